//! Why a bridged channel closed and why a bind was refused: a code (on the wire) and a text naming what happened
//! (what the local end's `ChannelClosed` or `BindError` will say).

use std::fmt;

/// Why a bridged channel was torn down (a TEARDOWN record's code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TeardownCode {
    /// An end closed it (its multi-hop TEARDOWN crossed) or its runtime's monitor link went.
    Closed = 1,
    /// A frame came with a sequence number past the next one: frames were lost.
    Gap = 2,
    /// A frame came with a sequence number already seen (or out of order).
    Duplicate = 3,
    /// A side sent more than the credit window allows.
    Window = 4,
    /// The peer runtime died, restarted or left the fabric.
    PeerLost = 5,
    /// The receiving bridge knows no such channel (its runtime forgot it: restarted, or already torn down).
    UnknownChannel = 6,
    /// The client gave up the bind (timeout) before the accept came.
    BindAbandoned = 7,
    /// The peer broke the protocol (an ack for frames never sent, a malformed put for this channel).
    Protocol = 8,
    /// Something local to one side (its driver said why).
    Local = 9,
}

impl TeardownCode {
    pub fn from_u8(v: u8) -> Option<TeardownCode> {
        use TeardownCode::*;
        [Closed, Gap, Duplicate, Window, PeerLost, UnknownChannel, BindAbandoned, Protocol, Local].into_iter().find(|c| *c as u8 == v)
    }
}

/// Why a bind across the fabric was refused (a BIND_REFUSE record's code, or the client bridge's own verdict).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The runtime is not a live member of this fabric.
    NotInFabric = 1,
    /// The runtime has no service of that name exported to the fabric.
    NotExported = 2,
    /// The service (its connect callback) or the remote runtime's local bind said no.
    Refused = 3,
    /// No answer within the bind's timeout.
    Timeout = 4,
    /// The runtime died or restarted while the bind was under way.
    PeerLost = 5,
    /// The request itself cannot be made (a bad name, this runtime itself).
    Invalid = 6,
}

impl Refusal {
    pub fn from_u8(v: u8) -> Option<Refusal> {
        use Refusal::*;
        [NotInFabric, NotExported, Refused, Timeout, PeerLost, Invalid].into_iter().find(|c| *c as u8 == v)
    }
}

/// A channel's end: the code and the whole sentence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Teardown {
    pub code: TeardownCode,
    pub text: String,
}

impl fmt::Display for Teardown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A bind's refusal: the code and the whole sentence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindRefused {
    pub code: Refusal,
    pub text: String,
}

impl fmt::Display for BindRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_ones_are_none() {
        for v in 0..=255u8 {
            if let Some(c) = TeardownCode::from_u8(v) {
                assert_eq!(c as u8, v);
            } else {
                assert!(v == 0 || v > 9);
            }
            if let Some(c) = Refusal::from_u8(v) {
                assert_eq!(c as u8, v);
            } else {
                assert!(v == 0 || v > 6);
            }
        }
    }
}
