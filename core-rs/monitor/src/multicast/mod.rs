//! Multicast groups in the monitors' data plane (issue 14, docs/groups.md §3-6).
//!
//! - [`ccast`]: convergecast aggregated up a request's tree (sans-IO);
//! - [`table`]: a monitor's fan-out entries with per-edge credits (sans-IO).
//!
//! The frames' wire format is `multihop_base::wire::multicast`; a
//! dispatcher's sends and receives are `multihop_dispatcher::multicast`.
//! Membership, trees and ordering are the group service's and the
//! endpoints' (Python, `multihop.groups`); the monitors only fan frames out
//! along the installed trees, FIFO per tree and edge.

pub(crate) mod ccast;
pub(crate) mod table;
