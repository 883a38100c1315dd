//! Group frames on the links (docs/groups.md §4).
//!
//! A group frame starts with the same 16 bytes as a channel frame (VCI 0,
//! direction 0) so a monitor tells it apart by `kind` before anything else;
//! then the group fields. All little-endian:
//!
//! ```text
//!  0  u64  vci        0
//!  8  u8   dir        0
//!  9  u8   kind       4 DATA, 5 CREDIT, 6 SUBMIT, 7 REPLY
//! 10  u16  flags      bit 0 stamped, bit 1 convergecast request; REPLY: bit 2 up, bit 3 merged, bit 4 gave up
//! 12  u32  credit     CREDIT: frames consumed on this edge since the last credit; convergecast request: timeout ms
//! 16  u32  group_id
//! 20  u32  view
//! 24  u32  dest       the tree's destination: node id, multicast id or 2^31
//! 28  u32  root_core  the core whose tree this frame follows
//! 32  u32  sender
//! 36  u32  seq
//! 40  u32  stamp      total order; SUBMIT: the stream's destination
//! 44  u16  vc_len
//! 46  u16  request
//! 48  u32  vc[vc_len], then the payload
//! ```

use crate::error::{Error, Result};

pub const GROUP_HEADER_BYTES: usize = 48;

pub const KIND_DATA: u8 = 4;
pub const KIND_CREDIT: u8 = 5;
pub const KIND_SUBMIT: u8 = 6;
pub const KIND_REPLY: u8 = 7;

/// Flag: a total-order frame stamped by its stream's sequencer.
pub const FLAG_STAMPED: u16 = 1;
/// Flag: a convergecast request aggregated by the monitors (every recipient
/// answers with a REPLY flagged [`FLAG_UP`]); its `request` field numbers it
/// per requester, its `credit` field carries the requester's timeout in ms
/// (0: none).
pub const FLAG_CONVERGECAST: u16 = 2;
/// Flag (REPLY): going up a request's tree to the monitor, not along a tree
/// (a member's reply: `sender` the replier; a monitor's merged report:
/// with [`FLAG_MERGED`]). `seq` is the requester's node id. Takes no credit.
pub const FLAG_UP: u16 = 4;
/// Flag (REPLY): the payload is a merged partial (`ccast.rs`); without
/// [`FLAG_UP`] it is the result, on the requester's node-id tree.
pub const FLAG_MERGED: u16 = 8;
/// Flag (merged REPLY): some monitor stopped waiting (the request's time
/// ran out, or too many requests were in flight): what is missing may be alive.
pub const FLAG_GAVE_UP: u16 = 16;

/// Whether a link message is a group frame (its kind byte), before any decode.
#[inline]
pub fn is_group_frame(msg: &[u8]) -> bool {
    msg.len() > 9 && (KIND_DATA..=KIND_REPLY).contains(&msg[9])
}

/// What names a tree: every monitor on it has one entry for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TreeKey {
    pub group_id: u32,
    pub view: u32,
    pub dest: u32,
    pub root_core: u32,
}

/// The fixed part of a group frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupHeader {
    pub kind: u8,
    pub flags: u16,
    pub credit: u32,
    pub key: TreeKey,
    pub sender: u32,
    pub seq: u32,
    pub stamp: u32,
    pub vc_len: u16,
    pub request: u16,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

impl GroupHeader {
    /// Decode the fixed part; checks length, kind, and that the clock fits.
    pub fn decode(b: &[u8]) -> Result<GroupHeader> {
        if b.len() < GROUP_HEADER_BYTES {
            return Err(Error::protocol(format!("group frame of {} bytes is shorter than its {GROUP_HEADER_BYTES}-byte header", b.len())));
        }
        let kind = b[9];
        if !(KIND_DATA..=KIND_REPLY).contains(&kind) {
            return Err(Error::protocol(format!("kind {kind} is not a group frame kind")));
        }
        let vc_len = u16::from_le_bytes([b[44], b[45]]);
        if b.len() < GROUP_HEADER_BYTES + 4 * vc_len as usize {
            return Err(Error::protocol(format!("group frame of {} bytes is too short for its {vc_len}-entry clock", b.len())));
        }
        Ok(GroupHeader {
            kind,
            flags: u16::from_le_bytes([b[10], b[11]]),
            credit: u32_at(b, 12),
            key: TreeKey { group_id: u32_at(b, 16), view: u32_at(b, 20), dest: u32_at(b, 24), root_core: u32_at(b, 28) },
            sender: u32_at(b, 32),
            seq: u32_at(b, 36),
            stamp: u32_at(b, 40),
            vc_len,
            request: u16::from_le_bytes([b[46], b[47]]),
        })
    }

    pub fn encode(&self) -> [u8; GROUP_HEADER_BYTES] {
        let mut b = [0u8; GROUP_HEADER_BYTES];
        b[9] = self.kind;
        b[10..12].copy_from_slice(&self.flags.to_le_bytes());
        b[12..16].copy_from_slice(&self.credit.to_le_bytes());
        b[16..20].copy_from_slice(&self.key.group_id.to_le_bytes());
        b[20..24].copy_from_slice(&self.key.view.to_le_bytes());
        b[24..28].copy_from_slice(&self.key.dest.to_le_bytes());
        b[28..32].copy_from_slice(&self.key.root_core.to_le_bytes());
        b[32..36].copy_from_slice(&self.sender.to_le_bytes());
        b[36..40].copy_from_slice(&self.seq.to_le_bytes());
        b[40..44].copy_from_slice(&self.stamp.to_le_bytes());
        b[44..46].copy_from_slice(&self.vc_len.to_le_bytes());
        b[46..48].copy_from_slice(&self.request.to_le_bytes());
        b
    }
}

/// A CREDIT frame returning `n` credits of tree `key`.
pub fn credit_frame(key: TreeKey, n: u32) -> [u8; GROUP_HEADER_BYTES] {
    GroupHeader { kind: KIND_CREDIT, flags: 0, credit: n, key, sender: 0, seq: 0, stamp: 0, vc_len: 0, request: 0 }.encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let key = TreeKey { group_id: 3, view: 7, dest: 1 << 31, root_core: 2 };
        let h = GroupHeader { kind: KIND_DATA, flags: FLAG_STAMPED, credit: 0, key, sender: 5, seq: 9, stamp: 4, vc_len: 2, request: 1 };
        let mut b = h.encode().to_vec();
        b.extend_from_slice(&[0u8; 8]);
        assert!(is_group_frame(&b));
        assert_eq!(GroupHeader::decode(&b).unwrap(), h);
        assert!(GroupHeader::decode(&b[..50]).is_err(), "clock cut short");
        assert!(GroupHeader::decode(&b[..20]).is_err(), "header cut short");
        b[9] = 1;
        assert!(!is_group_frame(&b));
        assert!(GroupHeader::decode(&b).is_err());
        let c = credit_frame(key, 8);
        let d = GroupHeader::decode(&c).unwrap();
        assert_eq!((d.kind, d.credit, d.key), (KIND_CREDIT, 8, key));
    }
}
