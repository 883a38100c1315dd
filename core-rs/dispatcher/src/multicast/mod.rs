//! Multicast groups, the dispatcher's side (issue 14, docs/groups.md §3-6):
//! the group frames (`multihop_base::wire::multicast`) that travel on its
//! link to the monitor.
//!
//! - [`inbox`]: the frames that arrived, and the credits of its own sends;
//! - [`port`]: sending and receiving them.
//!
//! The monitors fan frames out along the installed trees
//! (`multihop_monitor::multicast`); membership, trees and ordering are the
//! group service's and the endpoints' (Python, `multihop.groups`).

pub(crate) mod inbox;
pub(crate) mod port;
