//! `Engine`: a live broker's rounds in Rust (`crate::engine`), over the runtime's channels.
//!
//! The broker's loop (`multihop/ges/live/broker.py`) polls its dispatcher, then per round calls
//! [`Engine::round`] with the channels that are ready (their frames are read and handled with the
//! GIL released until one is for the control plane, which the call returns: the loop handles it,
//! pushes what changed, and calls [`Engine::resume`]), then [`Engine::flush`] with the control
//! plane's own frames of the round (written first on each link, then what the routing made).

use std::sync::Mutex;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use super::erp::EventRouting;
use super::profile_graph::lock;
use crate::engine::{Engine as Inner, Item, Kind};
use crate::fxhash::FxHashMap;

/// A live broker's native engine (see the module docs).
#[pyclass(frozen, module = "multihop._ges")]
pub struct Engine {
    inner: Mutex<Inner>,
    /// the channel objects of the links (held, so their addresses name them) -> link codes
    codes: Mutex<FxHashMap<usize, (i64, Py<PyAny>)>>,
}

fn item_to_py(py: Python<'_>, item: Option<Item>) -> PyResult<Option<(i64, Option<Bound<'_, PyBytes>>)>> {
    Ok(match item {
        None => None,
        Some(Item::Frame(code, f)) => Some((code, Some(PyBytes::new(py, &f)))),
        Some(Item::Closed(code)) => Some((code, None)),
    })
}

#[pymethods]
impl Engine {
    /// An engine over ``routing`` (the broker's native event routing: the state both share).
    #[new]
    fn new(routing: &Bound<'_, EventRouting>) -> Self {
        Engine { inner: Mutex::new(Inner::new(routing.get().erp.clone())), codes: Mutex::new(FxHashMap::default()) }
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
        inner.add_link(code, ch, kind, client.map(|c| (c.into_boxed_str(), incarnation)));
        inner.queue(code, queued);
        lock(&self.codes).insert(channel.as_ptr() as usize, (code, channel.clone().unbind()));
        Ok(())
    }

    /// Forget link ``code`` (lost or closed): what was queued for it is dropped.
    fn remove_link(&self, code: i64) {
        lock(&self.inner).remove_link(code);
        lock(&self.codes).retain(|_, (c, _)| *c != code);
    }

    /// Whether link ``code`` is handled here.
    fn has_link(&self, code: i64) -> bool {
        lock(&self.inner).has_link(code)
    }

    /// Read the links among ``ready`` (channels; others are left out) and handle their frames until
    /// one is for the control plane: ``(code, frame)``, or ``(code, None)`` for a link found closed;
    /// None when the round's frames are all handled.
    fn round<'py>(&self, py: Python<'py>, ready: &Bound<'py, PyList>) -> PyResult<Option<(i64, Option<Bound<'py, PyBytes>>)>> {
        let codes: Vec<i64> = {
            let map = lock(&self.codes);
            ready.iter().filter_map(|ch| map.get(&(ch.as_ptr() as usize)).map(|(c, _)| *c)).collect()
        };
        let item = py.detach(|| {
            let mut inner = lock(&self.inner);
            inner.receive(&codes);
            inner.process()
        });
        item_to_py(py, item)
    }

    /// Go on with the round's frames after the control plane handled the one :meth:`round` gave.
    fn resume<'py>(&self, py: Python<'py>) -> PyResult<Option<(i64, Option<Bound<'py, PyBytes>>)>> {
        let item = py.detach(|| lock(&self.inner).process());
        item_to_py(py, item)
    }

    /// End the round: queue the control plane's frames (``[(code, [frame, ...]), ...]``), encode what
    /// the routing made, and write every link until it has no credit. Returns the links found closed.
    fn flush(&self, py: Python<'_>, queued: Vec<(i64, Vec<Vec<u8>>)>) -> Vec<i64> {
        py.detach(|| {
            let mut inner = lock(&self.inner);
            for (code, frames) in queued {
                inner.queue(code, frames);
            }
            inner.flush()
        })
    }

    /// Whether frames wait for credit on some link.
    fn queued(&self) -> bool {
        lock(&self.inner).queued()
    }

    /// The engine's counters: frames read (``frames_in``, of which ``native_in`` handled here), written
    /// (``frames_out``), writes that found no credit (``busy``), rounds.
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = lock(&self.inner).counters.clone();
        let d = PyDict::new(py);
        for (k, v) in [("frames_in", c.frames_in), ("native_in", c.native_in), ("frames_out", c.frames_out), ("busy", c.busy), ("rounds", c.rounds)] {
            d.set_item(k, v)?;
        }
        Ok(d)
    }
}

/// Register the class.
pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Engine>()?;
    Ok(())
}
