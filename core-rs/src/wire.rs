//! Header of a multi-hop message on a link ring.
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
//!                  `caps::marker` prefix (its handles came out of band)
//! 12  u32  ack     messages the sender consumed since its last ack
//! ```
//!
//! Each monitor rewrites `vci` and nothing else. Unknown flags are ignored.

use crate::error::{Error, Result};

pub const HEADER_BYTES: usize = 16;

pub const DIR_TO_SERVER: u8 = 1;
pub const DIR_TO_CLIENT: u8 = 2;

/// Flag: ack as soon as every message before this one is consumed.
pub const FLAG_ACK_NOW: u16 = 1;
/// Flag: this DATA message carries handles (`caps/`); monitors ignore it.
pub const FLAG_HANDLES: u16 = 2;

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
        assert!(Header::decode(&b[..10]).is_err());
        b[9] = 99;
        assert!(Header::decode(&b).is_err());
    }
}
