//! `EventRouting`: the native event routing (`crate::erp`) driven with Python's protocol values
//! (`EventData`, `EventCopy`), as `multihop.ges.native.NativeEventRouting` drives it inside a
//! `BrokerCore` (the simulator's brokers, and the live broker's control calls). The live broker's
//! rounds go through the same state without making these values (`crate::python::engine`).
//!
//! An event that came from Python keeps its `EventData` object (the [`Event`]'s attachment), so
//! the copies and deliveries given back carry the very object that came in.

use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple, PyType};

use super::codec::{check_classes, field, named, tuple_of, EventView};
use super::profile_graph::{lock, ProfileGraph};
use crate::erp::{Copy, Erp, Event, StoreCall, Units};
use crate::routing::{NodeInfo, Snapshot};

/// The classes Python's protocol values are made of: `EventId`, `EventData`, `EventCopy`.
pub(crate) struct Classes {
    pub id: Py<PyType>,
    pub event: Py<PyType>,
    pub copy: Py<PyType>,
}

/// The native event routing of one broker, driven with Python's protocol values.
#[pyclass(frozen, module = "multihop._ges")]
pub struct EventRouting {
    pub(crate) erp: Arc<Mutex<Erp>>,
    pub(crate) classes: Classes,
}

/// An event from an `EventData` value (kept as its attachment).
pub(crate) fn event_from_py(erp: &mut Erp, ev: &Bound<'_, PyAny>) -> PyResult<Arc<Event>> {
    let v = EventView::of(ev)?;
    let f = v.fields()?;
    Ok(erp.event(
        v.publisher.to_str()?,
        f.timestamp,
        f.sequence,
        f.incarnation,
        v.signature.to_str()?,
        v.values.to_str()?,
        f.payload,
        Some(Box::new(ev.clone().unbind())),
    ))
}

fn units_of(v: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u64>> {
    v.try_iter()?.map(|u| field(&u?, what, u64::MAX)).collect()
}

fn unit_list(v: &Bound<'_, PyAny>, what: &str) -> PyResult<Units> {
    Ok(Units::from_slice(&units_of(v, what)?))
}

fn copy_from_py(erp: &mut Erp, c: &Bound<'_, PyAny>) -> PyResult<Copy> {
    let t = tuple_of(c, "an event copy", 8)?;
    let mode = field(&t.get_item(2)?, "mode", u8::MAX as u64)? as u8;
    if mode != crate::erp::UP && mode != crate::erp::DOWN {
        return Err(PyValueError::new_err(format!("mode {mode}")));
    }
    Ok(Copy {
        event: event_from_py(erp, &t.get_item(0)?)?,
        origin: field(&t.get_item(1)?, "origin", u64::MAX)?,
        mode,
        level: field(&t.get_item(3)?, "level", u8::MAX as u64)? as u8,
        targets: unit_list(&t.get_item(4)?, "a target unit")?,
        reached: unit_list(&t.get_item(5)?, "a reached unit")?,
        hops: field(&t.get_item(6)?, "hops", u16::MAX as u64)? as u16,
        left: unit_list(&t.get_item(7)?, "a left unit")?,
    })
}

impl Classes {
    /// The `EventData` of an event: the object it came as, or one made now.
    pub(crate) fn event_to_py<'py>(&self, py: Python<'py>, ev: &Event) -> PyResult<Bound<'py, PyAny>> {
        if let Some(obj) = ev.attachment.as_ref().and_then(|a| a.downcast_ref::<Py<PyAny>>()) {
            return Ok(obj.bind(py).clone());
        }
        let id = named(
            py,
            self.id.bind(py),
            [
                PyString::new(py, &ev.publisher).into_any(),
                ev.timestamp.into_pyobject(py)?.into_any(),
                ev.sequence.into_pyobject(py)?.into_any(),
                ev.incarnation.into_pyobject(py)?.into_any(),
            ],
        )?;
        named(
            py,
            self.event.bind(py),
            [id, PyString::new(py, &ev.signature).into_any(), PyString::new(py, ev.values()).into_any(), PyBytes::new(py, ev.payload()).into_any()],
        )
    }

    fn copy_to_py<'py>(&self, py: Python<'py>, c: &Copy) -> PyResult<Bound<'py, PyAny>> {
        named(
            py,
            self.copy.bind(py),
            [
                self.event_to_py(py, &c.event)?,
                c.origin.into_pyobject(py)?.into_any(),
                c.mode.into_pyobject(py)?.into_any(),
                c.level.into_pyobject(py)?.into_any(),
                PyTuple::new(py, c.targets.iter())?.into_any(),
                PyTuple::new(py, c.reached.iter())?.into_any(),
                c.hops.into_pyobject(py)?.into_any(),
                PyTuple::new(py, c.left.iter())?.into_any(),
            ],
        )
    }
}

/// A routing snapshot from Python's values (see `EventRouting.set_routing`).
pub(crate) fn snapshot_from_py(
    version: u64,
    links: &Bound<'_, PyDict>,
    nodes: &Bound<'_, PyAny>,
    deciders: &Bound<'_, PyDict>,
    decided: &Bound<'_, PyAny>,
    levels: u32,
) -> PyResult<Snapshot> {
    let mut snap = Snapshot { version, deciders: vec![Vec::new(); levels as usize + 2], ..Snapshot::default() };
    for (peer, level) in links.iter() {
        snap.links.insert(peer.extract()?, level.extract()?);
    }
    for n in nodes.try_iter()? {
        let (node, level, cost, hop, edges, vertex_hop): (u64, u32, f64, Option<u64>, Vec<(u64, f64)>, Option<u64>) = n?.extract()?;
        snap.nodes.insert(node, NodeInfo { level, cost, hop, edges, vertex_hop });
    }
    for (level, ds) in deciders.iter() {
        let level: usize = level.extract()?;
        if level >= snap.deciders.len() {
            return Err(PyValueError::new_err(format!("deciders of level {level}: the system has {levels} levels")));
        }
        let mut v: Vec<u64> = units_of(&ds, "a decider")?;
        v.sort_unstable();
        snap.deciders[level] = v;
    }
    for l in decided.try_iter()? {
        let l: u32 = l?.extract()?;
        if l >= 32 {
            return Err(PyValueError::new_err(format!("decided level {l} is out of range")));
        }
        snap.decided |= 1 << l;
    }
    Ok(snap)
}

/// The graphs of `set_graphs`: `(level, graph)` and the local one.
pub(crate) fn graphs_from_py(graphs: &Bound<'_, PyDict>) -> PyResult<Vec<(u32, crate::erp::SharedGraph)>> {
    let mut out = Vec::new();
    for (level, g) in graphs.iter() {
        let g = g.cast::<ProfileGraph>()?;
        out.push((level.extract()?, g.get().graph.clone()));
    }
    Ok(out)
}

#[pymethods]
impl EventRouting {
    /// The event routing of broker ``code`` in a system of ``levels`` levels; ``id_cls``,
    /// ``event_cls``, ``copy_cls``: the NamedTuple classes of event ids, events and copies.
    #[new]
    fn new(
        py: Python<'_>,
        code: u64,
        levels: u32,
        id_cls: Bound<'_, PyType>,
        event_cls: Bound<'_, PyType>,
        copy_cls: Bound<'_, PyType>,
    ) -> PyResult<Self> {
        check_classes(py, [&id_cls, &event_cls, &copy_cls])?;
        if levels > 9 {
            return Err(PyValueError::new_err(format!("levels must be at most 9, got {levels}")));
        }
        Ok(EventRouting {
            erp: Arc::new(Mutex::new(Erp::new(code, levels))),
            classes: Classes { id: id_cls.unbind(), event: event_cls.unbind(), copy: copy_cls.unbind() },
        })
    }

    /// Replace the control plane's state: the GPP ``version``, the live gateways ``{peer: level}``,
    /// the graph's ``nodes`` as ``(node, level, cost, hop or None, [(neighbour, weight), ...],
    /// vertex hop or None)``, the ``deciders`` of each level ``{level: codes}`` and the levels
    /// ``decided`` here.
    fn set_routing(
        &self,
        version: u64,
        links: &Bound<'_, PyDict>,
        nodes: &Bound<'_, PyAny>,
        deciders: &Bound<'_, PyDict>,
        decided: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let mut erp = lock(&self.erp);
        let snap = snapshot_from_py(version, links, nodes, deciders, decided, erp.levels)?;
        erp.routing.set(snap);
        Ok(())
    }

    /// The profile graphs this broker decides with (``{level: ProfileGraph}``) and its local one.
    fn set_graphs(&self, graphs: &Bound<'_, PyDict>, local: &Bound<'_, ProfileGraph>) -> PyResult<()> {
        let gs = graphs_from_py(graphs)?;
        let mut erp = lock(&self.erp);
        erp.set_graphs(gs);
        erp.set_local(local.get().graph.clone());
        Ok(())
    }

    /// A local client published ``event`` (an ``EventData``).
    fn publish(&self, event: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut erp = lock(&self.erp);
        let ev = event_from_py(&mut erp, event)?;
        erp.publish(ev);
        Ok(())
    }

    /// Copies (``EventCopy`` values) from neighbour ``peer``, numbered from ``first_seq``.
    fn on_events(&self, peer: u64, first_seq: u64, copies: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut erp = lock(&self.erp);
        let mut cs = Vec::new();
        for c in copies.try_iter()? {
            cs.push(copy_from_py(&mut erp, &c?)?);
        }
        erp.on_events(peer, first_seq, cs);
        Ok(())
    }

    /// Neighbour ``peer`` handled our copies up to ``upto``, and those in ``also``.
    #[pyo3(signature = (peer, upto, also=Vec::new()))]
    fn on_ack(&self, peer: u64, upto: i64, also: Vec<u64>) {
        lock(&self.erp).on_ack(peer, upto, &also);
    }

    /// Durable mode from now on (before any event).
    fn set_durable(&self) {
        lock(&self.erp).set_durable();
    }

    /// What the durability side says now (durable mode): ``restarting`` (a restarted broker without its
    /// profiles: every copy parks), ``missing`` (bit per level: profiles still missing there),
    /// ``has_store`` (a storage broker), ``had_deciders`` (bit per level: ``_had_deciders``).
    fn set_durable_state(&self, restarting: bool, missing: u32, has_store: bool, had_deciders: u32) {
        lock(&self.erp).set_durable_state(restarting, missing, has_store, had_deciders);
    }

    /// Durable mode: route stored entry ``entry`` (``event``, an ``EventData``) from this storage broker.
    fn originate(&self, event: &Bound<'_, PyAny>, entry: u64) -> PyResult<()> {
        let mut erp = lock(&self.erp);
        let ev = event_from_py(&mut erp, event)?;
        erp.originate(ev, entry);
        Ok(())
    }

    /// Durable mode: route the parked copies again.
    fn retry_parked(&self) {
        lock(&self.erp).retry_parked();
    }

    /// Copies parked now (durable mode).
    fn parked(&self) -> usize {
        lock(&self.erp).dur.parked.len()
    }

    /// Whether parked copies wait for a graph that changed since they were last routed (durable mode:
    /// :meth:`take` routes them again first).
    fn parked_due(&self) -> bool {
        lock(&self.erp).parked_due()
    }

    /// What the store must do, in order: ``(0, EventData, [peer, ...])`` (store it for these homed
    /// clients' profile peers, ``on_match``) or ``(1, entry, None)`` (``route_done``); empties the list.
    fn take_store_calls<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let calls = lock(&self.erp).take_store_calls();
        let list = PyList::empty(py);
        for c in calls {
            match c {
                StoreCall::Match(ev, peers) => list.append((0u8, self.classes.event_to_py(py, &ev)?, Some(peers)))?,
                StoreCall::RouteDone(e) => list.append((1u8, e.into_pyobject(py)?.into_any(), None::<Vec<i64>>))?,
            }
        }
        Ok(list)
    }

    /// The gateway to ``peer`` is lost (the routing pushed already says so).
    fn link_down(&self, peer: u64) {
        lock(&self.erp).link_down(peer);
    }

    /// A client detached.
    fn client_gone(&self, peer: i64) {
        lock(&self.erp).client_gone(peer);
    }

    /// The acknowledgement timer fired.
    fn fire_ack(&self) {
        lock(&self.erp).fire_ack();
    }

    /// Whether the acknowledgement timer must be set now.
    fn take_timer(&self) -> bool {
        lock(&self.erp).take_timer()
    }

    /// Whether :meth:`take` or :meth:`take_deliveries` would give anything (or an acknowledgement is due).
    fn pending(&self) -> bool {
        lock(&self.erp).pending()
    }

    /// Per neighbour, in order: ``(peer, first_seq or None, copies or None, (ack upto, also) or None)``.
    fn take<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        let mut failed: PyResult<()> = Ok(());
        lock(&self.erp).take(|o| {
            let item = || -> PyResult<()> {
                let (first, copies) = match o.events {
                    Some((first, cs)) => {
                        let t = PyTuple::new(py, cs.iter().map(|c| self.classes.copy_to_py(py, c)).collect::<PyResult<Vec<_>>>()?)?;
                        (Some(first), Some(t))
                    }
                    None => (None, None),
                };
                list.append((o.peer, first, copies, o.ack))
            };
            if failed.is_ok() {
                failed = item();
            }
        });
        failed.map(|()| list)
    }

    /// Per client, in order: ``(client peer, [EventData, ...])``.
    fn take_deliveries<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        let mut failed: PyResult<()> = Ok(());
        lock(&self.erp).take_deliveries(|out| {
            failed = out.lists.iter().enumerate().try_for_each(|(k, (client, _))| {
                let l = PyList::new(py, out.events_of(k).map(|e| self.classes.event_to_py(py, e)).collect::<PyResult<Vec<_>>>()?)?;
                list.append((*client, l))
            });
        });
        failed.map(|()| list)
    }

    /// The counters (those of ``EventRouting.counters``).
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in lock(&self.erp).counters.items() {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// Copies sent and not acknowledged yet, all neighbours together.
    fn in_flight(&self) -> usize {
        lock(&self.erp).in_flight()
    }
}

/// Register the class.
pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<EventRouting>()?;
    Ok(())
}
