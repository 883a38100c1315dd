//! multihop bindings: the engine's crates as a C library and as the Python
//! extension `multihop._core`. No engine logic lives here.
//!
//! The engine, bottom to top (each crate depends only on those before it):
//! `multihop_base` (errors, shared memory, rings, doorbells, control frames,
//! wire formats, defaults), `multihop_dispatcher` (a process attached to a
//! runtime: its connection to the monitor, channel ends, services, binds) and
//! `multihop_monitor` (the per-core monitor process), then
//! `multihop_testkit` (test hooks, in the Python module only).
//!
//! - [`capi`]: the C ABI (`include/multihop.h`, checked against this file by
//!   `tests/c/test_capi_header.py`);
//! - `python` (feature `python`): the PyO3 module `multihop._core`, one
//!   pyclass per file under `python/` (`fast_send`: generated stubs' native
//!   send methods).

pub mod capi;

#[cfg(feature = "python")]
mod python;
