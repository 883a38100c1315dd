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

pub mod forward;
pub mod handles;
pub mod idle_poll;
pub mod link_queue;
pub mod monitor;
pub mod multicast;
pub mod sched;
pub mod vci;

pub use monitor::{run, MonitorConfig};
