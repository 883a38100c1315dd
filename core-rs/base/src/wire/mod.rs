//! Wire formats on the link rings: the header of a multi-hop message (here) and the multicast group
//! frames ([`multicast`]).
//!
//! Every message a multi-hop channel puts on a link starts with this
//! 16-byte header (little-endian), then the payload:
//!
//! ```text
//! 0   u64  vci     virtual circuit identifier, local to this link hop
//! 8   u8   dir     1: client -> server, 2: server -> client
//! 9   u8   kind    DATA, DUMMY (ack only, takes no credit), TEARDOWN
//! 10  u16  flags   ACK_NOW (1): the sender waits for its credits
//!                  (a flush); ack as soon as what came before is consumed;
//!                  HANDLES (2): a DATA message whose payload starts with a
//!                  `handles::marker` prefix (its handles came out of band);
//!                  BATCH (4): a DATA frame that packs several messages
//! 12  u32  ack     frames the sender consumed since its last ack
//! ```
//!
//! A BATCH frame's payload (`send_batch`, `mh_send_batch`) is
//!
//! ```text
//! u32 count (2..=MAX_BATCH_MESSAGES), then count times: u32 len, len bytes
//! ```
//!
//! packed up to the channel's maximum message size, so that a batch crosses
//! every ring and every monitor as one unit: one ring write, one lookup and
//! one doorbell per hop. The credit window counts frames (a message, or a
//! batch of them): what a channel direction can hold in the monitors is
//! still at most `window` frames of at most the maximum message each.
//!
//! Each monitor rewrites `vci` and nothing else (it reads a BATCH frame's
//! count for its counters). Unknown flags are ignored.

use crate::error::{Error, Result};

pub mod multicast;

pub const HEADER_BYTES: usize = 16;

pub const DIR_TO_SERVER: u8 = 1;
pub const DIR_TO_CLIENT: u8 = 2;

/// Flag: ack as soon as every message before this one is consumed.
pub const FLAG_ACK_NOW: u16 = 1;
/// Flag: this DATA message carries handles (`handles`); monitors ignore it.
pub const FLAG_HANDLES: u16 = 2;
/// Flag: this DATA frame packs several messages (see the module's text).
pub const FLAG_BATCH: u16 = 4;

/// Most messages one BATCH frame packs ([`crate::defaults::MAX_BATCH`]): what a receiver queues per
/// credit stays bounded in entries as well as in bytes.
pub const MAX_BATCH_MESSAGES: usize = crate::defaults::MAX_BATCH;

/// Largest message on a link: a full-size channel message and its header.
pub const LINK_MAX_MESSAGE: usize = crate::defaults::MAX_MESSAGE + HEADER_BYTES;

/// Bytes a message adds to a BATCH frame (its length prefix).
pub const BATCH_ENTRY_BYTES: usize = 4;

/// Bytes of a BATCH frame's payload before its first entry (the count).
pub const BATCH_PREFIX_BYTES: usize = 4;

/// Append the BATCH payload of `msgs` (2..=MAX_BATCH_MESSAGES of them) to `out`.
pub fn encode_batch(msgs: &[&[u8]], out: &mut Vec<u8>) {
    debug_assert!((2..=MAX_BATCH_MESSAGES).contains(&msgs.len()));
    out.extend_from_slice(&(msgs.len() as u32).to_le_bytes());
    for m in msgs {
        out.extend_from_slice(&(m.len() as u32).to_le_bytes());
        out.extend_from_slice(m);
    }
}

/// How many messages a DATA frame (`msg`, header included) carries: 1, or a
/// BATCH frame's count (0 if it is too short to say, at most MAX_BATCH_MESSAGES).
#[inline]
pub fn messages_in(flags: u16, msg: &[u8]) -> u64 {
    if flags & FLAG_BATCH == 0 {
        return 1;
    }
    // Clamped: a frame nobody has checked yet only feeds a counter here.
    let count = msg.get(HEADER_BYTES..HEADER_BYTES + BATCH_PREFIX_BYTES).map_or(0, |b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
    u64::from(count).min(MAX_BATCH_MESSAGES as u64)
}

/// The messages of a BATCH payload, checked whole first: every entry lies
/// inside the payload, nothing is left over, and the count is 2..=MAX_BATCH_MESSAGES.
pub fn decode_batch(payload: &[u8]) -> Result<Vec<&[u8]>> {
    let bad = |why: &str| Error::protocol(format!("malformed batch frame of {} bytes: {why}", payload.len()));
    let Some(head) = payload.get(..BATCH_PREFIX_BYTES) else { return Err(bad("no count")) };
    let count = u32::from_le_bytes(head.try_into().expect("4 bytes")) as usize;
    if !(2..=MAX_BATCH_MESSAGES).contains(&count) {
        return Err(bad(&format!("count {count} outside 2..={MAX_BATCH_MESSAGES}")));
    }
    let mut out = Vec::with_capacity(count);
    let mut at = BATCH_PREFIX_BYTES;
    for i in 0..count {
        let Some(l) = payload.get(at..at + BATCH_ENTRY_BYTES) else { return Err(bad(&format!("entry {i} has no length"))) };
        let len = u32::from_le_bytes(l.try_into().expect("4 bytes")) as usize;
        at += BATCH_ENTRY_BYTES;
        let Some(m) = payload.get(at..at.saturating_add(len)) else { return Err(bad(&format!("entry {i} of {len} bytes runs past the end"))) };
        out.push(m);
        at += len;
    }
    if at != payload.len() {
        return Err(bad(&format!("{} bytes after the last entry", payload.len() - at)));
    }
    Ok(out)
}

/// What a multi-hop message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Data = 1,
    Dummy = 2,
    Teardown = 3,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub vci: u64,
    pub dir: u8,
    pub kind: Kind,
    pub flags: u16,
    pub ack: u32,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..8].copy_from_slice(&self.vci.to_le_bytes());
        b[8] = self.dir;
        b[9] = self.kind as u8;
        b[10..12].copy_from_slice(&self.flags.to_le_bytes());
        b[12..16].copy_from_slice(&self.ack.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Header> {
        if b.len() < HEADER_BYTES {
            return Err(Error::protocol(format!("multi-hop message of {} bytes has no header", b.len())));
        }
        let kind = match b[9] {
            1 => Kind::Data,
            2 => Kind::Dummy,
            3 => Kind::Teardown,
            k => return Err(Error::protocol(format!("unknown multi-hop message kind {k}"))),
        };
        let dir = b[8];
        if dir != DIR_TO_SERVER && dir != DIR_TO_CLIENT {
            return Err(Error::protocol(format!("bad multi-hop direction {dir}")));
        }
        Ok(Header {
            vci: u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
            dir,
            kind,
            flags: u16::from_le_bytes([b[10], b[11]]),
            ack: u32::from_le_bytes(b[12..16].try_into().expect("4 bytes")),
        })
    }

    /// Overwrite the VCI of an encoded message in place.
    #[inline]
    pub fn rewrite_vci(msg: &mut [u8], vci: u64) {
        msg[0..8].copy_from_slice(&vci.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let h = Header { vci: 0xdead_beef_1234, dir: DIR_TO_CLIENT, kind: Kind::Dummy, flags: FLAG_ACK_NOW, ack: 9 };
        let mut b = h.encode().to_vec();
        assert_eq!(Header::decode(&b).unwrap(), h);
        Header::rewrite_vci(&mut b, 7);
        assert_eq!(Header::decode(&b).unwrap().vci, 7);
        assert_eq!(messages_in(0, &b), 1);
        assert!(Header::decode(&b[..10]).is_err());
        b[9] = 99;
        assert!(Header::decode(&b).is_err());
    }

    #[test]
    fn batches_round_trip_and_malformed_ones_are_refused() {
        let msgs: [&[u8]; 3] = [b"a", b"", b"xyz"];
        let mut p = Vec::new();
        encode_batch(&msgs, &mut p);
        assert_eq!(p.len(), BATCH_PREFIX_BYTES + 3 * BATCH_ENTRY_BYTES + 4);
        assert_eq!(decode_batch(&p).unwrap(), msgs.to_vec());
        let mut frame = Header { vci: 1, dir: DIR_TO_SERVER, kind: Kind::Data, flags: FLAG_BATCH, ack: 0 }.encode().to_vec();
        frame.extend_from_slice(&p);
        assert_eq!(messages_in(FLAG_BATCH, &frame), 3);
        assert_eq!(messages_in(FLAG_BATCH, &frame[..HEADER_BYTES + 2]), 0);
        frame[HEADER_BYTES..HEADER_BYTES + 4].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(messages_in(FLAG_BATCH, &frame), MAX_BATCH_MESSAGES as u64, "a forged count is clamped");
        // Cut short, one byte too many, a count of 1, 0 or too many, a length past the end.
        for bad in [
            &p[..p.len() - 1],
            &[p.as_slice(), &[0]].concat(),
            &[1, 0, 0, 0, 1, 0, 0, 0, 9][..],
            &[0, 0, 0, 0][..],
            &[65, 0, 0, 0][..],
            &[2, 0, 0, 0, 255, 255, 255, 255][..],
            &[2][..],
        ] {
            let e = decode_batch(bad).unwrap_err();
            assert!(e.to_string().contains("malformed batch frame"), "{e}");
        }
    }
}
