//! Group communication in the data plane (issue 14, docs/groups.md §3-6).
//!
//! - [`ccast`]: convergecast aggregated up a request's tree (sans-IO);
//! - [`frame`]: the wire format of group frames;
//! - [`table`]: a monitor's fan-out entries with per-edge credits (sans-IO);
//! - [`port`]: a dispatcher's sends and receives of group frames.
//!
//! Membership, trees and ordering are the group service's and the
//! endpoints' (Python, `python/multihop/groups/`); the monitors only fan
//! frames out along the installed trees, FIFO per tree and edge.

pub mod ccast;
pub mod frame;
pub mod port;
pub mod table;
