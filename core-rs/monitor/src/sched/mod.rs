//! A monitor's Linux scheduling session: the session (and so the autogroup)
//! its forwarder runs in, kept light while idle, and when it needs its fair
//! share back.
//!
//! - [`session`]: the monitor's own session and its nice value (was `sched_group`);
//! - [`weight`]: when that session needs its fair share back (a state machine, was `group_weight`).

pub(crate) mod session;
pub(crate) mod weight;
