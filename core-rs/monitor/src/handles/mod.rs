//! Handles passing through a monitor (TN-006 2.7): the monitor's own tables.
//! The relay itself is `monitor/handles.rs`; the protocol is told in
//! `multihop_dispatcher::handles`, its shared pieces are `multihop_base::handles`.
//!
//! - [`routes`]: where each end of a UMP channel is, for its `Cap` frames
//!   (multi-hop frames follow the forwarding table).

pub(crate) mod routes;
