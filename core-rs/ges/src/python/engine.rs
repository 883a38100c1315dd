//! `Engine`: a live broker's event path in Rust (`crate::engine`), over the runtime's channels.
//!
//! The broker's loop (`multihop/ges/live/broker.py`) calls [`Engine::run`]: with the GIL released it
//! waits on the broker's dispatcher, reads, routes and writes the gateways' and attached clients'
//! frames, and returns only when the control plane has something to do: a frame of its own (handle
//! it, push what changed, :meth:`flush` the control plane's frames, run again), a closed link, one
//! of the control plane's own channels readable, its deadline, or a slice (to look at signals).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use super::erp::EventRouting;
use super::profile_graph::lock;
use crate::engine::{Engine as Inner, Item, Kind, Ran, CLIENT_QUEUE_LIMIT, MIN_CLIENT_QUEUE_LIMIT};
use crate::fxhash::FxHashMap;
use crate::io::{Dispatcher, FrameChannel};

/// A live broker's native engine (see the module docs).
#[pyclass(frozen, module = "multihop._ges")]
pub struct Engine {
    inner: Mutex<Inner>,
    dispatcher: Arc<dyn Dispatcher>,
    /// the control plane's channels seen by `run` (by their objects' addresses; each object held)
    control: Mutex<FxHashMap<usize, (Arc<dyn FrameChannel>, Py<PyAny>)>>,
}

// The default of `Engine(client_queue_limit=)`, written out in its signature (a constant shows as `...`).
const _: () = assert!(CLIENT_QUEUE_LIMIT == 67_108_864);

/// What `run` returns: `(kind, link code, frame)`.
type RunOut<'py> = (u8, i64, Option<Bound<'py, PyBytes>>);

#[pymethods]
impl Engine {
    /// An engine over ``routing`` (the broker's native event routing: the state both share), waiting
    /// and corking with ``dispatcher`` (the broker's ``multihop.Dispatcher``). ``client_queue_limit``:
    /// bytes that may wait here for one client beyond what its channel holds before it is given up as
    /// a slow consumer (``run``'s kind 5; default 64 MiB, at least 1 MiB).
    #[new]
    #[pyo3(signature = (routing, dispatcher, client_queue_limit=67_108_864))] // (CLIENT_QUEUE_LIMIT, written out for the signature)
    fn new(routing: &Bound<'_, EventRouting>, dispatcher: &Bound<'_, PyAny>, client_queue_limit: usize) -> PyResult<Self> {
        if client_queue_limit < MIN_CLIENT_QUEUE_LIMIT {
            return Err(PyValueError::new_err(format!(
                "client_queue_limit must be at least {MIN_CLIENT_QUEUE_LIMIT} bytes (1 MiB), got {client_queue_limit}"
            )));
        }
        crate::pool::keep_freed_memory();
        let mut inner = Inner::new(routing.get().erp.clone());
        inner.client_queue_limit = client_queue_limit;
        Ok(Engine { inner: Mutex::new(inner), dispatcher: super::dispatcher_of(dispatcher)?, control: Mutex::new(FxHashMap::default()) })
    }

    /// Handle link ``code`` here from now on: ``channel`` (a ``multihop.Channel``) to neighbour broker
    /// ``code`` (``kind`` 1) or to an attached client (``kind`` 2, ``code`` negative, with its id and
    /// incarnation); ``queued``: frames the control plane had waiting for it, sent first.
    #[pyo3(signature = (code, channel, kind, client=None, incarnation=0, queued=Vec::new()))]
    fn add_link(
        &self,
        code: i64,
        channel: &Bound<'_, PyAny>,
        kind: u8,
        client: Option<String>,
        incarnation: u64,
        queued: Vec<Vec<u8>>,
    ) -> PyResult<()> {
        let kind = match kind {
            1 => Kind::Broker,
            2 => Kind::Client,
            k => return Err(PyValueError::new_err(format!("kind must be 1 (broker) or 2 (client), got {k}"))),
        };
        let ch = super::channel_of(channel)?;
        let mut inner = lock(&self.inner);
        inner.add_link(code, ch, kind, client.map(|c| (Arc::from(c), incarnation)));
        inner.queue(code, queued);
        Ok(())
    }

    /// Forget link ``code`` (lost or closed): what was queued for it is dropped.
    fn remove_link(&self, code: i64) {
        lock(&self.inner).remove_link(code);
    }

    /// Whether link ``code`` is handled here.
    fn has_link(&self, code: i64) -> bool {
        lock(&self.inner).has_link(code)
    }

    /// Run the event path until the control plane has something to do; ``control``: the control
    /// plane's own channels (watched, not read), ``timeout``: seconds until its next deadline (None:
    /// none). Returns ``(kind, code, frame)``: kind 1, a frame of link ``code`` for the control plane;
    /// 2, link ``code`` is closed; 3, one of ``control`` is readable; 4, the store has calls to do
    /// (durable mode: ``EventRouting.take_store_calls``, then :meth:`flush`); 5, client link ``code`` was
    /// given up as a slow consumer (nothing more is written to it; the third element is why, UTF-8:
    /// close it and detach the client); 0, the deadline or a slice passed.
    fn run<'py>(&self, py: Python<'py>, control: &Bound<'py, PyList>, timeout: Option<f64>) -> PyResult<RunOut<'py>> {
        let until = match timeout {
            Some(t) if t.is_finite() && t >= 0.0 => Some(Instant::now() + Duration::from_secs_f64(t.min(1e6))),
            Some(t) if t.is_finite() || t.is_nan() => return Err(PyValueError::new_err(format!("timeout must be >= 0 or None, got {t}"))),
            _ => None,
        };
        let chans = self.control_channels(control)?;
        let ran = py.detach(|| lock(&self.inner).run(&*self.dispatcher, &chans, until));
        Ok(match ran {
            Ran::Item(Item::Frame(code, f)) => (1, code, Some(PyBytes::new(py, &f))),
            Ran::Item(Item::Closed(code)) => (2, code, None),
            Ran::Item(Item::Slow(code, why)) => (5, code, Some(PyBytes::new(py, why.as_bytes()))),
            Ran::Control => (3, 0, None),
            Ran::Store => (4, 0, None),
            Ran::Deadline | Ran::Slice => (0, 0, None),
        })
    }

    /// Queue the control plane's frames (``[(code, [frame, ...]), ...]``, before what the routing made),
    /// encode what the routing made, and write every link until it has no credit (corked). Returns the
    /// links found closed. ``hold_acks`` (durable mode: the store could not commit): acknowledgements
    /// wait, from now until a flush without it.
    #[pyo3(signature = (queued, hold_acks=false))]
    fn flush(&self, py: Python<'_>, queued: Vec<(i64, Vec<Vec<u8>>)>, hold_acks: bool) -> Vec<i64> {
        py.detach(|| {
            let mut inner = lock(&self.inner);
            inner.hold_acks(hold_acks);
            for (code, frames) in queued {
                inner.queue(code, frames);
            }
            let mut closed = Vec::new();
            self.dispatcher.corked(&mut || closed = inner.flush());
            closed
        })
    }

    /// Whether frames wait for credit on some link.
    fn queued(&self) -> bool {
        lock(&self.inner).queued()
    }

    /// The engine's counters: frames read (``frames_in``, of which ``native_in`` handled here), written
    /// (``frames_out``), writes that found no credit (``busy``), rounds, waits, this thread's CPU time
    /// in the loop's work (``work_cpu_ns``: reading, routing, writing) and in its waits (``wait_cpu_ns``),
    /// and clients given up as slow consumers (``slow_clients``).
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = lock(&self.inner).counters.clone();
        let d = PyDict::new(py);
        for (k, v) in [
            ("frames_in", c.frames_in),
            ("native_in", c.native_in),
            ("frames_out", c.frames_out),
            ("busy", c.busy),
            ("rounds", c.rounds),
            ("waits", c.waits),
            ("work_cpu_ns", c.work_cpu_ns),
            ("wait_cpu_ns", c.wait_cpu_ns),
            ("slow_clients", c.slow_clients),
        ] {
            d.set_item(k, v)?;
        }
        Ok(d)
    }
}

impl Engine {
    /// The control plane's channels as the engine watches them (made once per channel object).
    fn control_channels(&self, control: &Bound<'_, PyList>) -> PyResult<Vec<Arc<dyn FrameChannel>>> {
        let mut map = lock(&self.control);
        let mut out = Vec::with_capacity(control.len());
        for obj in control.iter() {
            let key = obj.as_ptr() as usize;
            if let Some((ch, _)) = map.get(&key) {
                out.push(ch.clone());
                continue;
            }
            let ch = super::channel_of(&obj)?;
            map.insert(key, (ch.clone(), obj.unbind()));
            out.push(ch);
        }
        if map.len() > 2 * out.len() + 16 {
            let keep: Vec<usize> = control.iter().map(|o| o.as_ptr() as usize).collect();
            map.retain(|k, _| keep.contains(k));
        }
        Ok(out)
    }
}

/// Register the class.
pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Engine>()?;
    m.add("CLIENT_QUEUE_LIMIT", CLIENT_QUEUE_LIMIT)?;
    m.add("MIN_CLIENT_QUEUE_LIMIT", MIN_CLIENT_QUEUE_LIMIT)?;
    Ok(())
}
