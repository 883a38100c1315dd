//! Messages a blocking send accepted while its multi-hop channel had no
//! credit: the *held frames* (write-behind coalescing, TCP autocorking's idea).
//!
//! When a blocking `send` finds the credit window used up, the message
//! could not leave now anyway: instead of waiting, the end appends it to its
//! held frames and returns. (A link to the monitor that is full only needs
//! the monitor to catch up, which it does at once: that send waits for room.)
//! The held messages leave as frames (a BATCH frame, `multihop_base::wire`, or a plain
//! one for a single message), oldest first, a credit each, as credits come
//! back: sent by the link's pump as it sorts the ack in, by the next send, or
//! by the dispatcher's flusher thread (`link.rs`) when nobody else looks.
//! So a loop of one `send` per message streams in frames of up to 64 messages
//! without the caller batching, and a message never waits longer than it
//! would have waited in a blocking send: nothing is held while a credit is
//! free. Turn it off with `MULTIHOP_HOLD=0`.
//!
//! A frame is built in place: `[count u32][len u32, bytes]...`, so the BATCH
//! payload is the whole buffer and a single message is the bytes after its
//! one entry header. Bounded: `HELD_FRAMES` frames of at most
//! `MAX_BATCH_MESSAGES` messages and the channel's maximum message size.

pub(crate) use multihop_base::defaults::HELD_FRAMES;
use multihop_base::wire::{BATCH_ENTRY_BYTES, BATCH_PREFIX_BYTES, MAX_BATCH_MESSAGES};

/// Whether blocking sends of this process hold messages (`MULTIHOP_HOLD`,
/// read once: `0` makes a blocking send wait for its credit instead, one
/// message per frame, as before holding existed; the strict baseline of
/// `bench_multihop.py`).
pub(crate) fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MULTIHOP_HOLD").map_or(true, |v| v.trim() != "0"))
}

/// Say on stderr that held messages were lost where no caller can be told
/// (an end dropped without a close, the exit hook): one line, `multihop:`
/// first, as a C library's warning would be.
pub(crate) fn warn_lost(what: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "multihop: warning: {what}");
}

/// One held frame: `[count u32][len u32, bytes]...`.
#[derive(Debug, Default)]
struct Frame {
    buf: Vec<u8>,
    count: u32,
}

impl Frame {
    fn fits(&self, len: usize, max: usize) -> bool {
        let used = if self.count == 0 { BATCH_PREFIX_BYTES } else { self.buf.len() };
        (self.count as usize) < MAX_BATCH_MESSAGES && used + BATCH_ENTRY_BYTES + len <= max
    }

    fn push(&mut self, parts: &[&[u8]], len: usize) {
        if self.count == 0 {
            self.buf.clear();
            self.buf.extend_from_slice(&[0; BATCH_PREFIX_BYTES]);
        }
        self.buf.extend_from_slice(&(len as u32).to_le_bytes());
        for p in parts {
            self.buf.extend_from_slice(p);
        }
        self.count += 1;
        self.buf[..BATCH_PREFIX_BYTES].copy_from_slice(&self.count.to_le_bytes());
    }
}

/// The held frames of one channel end (kept under its state lock), oldest first.
#[derive(Debug, Default)]
pub(crate) struct Held {
    frames: std::collections::VecDeque<Frame>,
    /// A sent frame's buffer, kept for the next one.
    spare: Option<Frame>,
    count: u32,
    bytes: u64,
}

impl Held {
    /// Messages held.
    pub(crate) fn count(&self) -> u32 {
        self.count
    }

    /// Payload bytes held (the callers' bytes, not the frames').
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether a message of `len` bytes fits, for a channel whose largest
    /// message is `max` bytes (a frame must fit it whole).
    pub(crate) fn fits(&self, len: usize, max: usize) -> bool {
        match self.frames.back() {
            Some(f) if f.fits(len, max) => true,
            _ => self.frames.len() < HELD_FRAMES && Frame::default().fits(len, max),
        }
    }

    /// Append one message made of `parts` to the last frame, or to a new
    /// one if it has no room by `max` (the caller checked `fits`).
    pub(crate) fn push(&mut self, parts: &[&[u8]], max: usize) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if !self.frames.back().is_some_and(|f| f.fits(len, max)) {
            let mut f = self.spare.take().unwrap_or_default();
            f.count = 0;
            self.frames.push_back(f);
        }
        let f = self.frames.back_mut().expect("a frame to hold in");
        f.push(parts, len);
        self.count += 1;
        self.bytes += len as u64;
    }

    /// The oldest frame's payload and whether it is a BATCH frame (two or
    /// more messages) or a single message's bytes; None when nothing is held.
    pub(crate) fn front(&self) -> Option<(&[u8], bool, u32)> {
        let f = self.frames.front()?;
        Some(if f.count == 1 { (&f.buf[BATCH_PREFIX_BYTES + BATCH_ENTRY_BYTES..], false, 1) } else { (&f.buf[..], true, f.count) })
    }

    /// The oldest frame left.
    pub(crate) fn pop_front(&mut self) {
        if let Some(f) = self.frames.pop_front() {
            self.count -= f.count;
            self.bytes -= (f.buf.len() - BATCH_PREFIX_BYTES - f.count as usize * BATCH_ENTRY_BYTES) as u64;
            self.spare = Some(f);
        }
    }

    /// Forget everything held.
    pub(crate) fn clear(&mut self) {
        self.frames.clear();
        self.count = 0;
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use multihop_base::wire::decode_batch;

    const MAX: usize = 1 << 20;

    #[test]
    fn one_message_is_a_plain_frame_and_more_are_a_batch() {
        let mut h = Held::default();
        assert!(h.is_empty() && h.front().is_none());
        h.push(&[b"ab", b"c"], MAX);
        assert_eq!(h.front(), Some((&b"abc"[..], false, 1)));
        h.push(&[b""], MAX);
        h.push(&[b"xyz"], MAX);
        let (p, batch, n) = h.front().unwrap();
        assert!(batch && n == 3);
        assert_eq!(decode_batch(p).unwrap(), vec![&b"abc"[..], b"", b"xyz"]);
        assert_eq!((h.count(), h.bytes()), (3, 6));
        h.pop_front();
        assert!(h.is_empty() && h.bytes() == 0);
        h.push(&[b"q"], MAX);
        assert_eq!(h.front(), Some((&b"q"[..], false, 1)), "a recycled buffer starts afresh");
    }

    #[test]
    fn frames_of_64_up_to_four_then_full() {
        let mut h = Held::default();
        for i in 0..HELD_FRAMES * MAX_BATCH_MESSAGES {
            assert!(h.fits(1, MAX), "message {i}");
            h.push(&[&[i as u8]], MAX);
        }
        assert!(!h.fits(0, MAX), "four frames of 64: full");
        let mut seen = 0;
        while let Some((p, batch, n)) = h.front() {
            assert!(batch && n == 64);
            let msgs = decode_batch(p).unwrap();
            assert_eq!(msgs[0], &[seen as u8][..], "oldest first");
            seen += msgs.len();
            h.pop_front();
        }
        assert_eq!((seen, h.count()), (256, 0));
    }

    #[test]
    fn a_frame_is_bounded_by_the_largest_message() {
        let mut h = Held::default();
        // A frame of one 100-byte message needs prefix + entry + 100.
        assert!(h.fits(100, 108));
        assert!(!h.fits(101, 108));
        h.push(&[&[0u8; 50]], 112);
        assert!(h.fits(50, 4 + 54 + 54), "the next entry counts its own length prefix");
        h.push(&[&[1u8; 50]], 4 + 54 + 53);
        assert_eq!(h.front().unwrap().2, 1, "no room in the first frame: a second one");
        assert_eq!(h.count(), 2);
        h.clear();
        assert!(h.is_empty() && h.front().is_none());
    }
}
