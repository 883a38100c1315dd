//! `ForgedMonitorLink`: test hook, a link into a monitor that claims to
//! come from another monitor (see `forgery.rs`).

use std::path::PathBuf;

use pyo3::prelude::*;

use super::args::to_py;

/// Test hook: a link to a monitor that claims to come from another monitor
/// (see `forgery.rs`), for writing raw frames a neighbour could send.
#[pyclass(frozen, module = "multihop._core")]
pub struct ForgedMonitorLink {
    link: multihop_testkit::ForgedMonitorLink,
}

#[pymethods]
impl ForgedMonitorLink {
    /// Open a link to the monitor of `core` (its socket in `runtime_dir`),
    /// claiming to be the monitor of `claimed_core`.
    #[new]
    fn new(py: Python<'_>, runtime_dir: PathBuf, core: u32, claimed_core: u32) -> PyResult<ForgedMonitorLink> {
        let link = py.detach(|| multihop_testkit::ForgedMonitorLink::open(&runtime_dir, core, claimed_core)).map_err(|e| to_py(py, e))?;
        Ok(ForgedMonitorLink { link })
    }

    /// Write one raw multi-hop frame (16-byte header + payload) on the link.
    fn inject(&self, py: Python<'_>, frame: &[u8]) -> PyResult<()> {
        py.detach(|| self.link.inject(frame)).map_err(|e| to_py(py, e))
    }

    /// Close the link; the monitor forgets it.
    fn close(&self) {
        self.link.close();
    }
}
