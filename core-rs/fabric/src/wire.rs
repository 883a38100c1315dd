//! The fabric's wire: what one Zenoh put between two bridges carries.
//!
//! Every put starts with the envelope (little-endian):
//!
//! ```text
//! 0   [u8; 4] magic      "MHFB"
//! 4   u8      version    1
//! 5   u8      kind       1 DATA (key data/<dst>), 2 HEARTBEAT (hb/<dst>), 3 BIND (bind/<dst>)
//! 6   u16     flags      0 (reserved: anything else is refused)
//! 8   u64     src_inc    the sending bridge's incarnation (random, not 0)
//! 16  u64     dst_inc    the receiver's incarnation as the sender knows it (0: not known yet)
//! 24  u32     src_epoch  the sender's session epoch towards the receiver (not 0)
//! 28  u32     dst_epoch  the receiver's epoch towards the sender as the sender knows it (0: not known yet)
//! 32  u8      n          length of the sender's runtime name (1..=64, the runtime-name rule)
//! 33  n bytes            the sender's runtime name
//! ```
//!
//! then records up to the end of the put: a HEARTBEAT has none, a BIND exactly one BIND_REQUEST, a DATA put one or
//! more of the others. Each record starts with its type (u8) and the fabric channel id (u64, not 0, allocated by the
//! bridge that opened the channel; `dir` says whose id it is, see [`Dir`]):
//!
//! ```text
//! 1 FRAME         chan, u8 dir, u64 seq, u32 len, len bytes: one link message (multi-hop header + payload)
//! 2 ACK           chan, u8 dir, u64 upto: the frames of the opposite direction delivered so far (cumulative)
//! 3 PROBE         chan, u8 dir, u64 next: the sequence number the sender will give its next frame
//! 4 TEARDOWN      chan, u8 dir, u8 code, u16 len, len bytes of UTF-8: the channel is closed, and why
//! 5 TEARDOWN_ACK  chan, u8 dir: a TEARDOWN was heard (its sender stops repeating it)
//! 6 BIND_REQUEST  chan, u32 window, u32 timeout_ms, u8 priority, u16 len, len bytes: the service's name
//! 7 BIND_ACCEPT   chan
//! 8 BIND_REFUSE   chan, u8 code, u16 len, len bytes of UTF-8
//! ```
//!
//! `dir` is the direction the record travels: TO_SERVER (1) from the bridge that opened the channel (the client
//! side), TO_CLIENT (2) towards it, the numbers of the multi-hop header's `dir`. Decoding checks every field; a bad
//! put is a [`DecodeError`] naming the field, never a panic.

use std::fmt;

use multihop_base::defaults::MAX_WINDOW;
use multihop_base::wire::{Header, DIR_TO_CLIENT, DIR_TO_SERVER, HEADER_BYTES, LINK_MAX_MESSAGE};

use crate::config::Priority;
use crate::keys::{check_runtime, check_service};
use crate::reason::{Refusal, TeardownCode};

pub const MAGIC: [u8; 4] = *b"MHFB";
pub const VERSION: u8 = 1;
/// Bytes of the envelope before the sender's name.
pub const ENVELOPE_FIXED: usize = 33;
/// Longest reason text a TEARDOWN or BIND_REFUSE carries (longer ones are cut at a character boundary).
pub const MAX_REASON: usize = 1024;
/// Longest bind timeout a request may carry.
pub const MAX_TIMEOUT_MS: u32 = 3_600_000;
/// Bytes a FRAME record adds to its frame.
pub const FRAME_OVERHEAD: usize = 1 + 8 + 1 + 8 + 4;

/// What a put is; its key's kind says the same (`data`, `hb`, `bind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutKind {
    Data = 1,
    Heartbeat = 2,
    Bind = 3,
}

/// Which way a record travels on its channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dir {
    /// From the client's side (the bridge that opened the channel and chose its id).
    ToServer = DIR_TO_SERVER as isize,
    /// Towards the client's side.
    ToClient = DIR_TO_CLIENT as isize,
}

impl Dir {
    pub fn reverse(self) -> Dir {
        match self {
            Dir::ToServer => Dir::ToClient,
            Dir::ToClient => Dir::ToServer,
        }
    }
}

/// The envelope of a put.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    pub kind: PutKind,
    pub src: String,
    pub src_inc: u64,
    pub dst_inc: u64,
    pub src_epoch: u32,
    pub dst_epoch: u32,
}

/// One record of a put (borrowing from it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    Frame { chan: u64, dir: Dir, seq: u64, frame: &'a [u8] },
    Ack { chan: u64, dir: Dir, upto: u64 },
    Probe { chan: u64, dir: Dir, next: u64 },
    Teardown { chan: u64, dir: Dir, code: TeardownCode, text: &'a str },
    TeardownAck { chan: u64, dir: Dir },
    BindRequest { chan: u64, window: u32, timeout_ms: u32, priority: Priority, service: &'a str },
    BindAccept { chan: u64 },
    BindRefuse { chan: u64, code: Refusal, text: &'a str },
}

/// A put that is not what the wire says: the field, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    pub field: &'static str,
    /// Where in the put the field starts.
    pub offset: usize,
    pub problem: String,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed fabric put: {} at byte {}: {}", self.field, self.offset, self.problem)
    }
}

impl std::error::Error for DecodeError {}

impl Envelope {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(self.kind as u8);
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&self.src_inc.to_le_bytes());
        out.extend_from_slice(&self.dst_inc.to_le_bytes());
        out.extend_from_slice(&self.src_epoch.to_le_bytes());
        out.extend_from_slice(&self.dst_epoch.to_le_bytes());
        out.push(self.src.len() as u8);
        out.extend_from_slice(self.src.as_bytes());
    }

    /// Bytes [`Envelope::encode`] writes.
    pub fn len(&self) -> usize {
        ENVELOPE_FIXED + self.src.len()
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}

fn put_text(out: &mut Vec<u8>, text: &str) {
    let mut end = text.len().min(MAX_REASON);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&(end as u16).to_le_bytes());
    out.extend_from_slice(&text.as_bytes()[..end]);
}

impl Record<'_> {
    /// Append this record to `out` (a reason text longer than [`MAX_REASON`] is cut).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let head = |out: &mut Vec<u8>, t: u8, chan: u64| {
            out.push(t);
            out.extend_from_slice(&chan.to_le_bytes());
        };
        match *self {
            Record::Frame { chan, dir, seq, frame } => {
                head(out, 1, chan);
                out.push(dir as u8);
                out.extend_from_slice(&seq.to_le_bytes());
                out.extend_from_slice(&(frame.len() as u32).to_le_bytes());
                out.extend_from_slice(frame);
            }
            Record::Ack { chan, dir, upto } => {
                head(out, 2, chan);
                out.push(dir as u8);
                out.extend_from_slice(&upto.to_le_bytes());
            }
            Record::Probe { chan, dir, next } => {
                head(out, 3, chan);
                out.push(dir as u8);
                out.extend_from_slice(&next.to_le_bytes());
            }
            Record::Teardown { chan, dir, code, text } => {
                head(out, 4, chan);
                out.push(dir as u8);
                out.push(code as u8);
                put_text(out, text);
            }
            Record::TeardownAck { chan, dir } => {
                head(out, 5, chan);
                out.push(dir as u8);
            }
            Record::BindRequest { chan, window, timeout_ms, priority, service } => {
                head(out, 6, chan);
                out.extend_from_slice(&window.to_le_bytes());
                out.extend_from_slice(&timeout_ms.to_le_bytes());
                out.push(priority as u8);
                out.extend_from_slice(&(service.len() as u16).to_le_bytes());
                out.extend_from_slice(service.as_bytes());
            }
            Record::BindAccept { chan } => head(out, 7, chan),
            Record::BindRefuse { chan, code, text } => {
                head(out, 8, chan);
                out.push(code as u8);
                put_text(out, text);
            }
        }
    }

    /// The record's channel id.
    pub fn chan(&self) -> u64 {
        match *self {
            Record::Frame { chan, .. }
            | Record::Ack { chan, .. }
            | Record::Probe { chan, .. }
            | Record::Teardown { chan, .. }
            | Record::TeardownAck { chan, .. }
            | Record::BindRequest { chan, .. }
            | Record::BindAccept { chan }
            | Record::BindRefuse { chan, .. } => chan,
        }
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn err<T>(&self, field: &'static str, problem: impl Into<String>) -> Result<T, DecodeError> {
        Err(DecodeError { field, offset: self.at, problem: problem.into() })
    }

    fn bytes(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], DecodeError> {
        match self.b.get(self.at..self.at.saturating_add(n)) {
            Some(s) => {
                self.at += n;
                Ok(s)
            }
            None => self.err(field, format!("needs {n} bytes, {} left", self.b.len() - self.at)),
        }
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        Ok(self.bytes(field, 1)?[0])
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.bytes(field, 2)?.try_into().expect("2 bytes")))
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.bytes(field, 4)?.try_into().expect("4 bytes")))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.bytes(field, 8)?.try_into().expect("8 bytes")))
    }

    fn dir(&mut self) -> Result<Dir, DecodeError> {
        let at = self.at;
        match self.u8("dir")? {
            DIR_TO_SERVER => Ok(Dir::ToServer),
            DIR_TO_CLIENT => Ok(Dir::ToClient),
            d => Err(DecodeError { field: "dir", offset: at, problem: format!("{d} is neither 1 (to server) nor 2 (to client)") }),
        }
    }

    fn chan(&mut self) -> Result<u64, DecodeError> {
        let at = self.at;
        match self.u64("chan")? {
            0 => Err(DecodeError { field: "chan", offset: at, problem: "channel id 0 is never allocated".into() }),
            c => Ok(c),
        }
    }

    fn text(&mut self, field: &'static str) -> Result<&'a str, DecodeError> {
        let len = self.u16(field)? as usize;
        if len > MAX_REASON {
            return self.err(field, format!("{len} bytes, more than {MAX_REASON}"));
        }
        let at = self.at;
        let b = self.bytes(field, len)?;
        std::str::from_utf8(b).map_err(|e| DecodeError { field, offset: at, problem: format!("not UTF-8: {e}") })
    }
}

/// Decode the envelope of a put and check it; returns it and the reader positioned at the first record.
pub fn decode_envelope(put: &[u8]) -> Result<(Envelope, usize), DecodeError> {
    let mut r = Reader { b: put, at: 0 };
    if r.bytes("magic", 4)? != MAGIC {
        return Err(DecodeError { field: "magic", offset: 0, problem: format!("{:?}, not \"MHFB\"", &put[..4]) });
    }
    let v = r.u8("version")?;
    if v != VERSION {
        return Err(DecodeError { field: "version", offset: 4, problem: format!("{v}, this bridge speaks {VERSION}") });
    }
    let kind = match r.u8("kind")? {
        1 => PutKind::Data,
        2 => PutKind::Heartbeat,
        3 => PutKind::Bind,
        k => return Err(DecodeError { field: "kind", offset: 5, problem: format!("unknown put kind {k}") }),
    };
    let flags = r.u16("flags")?;
    if flags != 0 {
        return Err(DecodeError { field: "flags", offset: 6, problem: format!("{flags:#x}: no flag is defined") });
    }
    let src_inc = r.u64("src_inc")?;
    if src_inc == 0 {
        return Err(DecodeError { field: "src_inc", offset: 8, problem: "incarnation 0 is never chosen".into() });
    }
    let dst_inc = r.u64("dst_inc")?;
    let src_epoch = r.u32("src_epoch")?;
    if src_epoch == 0 {
        return Err(DecodeError { field: "src_epoch", offset: 24, problem: "epoch 0 is never used".into() });
    }
    let dst_epoch = r.u32("dst_epoch")?;
    let n = r.u8("src")? as usize;
    let name = r.bytes("src", n)?;
    let src = std::str::from_utf8(name).ok().filter(|s| check_runtime(s).is_ok()).ok_or_else(|| DecodeError {
        field: "src",
        offset: ENVELOPE_FIXED,
        problem: format!("{:?} is not a runtime name", String::from_utf8_lossy(name)),
    })?;
    Ok((Envelope { kind, src: src.to_string(), src_inc, dst_inc, src_epoch, dst_epoch }, r.at))
}

fn decode_record<'a>(r: &mut Reader<'a>, kind: PutKind) -> Result<Record<'a>, DecodeError> {
    let at = r.at;
    let t = r.u8("record type")?;
    let allowed = match kind {
        PutKind::Heartbeat => false,
        PutKind::Bind => t == 6,
        PutKind::Data => (1..=8).contains(&t) && t != 6,
    };
    if !(1..=8).contains(&t) {
        return Err(DecodeError { field: "record type", offset: at, problem: format!("unknown record type {t}") });
    }
    if !allowed {
        return Err(DecodeError { field: "record type", offset: at, problem: format!("record type {t} cannot be in a {kind:?} put") });
    }
    let chan = r.chan()?;
    Ok(match t {
        1 => {
            let dir = r.dir()?;
            let seq = r.u64("seq")?;
            let len = r.u32("frame length")? as usize;
            if !(HEADER_BYTES..=LINK_MAX_MESSAGE).contains(&len) {
                return r.err("frame length", format!("{len} outside {HEADER_BYTES}..={LINK_MAX_MESSAGE}"));
            }
            let fat = r.at;
            let frame = r.bytes("frame", len)?;
            Header::decode(frame).map_err(|e| DecodeError { field: "frame header", offset: fat, problem: e.to_string() })?;
            Record::Frame { chan, dir, seq, frame }
        }
        2 => Record::Ack { chan, dir: r.dir()?, upto: r.u64("upto")? },
        3 => Record::Probe { chan, dir: r.dir()?, next: r.u64("next")? },
        4 => {
            let dir = r.dir()?;
            let cat = r.at;
            let c = r.u8("teardown code")?;
            let code =
                TeardownCode::from_u8(c).ok_or_else(|| DecodeError { field: "teardown code", offset: cat, problem: format!("unknown code {c}") })?;
            Record::Teardown { chan, dir, code, text: r.text("teardown reason")? }
        }
        5 => Record::TeardownAck { chan, dir: r.dir()? },
        6 => {
            let window = r.u32("window")?;
            if !(1..=MAX_WINDOW).contains(&window) {
                return Err(DecodeError { field: "window", offset: r.at - 4, problem: format!("{window} outside 1..={MAX_WINDOW}") });
            }
            let timeout_ms = r.u32("timeout")?;
            if !(1..=MAX_TIMEOUT_MS).contains(&timeout_ms) {
                return Err(DecodeError { field: "timeout", offset: r.at - 4, problem: format!("{timeout_ms} ms outside 1..={MAX_TIMEOUT_MS}") });
            }
            let p = r.u8("priority")?;
            let priority =
                Priority::from_u8(p).ok_or_else(|| DecodeError { field: "priority", offset: r.at - 1, problem: format!("{p} outside 1..=7") })?;
            let len = r.u16("service")? as usize;
            let sat = r.at;
            let b = r.bytes("service", len)?;
            let service = std::str::from_utf8(b)
                .map_err(|e| e.to_string())
                .and_then(|s| check_service(s).map(|()| s).map_err(|e| e.to_string()))
                .map_err(|problem| DecodeError { field: "service", offset: sat, problem })?;
            Record::BindRequest { chan, window, timeout_ms, priority, service }
        }
        7 => Record::BindAccept { chan },
        _ => {
            let cat = r.at;
            let c = r.u8("refusal code")?;
            let code = Refusal::from_u8(c).ok_or_else(|| DecodeError { field: "refusal code", offset: cat, problem: format!("unknown code {c}") })?;
            Record::BindRefuse { chan, code, text: r.text("refusal reason")? }
        }
    })
}

/// Decode a whole put, every field checked: its envelope and its records (a HEARTBEAT none, a BIND exactly one
/// BIND_REQUEST, a DATA put at least one record).
pub fn decode_put(put: &[u8]) -> Result<(Envelope, Vec<Record<'_>>), DecodeError> {
    let (env, at) = decode_envelope(put)?;
    let mut r = Reader { b: put, at };
    let mut recs = Vec::new();
    while r.at < put.len() {
        recs.push(decode_record(&mut r, env.kind)?);
    }
    let want = match env.kind {
        PutKind::Heartbeat if !recs.is_empty() => Some("a heartbeat carries no record"),
        PutKind::Bind if recs.len() != 1 => Some("a bind put carries exactly one BIND_REQUEST"),
        PutKind::Data if recs.is_empty() => Some("a data put carries at least one record"),
        _ => None,
    };
    if let Some(why) = want {
        return Err(DecodeError { field: "records", offset: at, problem: format!("{} records: {why}", recs.len()) });
    }
    Ok((env, recs))
}

#[cfg(test)]
mod tests {
    use multihop_base::wire::Kind;

    use super::*;

    fn env(kind: PutKind) -> Envelope {
        Envelope { kind, src: "hosta".into(), src_inc: 0x1234, dst_inc: 0, src_epoch: 1, dst_epoch: 3 }
    }

    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut f = Header { vci: 5, dir: DIR_TO_SERVER, kind: Kind::Data, flags: 0, ack: 2 }.encode().to_vec();
        f.extend_from_slice(payload);
        f
    }

    fn put(kind: PutKind, recs: &[Record<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        env(kind).encode(&mut out);
        for r in recs {
            r.encode(&mut out);
        }
        out
    }

    fn all_data_records(f: &[u8]) -> Vec<Record<'_>> {
        vec![
            Record::Frame { chan: 1, dir: Dir::ToServer, seq: u64::MAX, frame: f },
            Record::Ack { chan: 2, dir: Dir::ToClient, upto: 9 },
            Record::Probe { chan: 3, dir: Dir::ToServer, next: 10 },
            Record::Teardown { chan: 4, dir: Dir::ToClient, code: TeardownCode::Gap, text: "expected 3, got 5 é" },
            Record::TeardownAck { chan: 5, dir: Dir::ToServer },
            Record::BindAccept { chan: 6 },
            Record::BindRefuse { chan: 7, code: Refusal::NotExported, text: "no" },
        ]
    }

    #[test]
    fn every_record_round_trips() {
        let f = frame(b"hello");
        let recs = all_data_records(&f);
        let p = put(PutKind::Data, &recs);
        let (e, got) = decode_put(&p).unwrap();
        assert_eq!(e, env(PutKind::Data));
        assert_eq!(e.len(), ENVELOPE_FIXED + 5);
        assert_eq!(got, recs);
        let b = [Record::BindRequest { chan: 9, window: 16, timeout_ms: 5000, priority: Priority::DataHigh, service: "echo" }];
        assert_eq!(decode_put(&put(PutKind::Bind, &b)).unwrap().1, b);
        assert!(decode_put(&put(PutKind::Heartbeat, &[])).unwrap().1.is_empty());
        let mut one = Vec::new();
        recs[0].encode(&mut one);
        assert_eq!(one.len(), FRAME_OVERHEAD + f.len());
    }

    #[test]
    fn long_reasons_are_cut_at_a_character_boundary() {
        let text = "é".repeat(MAX_REASON);
        let p = put(PutKind::Data, &[Record::Teardown { chan: 1, dir: Dir::ToServer, code: TeardownCode::Local, text: &text }]);
        let Record::Teardown { text: got, .. } = decode_put(&p).unwrap().1[0] else { panic!() };
        assert_eq!(got.len(), MAX_REASON);
    }

    /// A put with its byte at `at` set to `v` fails naming `field`.
    fn bad(p: &[u8], at: usize, v: &[u8], field: &str) {
        let mut q = p.to_vec();
        q[at..at + v.len()].copy_from_slice(v);
        let e = decode_put(&q).unwrap_err();
        assert_eq!(e.field, field, "{e}");
        assert!(e.to_string().contains(field));
    }

    #[test]
    fn every_envelope_field_is_checked() {
        let p = put(PutKind::Heartbeat, &[]);
        bad(&p, 0, b"X", "magic");
        bad(&p, 4, &[2], "version");
        bad(&p, 5, &[0], "kind");
        bad(&p, 5, &[4], "kind");
        bad(&p, 6, &[1], "flags");
        bad(&p, 8, &0u64.to_le_bytes(), "src_inc");
        bad(&p, 24, &0u32.to_le_bytes(), "src_epoch");
        bad(&p, 32, &[0], "src");
        bad(&p, 32, &[6], "src");
        bad(&p, 33, b".", "src");
        bad(&p, 33, &[0xff], "src");
        // The put kind and its records must agree.
        let f = frame(b"x");
        let mut hb = p.clone();
        Record::Ack { chan: 1, dir: Dir::ToServer, upto: 0 }.encode(&mut hb);
        assert_eq!(decode_put(&hb).unwrap_err().field, "record type");
        assert_eq!(decode_put(&put(PutKind::Data, &[])).unwrap_err().field, "records");
        assert_eq!(decode_put(&put(PutKind::Bind, &[])).unwrap_err().field, "records");
        let b = Record::BindRequest { chan: 9, window: 16, timeout_ms: 5000, priority: Priority::Data, service: "echo" };
        assert_eq!(decode_put(&put(PutKind::Data, std::slice::from_ref(&b))).unwrap_err().field, "record type");
        assert_eq!(decode_put(&put(PutKind::Bind, &[b.clone(), b])).unwrap_err().field, "records");
        assert_eq!(decode_put(&put(PutKind::Bind, &all_data_records(&f)[..1])).unwrap_err().field, "record type");
    }

    #[test]
    fn every_record_field_is_checked() {
        let f = frame(b"abc");
        let base = ENVELOPE_FIXED + 5;
        let p = put(PutKind::Data, &[Record::Frame { chan: 1, dir: Dir::ToServer, seq: 0, frame: &f }]);
        bad(&p, base, &[0], "record type");
        bad(&p, base, &[9], "record type");
        bad(&p, base + 1, &0u64.to_le_bytes(), "chan");
        bad(&p, base + 9, &[3], "dir");
        bad(&p, base + 18, &3u32.to_le_bytes(), "frame length");
        bad(&p, base + 18, &(LINK_MAX_MESSAGE as u32 + 1).to_le_bytes(), "frame length");
        bad(&p, base + 18, &100u32.to_le_bytes(), "frame");
        bad(&p, base + 22 + 9, &[7], "frame header"); // the multi-hop kind
        let t = put(PutKind::Data, &[Record::Teardown { chan: 1, dir: Dir::ToServer, code: TeardownCode::Gap, text: "ab" }]);
        bad(&t, base + 10, &[0], "teardown code");
        bad(&t, base + 11, &2000u16.to_le_bytes(), "teardown reason");
        bad(&t, base + 11, &9u16.to_le_bytes(), "teardown reason");
        bad(&t, base + 13, &[0xff], "teardown reason");
        let r = put(PutKind::Data, &[Record::BindRefuse { chan: 1, code: Refusal::Refused, text: "ab" }]);
        bad(&r, base + 9, &[99], "refusal code");
        let b = put(PutKind::Bind, &[Record::BindRequest { chan: 9, window: 16, timeout_ms: 5000, priority: Priority::Data, service: "echo" }]);
        bad(&b, base + 9, &0u32.to_le_bytes(), "window");
        bad(&b, base + 9, &(MAX_WINDOW + 1).to_le_bytes(), "window");
        bad(&b, base + 13, &0u32.to_le_bytes(), "timeout");
        bad(&b, base + 17, &[0], "priority");
        bad(&b, base + 20, b"e*", "service");
        bad(&b, base + 18, &0u16.to_le_bytes(), "service");
        bad(&b, base + 18, &50u16.to_le_bytes(), "service");
    }

    #[test]
    fn every_truncation_is_an_error_never_a_panic() {
        let f = frame(b"payload");
        let mut recs = all_data_records(&f);
        let p = put(PutKind::Data, &recs);
        for cut in 0..p.len() {
            // Cut inside a record: an error; cut between records: a shorter valid put (or no record at all).
            let _ = decode_put(&p[..cut]);
        }
        recs.truncate(1);
        let p = put(PutKind::Data, &recs);
        for cut in 0..p.len() {
            assert!(decode_put(&p[..cut]).is_err(), "cut at {cut}");
        }
        // Every single-byte corruption decodes or fails cleanly.
        let p = put(PutKind::Data, &all_data_records(&f));
        for at in 0..p.len() {
            for v in [0u8, 1, 2, 0x7f, 0xff] {
                let mut q = p.clone();
                q[at] = v;
                let _ = decode_put(&q);
            }
        }
    }
}
