//! `multihop._ges`: the GES native engine for Python.
//!
//! **How the module is found.** maturin builds one extension, `multihop._core` (crate
//! `multihop-core`, feature `python`), which depends on this crate. Its module initialiser calls
//! [`register`], which makes a module object named `multihop._ges`, adds it to `_core` as the
//! attribute `_ges` and puts it in `sys.modules["multihop._ges"]`. The package imports `_core`
//! first (`multihop/__init__.py`), so `from multihop import _ges` (and `import multihop._ges`) finds
//! the module there, typed by `python/multihop/_ges.pyi`. The runtime's extension carries nothing
//! of GES but that call, which also hands over what the engine needs of the runtime ([`Hooks`]): a
//! way to turn the extension's `Channel` objects into [`FrameChannel`]s and its `Dispatcher` objects
//! into [`Dispatcher`]s (its `native_channels.rs`: a channel end's non-blocking receive of many, send
//! of one and readiness; a dispatcher's wait and cork).

mod codec;
mod content;
mod engine;
pub mod erp;
pub mod profile_graph;

use std::sync::{Arc, OnceLock};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::io::{Dispatcher, FrameChannel};

/// The module's name in `sys.modules`.
pub const MODULE: &str = "multihop._ges";

/// What this module needs of the runtime, handed over by [`register`]: how the runtime's extension
/// turns one of its Python `Channel` objects into a [`FrameChannel`], and one of its `Dispatcher`
/// objects into a [`Dispatcher`] (TypeError for anything else).
#[derive(Clone, Copy)]
pub struct Hooks {
    pub channel: fn(&Bound<'_, PyAny>) -> PyResult<Arc<dyn FrameChannel>>,
    pub dispatcher: fn(&Bound<'_, PyAny>) -> PyResult<Arc<dyn Dispatcher>>,
}

static HOOKS: OnceLock<Hooks> = OnceLock::new();

fn hooks() -> PyResult<&'static Hooks> {
    HOOKS.get().ok_or_else(|| PyRuntimeError::new_err("multihop._ges was registered without the runtime's hooks"))
}

pub(crate) fn channel_of(obj: &Bound<'_, PyAny>) -> PyResult<Arc<dyn FrameChannel>> {
    (hooks()?.channel)(obj)
}

pub(crate) fn dispatcher_of(obj: &Bound<'_, PyAny>) -> PyResult<Arc<dyn Dispatcher>> {
    (hooks()?.dispatcher)(obj)
}

/// Make `multihop._ges` and register it as the submodule `_ges` of `parent` (`multihop._core`);
/// `hooks` give the engine the runtime's channels and dispatchers.
pub fn register(parent: &Bound<'_, PyModule>, hooks: Hooks) -> PyResult<()> {
    let _ = HOOKS.set(hooks); // (the same functions if the module is registered again)
    let py = parent.py();
    let m = PyModule::new(py, "_ges")?;
    m.setattr("__name__", MODULE)?;
    m.setattr("__doc__", "The GES native engine (crate multihop-ges): codec, profile graphs, event routing.")?;
    codec::register(&m)?;
    content::register(&m)?;
    profile_graph::register(&m)?;
    erp::register(&m)?;
    engine::register(&m)?;
    parent.add_submodule(&m)?;
    py.import("sys")?.getattr("modules")?.set_item(MODULE, &m)?;
    Ok(())
}
