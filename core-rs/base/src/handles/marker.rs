//! The in-band part of a message that carries handles: a 16-byte prefix
//! before its payload naming its handle group.
//!
//! ```text
//! 0   u64  seq     the sending end's number for this group (from 1)
//! 8   u32  count   handles in the group
//! 12  u32  zero
//! ```
//!
//! On a UMP ring the message has its own kind ([`crate::ringpair`]'s
//! `KIND_HANDLES`); on a multi-hop link its header carries
//! [`crate::wire::FLAG_HANDLES`] (monitors ignore flags, so the forwarding
//! loop never looks at it).  Receivers strip the prefix.

use crate::error::{Error, Result};

/// Bytes of the prefix.
pub const MARK_BYTES: usize = 16;

/// The prefix of group `seq` of `count` handles.
pub fn encode(seq: u64, count: u32) -> [u8; MARK_BYTES] {
    let mut b = [0u8; MARK_BYTES];
    b[0..8].copy_from_slice(&seq.to_le_bytes());
    b[8..12].copy_from_slice(&count.to_le_bytes());
    b
}

/// (seq, count) of a message that starts with a prefix.
pub fn decode(msg: &[u8]) -> Result<(u64, u32)> {
    if msg.len() < MARK_BYTES {
        return Err(Error::protocol(format!("a message marked as carrying handles has {} bytes, less than its {MARK_BYTES}-byte prefix", msg.len())));
    }
    let seq = u64::from_le_bytes(msg[0..8].try_into().expect("8 bytes"));
    let count = u32::from_le_bytes(msg[8..12].try_into().expect("4 bytes"));
    if seq == 0 || count as usize > super::MAX_HANDLES {
        return Err(Error::protocol(format!("bad handle prefix: group {seq} of {count} handles")));
    }
    Ok((seq, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let b = encode(7, 3);
        assert_eq!(decode(&b).unwrap(), (7, 3));
        assert!(decode(&b[..10]).is_err());
        assert!(decode(&encode(0, 1)).is_err());
        assert!(decode(&encode(1, 1000)).is_err());
    }
}
