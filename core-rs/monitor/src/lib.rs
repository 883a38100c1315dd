//! multihop monitor side: the per-core monitor process and its data plane.
//!
//! Stands on `multihop-base` alone (a monitor never holds a dispatcher's
//! types); the bindings start it (`python -m multihop.monitor`, [`run`]).
//!
//! - [`vci`]: the forwarding table (VCI -> outgoing link and VCI);
//! - [`link_queue`]: what waits for an outgoing link, served fairly over channels;
//! - [`sched`]: the monitor's Linux scheduling session and its weight;
//! - [`idle_poll`]: how the forwarder polls at idle priority;
//! - [`multicast`]: multicast group tables and convergecast;
//! - [`forward`]: the data plane (links, forwarding loop);
//! - [`handles`]: the routes of handles passing through;
//! - [`monitor`]: the monitor process (one concern per file under `monitor/`).

//!
//! The public face is [`run`] and [`MonitorConfig`] (what `python -m
//! multihop.monitor` calls) and the forwarding table the `pingpong` bench
//! times; every other item is the crate's own (`unreachable_pub` keeps it so).

#![warn(unreachable_pub)]

mod forward;
mod handles;
mod idle_poll;
mod link_queue;
mod monitor;
mod multicast;
mod sched;
mod vci;

pub use monitor::{run, MonitorConfig};
pub use vci::{Entry, ForwardTable, LinkId};
