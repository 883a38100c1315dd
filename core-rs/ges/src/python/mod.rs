//! `multihop._ges`: the GES native engine for Python.
//!
//! **How the module is found.** maturin builds one extension, `multihop._core` (crate
//! `multihop-core`, feature `python`), which depends on this crate. Its module initialiser calls
//! [`register`], which makes a module object named `multihop._ges`, adds it to `_core` as the
//! attribute `_ges` and puts it in `sys.modules["multihop._ges"]`. The package imports `_core`
//! first (`multihop/__init__.py`), so `from multihop import _ges` (and `import multihop._ges`) finds
//! the module there, typed by `python/multihop/_ges.pyi`. The runtime's extension carries nothing
//! of GES but that call, which also hands over the one thing the engine needs of the runtime: a way
//! to turn the extension's `Channel` objects into [`FrameChannel`]s (its `native_channels.rs`: a
//! channel end's non-blocking receive of many and send of one, the runtime's public API).

mod codec;
mod engine;
pub mod erp;
pub mod profile_graph;

use std::sync::{Arc, OnceLock};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::io::FrameChannel;

/// The module's name in `sys.modules`.
pub const MODULE: &str = "multihop._ges";

/// How the runtime's extension turns one of its Python `Channel` objects into a [`FrameChannel`]
/// (TypeError for anything else): the one thing this module needs of the runtime, handed over by
/// [`register`].
pub type ChannelOf = fn(&Bound<'_, PyAny>) -> PyResult<Arc<dyn FrameChannel>>;

static CHANNEL_OF: OnceLock<ChannelOf> = OnceLock::new();

pub(crate) fn channel_of(obj: &Bound<'_, PyAny>) -> PyResult<Arc<dyn FrameChannel>> {
    let f = CHANNEL_OF.get().ok_or_else(|| PyRuntimeError::new_err("multihop._ges was registered without the runtime's channels"))?;
    f(obj)
}

/// Make `multihop._ges` and register it as the submodule `_ges` of `parent` (`multihop._core`);
/// `channel_of` gives the engine the runtime's channels.
pub fn register(parent: &Bound<'_, PyModule>, channel_of: ChannelOf) -> PyResult<()> {
    let _ = CHANNEL_OF.set(channel_of); // (the same function if the module is registered again)
    let py = parent.py();
    let m = PyModule::new(py, "_ges")?;
    m.setattr("__name__", MODULE)?;
    m.setattr("__doc__", "The GES native engine (crate multihop-ges): codec, profile graphs, event routing.")?;
    codec::register(&m)?;
    profile_graph::register(&m)?;
    erp::register(&m)?;
    engine::register(&m)?;
    parent.add_submodule(&m)?;
    py.import("sys")?.getattr("modules")?.set_item(MODULE, &m)?;
    Ok(())
}
