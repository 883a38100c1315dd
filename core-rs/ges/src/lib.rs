//! GES native engine: the broker's event path of the Grid Event Service (`python/multihop/ges/`) in
//! Rust, apart from the runtime's channel code.
//!
//! Module map:
//! - [`codec`]: the event batches, hop acknowledgements and client deliveries on the wire
//! - [`profile_graph`]: the Gryphon-style profile graph (matching an event's values to destinations)
//! - [`fxhash`]: the hasher of the engine's tables
//! - [`address`]: unit ids
//! - [`routing`]: what the event routing reads of the control plane (best hops, deciders)
//! - [`erp`]: the event routing protocol of one broker, sans-IO
//! - [`ordered`]: an insertion-ordered map (outputs in the reference's order)
//! - [`unacked`]: a gateway's copies sent and not yet acknowledged
//! - [`engine`]: the live broker's rounds: frames in, routing, frames out
//! - [`io`]: what the engine needs of a channel
//! - [`pool`]: frame buffers kept for the next frame
//! - [`small`]: short lists kept inline
//!
//! Nothing outside `python` (feature `python`) knows Python: the PyO3 glue there is the module
//! `multihop._ges`, which the runtime's extension (`multihop._core`) registers as a submodule of
//! itself at import (see [`python::register`]).

pub mod address;
pub mod codec;
pub mod engine;
pub mod erp;
pub mod fxhash;
pub mod io;
pub mod ordered;
pub mod pool;
pub mod profile_graph;
pub mod routing;
pub mod small;
pub mod unacked;

#[cfg(feature = "python")]
pub mod python;
