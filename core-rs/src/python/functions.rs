//! Module functions: run a monitor in this process, talk to a monitor as a
//! tool, and the runtime lock (`liveness.rs`) for `multihop.runtime`.

use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::args::{int, to_py};
use multihop_base::control::{self, Msg, Role};
use multihop_base::error::Error;
use multihop_base::liveness;
use multihop_monitor::{self as monitor, MonitorConfig};

fn seconds(timeout: f64) -> PyResult<std::time::Duration> {
    Ok(super::args::timeout("timeout", Some(timeout))?.unwrap_or_default())
}

/// Run a monitor in this process until it is shut down (GIL released).
/// `lock_fd`: the runtime lock inherited from the starter (this call owns
/// it from now on). Returns the exit code.
#[pyfunction]
#[pyo3(signature = (runtime_dir, core, initial_core, cpu=None, owner_pid=None, lock_fd=None))]
fn run_monitor(
    py: Python<'_>,
    runtime_dir: PathBuf,
    core: u32,
    initial_core: u32,
    cpu: Option<usize>,
    owner_pid: Option<u32>,
    lock_fd: Option<i32>,
) -> PyResult<i32> {
    let lock_fd = match lock_fd {
        Some(fd) if fd < 0 => return Err(PyValueError::new_err(format!("lock_fd must be a descriptor (>= 0), got {fd}"))),
        // SAFETY: the caller hands us an open descriptor it no longer uses.
        Some(fd) => Some(unsafe { OwnedFd::from_raw_fd(fd) }),
        None => None,
    };
    let cfg = MonitorConfig { dir: runtime_dir, core, cpu, initial_core, owner_pid, lock_fd };
    py.detach(|| monitor::run(cfg)).map_err(|e| to_py(py, e))
}

// The tool functions' default timeout (a literal in their signatures, so Python shows it) is the engine's.
const _: () = assert!(multihop_base::defaults::TIMEOUT.as_secs() == 5);

/// Query a monitor's status over its socket without attaching (for tools).
/// `limit`: most entries per list (counts are always whole).
#[pyfunction]
#[pyo3(signature = (socket_path, timeout=5.0, limit=None))]
fn monitor_status<'py>(py: Python<'py>, socket_path: PathBuf, timeout: f64, limit: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
    let t = seconds(timeout)?;
    let limit = limit.map(|l| int(l, "limit", 0, u64::MAX as i128)).transpose()?.map(|l| l as u64);
    let v = py.detach(|| control::call(&socket_path, Role::Tool, &Msg::Status { req: 1, limit }, &[], t)).map_err(|e| to_py(py, e))?;
    match v.0 {
        Msg::StatusReply { status, .. } => py.import("json")?.call_method1("loads", (status.to_string(),)),
        other => Err(to_py(py, Error::protocol(format!("monitor answered status with {}", other.op())))),
    }
}

/// The status of the fabric bridge of the runtime in `runtime_dir` (peers, their services, bridged channels with
/// counters). Raises MonitorError when the runtime has no fabric.
#[pyfunction]
#[pyo3(signature = (runtime_dir, timeout=5.0))]
fn fabric_status<'py>(py: Python<'py>, runtime_dir: PathBuf, timeout: f64) -> PyResult<Bound<'py, PyAny>> {
    let t = seconds(timeout)?;
    let v = py.detach(|| multihop_dispatcher::fabric_export::fabric_status(&runtime_dir, t)).map_err(|e| to_py(py, e))?;
    py.import("json")?.call_method1("loads", (v.to_string(),))
}

/// Hand the whole routing table to the initial monitor (the RTS's job):
/// `table[src][dst] = next hop`. Later monitors fetch their rows from it.
#[pyfunction]
#[pyo3(signature = (socket_path, table, timeout=5.0))]
fn monitor_set_table(
    py: Python<'_>,
    socket_path: PathBuf,
    table: std::collections::BTreeMap<u32, std::collections::BTreeMap<u32, u32>>,
    timeout: f64,
) -> PyResult<()> {
    let t = seconds(timeout)?;
    let table = table.into_iter().map(|(s, r)| (s, r.into_iter().collect())).collect();
    let msg = Msg::SetTable { req: 1, table };
    py.detach(|| control::call(&socket_path, Role::Tool, &msg, &[], t)).map(|_| ()).map_err(|e| to_py(py, e))
}

/// Ask a monitor to shut down (for tools).
#[pyfunction]
#[pyo3(signature = (socket_path, timeout=5.0))]
fn monitor_shutdown(py: Python<'_>, socket_path: PathBuf, timeout: f64) -> PyResult<()> {
    let t = seconds(timeout)?;
    py.detach(|| control::call(&socket_path, Role::Tool, &Msg::Shutdown { req: 1 }, &[], t)).map(|_| ()).map_err(|e| to_py(py, e))
}

/// Take over runtime directory `runtime_dir` for a new runtime: create it
/// (0700) with its lock, lock it, and empty it of a dead runtime's
/// leftovers. Returns the locked descriptor (close-on-exec; pass it to the
/// monitors, then close it). RuntimeExists if a live runtime holds it.
#[pyfunction]
fn runtime_claim(py: Python<'_>, runtime_dir: PathBuf) -> PyResult<i32> {
    py.detach(|| liveness::claim(&runtime_dir)).map(IntoRawFd::into_raw_fd).map_err(|e| to_py(py, e))
}

/// "absent", "stale" or "live": whether a monitor holds the runtime lock of
/// `runtime_dir` (nothing is created or changed).
#[pyfunction]
fn runtime_state(py: Python<'_>, runtime_dir: PathBuf) -> PyResult<&'static str> {
    liveness::probe(&runtime_dir).map(liveness::State::name).map_err(|e| to_py(py, e))
}

/// Remove `runtime_dir` with everything in it if no live monitor holds its
/// lock. Returns whether it is gone.
#[pyfunction]
fn runtime_remove_if_unheld(py: Python<'_>, runtime_dir: PathBuf) -> PyResult<bool> {
    py.detach(|| liveness::remove_if_unheld(&runtime_dir)).map_err(|e| to_py(py, e))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run_monitor, m)?)?;
    m.add_function(wrap_pyfunction!(monitor_status, m)?)?;
    m.add_function(wrap_pyfunction!(fabric_status, m)?)?;
    m.add_function(wrap_pyfunction!(monitor_shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(monitor_set_table, m)?)?;
    m.add_function(wrap_pyfunction!(runtime_claim, m)?)?;
    m.add_function(wrap_pyfunction!(runtime_state, m)?)?;
    m.add_function(wrap_pyfunction!(runtime_remove_if_unheld, m)?)?;
    Ok(())
}
