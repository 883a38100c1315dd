//! `Service`: an exported name; `accept` takes channels from its backlog.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::adopt::Adopted;
use super::args::{deadline, to_py};
use super::channel::Channel;
use multihop_base::error::Error;
use multihop_dispatcher::{OnConnect, PendingConnect, Service as EngineService};

/// An exception the `on_connect` callback raised, kept for the next `accept`.
pub(crate) type CallbackError = Arc<Mutex<Option<PyErr>>>;

/// An exported service: ``accept`` connections to it.
#[pyclass(frozen, module = "multihop._core")]
pub struct Service {
    pub(crate) svc: EngineService,
    /// The `Dispatcher` object this service was exported from (kept alive with it).
    pub(crate) _owner: Py<PyAny>,
    /// Its channels, which an accepted one joins.
    pub(crate) adopted: Arc<Adopted>,
    pub(crate) callback_error: CallbackError,
}

fn connect_info<'py>(py: Python<'py>, p: &PendingConnect) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("service", &p.service)?;
    d.set_item("iref", p.iref)?;
    d.set_item("channel", p.chan)?;
    d.set_item("transport", &p.transport)?;
    d.set_item("client_pid", p.client_pid)?;
    d.set_item("client_core", p.client_core)?;
    Ok(d)
}

/// The engine's connect hook over a Python callable: called on the
/// dispatcher's acceptor thread with the GIL taken; an exception refuses the
/// client and is kept for the service's next `accept` to raise.
pub(crate) fn on_connect_hook(cb: Py<PyAny>, errors: CallbackError) -> OnConnect {
    Box::new(move |p: &PendingConnect| {
        Python::attach(|py| {
            let verdict = connect_info(py, p).and_then(|info| cb.bind(py).call1((info,))).and_then(|v| v.is_truthy());
            verdict.map_err(|e| {
                let reason = format!("the service's on_connect callback raised: {e}");
                *multihop_base::sync::lock(&errors) = Some(e);
                // An `accept_async` waiting on the doorbell raises it now.
                if let Ok(bell) = multihop_base::park::process_doorbell() {
                    bell.ring();
                }
                reason
            })
        })
    })
}

/// How long one wait of `accept` lasts at most. Only Python's main thread runs signal handlers
/// (Ctrl-C), so it waits in slices (`WAIT_SLICE`, 50 ms) and looks at them in between. Another thread (a
/// server's accept loop, a GES broker's acceptor) has nothing to look at: it is woken by what it
/// waits for (a connection in the backlog, a refusal whose `on_connect` raised, the monitor gone,
/// a detach: `service.rs` notifies for each), so it sleeps until then, with a long slice only as
/// a safety net. (With 50 ms everywhere, every idle accept loop woke 20 times a second.)
fn accept_slice(py: Python<'_>) -> PyResult<Duration> {
    let threading = py.import("threading")?;
    let main = threading.call_method0("main_thread")?.getattr("ident")?;
    let me = threading.call_method0("get_ident")?;
    Ok(if main.eq(me)? { multihop_base::defaults::WAIT_SLICE } else { Duration::from_secs(60) })
}

impl Service {
    /// Whether ``try_accept`` would return or raise now (async waiters look with it).
    pub(crate) fn acceptable(&self) -> bool {
        multihop_base::sync::lock(&self.callback_error).is_some() || self.svc.acceptable()
    }
}

#[pymethods]
impl Service {
    /// The exported name.
    #[getter]
    fn name(&self) -> String {
        self.svc.name.clone()
    }

    /// The interface reference the registry gave this service.
    #[getter]
    fn iref(&self) -> u64 {
        self.svc.iref
    }

    /// The most connections that wait (bound, not accepted yet).
    #[getter]
    fn backlog(&self) -> usize {
        self.svc.backlog()
    }

    /// Connections bound and waiting for `accept` now.
    #[getter]
    fn queued(&self) -> usize {
        self.svc.queued()
    }

    /// Connect requests waiting for room in the backlog now (their binds
    /// have not completed).
    #[getter]
    fn waiting(&self) -> usize {
        self.svc.waiting()
    }

    /// Take the next connection from the backlog, waiting up to `timeout`
    /// seconds (None: forever). Binds complete once queued; the
    /// `on_connect` callback (if any) already said yes to this one. If the
    /// callback raised for an earlier client (which was refused), that
    /// exception is raised here.
    #[pyo3(signature = (timeout=None))]
    fn accept(&self, py: Python<'_>, #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>) -> PyResult<Py<Channel>> {
        let until = deadline(timeout)?;
        let longest = accept_slice(py)?;
        loop {
            if let Some(e) = multihop_base::sync::lock(&self.callback_error).take() {
                return Err(e);
            }
            let slice = until.map_or(longest, |u| u.saturating_duration_since(Instant::now()).min(longest));
            match py.detach(|| self.svc.accept_next(slice)).map_err(|e| to_py(py, e))? {
                Some(ch) => return self.adopted.adopt(py, Channel::new(ch)),
                None => {
                    py.check_signals()?;
                    if until.is_some_and(|u| Instant::now() >= u) {
                        return Err(to_py(py, Error::timeout(format!("no client bound to {:?} in time", self.svc.name))));
                    }
                }
            }
        }
    }

    /// Take the next connection from the backlog if one is there, else
    /// None (never waits). Raises the ``on_connect`` error kept for the
    /// next accept, and MonitorError when the monitor is gone.
    fn try_accept(&self, py: Python<'_>) -> PyResult<Option<Py<Channel>>> {
        if let Some(e) = multihop_base::sync::lock(&self.callback_error).take() {
            return Err(e);
        }
        match self.svc.try_accept().map_err(|e| to_py(py, e))? {
            Some(ch) => self.adopted.adopt(py, Channel::new(ch)).map(Some),
            None => Ok(None),
        }
    }

    /// ``await svc.accept_async(timeout=None)``: ``accept`` without
    /// blocking the event loop (``multihop.aio.accept``).
    #[pyo3(signature = (timeout=None))]
    fn accept_async<'py>(slf: &Bound<'py, Self>, #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        super::wait::aio(slf.py())?.getattr("accept")?.call1((slf, timeout))
    }

    fn __repr__(&self) -> String {
        format!("<Service {:?} iref={:#x} backlog={}>", self.svc.name, self.svc.iref, self.svc.backlog())
    }
}
