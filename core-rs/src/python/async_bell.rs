//! `AsyncBell`: this process's doorbell as a descriptor for an event loop,
//! with the registry of what the loop's tasks wait for.
//!
//! One per event loop (normally one per process) serves every channel,
//! service and pending bind of the process: the loop watches `fileno()`
//! (`loop.add_reader`); a task that must wait registers what it waits for
//! (`watch`, keyed by a token) and awaits a future; when the descriptor
//! turns readable the loop calls `consume`, `arm`, then `ready` to learn
//! which tokens may proceed, and wakes those futures. The scan runs here, in
//! Rust, over the registry only: one look per watched item (a ring's control
//! word, a backlog's length; a UMP end also polls its peer's pidfd, at most
//! every 2 ms). `multihop.aio` is the Python side.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use super::args::{to_py, type_name};
use super::channel::Channel;
use super::pending_bind::PendingBind;
use super::service::Service;
use multihop_base::async_bell::AsyncBell as EngineBell;
use multihop_base::park::process_doorbell;
use multihop_base::ringpair::Want;
use multihop_dispatcher::Channel as Endpoint;

/// What one token waits for.
enum Watched {
    Channel(Arc<Endpoint>, Want),
    Service(Py<Service>),
    Bind(Py<PendingBind>),
}

impl Watched {
    /// One look: may the waiting task proceed? `strict`: look at a UMP
    /// peer's process now rather than at most every 2 ms (after its pidfd
    /// turned readable).
    fn ready(&self, strict: bool) -> bool {
        match self {
            Watched::Channel(ep, want) => ep.is_ready(*want) || (strict && ep.is_closed()),
            Watched::Service(s) => s.get().acceptable(),
            Watched::Bind(b) => b.get().poll(),
        }
    }
}

/// What a task waits for on a channel: 0 a message (or the end), 1 room
/// for `size` bytes (credit and ring room), 2 every message consumed.
const WANT_READABLE: u8 = 0;
const WANT_WRITABLE: u8 = 1;
const WANT_FLUSHED: u8 = 2;

/// This process's doorbell as a pollable descriptor, with the registry of
/// what an event loop's tasks wait for (see `multihop.aio`).
#[pyclass(frozen, module = "multihop._core")]
pub struct AsyncBell {
    bell: EngineBell,
    watched: Mutex<(HashMap<u64, Watched>, u64)>,
}

impl AsyncBell {
    fn registry(&self) -> std::sync::MutexGuard<'_, (HashMap<u64, Watched>, u64)> {
        multihop_base::sync::lock(&self.watched)
    }
}

#[pymethods]
impl AsyncBell {
    /// Make the descriptor for this process's doorbell: io_uring waiting on
    /// the doorbell's futex (Linux 6.7+), else one bridge thread and an
    /// eventfd (see ``kind``).
    #[new]
    fn new(py: Python<'_>) -> PyResult<AsyncBell> {
        let bell = process_doorbell().and_then(EngineBell::new).map_err(|e| to_py(py, e))?;
        Ok(AsyncBell { bell, watched: Mutex::new((HashMap::new(), 0)) })
    }

    /// The descriptor to watch for readability.
    fn fileno(&self) -> i32 {
        self.bell.fileno()
    }

    /// "io_uring" or "bridge": how the doorbell's wake-up reaches the descriptor.
    #[getter]
    fn kind(&self) -> &'static str {
        self.bell.kind()
    }

    /// Count the event loop as a waiter on the doorbell: from now on every
    /// ring turns the descriptor readable. Look at what you wait for after
    /// this (``ready``), never only before.
    fn arm(&self, py: Python<'_>) -> PyResult<()> {
        self.bell.arm().map_err(|e| to_py(py, e))
    }

    /// The descriptor turned readable (or the loop stops waiting): take the
    /// wake-up and stop counting the loop as a waiter.
    fn consume(&self) {
        self.bell.consume();
    }

    /// Register what a task waits for: a Channel (``want`` 0: a message or
    /// the end; 1: room for ``size`` bytes; 2: every message consumed), a
    /// Service (a connection in its backlog) or a PendingBind (its reply).
    /// Returns the token ``ready`` reports it by.
    #[pyo3(signature = (obj, want=0, size=0))]
    fn watch(&self, obj: &Bound<'_, PyAny>, want: u8, size: usize) -> PyResult<u64> {
        let w = if let Ok(c) = obj.cast::<Channel>() {
            let want = match want {
                WANT_READABLE => Want::Readable,
                WANT_WRITABLE => Want::Writable(size),
                WANT_FLUSHED => Want::Flushed,
                other => return Err(PyValueError::new_err(format!("want must be 0 (readable), 1 (writable) or 2 (flushed), got {other}"))),
            };
            Watched::Channel(c.get().ch.clone(), want)
        } else if let Ok(s) = obj.cast::<Service>() {
            Watched::Service(s.clone().unbind())
        } else if let Ok(b) = obj.cast::<PendingBind>() {
            Watched::Bind(b.clone().unbind())
        } else {
            return Err(PyTypeError::new_err(format!("watch takes a Channel, Service or PendingBind, got {}", type_name(obj))));
        };
        let mut reg = self.registry();
        reg.1 += 1;
        let token = reg.1;
        reg.0.insert(token, w);
        Ok(token)
    }

    /// Forget a token (its task got what it waited for, or gave up). Unknown tokens are ignored.
    fn unwatch(&self, token: u64) {
        let gone = self.registry().0.remove(&token);
        drop(gone); // outside the lock: dropping a Py<...> may run Python code
    }

    /// Whether the task behind ``token`` may proceed now (False for an unknown token).
    fn poll(&self, token: u64) -> bool {
        let reg = self.registry();
        reg.0.get(&token).is_some_and(|w| w.ready(false))
    }

    /// The tokens whose tasks may proceed now (each looked at once).
    /// ``strict``: also look at every UMP peer's process now (after a peer's
    /// pidfd turned readable), not at most every 2 ms.
    #[pyo3(signature = (strict=false))]
    fn ready(&self, strict: bool) -> Vec<u64> {
        let reg = self.registry();
        reg.0.iter().filter(|(_, w)| w.ready(strict)).map(|(t, _)| *t).collect()
    }

    /// How many tokens are registered.
    #[getter]
    fn watching(&self) -> usize {
        self.registry().0.len()
    }

    fn __repr__(&self) -> String {
        format!("<AsyncBell fd={} kind={} watching={}>", self.bell.fileno(), self.bell.kind(), self.registry().0.len())
    }
}
