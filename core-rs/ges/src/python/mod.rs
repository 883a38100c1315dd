//! `multihop._ges`: the GES native engine for Python.
//!
//! **How the module is found.** maturin builds one extension, `multihop._core` (crate
//! `multihop-core`, feature `python`), which depends on this crate. Its module initialiser calls
//! [`register`], which makes a module object named `multihop._ges`, adds it to `_core` as the
//! attribute `_ges` and puts it in `sys.modules["multihop._ges"]`. The package imports `_core`
//! first (`multihop/__init__.py`), so `from multihop import _ges` (and `import multihop._ges`) finds
//! the module there, typed by `python/multihop/_ges.pyi`. The runtime's extension carries nothing
//! of GES but that call.

mod codec;
pub mod erp;
pub mod profile_graph;

use pyo3::prelude::*;

/// The module's name in `sys.modules`.
pub const MODULE: &str = "multihop._ges";

/// Make `multihop._ges` and register it as the submodule `_ges` of `parent` (`multihop._core`).
pub fn register(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = parent.py();
    let m = PyModule::new(py, "_ges")?;
    m.setattr("__name__", MODULE)?;
    m.setattr("__doc__", "The GES native engine (crate multihop-ges): codec, profile graphs, event routing.")?;
    codec::register(&m)?;
    profile_graph::register(&m)?;
    erp::register(&m)?;
    parent.add_submodule(&m)?;
    py.import("sys")?.getattr("modules")?.set_item(MODULE, &m)?;
    Ok(())
}
