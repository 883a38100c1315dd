//! `Dispatcher`: this process attached to one core's monitor.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use super::adopt::Adopted;
use super::args::{deadline, int, text, to_py};
use super::channel::Channel;
use super::pending_bind::PendingBind;
use super::service::{on_connect_hook, Service};
use multihop_base::defaults::{BACKLOG as DEFAULT_BACKLOG, TIMEOUT, WINDOW};

// The bind methods' signatures show their defaults as literals (so Python's `inspect` reads them); they are
// the engine's, defined once in `multihop_base::defaults` (and `_core.DEFAULT_WINDOW` / `DEFAULT_TIMEOUT`).
const _: () = assert!(WINDOW == 16 && TIMEOUT.as_secs() == 5 && TIMEOUT.subsec_nanos() == 0, "the bind signatures' defaults");
use multihop_base::error::{Error, ErrorKind};
use multihop_base::park::process_doorbell;
use multihop_base::ringpair::Waited;
use multihop_dispatcher::Channel as Endpoint;
use multihop_dispatcher::{BindOptions, Dispatcher as EngineDispatcher};

/// Check `bind`'s arguments: (name, iref, options).
fn bind_args(
    py: Python<'_>,
    name: Option<&Bound<'_, PyAny>>,
    transport: &'static str,
    timeout: Option<f64>,
    max_message: Option<&Bound<'_, PyAny>>,
    iref: Option<&Bound<'_, PyAny>>,
    window: u32,
) -> PyResult<(String, u64, BindOptions)> {
    let (name, iref) = match (name, iref) {
        (Some(n), None) => (text(n, "service name")?, 0),
        (None, Some(i)) => (String::new(), int(i, "iref", 1, u64::MAX as i128)? as u64),
        _ => return Err(PyTypeError::new_err("bind needs exactly one of name or iref")),
    };
    let opts = BindOptions {
        transport: transport.to_string(),
        max_message: max_message.map(|m| super::args::max_message(m, transport)).transpose()?,
        window,
        timeout: super::args::timeout("timeout", Some(timeout.unwrap_or(TIMEOUT.as_secs_f64())))?.unwrap_or_default(),
    };
    opts.check().map_err(|e| to_py(py, e))?;
    Ok((name, iref, opts))
}

/// This process attached to one core's monitor.
#[pyclass(frozen, module = "multihop._core")]
pub struct Dispatcher {
    d: EngineDispatcher,
    /// This dispatcher's channels, held weakly for `poll`.
    channels: Arc<Adopted>,
}

impl Dispatcher {
    /// The engine's dispatcher (group ports, `group.rs`).
    pub(crate) fn engine(&self) -> &EngineDispatcher {
        &self.d
    }

    /// Remember a new channel (weakly) for `poll` and hand it out.
    pub(crate) fn adopt(&self, py: Python<'_>, ch: Channel) -> PyResult<Py<Channel>> {
        self.channels.adopt(py, ch)
    }
}

#[pymethods]
impl Dispatcher {
    /// Attach to the monitor of `core` in the runtime directory `runtime_dir`.
    #[staticmethod]
    fn attach(py: Python<'_>, runtime_dir: PathBuf, core: &Bound<'_, PyAny>) -> PyResult<Dispatcher> {
        let core = int(core, "core", 0, u32::MAX as i128)? as u32;
        let d = py.detach(|| EngineDispatcher::attach(&runtime_dir, core)).map_err(|e| to_py(py, e))?;
        Ok(Dispatcher { d, channels: Arc::default() })
    }

    /// The core this dispatcher is attached to.
    #[getter]
    fn core(&self) -> u32 {
        self.d.core()
    }

    /// Pid of this core's monitor.
    #[getter]
    fn monitor_pid(&self) -> u32 {
        self.d.monitor_pid()
    }

    /// Whether the monitor connection is up.
    #[getter]
    fn attached(&self) -> bool {
        self.d.is_attached()
    }

    /// Export `name` with room for `backlog` connections that are bound but
    /// not yet accepted (a bind completes once its connection is queued).
    /// `on_connect(info: dict) -> bool`, if given, is asked for each client
    /// on this dispatcher's acceptor thread (no thread needs to be in
    /// `accept`); False refuses it (the client gets BindError). Dropping the
    /// returned Service withdraws the name. Raises ExportError when the name
    /// is taken or invalid. With `fabric=True` the service is also exported
    /// to the runtime's fabric (other runtimes bind it as `name@RUNTIME`);
    /// ExportError when the runtime has no fabric. Without, it is local:
    /// never reachable from another machine.
    #[pyo3(signature = (name, on_connect=None, backlog=16, *, fabric=false))]
    fn export(
        slf: &Bound<'_, Self>,
        name: &Bound<'_, PyAny>,
        on_connect: Option<Py<PyAny>>,
        #[pyo3(from_py_with = super::args::backlog)] backlog: usize,
        fabric: bool,
    ) -> PyResult<Service> {
        const _: () = assert!(DEFAULT_BACKLOG == 16, "the signature's default");
        let py = slf.py();
        let me = slf.get();
        let name = text(name, "service name")?;
        if let Some(cb) = &on_connect {
            if !cb.bind(py).is_callable() {
                return Err(PyTypeError::new_err("on_connect must be callable"));
            }
        }
        let errors = Arc::new(Mutex::new(None));
        let hook = on_connect.map(|cb| on_connect_hook(cb, errors.clone()));
        let svc = py.detach(|| me.d.export(&name, backlog, hook)).map_err(|e| to_py(py, e))?;
        if fabric {
            // Dropping `svc` on failure withdraws the local export too: all or nothing.
            py.detach(|| svc.export_to_fabric(std::time::Duration::from_secs(5))).map_err(|e| to_py(py, e))?;
        }
        Ok(Service { svc, _owner: slf.clone().into_any().unbind(), adopted: slf.get().channels.clone(), callback_error: errors })
    }

    /// Bind to service `name` (or `iref`) over `transport` ("ump": a ring
    /// pair straight to the service; "multihop": a virtual circuit through
    /// the monitors with a credit `window`; "auto": whichever the routing
    /// table says, see `choose_transport`). Returns once the service has
    /// the connection in its backlog. Raises BindError when the service is
    /// unknown or refuses, Timeout when its backlog stays full; ValueError /
    /// TypeError for a bad argument (checked before anything starts).
    #[pyo3(signature = (name=None, transport="ump", timeout=5.0, max_message=None, iref=None, window=16))]
    #[allow(clippy::too_many_arguments)]
    fn bind(
        &self,
        py: Python<'_>,
        name: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = super::args::transport)] transport: &'static str,
        #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>,
        max_message: Option<&Bound<'_, PyAny>>,
        iref: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = super::args::window)] window: u32,
    ) -> PyResult<Py<Channel>> {
        let (name, iref, opts) = bind_args(py, name, transport, timeout, max_message, iref, window)?;
        let mut pending: Option<PyErr> = None;
        let res = py.detach(|| {
            self.d.bind(&name, iref, &opts, &mut || {
                Python::attach(|py| py.check_signals()).map_err(|e| {
                    pending = Some(e);
                    Error::new(ErrorKind::Interrupted, "interrupted")
                })
            })
        });
        match res {
            Ok(ch) => self.adopt(py, Channel::new(ch)),
            Err(e) => Err(pending.unwrap_or_else(|| to_py(py, e))),
        }
    }

    /// Start a bind and return at once (what ``bind_async`` awaits): the
    /// same arguments as ``bind``, but ``transport`` must be "ump" or
    /// "multihop" (resolve "auto" with ``choose_transport`` first).
    #[pyo3(signature = (name=None, transport="ump", timeout=5.0, max_message=None, iref=None, window=16))]
    #[allow(clippy::too_many_arguments)]
    fn _bind_start(
        slf: &Bound<'_, Self>,
        name: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = super::args::transport)] transport: &'static str,
        #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>,
        max_message: Option<&Bound<'_, PyAny>>,
        iref: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = super::args::window)] window: u32,
    ) -> PyResult<PendingBind> {
        let py = slf.py();
        if transport == "auto" {
            return Err(pyo3::exceptions::PyValueError::new_err("_bind_start needs a resolved transport (\"ump\" or \"multihop\"), got \"auto\""));
        }
        let (name, iref, opts) = bind_args(py, name, transport, timeout, max_message, iref, window)?;
        let p = slf.get().d.bind_start(&name, iref, &opts).map_err(|e| to_py(py, e))?;
        Ok(PendingBind::new(p, slf.clone().into_any().unbind(), slf.get().channels.clone()))
    }

    /// ``await d.bind_async(...)``: ``bind`` without blocking the event
    /// loop (same arguments, same errors; see ``multihop.aio.bind``).
    #[pyo3(signature = (name=None, transport="ump", timeout=5.0, max_message=None, iref=None, window=16))]
    #[allow(clippy::too_many_arguments)]
    fn bind_async<'py>(
        slf: &Bound<'py, Self>,
        name: Option<&Bound<'py, PyAny>>,
        // Checked as `bind` checks them (a window of 2**70 is a ValueError in words, not an OverflowError).
        #[pyo3(from_py_with = super::args::transport)] transport: &'static str,
        #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>,
        max_message: Option<&Bound<'py, PyAny>>,
        iref: Option<&Bound<'py, PyAny>>,
        #[pyo3(from_py_with = super::args::window)] window: u32,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args = (slf, name, transport, timeout, max_message, iref, window);
        super::wait::aio(slf.py())?.getattr("bind")?.call1(args)
    }

    /// The transport `bind(..., transport="auto")` takes to service `name`
    /// (or `iref`): "ump" when the service is on this core or a core the
    /// routing table links to this one directly, "multihop" otherwise.
    /// Raises BindError when the service is not exported.
    #[pyo3(signature = (name=None, iref=None))]
    fn choose_transport(&self, py: Python<'_>, name: Option<&Bound<'_, PyAny>>, iref: Option<&Bound<'_, PyAny>>) -> PyResult<&'static str> {
        let (name, iref) = match (name, iref) {
            (Some(n), None) => (text(n, "service name")?, 0),
            (None, Some(i)) => (String::new(), int(i, "iref", 1, u64::MAX as i128)? as u64),
            _ => return Err(PyTypeError::new_err("choose_transport needs exactly one of name or iref")),
        };
        py.detach(|| multihop_dispatcher::transport_choice::choose(self.d.runtime_dir(), self.d.core(), &name, iref)).map_err(|e| to_py(py, e))
    }

    /// Wait up to `timeout` seconds (None: forever) until some channel of
    /// this dispatcher has a message or was closed; returns those channels
    /// ([] on timeout). Serves many clients from one thread.
    #[pyo3(signature = (timeout=None))]
    fn poll<'py>(&self, py: Python<'py>, #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>) -> PyResult<Bound<'py, PyList>> {
        let until = deadline(timeout)?;
        let list: Vec<Bound<'py, Channel>> = self.channels.live(py).into_iter().filter(|c| !c.get().ch.closed_here()).collect();
        let eps: Vec<Arc<Endpoint>> = list.iter().map(|c| c.get().ch.clone()).collect();
        let bell = process_doorbell().map_err(|e| to_py(py, e))?;
        let parks = std::sync::atomic::AtomicU64::new(0);
        loop {
            let ready = PyList::empty(py);
            for (c, ep) in list.iter().zip(&eps) {
                if ep.readable() {
                    ready.append(c)?;
                }
            }
            if !ready.is_empty() {
                return Ok(ready);
            }
            let w = py.detach(|| {
                multihop_base::park::wait_until(
                    &bell,
                    &parks,
                    multihop_base::park::relay_spin_budget(),
                    until,
                    &mut || eps.iter().any(|e| e.readable()),
                    &mut || false,
                )
            });
            match w {
                Waited::TimedOut => return Ok(PyList::empty(py)),
                Waited::Slice | Waited::Interrupted => py.check_signals()?,
                Waited::Ready => {}
            }
        }
    }

    /// Join application group `name` (issue 14): see `multihop.groups.endpoint.join`.
    #[pyo3(signature = (name, on_join=None, on_leave=None, on_view=None, reply=None, timeout=30.0, auto_ack=None))]
    #[allow(clippy::too_many_arguments)]
    fn join<'py>(
        slf: &Bound<'py, Self>,
        name: &Bound<'py, PyAny>,
        on_join: Option<&Bound<'py, PyAny>>,
        on_leave: Option<&Bound<'py, PyAny>>,
        on_view: Option<&Bound<'py, PyAny>>,
        reply: Option<&Bound<'py, PyAny>>,
        #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>,
        auto_ack: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let f = slf.py().import("multihop.groups.endpoint")?.getattr("join")?;
        let auto_ack = match auto_ack {
            Some(a) => a.clone(),
            None => pyo3::types::PyBool::new(slf.py(), true).to_owned().into_any(),
        };
        f.call1((slf, name, on_join, on_leave, on_view, reply, timeout, auto_ack))
    }

    /// Leave application group `name`: see `multihop.groups.endpoint.leave`.
    #[pyo3(signature = (name, timeout=30.0))]
    fn leave<'py>(
        slf: &Bound<'py, Self>,
        name: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let f = slf.py().import("multihop.groups.endpoint")?.getattr("leave")?;
        f.call1((slf, name, timeout))
    }

    /// Messages that reached this dispatcher's link and were dropped: for no
    /// channel of ours, or malformed (a batch frame that does not add up).
    #[getter]
    fn link_dropped(&self) -> u64 {
        self.d.link_dropped()
    }

    /// How often this process's multi-hop sends on this dispatcher woke its monitor (a monitor that was
    /// parked; one that polls or is busy needs no wake-up). ``corked`` blocks take one for all their sends.
    #[getter]
    fn monitor_wakeups(&self) -> u64 {
        self.d.link().map_or(0, |l| l.wakeups())
    }

    /// Test hook: write a raw multi-hop frame (16-byte header + payload) on
    /// this dispatcher's link to its monitor, as a forger would.
    fn _inject_raw(&self, py: Python<'_>, frame: &[u8]) -> PyResult<()> {
        multihop_testkit::inject_raw(&self.d, frame).map_err(|e| to_py(py, e))
    }

    /// Status of this core's monitor (a dict; lists cut at `limit` entries each).
    #[pyo3(signature = (limit=None))]
    fn monitor_status<'py>(&self, py: Python<'py>, limit: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let limit = limit.map(|l| int(l, "limit", 0, u64::MAX as i128)).transpose()?.map(|l| l as u64);
        let v = py.detach(|| self.d.monitor_status(limit)).map_err(|e| to_py(py, e))?;
        py.import("json")?.call_method1("loads", (v.to_string(),))
    }

    /// ``with d.corked(): ...``: this thread's sends on this dispatcher's multi-hop channels within the block
    /// wake this core's monitor once, at the block's end, instead of at the first message (nothing waits and
    /// nothing is held back: the messages are on the link as each send returns). For a burst of sends to many
    /// channels, such as a broker's round. Corks nest.
    fn corked(&self, py: Python<'_>) -> PyResult<super::cork::Cork> {
        let link = self.d.link().map_err(|e| to_py(py, e))?;
        Ok(super::cork::Cork::new(link.clone()))
    }

    /// Detach from the monitor: exported services vanish and multi-hop
    /// channels end (their data rides on this connection); UMP channels stay usable.
    fn detach(&self) {
        self.d.detach();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.d.detach();
        false
    }

    fn __repr__(&self) -> String {
        format!("<Dispatcher core={} monitor_pid={}{}>", self.d.core(), self.d.monitor_pid(), if self.d.is_attached() { "" } else { " detached" })
    }
}
