//! `AsyncCall`: the awaitable an `*_async` channel call returns.
//!
//! It does nothing until the awaiting task first runs it: then it tries once
//! (a message there, room in the ring) and, when that succeeds, finishes in
//! that very step, with no coroutine frame and no turn of the event loop (as
//! `StreamReader.read` does with buffered data). Otherwise it hands over to
//! the coroutine of `multihop.aio` that waits on the doorbell, and forwards
//! every later step to it. Because nothing happens before the first step, a
//! task cancelled before it ever ran has taken no message and sent none.
//! To asyncio it is a coroutine (`multihop.aio` registers the class with
//! `collections.abc.Coroutine`), so `create_task`, `wait_for` and `gather`
//! take it.

use pyo3::exceptions::PyStopIteration;
use std::sync::Arc;

use pyo3::prelude::*;

use super::wait::{aio, try_recv_bytes, Bytes};
use multihop_dispatcher::Channel as Endpoint;

/// What the call does.
pub(crate) enum Op {
    Recv,
    Send(Py<PyAny>),
}

enum State {
    /// Not run yet.
    Start {
        /// The `Channel` object (what the coroutine is given) and its engine end.
        ch: Py<PyAny>,
        end: Arc<Endpoint>,
        op: Op,
        timeout: Option<f64>,
    },
    /// Waiting: every step goes to this `multihop.aio` coroutine.
    Waiting(Py<PyAny>),
    Done,
}

/// An ``await``-able ``recv_async`` / ``send_async`` call (see the module text).
#[pyclass(module = "multihop._core")]
pub struct AsyncCall {
    state: State,
}

impl AsyncCall {
    pub(crate) fn new(ch: Py<PyAny>, end: Arc<Endpoint>, op: Op, timeout: Option<f64>) -> AsyncCall {
        AsyncCall { state: State::Start { ch, end, op, timeout } }
    }

    /// One step: the first tries at once, then hands over to the waiting coroutine.
    fn step(&mut self, py: Python<'_>, value: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Start { ch, end, op, timeout } => {
                let c = ch.bind(py);
                let quick: Option<Py<PyAny>> = match &op {
                    Op::Recv => match try_recv_bytes(py, &end) {
                        Ok(Some(b)) => Some(b.into_any().unbind()),
                        _ => None, // nothing there, or an error the coroutine raises
                    },
                    Op::Send(data) => match Bytes::get(data.bind(py)) {
                        Ok(bytes) if end.send_or_hold(&[bytes.as_slice()]).is_ok() => Some(py.None()),
                        _ => None,
                    },
                };
                if let Some(v) = quick {
                    return Err(PyStopIteration::new_err((v,)));
                }
                let aio = aio(py)?;
                let coro = match op {
                    Op::Recv => aio.getattr("recv")?.call1((c, timeout))?,
                    Op::Send(data) => aio.getattr("send")?.call1((c, data, timeout))?,
                };
                self.state = State::Waiting(coro.clone().unbind());
                self.forward(py, &coro, None)
            }
            State::Waiting(coro) => {
                let c = coro.bind(py).clone();
                self.state = State::Waiting(coro);
                self.forward(py, &c, value)
            }
            State::Done => Err(pyo3::exceptions::PyRuntimeError::new_err("cannot reuse an awaited *_async call")),
        }
    }

    fn forward(&mut self, py: Python<'_>, coro: &Bound<'_, PyAny>, value: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        let r = coro.call_method1("send", (value.map_or_else(|| py.None(), |v| v.clone().unbind()),));
        if r.is_err() {
            self.state = State::Done; // finished (StopIteration) or failed
        }
        r.map(Bound::unbind)
    }
}

#[pymethods]
impl AsyncCall {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.step(py, None)
    }

    /// Coroutine protocol: run one step.
    #[pyo3(signature = (value=None))]
    fn send(&mut self, py: Python<'_>, value: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        self.step(py, value)
    }

    /// Coroutine protocol: raise an exception where the call waits (before
    /// its first step: nothing was taken or sent).
    #[pyo3(signature = (typ, val=None, tb=None))]
    fn throw(
        &mut self,
        py: Python<'_>,
        typ: &Bound<'_, PyAny>,
        val: Option<&Bound<'_, PyAny>>,
        tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Waiting(coro) => {
                let c = coro.bind(py).clone();
                self.state = State::Waiting(coro);
                let r = match (val, tb) {
                    (None, None) => c.call_method1("throw", (typ,)),
                    _ => c.call_method1("throw", (typ, val, tb)),
                };
                if r.is_err() {
                    self.state = State::Done;
                }
                r.map(Bound::unbind)
            }
            _ => {
                let exc = match val {
                    Some(v) if !v.is_none() => v.clone(),
                    _ => typ.clone(),
                };
                Err(PyErr::from_value(exc))
            }
        }
    }

    /// Coroutine protocol: stop (the waiting coroutine, if any, is closed).
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        if let State::Waiting(coro) = std::mem::replace(&mut self.state, State::Done) {
            coro.bind(py).call_method0("close")?;
        }
        Ok(())
    }
}
