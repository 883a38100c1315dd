//! `decode_events`, `encode_events`, `encode_deliver`: the codec of `crate::codec` for Python's
//! protocol values (`typing.NamedTuple`s `EventId`, `EventData`, `EventCopy` of
//! `multihop.ges.event` / `multihop.ges.messages`), as `multihop/ges/live/wire.py` uses it when the
//! Python event path runs (the native engine decodes and encodes without making these objects).
//!
//! The values are made as `tuple.__new__` makes them: the class's own allocator, then the items.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple, PyType};

use crate::codec::{self, CodecError, CopyFields, EventFields, Units};

pub(crate) fn value_error(e: CodecError) -> PyErr {
    PyValueError::new_err(e.0)
}

/// A NamedTuple class whose instances are plain tuples in memory (no `__dict__`, no extra slots).
/// The answer is remembered for the classes a broker passes on every call (see [`PLAIN`]).
fn check_plain(py: Python<'_>, cls: &Bound<'_, PyType>) -> PyResult<()> {
    let mut plain = PLAIN.lock().unwrap_or_else(|p| p.into_inner());
    if plain.iter().any(|c| c.as_ptr() == cls.as_ptr()) {
        return Ok(());
    }
    let tuple = py.get_type::<PyTuple>();
    if !cls.is_subclass(&tuple)? || cls.getattr("__basicsize__")?.extract::<isize>()? != tuple.getattr("__basicsize__")?.extract::<isize>()? {
        return Err(PyTypeError::new_err(format!("{} is not a NamedTuple without extra fields", cls.name()?)));
    }
    if plain.len() < PLAIN_MAX {
        plain.push(cls.clone().unbind());
    }
    Ok(())
}

/// Classes that passed [`check_plain`]. A broker decodes with the same three classes every time,
/// and asking a class for `__basicsize__` twice per call cost a third of a one-event decode when the
/// caches are cold (12 of 39 us; the broker of a quiet system wakes cold for every event). Each is
/// held (a strong reference), so a listed class is never freed and its address never reused by
/// another class; a class's layout cannot change once made. Taken with the GIL held: uncontended.
static PLAIN: std::sync::Mutex<Vec<Py<PyType>>> = std::sync::Mutex::new(Vec::new());
/// Most classes remembered (beyond that they are checked on every call, as before).
const PLAIN_MAX: usize = 16;

/// An instance of tuple subclass `cls` holding `items` (as `tuple.__new__(cls, items)`).
pub(crate) fn named<'py, const N: usize>(py: Python<'py>, cls: &Bound<'py, PyType>, items: [Bound<'py, PyAny>; N]) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: `cls` passed `check_plain` (a tuple subclass laid out as a tuple), so its allocator
    // gives a tuple of N empty items that `PyTuple_SetItem` fills (it steals each reference; the
    // object's count is 1, as SetItem requires). A failed SetItem leaves a valid tuple to drop.
    unsafe {
        let tp = cls.as_type_ptr();
        let alloc = ffi::PyType_GetSlot(tp, ffi::Py_tp_alloc);
        if alloc.is_null() {
            return Err(PyTypeError::new_err("the class has no allocator"));
        }
        let alloc: ffi::allocfunc = std::mem::transmute(alloc);
        let obj = alloc(tp, N as ffi::Py_ssize_t);
        if obj.is_null() {
            return Err(PyErr::fetch(py));
        }
        let obj = Bound::from_owned_ptr(py, obj);
        for (i, item) in items.into_iter().enumerate() {
            if ffi::PyTuple_SetItem(obj.as_ptr(), i as ffi::Py_ssize_t, item.into_ptr()) != 0 {
                return Err(PyErr::fetch(py));
            }
        }
        Ok(obj)
    }
}

/// Check the three classes a decoder makes values of.
pub(crate) fn check_classes(py: Python<'_>, classes: [&Bound<'_, PyType>; 3]) -> PyResult<()> {
    for cls in classes {
        check_plain(py, cls)?;
    }
    Ok(())
}

/// The object made for the previous event's field, reused when its bytes are the same: a batch's
/// events mostly share publisher, signature and routing lists, so the brokers' tables keyed by them
/// hash one object (a str caches its hash) and compare by identity.
struct Last<'a, 'py> {
    bytes: &'a [u8],
    obj: Option<Bound<'py, PyAny>>,
}

impl<'a, 'py> Last<'a, 'py> {
    fn new() -> Self {
        Last { bytes: &[], obj: None }
    }

    fn get(&mut self, b: &'a [u8], make: impl FnOnce(&'a [u8]) -> PyResult<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        if let Some(o) = &self.obj {
            if self.bytes == b {
                return Ok(o.clone());
            }
        }
        let o = make(b)?;
        (self.bytes, self.obj) = (b, Some(o.clone()));
        Ok(o)
    }
}

fn units<'py>(py: Python<'py>, u: Units<'_>) -> PyResult<Bound<'py, PyAny>> {
    Ok(PyTuple::new(py, u.iter())?.into_any())
}

fn str_of<'py>(py: Python<'py>, b: &[u8]) -> Bound<'py, PyAny> {
    // the codec checked every text as UTF-8
    PyString::new(py, std::str::from_utf8(b).unwrap_or_default()).into_any()
}

/// Decode one `events` message: `(first_seq, copies)`, the copies as `copy_cls(event_cls(id_cls(...),
/// ...), ...)`. Raises ValueError naming what is malformed.
#[pyfunction]
fn decode_events<'py>(
    py: Python<'py>,
    data: &[u8],
    id_cls: &Bound<'py, PyType>,
    event_cls: &Bound<'py, PyType>,
    copy_cls: &Bound<'py, PyType>,
) -> PyResult<(u64, Bound<'py, PyTuple>)> {
    check_classes(py, [id_cls, event_cls, copy_cls])?;
    let mut refs = Vec::new();
    let first_seq = codec::decode_events(data, &mut refs).map_err(value_error)?;
    let empty = PyTuple::empty(py).into_any();
    let (mut publisher, mut signature, mut values) = (Last::new(), Last::new(), Last::new());
    let (mut targets, mut reached, mut lefts) = (Last::new(), Last::new(), Last::new());
    let mut copies = Vec::with_capacity(refs.len());
    for c in &refs {
        let id = named(
            py,
            id_cls,
            [
                publisher.get(c.publisher.as_bytes(), |b| Ok(str_of(py, b)))?,
                c.timestamp.into_pyobject(py)?.into_any(),
                c.sequence.into_pyobject(py)?.into_any(),
                c.incarnation.into_pyobject(py)?.into_any(),
            ],
        )?;
        let ev = named(
            py,
            event_cls,
            [
                id,
                signature.get(c.signature.as_bytes(), |b| Ok(str_of(py, b)))?,
                values.get(c.values.as_bytes(), |b| Ok(str_of(py, b)))?,
                PyBytes::new(py, c.payload).into_any(),
            ],
        )?;
        let left = if c.left.is_empty() { empty.clone() } else { lefts.get(c.left.bytes(), |u| units(py, Units(u)))? };
        copies.push(named(
            py,
            copy_cls,
            [
                ev,
                c.origin.into_pyobject(py)?.into_any(),
                c.mode.into_pyobject(py)?.into_any(),
                c.level.into_pyobject(py)?.into_any(),
                targets.get(c.targets.bytes(), |u| units(py, Units(u)))?,
                reached.get(c.reached.bytes(), |u| units(py, Units(u)))?,
                c.hops.into_pyobject(py)?.into_any(),
                left,
            ],
        )?);
    }
    Ok((first_seq, PyTuple::new(py, copies)?))
}

/// A Python int as `u64` no larger than `max`, or ValueError naming the field.
pub(crate) fn field(v: &Bound<'_, PyAny>, what: &str, max: u64) -> PyResult<u64> {
    match v.extract::<u64>() {
        Ok(x) if x <= max => Ok(x),
        _ => Err(PyValueError::new_err(format!("{what} {} is not an integer in 0..={max}", v.repr().map(|r| r.to_string()).unwrap_or_default()))),
    }
}

pub(crate) fn tuple_of<'a, 'py>(v: &'a Bound<'py, PyAny>, what: &str, n: usize) -> PyResult<&'a Bound<'py, PyTuple>> {
    let t = v.cast::<PyTuple>().map_err(|_| PyTypeError::new_err(format!("{what} is not a tuple")))?;
    if t.len() != n {
        return Err(PyTypeError::new_err(format!("{what} has {} fields, not {n}", t.len())));
    }
    Ok(t)
}

fn string<'py>(v: Bound<'py, PyAny>, what: &str) -> PyResult<Bound<'py, PyString>> {
    v.cast_into::<PyString>().map_err(|_| PyTypeError::new_err(format!("{what} is not a str")))
}

/// An `EventData` as the wire wants it: its id's numbers and its four texts.
pub(crate) struct EventView<'py> {
    /// timestamp, sequence, incarnation
    pub ids: [u64; 3],
    pub publisher: Bound<'py, PyString>,
    pub signature: Bound<'py, PyString>,
    pub values: Bound<'py, PyString>,
    pub payload: Bound<'py, PyBytes>,
}

impl<'py> EventView<'py> {
    pub(crate) fn of(ev: &Bound<'py, PyAny>) -> PyResult<Self> {
        let ev = tuple_of(ev, "an event", 4)?;
        let eid = ev.get_item(0)?;
        let eid = tuple_of(&eid, "an event id", 4)?;
        let ids = [
            field(&eid.get_item(1)?, "timestamp", u64::MAX)?,
            field(&eid.get_item(2)?, "sequence", u64::MAX)?,
            field(&eid.get_item(3)?, "incarnation", u64::MAX)?,
        ];
        Ok(EventView {
            ids,
            publisher: string(eid.get_item(0)?, "a publisher")?,
            signature: string(ev.get_item(1)?, "a signature")?,
            values: string(ev.get_item(2)?, "a values text")?,
            payload: ev.get_item(3)?.cast_into::<PyBytes>().map_err(|_| PyTypeError::new_err("a payload is not bytes"))?,
        })
    }

    /// The event's fields (its texts UTF-8, cached on each str).
    pub(crate) fn fields(&self) -> PyResult<EventFields<'_>> {
        Ok(EventFields {
            timestamp: self.ids[0],
            sequence: self.ids[1],
            incarnation: self.ids[2],
            publisher: self.publisher.to_str()?.as_bytes(),
            signature: self.signature.to_str()?.as_bytes(),
            values: self.values.to_str()?.as_bytes(),
            payload: self.payload.as_bytes(),
        })
    }
}

fn unit_list(v: &Bound<'_, PyAny>, what: &str, out: &mut Vec<u64>) -> PyResult<()> {
    out.clear();
    for u in v.try_iter()? {
        out.push(field(&u?, what, u64::MAX)?);
    }
    Ok(())
}

fn list_of<'py>(py: Python<'py>, parts: Vec<Vec<u8>>) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, parts.iter().map(|p| PyBytes::new(py, p)))
}

/// Encode `copies` (EventCopy values) as `events` messages numbered from `first_seq`, cut as
/// `wire.py` cuts them.
#[pyfunction]
fn encode_events<'py>(py: Python<'py>, first_seq: u64, copies: &Bound<'py, PyAny>, batch_text: usize) -> PyResult<Bound<'py, PyList>> {
    // (read whole first: the encoder reads each copy a few times)
    let mut read = Vec::new();
    for copy in copies.try_iter()? {
        let copy = copy?;
        let copy = tuple_of(&copy, "an event copy", 8)?;
        let ev = EventView::of(&copy.get_item(0)?)?;
        let mut units: [Vec<u64>; 3] = Default::default();
        for (k, (at, what)) in [(4, "a target unit"), (5, "a reached unit"), (7, "a left unit")].into_iter().enumerate() {
            unit_list(&copy.get_item(at)?, what, &mut units[k])?;
        }
        let head = (
            field(&copy.get_item(1)?, "origin", u64::MAX)?,
            field(&copy.get_item(2)?, "mode", u8::MAX as u64)? as u8,
            field(&copy.get_item(3)?, "level", u8::MAX as u64)? as u8,
            field(&copy.get_item(6)?, "hops", u16::MAX as u64)? as u16,
        );
        read.push((ev, head, units));
    }
    let fields = read
        .iter()
        .map(|(ev, (origin, mode, level, hops), [targets, reached, left])| {
            Ok(CopyFields { event: ev.fields()?, origin: *origin, mode: *mode, level: *level, hops: *hops, targets, reached, left })
        })
        .collect::<PyResult<Vec<_>>>()?;
    list_of(py, codec::encode_events(first_seq, batch_text, fields.len(), |i| fields[i]).map_err(value_error)?)
}

/// Encode `events` (EventData values) as `ges_client.deliver` messages, cut as `wire.py` cuts them.
#[pyfunction]
fn encode_deliver<'py>(py: Python<'py>, events: &Bound<'py, PyAny>, batch_text: usize) -> PyResult<Bound<'py, PyList>> {
    let views = events.try_iter()?.map(|ev| EventView::of(&ev?)).collect::<PyResult<Vec<_>>>()?;
    let fields = views.iter().map(EventView::fields).collect::<PyResult<Vec<_>>>()?;
    list_of(py, codec::encode_deliver(batch_text, fields.len(), |i| fields[i]).map_err(value_error)?)
}

/// Register the codec's functions.
pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode_events, m)?)?;
    m.add_function(wrap_pyfunction!(encode_events, m)?)?;
    m.add_function(wrap_pyfunction!(encode_deliver, m)?)?;
    Ok(())
}
