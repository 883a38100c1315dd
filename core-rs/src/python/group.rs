//! `GroupPort` (a dispatcher's group frames, `multicast/port.rs`) and
//! `monitor_group` (the group service's requests to a monitor).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use super::args::{count, deadline, int, to_py};
use super::dispatcher::Dispatcher;
use super::wait::Bytes;
use multihop_base::control::{self, Msg, Role};
use multihop_base::error::{Error, ErrorKind};
use multihop_dispatcher::GroupPort as EnginePort;

/// One wait with the GIL released lasts at most this long (then signals are checked).
const SLICE: Duration = multihop_base::defaults::WAIT_SLICE;

// `monitor_group`'s default timeout (a literal in its signature, so Python shows it) is the engine's.
const _: () = assert!(multihop_base::defaults::REQUEST_TIMEOUT.as_secs() == 10);

fn slice_end(until: Option<Instant>) -> Instant {
    let s = Instant::now() + SLICE;
    until.map_or(s, |u| u.min(s))
}

/// A dispatcher's sends and receives of group frames (used by `multihop.groups.endpoint`).
#[pyclass(frozen, module = "multihop._core")]
pub struct GroupPort {
    port: EnginePort,
    dir: PathBuf,
    core: u32,
}

#[pymethods]
impl GroupPort {
    #[new]
    fn new(py: Python<'_>, dispatcher: &Bound<'_, Dispatcher>) -> PyResult<GroupPort> {
        let d = dispatcher.get().engine();
        let port = EnginePort::new(d.conn()).map_err(|e| to_py(py, e))?;
        Ok(GroupPort { port, dir: d.runtime_dir().to_path_buf(), core: d.core() })
    }

    /// The runtime directory of the dispatcher.
    #[getter]
    fn runtime_dir(&self) -> PathBuf {
        self.dir.clone()
    }

    /// The dispatcher's core.
    #[getter]
    fn core(&self) -> u32 {
        self.core
    }

    /// Credits per tree edge of group `group_id` (what this process sends and returns).
    fn set_window(&self, group_id: &Bound<'_, PyAny>, window: &Bound<'_, PyAny>) -> PyResult<()> {
        let g = int(group_id, "group_id", 0, u32::MAX as i128)? as u32;
        let w = int(window, "window", 1, 4096)? as u32;
        self.port.set_window(g, w);
        Ok(())
    }

    /// Send one encoded group frame, waiting for a credit of its tree up to
    /// `timeout` seconds (None: forever). Timeout, ChannelClosed, MessageTooLarge.
    #[pyo3(signature = (frame, timeout=None))]
    fn send(&self, py: Python<'_>, frame: &Bound<'_, PyAny>, #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>) -> PyResult<()> {
        let until = deadline(timeout)?;
        let b = Bytes::get(frame)?;
        let data = b.as_slice().to_vec();
        loop {
            let end = slice_end(until);
            let r = py.detach(|| self.port.send(&data, Some(end), &mut || Ok(())));
            match r {
                Ok(()) => return Ok(()),
                Err(e) if e.kind == ErrorKind::Timeout && until.is_none_or(|u| Instant::now() < u) => py.check_signals()?,
                Err(e) => return Err(to_py(py, e)),
            }
        }
    }

    /// Send without waiting: True if it went, False if the tree has no credit
    /// (or the link no room) now.
    fn try_send(&self, py: Python<'_>, frame: &Bound<'_, PyAny>) -> PyResult<bool> {
        let b = Bytes::get(frame)?;
        self.port.try_send(b.as_slice()).map_err(|e| to_py(py, e))
    }

    /// Up to `max` frames that arrived ([] after `timeout` seconds with none; None: wait forever).
    #[pyo3(signature = (max=None, timeout=None))]
    fn recv_many<'py>(
        &self,
        py: Python<'py>,
        max: Option<&Bound<'py, PyAny>>,
        #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>,
    ) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let max = max.map(|m| count(m, "max", 1, 1 << 20)).transpose()?.unwrap_or(256);
        let until = deadline(timeout)?;
        loop {
            let end = slice_end(until);
            let got = py.detach(|| self.port.recv_many(max, Some(end), &mut || Ok(()))).map_err(|e| to_py(py, e))?;
            if !got.is_empty() {
                return Ok(got.iter().map(|f| PyBytes::new(py, f)).collect());
            }
            if until.is_some_and(|u| Instant::now() >= u) {
                return Ok(Vec::new());
            }
            py.check_signals()?;
        }
    }

    /// Return every credit owed to the monitor now.
    fn flush_credits(&self) {
        self.port.flush_credits();
    }

    /// Counters: sent, received, credit_waits, credits_returned, malformed, queued.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.port.stats();
        let d = PyDict::new(py);
        d.set_item("sent", s.sent)?;
        d.set_item("received", s.received)?;
        d.set_item("credit_waits", s.credit_waits)?;
        d.set_item("credits_returned", s.credits_returned)?;
        d.set_item("malformed", s.malformed)?;
        d.set_item("queued", s.queued)?;
        Ok(d)
    }
}

/// Send one group request (a JSON text, see `monitor/groups.rs`) to the
/// monitor at `socket_path`; returns its answer as JSON text.
#[pyfunction]
#[pyo3(signature = (socket_path, body, timeout=10.0))]
fn monitor_group(py: Python<'_>, socket_path: PathBuf, body: &str, timeout: f64) -> PyResult<String> {
    let t = super::args::timeout("timeout", Some(timeout))?.unwrap_or_default();
    let body: serde_json::Value = serde_json::from_str(body).map_err(|e| to_py(py, Error::invalid(format!("group request is not JSON: {e}"))))?;
    let (reply, _) = py.detach(|| control::call(&socket_path, Role::Tool, &Msg::Group { req: 1, body }, &[], t)).map_err(|e| to_py(py, e))?;
    match reply {
        Msg::GroupReply { body, .. } => Ok(body.to_string()),
        other => Err(to_py(py, Error::protocol(format!("monitor answered a group request with {}", other.op())))),
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<GroupPort>()?;
    m.add_function(wrap_pyfunction!(monitor_group, m)?)?;
    Ok(())
}
