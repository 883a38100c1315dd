//! The GES brokers' event batches (`ges_broker.events`, `flounder-idl/ges_broker.if`) encoded and
//! decoded natively, and their deliveries to clients (`ges_client.deliver`) encoded: the same bytes
//! as the generated Flounder stubs and `ges/live/wire.py` (the reference, kept and compared by
//! `tests/test_ges_wire.py`), without the interpreter's work per field. A broker decodes, routes
//! and encodes every event that passes it; these loops were a third of its CPU per event in Python.
//!
//! Wire (little endian, as the stub packs it): `u16 13, u64 first_seq, u64 n`, then `n` heads of 56
//! bytes (`<QQQQHBBHHHHIII`: origin, timestamp, sequence, incarnation, hops, mode, level, ntargets,
//! nreached, nleft, publisher_len, signature_len, values_len, payload_len), `u64 nu` and `nu` u64
//! units (each head's targets, reached and left in turn), `u64 nt` and `nt` bytes of text (each
//! event's publisher, signature, values and payload in turn).
//!
//! The protocol values are `typing.NamedTuple`s (`EventId`, `EventData`, `EventCopy`), made here
//! as `tuple.__new__` makes them: the class's own allocator, then the items.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple, PyType};

/// Message number of `events` in `ges_broker.if`.
const EVENTS: u16 = 13;
/// Most heads in one message (the interface's bound).
const MAX_HEADS: usize = 4096;
/// Most units in one message.
const MAX_UNITS: usize = 262_144;
/// Most text bytes in one message.
const MAX_TEXT: usize = 16_777_216;
const HEAD: usize = 56;
/// Event copy modes (`messages.UP`, `messages.DOWN`).
const UP: u8 = 1;
const DOWN: u8 = 2;

fn bad(why: impl Into<String>) -> PyErr {
    PyValueError::new_err(why.into())
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Where a dynamic array's elements lie: its u64 count is at `at`, then `count * size` bytes follow
/// (at most `max` elements). Checked as the stub's decoder checks them, with its words.
fn dyn_array(data: &[u8], at: usize, size: usize, max: usize, name: &str) -> PyResult<(usize, usize)> {
    if at + 8 > data.len() {
        return Err(bad(format!("argument '{name}' runs past the end of the message")));
    }
    let n = u64_at(data, at);
    if n > max as u64 {
        return Err(bad(format!("argument '{name}' has {n} elements, more than its maximum {max}")));
    }
    let end = at + 8 + n as usize * size;
    if end > data.len() {
        return Err(bad(format!("argument '{name}' runs past the end of the message")));
    }
    Ok((at + 8, end))
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
fn named<'py, const N: usize>(py: Python<'py>, cls: &Bound<'py, PyType>, items: [Bound<'py, PyAny>; N]) -> PyResult<Bound<'py, PyAny>> {
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

fn text<'py>(py: Python<'py>, b: &[u8], what: &str) -> PyResult<Bound<'py, PyAny>> {
    match std::str::from_utf8(b) {
        Ok(s) => Ok(PyString::new(py, s).into_any()),
        Err(e) => Err(bad(format!("{what} is not valid UTF-8 ({e})"))),
    }
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

fn units<'py>(py: Python<'py>, u: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    Ok(PyTuple::new(py, u.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))))?.into_any())
}

/// Decode one `events` message: `(first_seq, copies)`, the copies as `copy_cls(event_cls(id_cls(...),
/// ...), ...)`. Raises ValueError naming what is malformed.
#[pyfunction]
fn ges_decode_events<'py>(
    py: Python<'py>,
    data: &[u8],
    id_cls: &Bound<'py, PyType>,
    event_cls: &Bound<'py, PyType>,
    copy_cls: &Bound<'py, PyType>,
) -> PyResult<(u64, Bound<'py, PyTuple>)> {
    for cls in [id_cls, event_cls, copy_cls] {
        check_plain(py, cls)?;
    }
    if data.len() < 18 {
        return Err(bad(format!("message is truncated ({} bytes)", data.len())));
    }
    if u16_at(data, 0) != EVENTS {
        return Err(bad(format!("message number {} is not events ({EVENTS})", u16_at(data, 0))));
    }
    let first_seq = u64_at(data, 2);
    let (heads_at, heads_end) = dyn_array(data, 10, HEAD, MAX_HEADS, "heads")?;
    let (units_at, units_end) = dyn_array(data, heads_end, 8, MAX_UNITS, "units")?;
    let (text_at, text_end) = dyn_array(data, units_end, 1, MAX_TEXT, "text")?;
    let n = (heads_end - heads_at) / HEAD;
    if text_end != data.len() {
        return Err(bad(format!("{} bytes after the last argument", data.len() - text_end)));
    }
    let all_units = &data[units_at..units_end];
    let all_text = &data[text_at..text_end];
    let empty = PyTuple::empty(py).into_any();
    let (mut publisher, mut signature, mut values) = (Last::new(), Last::new(), Last::new());
    let (mut targets, mut reached, mut lefts) = (Last::new(), Last::new(), Last::new());
    let (mut ui, mut ti) = (0usize, 0usize);
    let mut copies = Vec::with_capacity(n);
    for k in 0..n {
        let h = &data[heads_at + k * HEAD..heads_at + (k + 1) * HEAD];
        let (origin, ts, seq, inc) = (u64_at(h, 0), u64_at(h, 8), u64_at(h, 16), u64_at(h, 24));
        let (hops, mode, level) = (u16_at(h, 32), h[34], h[35]);
        let (nt_, nr, nl) = (u16_at(h, 36) as usize, u16_at(h, 38) as usize, u16_at(h, 40) as usize);
        let (pl, sl, vl, yl) = (u16_at(h, 42) as usize, u32_at(h, 44) as usize, u32_at(h, 48) as usize, u32_at(h, 52) as usize);
        if mode != UP && mode != DOWN {
            return Err(bad(format!("mode {mode}")));
        }
        let (a, b, c) = (ui + nt_, ui + nt_ + nr, ui + nt_ + nr + nl);
        let (p1, p2, p3, p4) = (ti + pl, ti + pl + sl, ti + pl + sl + vl, ti + pl + sl + vl + yl);
        if c * 8 > all_units.len() || p4 > all_text.len() {
            return Err(bad("lengths run past the arrays"));
        }
        let id = named(
            py,
            id_cls,
            [
                publisher.get(&all_text[ti..p1], |b| text(py, b, "a publisher"))?,
                ts.into_pyobject(py)?.into_any(),
                seq.into_pyobject(py)?.into_any(),
                inc.into_pyobject(py)?.into_any(),
            ],
        )?;
        let ev = named(
            py,
            event_cls,
            [
                id,
                signature.get(&all_text[p1..p2], |b| text(py, b, "a signature"))?,
                values.get(&all_text[p2..p3], |b| text(py, b, "a values text"))?,
                PyBytes::new(py, &all_text[p3..p4]).into_any(),
            ],
        )?;
        let left = if nl == 0 { empty.clone() } else { lefts.get(&all_units[b * 8..c * 8], |u| units(py, u))? };
        copies.push(named(
            py,
            copy_cls,
            [
                ev,
                origin.into_pyobject(py)?.into_any(),
                mode.into_pyobject(py)?.into_any(),
                level.into_pyobject(py)?.into_any(),
                targets.get(&all_units[ui * 8..a * 8], |u| units(py, u))?,
                reached.get(&all_units[a * 8..b * 8], |u| units(py, u))?,
                hops.into_pyobject(py)?.into_any(),
                left,
            ],
        )?);
        (ui, ti) = (c, p4);
    }
    if ui * 8 != all_units.len() || ti != all_text.len() {
        return Err(bad("bytes left over after the last event"));
    }
    Ok((first_seq, PyTuple::new(py, copies)?))
}

/// A Python int as `u64` no larger than `max`, or ValueError naming the field.
fn field(v: &Bound<'_, PyAny>, what: &str, max: u64) -> PyResult<u64> {
    match v.extract::<u64>() {
        Ok(x) if x <= max => Ok(x),
        _ => Err(bad(format!("{what} {} is not an integer in 0..={max}", v.repr().map(|r| r.to_string()).unwrap_or_default()))),
    }
}

fn tuple_of<'a, 'py>(v: &'a Bound<'py, PyAny>, what: &str, n: usize) -> PyResult<&'a Bound<'py, PyTuple>> {
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
struct EventView<'py> {
    /// timestamp, sequence, incarnation
    ids: [u64; 3],
    publisher: Bound<'py, PyString>,
    signature: Bound<'py, PyString>,
    values: Bound<'py, PyString>,
    payload: Bound<'py, PyBytes>,
}

impl<'py> EventView<'py> {
    fn of(ev: &Bound<'py, PyAny>) -> PyResult<Self> {
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

    /// Publisher, signature, values (UTF-8, cached on each str) and payload.
    fn texts(&self) -> PyResult<[&[u8]; 4]> {
        Ok([self.publisher.to_str()?.as_bytes(), self.signature.to_str()?.as_bytes(), self.values.to_str()?.as_bytes(), self.payload.as_bytes()])
    }
}

/// The four lengths of a head: the publisher's in 16 bits, the others in 32.
fn text_lengths(t: &[&[u8]; 4]) -> PyResult<(u16, [u32; 3])> {
    let p = u16::try_from(t[0].len()).map_err(|_| bad(format!("publisher length {} does not fit 16 bits", t[0].len())))?;
    let mut rest = [0u32; 3];
    for (k, what) in ["signature length", "values length", "payload length"].into_iter().enumerate() {
        rest[k] = u32::try_from(t[k + 1].len()).map_err(|_| bad(format!("{what} {} does not fit 32 bits", t[k + 1].len())))?;
    }
    Ok((p, rest))
}

/// One message: `prefix`, the heads, then each `(count, bytes)` array as a u64 count and its bytes.
fn message<'py>(py: Python<'py>, prefix: &[u8], heads: &[u8], arrays: &[(usize, &[u8])]) -> PyResult<Bound<'py, PyBytes>> {
    let len = prefix.len() + heads.len() + arrays.iter().map(|(_, b)| 8 + b.len()).sum::<usize>();
    PyBytes::new_with(py, len, |b| {
        let mut at = 0;
        for part in [prefix, heads] {
            b[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        for (n, part) in arrays {
            b[at..at + 8].copy_from_slice(&(*n as u64).to_le_bytes());
            b[at + 8..at + 8 + part.len()].copy_from_slice(part);
            at += 8 + part.len();
        }
        Ok(())
    })
}

/// A batch being cut into messages as `wire.py` cuts it: a new message when the text would pass
/// `batch_text` (each event counted with 64 bytes more) or the heads 4096.
struct Batch {
    heads: Vec<u8>,
    n: usize,
    units: Vec<u8>,
    text: Vec<u8>,
    size: usize,
    batch_text: usize,
}

impl Batch {
    fn new(batch_text: usize) -> Self {
        Batch { heads: Vec::new(), n: 0, units: Vec::new(), text: Vec::new(), size: 0, batch_text }
    }

    /// True if an event of `blob` text bytes must start a new message.
    fn full_for(&self, blob: usize) -> bool {
        self.n > 0 && (self.size + blob + 64 > self.batch_text || self.n == MAX_HEADS)
    }

    fn add_text(&mut self, texts: &[&[u8]; 4]) {
        for part in texts {
            self.text.extend_from_slice(part);
        }
        self.size += texts.iter().map(|t| t.len()).sum::<usize>() + 64;
        self.n += 1;
    }

    fn clear(&mut self) {
        self.heads.clear();
        self.units.clear();
        self.text.clear();
        (self.n, self.size) = (0, 0);
    }

    fn check(&self) -> PyResult<()> {
        if self.units.len() / 8 > MAX_UNITS || self.text.len() > MAX_TEXT {
            return Err(bad("a batch has more units or text than one message carries"));
        }
        Ok(())
    }
}

/// Encode `copies` (EventCopy values) as `events` messages numbered from `first_seq`, cut as
/// `wire.py` cuts them.
#[pyfunction]
fn ges_encode_events<'py>(py: Python<'py>, first_seq: u64, copies: &Bound<'py, PyAny>, batch_text: usize) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    let mut b = Batch::new(batch_text);
    let mut first = first_seq;
    let flush = |b: &Batch, first: u64| -> PyResult<Bound<'py, PyBytes>> {
        b.check()?;
        let mut prefix = [0u8; 18];
        prefix[0..2].copy_from_slice(&EVENTS.to_le_bytes());
        prefix[2..10].copy_from_slice(&first.to_le_bytes());
        prefix[10..18].copy_from_slice(&(b.n as u64).to_le_bytes());
        message(py, &prefix, &b.heads, &[(b.units.len() / 8, &b.units), (b.text.len(), &b.text)])
    };
    for copy in copies.try_iter()? {
        let copy = copy?;
        let copy = tuple_of(&copy, "an event copy", 8)?;
        let ev = EventView::of(&copy.get_item(0)?)?;
        let texts = ev.texts()?;
        if b.full_for(texts.iter().map(|t| t.len()).sum()) {
            out.append(flush(&b, first)?)?;
            first += b.n as u64;
            b.clear();
        }
        let mut counts = [0u64; 3];
        for (k, (at, what)) in [(4, "a target unit"), (5, "a reached unit"), (7, "a left unit")].into_iter().enumerate() {
            for u in copy.get_item(at)?.try_iter()? {
                b.units.extend_from_slice(&field(&u?, what, u64::MAX)?.to_le_bytes());
                counts[k] += 1;
            }
        }
        let (plen, lens) = text_lengths(&texts)?;
        let mut h = [0u8; HEAD];
        h[0..8].copy_from_slice(&field(&copy.get_item(1)?, "origin", u64::MAX)?.to_le_bytes());
        for (k, id) in ev.ids.iter().enumerate() {
            h[8 + 8 * k..16 + 8 * k].copy_from_slice(&id.to_le_bytes());
        }
        h[32..34].copy_from_slice(&(field(&copy.get_item(6)?, "hops", u16::MAX as u64)? as u16).to_le_bytes());
        h[34] = field(&copy.get_item(2)?, "mode", u8::MAX as u64)? as u8;
        h[35] = field(&copy.get_item(3)?, "level", u8::MAX as u64)? as u8;
        for (k, (n, what)) in counts.into_iter().zip(["targets", "reached", "left"]).enumerate() {
            let n = u16::try_from(n).map_err(|_| bad(format!("{what} {n} does not fit 16 bits")))?;
            h[36 + 2 * k..38 + 2 * k].copy_from_slice(&n.to_le_bytes());
        }
        h[42..44].copy_from_slice(&plen.to_le_bytes());
        for (k, n) in lens.iter().enumerate() {
            h[44 + 4 * k..48 + 4 * k].copy_from_slice(&n.to_le_bytes());
        }
        b.heads.extend_from_slice(&h);
        b.add_text(&texts);
    }
    out.append(flush(&b, first)?)?;
    Ok(out)
}

/// Message number of `deliver` in `ges_client.if`, and its head's size (`<QQQHIII`).
const DELIVER: u16 = 7;
const DELIVERY_HEAD: usize = 38;

/// Encode `events` (EventData values) as `ges_client.deliver` messages, cut as `wire.py` cuts them.
#[pyfunction]
fn ges_encode_deliver<'py>(py: Python<'py>, events: &Bound<'py, PyAny>, batch_text: usize) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    let mut b = Batch::new(batch_text);
    let flush = |b: &Batch| -> PyResult<Bound<'py, PyBytes>> {
        b.check()?;
        let mut prefix = [0u8; 10];
        prefix[0..2].copy_from_slice(&DELIVER.to_le_bytes());
        prefix[2..10].copy_from_slice(&(b.n as u64).to_le_bytes());
        message(py, &prefix, &b.heads, &[(b.text.len(), &b.text)])
    };
    for ev in events.try_iter()? {
        let ev = EventView::of(&ev?)?;
        let texts = ev.texts()?;
        if b.full_for(texts.iter().map(|t| t.len()).sum()) {
            out.append(flush(&b)?)?;
            b.clear();
        }
        let (plen, lens) = text_lengths(&texts)?;
        let mut h = [0u8; DELIVERY_HEAD];
        for (k, id) in ev.ids.iter().enumerate() {
            h[8 * k..8 * k + 8].copy_from_slice(&id.to_le_bytes());
        }
        h[24..26].copy_from_slice(&plen.to_le_bytes());
        for (k, n) in lens.iter().enumerate() {
            h[26 + 4 * k..30 + 4 * k].copy_from_slice(&n.to_le_bytes());
        }
        b.heads.extend_from_slice(&h);
        b.add_text(&texts);
    }
    out.append(flush(&b)?)?;
    Ok(out)
}

/// Register the codec's functions.
pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ges_decode_events, m)?)?;
    m.add_function(wrap_pyfunction!(ges_encode_events, m)?)?;
    m.add_function(wrap_pyfunction!(ges_encode_deliver, m)?)?;
    Ok(())
}
