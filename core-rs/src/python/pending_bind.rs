//! `PendingBind`: a bind whose request is out and whose reply has not been
//! taken yet (what `Dispatcher.bind_async` awaits; `pending_bind.rs`).

use std::sync::Mutex;

use pyo3::prelude::*;

use super::args::to_py;
use super::channel::Channel;
use super::dispatcher::Dispatcher;
use crate::error::Error;
use crate::pending_bind::PendingBind as EnginePending;

/// A bind in flight: ``poll()`` says whether it is decided, ``finish()``
/// returns the channel (or raises the bind's error). Dropping it, or
/// ``cancel()``, gives the bind up as a timed-out bind does.
#[pyclass(frozen, module = "multihop._core")]
pub struct PendingBind {
    pending: Mutex<Option<EnginePending>>,
    owner: Py<Dispatcher>,
}

impl PendingBind {
    pub(crate) fn new(pending: EnginePending, owner: Py<Dispatcher>) -> PendingBind {
        PendingBind { pending: Mutex::new(Some(pending)), owner }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<EnginePending>> {
        crate::sync::lock(&self.pending)
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
        self.owner.bind(py).get().adopt(py, Channel::new(ch))
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
