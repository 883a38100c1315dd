//! The GES brokers' event batches (`ges_broker.events`, `flounder-idl/ges_broker.if`), their hop
//! acknowledgements (`ges_broker.event_ack`) and their deliveries to clients (`ges_client.deliver`),
//! encoded and decoded in Rust: the same bytes as the generated Flounder stubs and
//! `multihop/ges/live/wire.py` (the reference, kept and compared by `tests/ges/test_ges_wire.py`).
//!
//! Wire (little endian, as the stub packs it): `u16 13, u64 first_seq, u64 n`, then `n` heads of 56
//! bytes (`<QQQQHBBHHHHIII`: origin, timestamp, sequence, incarnation, hops, mode, level, ntargets,
//! nreached, nleft, publisher_len, signature_len, values_len, payload_len), `u64 nu` and `nu` u64
//! units (each head's targets, reached and left in turn), `u64 nt` and `nt` bytes of text (each
//! event's publisher, signature, values and payload in turn). A delivery is `u16 7, u64 n`, `n`
//! heads of 38 bytes (`<QQQHIII`: timestamp, sequence, incarnation and the four lengths), then
//! `u64 nt` and the text. An acknowledgement is `u16 14, u64 upto`.
//!
//! Nothing here knows Python: the PyO3 glue (`python/codec.rs`) and the event engine use it.

use std::fmt;

/// Message number of `events` in `ges_broker.if`.
pub const EVENTS: u16 = 13;
/// Message number of `event_ack` in `ges_broker.if`.
pub const EVENT_ACK: u16 = 14;
/// Message number of `event_ack_also` in `ges_broker.if`.
pub const EVENT_ACK_ALSO: u16 = 15;
/// Message number of `deliver` in `ges_client.if`.
pub const DELIVER: u16 = 7;
/// Message number of `publish` in `ges_client.if`.
pub const PUBLISH: u16 = 6;
/// Most heads in one message (the interface's bound).
pub const MAX_HEADS: usize = 4096;
/// Most units in one message.
pub const MAX_UNITS: usize = 262_144;
/// Most text bytes in one message.
pub const MAX_TEXT: usize = 16_777_216;
/// Bytes of an `event_head`.
pub const HEAD: usize = 56;
/// Bytes of a `delivery_head`.
pub const DELIVERY_HEAD: usize = 38;
/// Event copy modes (`messages.UP`, `messages.DOWN`).
pub const UP: u8 = 1;
pub const DOWN: u8 = 2;
/// A batch is cut when its text would pass this (`wire.BATCH_TEXT`).
pub const BATCH_TEXT: usize = 256 << 10;

/// What is wrong with a message or a value to encode (the glue raises it as ValueError).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError(pub String);

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CodecError {}

fn bad(why: impl Into<String>) -> CodecError {
    CodecError(why.into())
}

pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The message number of a frame (None if it is shorter than one).
pub fn message_number(data: &[u8]) -> Option<u16> {
    (data.len() >= 2).then(|| u16_at(data, 0))
}

/// Where a dynamic array's elements lie: its u64 count is at `at`, then `count * size` bytes follow
/// (at most `max` elements). Checked as the stub's decoder checks them, with its words.
fn dyn_array(data: &[u8], at: usize, size: usize, max: usize, name: &str) -> Result<(usize, usize), CodecError> {
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

/// A list of units as it lies on the wire: little-endian u64s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Units<'a>(pub &'a [u8]);

impl<'a> Units<'a> {
    /// How many units.
    pub fn len(&self) -> usize {
        self.0.len() / 8
    }
    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// The units in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = u64> + 'a {
        self.0.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
    }
    /// The units in a vector.
    pub fn to_vec(&self) -> Vec<u64> {
        self.iter().collect()
    }
    /// The bytes as they lie (equal lists have equal bytes).
    pub fn bytes(&self) -> &'a [u8] {
        self.0
    }
}

/// One event copy of a decoded `events` message, borrowing the message's bytes.
#[derive(Clone, Copy, Debug)]
pub struct CopyRef<'a> {
    pub origin: u64,
    pub timestamp: u64,
    pub sequence: u64,
    pub incarnation: u64,
    pub hops: u16,
    pub mode: u8,
    pub level: u8,
    pub targets: Units<'a>,
    pub reached: Units<'a>,
    pub left: Units<'a>,
    pub publisher: &'a str,
    pub signature: &'a str,
    pub values: &'a str,
    pub payload: &'a [u8],
}

fn text<'a>(b: &'a [u8], what: &str) -> Result<&'a str, CodecError> {
    std::str::from_utf8(b).map_err(|e| bad(format!("{what} is not valid UTF-8 ({e})")))
}

/// [`text`], or `last` itself when `b` holds the same bytes (then already checked); `last` becomes
/// the text given.
fn same_text<'a>(b: &'a [u8], last: &mut &'a str, what: &str) -> Result<&'a str, CodecError> {
    if b == last.as_bytes() {
        return Ok(last);
    }
    *last = text(b, what)?;
    Ok(last)
}

/// Decode one `events` message into `out` (cleared first): returns its `first_seq`. The whole
/// message is checked before it is accepted: a malformed one gives an error naming what is wrong
/// and leaves `out` empty.
pub fn decode_events<'a>(data: &'a [u8], out: &mut Vec<CopyRef<'a>>) -> Result<u64, CodecError> {
    out.clear();
    let r = decode_events_inner(data, out);
    if r.is_err() {
        out.clear();
    }
    r
}

fn decode_events_inner<'a>(data: &'a [u8], out: &mut Vec<CopyRef<'a>>) -> Result<u64, CodecError> {
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
    let (mut ui, mut ti) = (0usize, 0usize);
    out.reserve(n);
    // (a batch's events mostly share publisher and signature: bytes equal to the last event's are
    // the text already checked, so only new ones are validated)
    let (mut last_pub, mut last_sig): (&str, &str) = ("", "");
    for k in 0..n {
        let h = &data[heads_at + k * HEAD..heads_at + (k + 1) * HEAD];
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
        out.push(CopyRef {
            origin: u64_at(h, 0),
            timestamp: u64_at(h, 8),
            sequence: u64_at(h, 16),
            incarnation: u64_at(h, 24),
            hops,
            mode,
            level,
            targets: Units(&all_units[ui * 8..a * 8]),
            reached: Units(&all_units[a * 8..b * 8]),
            left: Units(&all_units[b * 8..c * 8]),
            publisher: same_text(&all_text[ti..p1], &mut last_pub, "a publisher")?,
            signature: same_text(&all_text[p1..p2], &mut last_sig, "a signature")?,
            values: text(&all_text[p2..p3], "a values text")?,
            payload: &all_text[p3..p4],
        });
        (ui, ti) = (c, p4);
    }
    if ui * 8 != all_units.len() || ti != all_text.len() {
        return Err(bad("bytes left over after the last event"));
    }
    Ok(first_seq)
}

/// The `upto` of an `event_ack` message (None if it is not exactly one).
pub fn decode_event_ack(data: &[u8]) -> Option<u64> {
    (data.len() == 10 && u16_at(data, 0) == EVENT_ACK).then(|| u64_at(data, 2))
}

/// The `upto` (signed, as the control plane reads it) and `also` of an `event_ack_also` message
/// (durable mode's selective acknowledgement; None if it is not exactly one).
pub fn decode_event_ack_also(data: &[u8]) -> Option<(i64, Vec<u64>)> {
    if data.len() < 18 || u16_at(data, 0) != EVENT_ACK_ALSO {
        return None;
    }
    let n = u64_at(data, 10);
    if n > 65536 || data.len() as u64 != 18 + 8 * n {
        return None;
    }
    Some((u64_at(data, 2) as i64, (0..n as usize).map(|i| u64_at(data, 18 + 8 * i)).collect()))
}

/// An `event_ack` message.
pub fn encode_event_ack(upto: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(10);
    b.extend_from_slice(&EVENT_ACK.to_le_bytes());
    b.extend_from_slice(&upto.to_le_bytes());
    b
}

/// An `event_ack_also` message (what a broker sends for an acknowledgement below 0: none yet).
pub fn encode_event_ack_also(upto: u64, also: &[u64]) -> Vec<u8> {
    let mut b = Vec::with_capacity(18 + 8 * also.len());
    b.extend_from_slice(&EVENT_ACK_ALSO.to_le_bytes());
    b.extend_from_slice(&upto.to_le_bytes());
    b.extend_from_slice(&(also.len() as u64).to_le_bytes());
    for a in also {
        b.extend_from_slice(&a.to_le_bytes());
    }
    b
}

/// A client's `publish` message (`ges_client.if`): `u16 6, u64 timestamp, u64 sequence`, then the
/// signature (at most 8192 bytes), the values (65536) and the payload (524288), each as a u64
/// length and its bytes.
#[derive(Clone, Copy, Debug)]
pub struct PublishRef<'a> {
    pub timestamp: u64,
    pub sequence: u64,
    pub signature: &'a str,
    pub values: &'a str,
    pub payload: &'a [u8],
}

/// A `publish` message exactly as the stub would take it (UTF-8 strings without NUL, within their
/// bounds, nothing left over), else None: the caller hands it to the stub, which says what is wrong.
pub fn decode_publish(data: &[u8]) -> Option<PublishRef<'_>> {
    if data.len() < 34 || u16_at(data, 0) != PUBLISH {
        return None;
    }
    let (timestamp, sequence) = (u64_at(data, 2), u64_at(data, 10));
    let mut at = 18;
    let mut take = |max: u64| -> Option<&[u8]> {
        if at + 8 > data.len() {
            return None;
        }
        let n = u64_at(data, at);
        if n > max || at + 8 + n as usize > data.len() {
            return None;
        }
        let part = &data[at + 8..at + 8 + n as usize];
        at += 8 + n as usize;
        Some(part)
    };
    let signature = std::str::from_utf8(take(8192)?).ok().filter(|s| !s.contains('\0'))?;
    let values = std::str::from_utf8(take(65536)?).ok().filter(|s| !s.contains('\0'))?;
    let payload = take(524_288)?;
    (at == data.len()).then_some(PublishRef { timestamp, sequence, signature, values, payload })
}

/// Whether an event from a client is well formed in the canonical form clients make
/// (`multihop.ges.event.validate_event` accepts every event this accepts): a signature of
/// `name:type` pairs (types int, str, bool, float; names non-empty, without `:`, NUL or
/// `\x1c`-`\x1f`), one value per attribute with its type's tag, an int's digits, a float's digits or
/// `inf`/`nan`. Anything else goes to the Python path, which refuses it naming what is wrong (or
/// takes a form Python's parsers accept, `i+5` say).
pub fn canonical_event(signature: &str, values: &str) -> bool {
    if signature.is_empty() {
        return false;
    }
    let mut vals = values.split('\x1f');
    for part in signature.split('\x1f') {
        let Some((name, ty)) = part.rsplit_once(':') else { return false };
        if name.is_empty() || name.chars().any(|c| c == ':' || c == '\0' || ('\x1c'..='\x1f').contains(&c)) {
            return false;
        }
        let Some(v) = vals.next() else { return false };
        let ok = match ty {
            "int" => v.strip_prefix('i').is_some_and(int_digits),
            "float" => v.strip_prefix('f').is_some_and(float_text),
            "str" => v.starts_with('s'),
            "bool" => v.starts_with('b'),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    vals.next().is_none()
}

fn int_digits(t: &str) -> bool {
    let d = t.strip_prefix('-').unwrap_or(t);
    !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
}

fn float_text(t: &str) -> bool {
    let u = t.strip_prefix('-').unwrap_or(t);
    if u == "inf" || u == "nan" {
        return true;
    }
    // digits, maybe a fraction, maybe an exponent: 1, 1.5, 1., 1e+16, 2.5e-07 (repr's forms)
    let (mant, exp) = match u.find(['e', 'E']) {
        Some(i) => (&u[..i], Some(&u[i + 1..])),
        None => (u, None),
    };
    let (whole, frac) = match mant.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (mant, None),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let mant_ok = !whole.is_empty() && digits(whole) && frac.is_none_or(digits);
    let exp_ok = exp.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    mant_ok && exp_ok
}

/// An event as the wire wants it: its id's numbers and its four texts.
#[derive(Clone, Copy, Debug)]
pub struct EventFields<'a> {
    pub timestamp: u64,
    pub sequence: u64,
    pub incarnation: u64,
    pub publisher: &'a [u8],
    pub signature: &'a [u8],
    pub values: &'a [u8],
    pub payload: &'a [u8],
}

impl EventFields<'_> {
    fn texts(&self) -> [&[u8]; 4] {
        [self.publisher, self.signature, self.values, self.payload]
    }
    fn text_len(&self) -> usize {
        self.publisher.len() + self.signature.len() + self.values.len() + self.payload.len()
    }
}

/// An event copy to encode.
#[derive(Clone, Copy, Debug)]
pub struct CopyFields<'a> {
    pub event: EventFields<'a>,
    pub origin: u64,
    pub mode: u8,
    pub level: u8,
    pub hops: u16,
    pub targets: &'a [u64],
    pub reached: &'a [u64],
    pub left: &'a [u64],
}

/// The four lengths of a head: the publisher's in 16 bits, the others in 32.
fn text_lengths(ev: &EventFields<'_>) -> Result<(u16, [u32; 3]), CodecError> {
    let t = ev.texts();
    let p = u16::try_from(t[0].len()).map_err(|_| bad(format!("publisher length {} does not fit 16 bits", t[0].len())))?;
    let mut rest = [0u32; 3];
    for (k, what) in ["signature length", "values length", "payload length"].into_iter().enumerate() {
        rest[k] = u32::try_from(t[k + 1].len()).map_err(|_| bad(format!("{what} {} does not fit 32 bits", t[k + 1].len())))?;
    }
    Ok((p, rest))
}

/// Where a batch is cut: the next message starts at the first copy whose text would take the
/// message's past `batch_text` (each counted with 64 bytes more, as `wire.py` counts them) or whose
/// head would be the 4097th; a message has at least one copy (or none, if there is none).
struct Cut {
    /// copies in the message
    n: usize,
    /// their units and text bytes, all together
    units: usize,
    text: usize,
    /// text counted for the cut (`text` + 64 per copy)
    size: usize,
}

impl Cut {
    fn new() -> Self {
        Cut { n: 0, units: 0, text: 0, size: 0 }
    }

    /// Take a copy of `text` bytes and `units` units, unless it must start the next message.
    fn take(&mut self, text: usize, units: usize, batch_text: usize) -> bool {
        if self.n > 0 && (self.size + text + 64 > batch_text || self.n == MAX_HEADS) {
            return false;
        }
        self.n += 1;
        self.units += units;
        self.text += text;
        self.size += text + 64;
        true
    }

    fn check(&self) -> Result<(), CodecError> {
        if self.units > MAX_UNITS || self.text > MAX_TEXT {
            return Err(bad("a batch has more units or text than one message carries"));
        }
        Ok(())
    }
}

/// Messages made of `n` items (`item(i)` gives the i-th's text bytes and units, or why it cannot be
/// sent), cut as `wire.py` cuts them, each written in one pass into a buffer of its exact size:
/// `write(buffer, first, cut)` writes the message of items `first..first + cut.n`.
fn cut_and_write(
    n: usize,
    batch_text: usize,
    item: impl Fn(usize) -> Result<(usize, usize), CodecError>,
    size: impl Fn(&Cut) -> usize,
    mut write: impl FnMut(&mut Vec<u8>, usize, &Cut),
) -> Result<Vec<Vec<u8>>, CodecError> {
    let mut out = Vec::new();
    let mut first = 0;
    loop {
        let mut cut = Cut::new();
        while first + cut.n < n {
            let (text, units) = item(first + cut.n)?;
            if !cut.take(text, units, batch_text) {
                break;
            }
        }
        cut.check()?;
        let mut b = crate::pool::take(size(&cut));
        write(&mut b, first, &cut);
        debug_assert_eq!(b.len(), size(&cut), "a message is the size it was cut to");
        out.push(b);
        first += cut.n;
        if first >= n {
            return Ok(out);
        }
    }
}

fn head_checks(c: &CopyFields<'_>) -> Result<(), CodecError> {
    for (list, what) in [(c.targets, "targets"), (c.reached, "reached"), (c.left, "left")] {
        u16::try_from(list.len()).map_err(|_| bad(format!("{what} {} does not fit 16 bits", list.len())))?;
    }
    Ok(())
}

/// Encode `n` event copies (`copy(i)`, read a few times each) as `events` messages numbered from
/// `first_seq`, cut as `wire.py` cuts them (at least one message, maybe of no copy). Each message is
/// written once, in order, into a buffer of its exact size: no intermediate buffer, no growth.
pub fn encode_events<'a>(first_seq: u64, batch_text: usize, n: usize, copy: impl Fn(usize) -> CopyFields<'a>) -> Result<Vec<Vec<u8>>, CodecError> {
    let item = |i: usize| {
        let c = copy(i);
        text_lengths(&c.event)?;
        head_checks(&c)?;
        Ok((c.event.text_len(), c.targets.len() + c.reached.len() + c.left.len()))
    };
    let size = |cut: &Cut| 18 + cut.n * HEAD + 8 + cut.units * 8 + 8 + cut.text;
    let mut seq = first_seq;
    cut_and_write(n, batch_text, item, size, |b, first, cut| {
        let copies = first..first + cut.n;
        b.extend_from_slice(&EVENTS.to_le_bytes());
        b.extend_from_slice(&seq.to_le_bytes());
        b.extend_from_slice(&(cut.n as u64).to_le_bytes());
        for i in copies.clone() {
            let c = copy(i);
            let (plen, lens) = text_lengths(&c.event).expect("checked by the cut");
            let mut h = [0u8; HEAD];
            h[0..8].copy_from_slice(&c.origin.to_le_bytes());
            for (k, id) in [c.event.timestamp, c.event.sequence, c.event.incarnation].iter().enumerate() {
                h[8 + 8 * k..16 + 8 * k].copy_from_slice(&id.to_le_bytes());
            }
            h[32..34].copy_from_slice(&c.hops.to_le_bytes());
            h[34] = c.mode;
            h[35] = c.level;
            for (k, list) in [c.targets, c.reached, c.left].iter().enumerate() {
                h[36 + 2 * k..38 + 2 * k].copy_from_slice(&(list.len() as u16).to_le_bytes());
            }
            h[42..44].copy_from_slice(&plen.to_le_bytes());
            for (k, n) in lens.iter().enumerate() {
                h[44 + 4 * k..48 + 4 * k].copy_from_slice(&n.to_le_bytes());
            }
            b.extend_from_slice(&h);
        }
        b.extend_from_slice(&(cut.units as u64).to_le_bytes());
        for i in copies.clone() {
            let c = copy(i);
            for list in [c.targets, c.reached, c.left] {
                for u in list {
                    b.extend_from_slice(&u.to_le_bytes());
                }
            }
        }
        b.extend_from_slice(&(cut.text as u64).to_le_bytes());
        for i in copies {
            for part in copy(i).event.texts() {
                b.extend_from_slice(part);
            }
        }
        seq += cut.n as u64;
    })
}

/// Encode `n` events (`event(i)`, read a few times each) as `ges_client.deliver` messages, cut as
/// `wire.py` cuts them (at least one message, maybe of no event), each written once into a buffer
/// of its exact size.
pub fn encode_deliver<'a>(batch_text: usize, n: usize, event: impl Fn(usize) -> EventFields<'a>) -> Result<Vec<Vec<u8>>, CodecError> {
    let item = |i: usize| {
        let e = event(i);
        text_lengths(&e)?;
        Ok((e.text_len(), 0))
    };
    let size = |cut: &Cut| 10 + cut.n * DELIVERY_HEAD + 8 + cut.text;
    cut_and_write(n, batch_text, item, size, |b, first, cut| {
        let events = first..first + cut.n;
        b.extend_from_slice(&DELIVER.to_le_bytes());
        b.extend_from_slice(&(cut.n as u64).to_le_bytes());
        for i in events.clone() {
            let ev = event(i);
            let (plen, lens) = text_lengths(&ev).expect("checked by the cut");
            let mut h = [0u8; DELIVERY_HEAD];
            for (k, id) in [ev.timestamp, ev.sequence, ev.incarnation].iter().enumerate() {
                h[8 * k..8 * k + 8].copy_from_slice(&id.to_le_bytes());
            }
            h[24..26].copy_from_slice(&plen.to_le_bytes());
            for (k, n) in lens.iter().enumerate() {
                h[26 + 4 * k..30 + 4 * k].copy_from_slice(&n.to_le_bytes());
            }
            b.extend_from_slice(&h);
        }
        b.extend_from_slice(&(cut.text as u64).to_le_bytes());
        for i in events {
            for part in event(i).texts() {
                b.extend_from_slice(part);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(k: u64) -> (String, Vec<u8>) {
        (format!("pub{k}"), vec![k as u8; 10])
    }

    #[test]
    fn copies_come_back_as_they_went_and_batches_are_cut() {
        let evs: Vec<_> = (0..9000u64).map(ev).collect();
        let reached: Vec<u64> = (0..9000).collect();
        let copy = |k: usize| {
            let (p, pay) = &evs[k];
            let k = k as u64;
            CopyFields {
                event: EventFields {
                    timestamp: k,
                    sequence: k + 1,
                    incarnation: 7,
                    publisher: p.as_bytes(),
                    signature: b"a:int",
                    values: b"i1",
                    payload: pay,
                },
                origin: 99,
                mode: if k.is_multiple_of(2) { UP } else { DOWN },
                level: (k % 4) as u8,
                hops: (k % 255) as u16,
                targets: &[5, 6][..(k % 3) as usize % 3],
                reached: &reached[k as usize..k as usize + 1],
                left: &[],
            }
        };
        let parts = encode_events(40, BATCH_TEXT, evs.len(), copy).unwrap();
        assert!(parts.len() > 1);
        let mut first = 40;
        let mut k = 0u64;
        let mut out = Vec::new();
        for part in &parts {
            assert_eq!(decode_events(part, &mut out).unwrap(), first);
            first += out.len() as u64;
            for c in &out {
                assert_eq!((c.timestamp, c.sequence, c.publisher), (k, k + 1, evs[k as usize].0.as_str()));
                assert_eq!(c.reached.to_vec(), vec![k]);
                k += 1;
            }
        }
        assert_eq!(k, 9000);
    }

    #[test]
    fn malformed_messages_are_refused_whole() {
        let e = EventFields { timestamp: 1, sequence: 2, incarnation: 3, publisher: b"p", signature: b"a:int", values: b"i1", payload: b"x" };
        let c = CopyFields { event: e, origin: 1, mode: UP, level: 1, hops: 0, targets: &[1], reached: &[], left: &[] };
        let good = encode_events(5, BATCH_TEXT, 3, |_| c).unwrap().remove(0);
        let mut out = Vec::new();
        assert_eq!(decode_events(&good, &mut out).unwrap(), 5);
        assert_eq!(out.len(), 3);
        let mut bad_mode = good.clone();
        bad_mode[18 + 34] = 7;
        assert_eq!(decode_events(&bad_mode, &mut out).unwrap_err().0, "mode 7");
        assert!(out.is_empty());
        assert!(decode_events(&good[..10], &mut out).unwrap_err().0.contains("truncated"));
        let mut longer = good.clone();
        longer.push(0);
        assert!(decode_events(&longer, &mut out).unwrap_err().0.contains("after the last argument"));
    }

    #[test]
    fn canonical_events_are_told_from_the_rest() {
        assert!(canonical_event("a:int\x1fb:str\x1fc:float\x1fd:bool", "i-5\x1fsx:y\x1ff2.5e-07\x1fb1"));
        assert!(canonical_event("a:float", "finf") && canonical_event("a:float", "f1.") && canonical_event("a:float", "f1e+16"));
        for (sig, vals) in [
            ("", ""),
            ("a:int", "i+5"),
            ("a:int", "i"),
            ("a:int", "s5"),
            ("a:float", "f1e"),
            ("a:float", "f.5"),
            ("a:integer", "i5"),
            ("a", "i5"),
            (":int", "i5"),
            ("a:b:int", "i5"),
            ("a:int\x1fb:int", "i5"),
            ("a:int", "i5\x1fi6"),
        ] {
            assert!(!canonical_event(sig, vals), "{sig:?} {vals:?}");
        }
    }

    #[test]
    fn acks_round_trip() {
        assert_eq!(decode_event_ack(&encode_event_ack(77)), Some(77));
        assert_eq!(decode_event_ack_also(&encode_event_ack_also(5, &[7, 9])), Some((5, vec![7, 9])));
        assert_eq!(decode_event_ack_also(&encode_event_ack_also(u64::MAX, &[])), Some((-1, vec![])));
        assert_eq!(decode_event_ack_also(&encode_event_ack_also(5, &[7])[..25]), None);
        assert_eq!(decode_event_ack_also(&encode_event_ack(5)), None);
        assert_eq!(decode_event_ack(b"\x0e\x00"), None);
    }
}
