//! GES native engine: the broker's event path of the Grid Event Service (`python/multihop/ges/`) in
//! Rust, apart from the runtime's channel code.
//!
//! Module map:
//! - [`codec`]: the event batches, hop acknowledgements and client deliveries on the wire
//! - [`profile_graph`]: the Gryphon-style profile graph (matching an event's values to destinations)
//! - [`fxhash`]: the hasher of the engine's tables
//!
//! Nothing outside `python` (feature `python`) knows Python: the PyO3 glue there is the module
//! `multihop._ges`, which the runtime's extension (`multihop._core`) registers as a submodule of
//! itself at import (see [`python::register`]).

pub mod codec;
pub mod fxhash;
pub mod profile_graph;

#[cfg(feature = "python")]
pub mod python;
