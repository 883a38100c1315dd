//! `PendingBind`: a bind whose request is out and whose reply has not been
//! taken yet (what `Dispatcher.bind_async` awaits; `bind.rs`).

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;

use super::adopt::Adopted;
use super::args::to_py;
use super::channel::Channel;
use multihop_base::error::Error;
use multihop_dispatcher::PendingBind as EnginePending;

/// A bind in flight: ``poll()`` says whether it is decided, ``finish()``
/// returns the channel (or raises the bind's error). Dropping it, or
/// ``cancel()``, gives the bind up as a timed-out bind does.
#[pyclass(frozen, module = "multihop._core")]
pub struct PendingBind {
    pending: Mutex<Option<EnginePending>>,
    /// The `Dispatcher` object that started the bind (kept alive with it).
    _owner: Py<PyAny>,
    /// Its channels, which the finished bind's joins.
    adopted: Arc<Adopted>,
}

impl PendingBind {
    pub(crate) fn new(pending: EnginePending, owner: Py<PyAny>, adopted: Arc<Adopted>) -> PendingBind {
        PendingBind { pending: Mutex::new(Some(pending)), _owner: owner, adopted }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<EnginePending>> {
        multihop_base::sync::lock(&self.pending)
    }
}

#[pymethods]
impl PendingBind {
    /// Whether the bind is decided (the reply came, it failed, or the
    /// monitor's answer is overdue); never waits. True once finished or cancelled.
    pub(crate) fn poll(&self) -> bool {
        self.lock().as_mut().is_none_or(|p| p.poll())
    }

    /// Seconds until the client stops waiting for the monitor's answer (0 when overdue).
    #[getter]
    fn time_left(&self) -> f64 {
        self.lock().as_ref().map_or(0.0, |p| p.deadline().saturating_duration_since(std::time::Instant::now()).as_secs_f64())
    }

    /// The bound channel once ``poll()`` is True; raises the bind's error
    /// (BindError, Timeout, MonitorError) if it failed. Call once.
    fn finish(&self, py: Python<'_>) -> PyResult<Py<Channel>> {
        let taken = self.lock().take();
        let Some(mut p) = taken else {
            return Err(to_py(py, Error::invalid("this bind was finished or cancelled already")));
        };
        if !p.poll() {
            *self.lock() = Some(p);
            return Err(to_py(py, Error::invalid("the bind is not decided yet: wait until poll() is True")));
        }
        let ch = p.finish().map_err(|e| to_py(py, e))?;
        self.adopted.adopt(py, Channel::new(ch))
    }

    /// Give the bind up (as a timed-out bind does); a reply that comes
    /// later is torn down. Idempotent.
    fn cancel(&self) {
        let taken = self.lock().take();
        drop(taken);
    }

    fn __repr__(&self) -> String {
        match self.lock().as_ref() {
            Some(_) => "<PendingBind in flight>".into(),
            None => "<PendingBind done>".into(),
        }
    }
}
