//! The single-producer single-consumer ring of cache-line slots (UMP style).
//!
//! A ring is a 128-byte consumer line followed by `nslots` 64-byte slots in a
//! shared segment.  A slot is 56 bytes of payload and an 8-byte control word
//! (its last 8 bytes):
//!
//! ```text
//!  63        40 39   32 31            0
//! +------------+-------+---------------+
//! | lap tag 24 | kind 8| length 32     |
//! +------------+-------+---------------+
//! ```
//!
//! A message of `len` bytes takes `max(1, ceil(len / 56))` consecutive slots
//! (modulo the ring).  The producer writes every slot's payload, then the
//! continuation slots' control words (kind [`KIND_CONT`]), and last the first
//! slot's control word with release ordering.  The consumer polls only the
//! control word of the slot at its read position, with acquire ordering, and
//! compares the lap tag with the lap it expects: a slot left over from the
//! previous lap, head or continuation, always carries the previous lap's
//! tag.  So a message costs the consumer one cache-line transfer and no
//! shared index (Barrelfish's UMP scheme).
//!
//! Slots go back to the producer lazily: the consumer publishes its read
//! position in its own padded line every `publish_every` slots within a batch
//! and at the end of every receive call (the channel layer does this, so a
//! writer never waits on slots that were read); the producer reloads it only
//! when its cached copy says the ring is full.  Producer state is private to the producer
//! process, so producer and consumer never write the same cache line, with
//! one exception for a full ring: a producer about to wait for room raises a
//! flag in the consumer's line, and only then does the consumer's give-back
//! ring the producer's doorbell (a process waiting for a reply is not woken
//! by every slot its peer frees).
//!
//! A full ring refuses the whole message (`false` from `try_send`): nothing
//! is dropped and order is kept.  A "soft capacity" keeps small-message
//! streams within a cache-friendly part of the ring; a message larger than
//! that still goes once the ring has drained.

use std::sync::atomic::{fence, AtomicU64, Ordering};

use crate::error::{Error, Result};

pub const SLOT_BYTES: usize = 64;
pub const SLOT_PAYLOAD: usize = 56;
/// Bytes before the slots: the consumer's padded line.
pub const RING_HEADER_BYTES: usize = 128;
/// Control-word kind of a continuation slot. User kinds are 1..=254.
pub const KIND_CONT: u8 = 0xFF;
/// Default soft capacity, in slots (64 KiB of slots).
pub const DEFAULT_SOFT_SLOTS: usize = 4096;
/// Smallest ring, in slots.
pub const MIN_SLOTS: usize = 64;

#[repr(C, align(64))]
struct Slot {
    payload: [u8; SLOT_PAYLOAD],
    /// Written by the producer last (release) for a head slot; polled by the
    /// consumer (acquire). Pairs with the release store in `Producer::try_send`.
    ctrl: AtomicU64,
}

#[repr(C, align(128))]
struct ConsumerLine {
    /// Slots consumed so far, published lazily by the consumer (release);
    /// read by the producer (acquire) when its cached copy says "full".
    read: AtomicU64,
    _pad: [u8; 56],
    /// Set by a producer about to wait for room (SeqCst store, then a
    /// re-check of `read`); read and cleared by the consumer after it
    /// publishes `read` (behind a SeqCst fence). Either the consumer sees the
    /// flag and rings the producer, or the producer's re-check sees the slots:
    /// a producer waiting for room is never missed, and one waiting for
    /// anything else is never woken by slot give-backs.
    room_wanted: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Slot>() == SLOT_BYTES);
const _: () = assert!(std::mem::size_of::<ConsumerLine>() == RING_HEADER_BYTES);

/// Number of slots a message of `len` bytes occupies.
#[inline]
pub fn slots_for(len: usize) -> usize {
    if len <= SLOT_PAYLOAD {
        1
    } else {
        len.div_ceil(SLOT_PAYLOAD)
    }
}

/// Bytes a ring of `nslots` slots occupies in a segment.
pub fn ring_bytes(nslots: usize) -> usize {
    RING_HEADER_BYTES + nslots * SLOT_BYTES
}

/// The smallest power-of-two slot count that holds a message of `max_len`.
pub fn slots_for_max_message(max_len: usize) -> usize {
    slots_for(max_len).max(MIN_SLOTS).next_power_of_two()
}

#[inline]
fn ctrl_word(tag: u32, kind: u8, len: u32) -> u64 {
    ((tag as u64) << 40) | ((kind as u64) << 32) | len as u64
}

#[inline]
fn tag_of(pos: u64, shift: u32) -> u32 {
    (((pos >> shift) + 1) & 0xFF_FFFF) as u32
}

/// Geometry shared by both ends of one ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingGeometry {
    pub nslots: usize,
    pub soft_slots: usize,
}

impl RingGeometry {
    pub fn new(nslots: usize, soft_slots: usize) -> Result<RingGeometry> {
        if !nslots.is_power_of_two() || nslots < MIN_SLOTS || nslots > (1 << 28) {
            return Err(Error::invalid(format!("ring slot count {nslots} must be a power of two in {MIN_SLOTS}..=2^28")));
        }
        Ok(RingGeometry { nslots, soft_slots: soft_slots.clamp(1, nslots) })
    }

    fn shift(&self) -> u32 {
        self.nslots.trailing_zeros()
    }
}

/// The writing end. Lives in exactly one thread at a time.
pub struct Producer {
    line: *const ConsumerLine,
    slots: *mut Slot,
    geo: RingGeometry,
    wpos: u64,
    cached_read: u64,
}

unsafe impl Send for Producer {}

/// What a head slot announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: u8,
    pub len: usize,
}

/// The reading end. Lives in exactly one thread at a time.
pub struct Consumer {
    line: *const ConsumerLine,
    slots: *const Slot,
    geo: RingGeometry,
    rpos: u64,
    published: u64,
    publish_every: u64,
    max_len: usize,
}

unsafe impl Send for Consumer {}

impl Producer {
    /// # Safety
    /// `base` points at `ring_bytes(geo.nslots)` bytes of shared memory,
    /// 128-byte aligned, zero-filled at creation, outliving the producer, with
    /// at most one producer at a time.
    pub unsafe fn new(base: *mut u8, geo: RingGeometry) -> Producer {
        let line = base as *const ConsumerLine;
        let read = (*line).read.load(Ordering::Acquire);
        Producer { line, slots: base.add(RING_HEADER_BYTES) as *mut Slot, geo, wpos: read, cached_read: read }
    }

    /// The largest message this ring can ever take.
    pub fn capacity_bytes(&self) -> usize {
        self.geo.nslots * SLOT_PAYLOAD
    }

    #[inline]
    fn fits(&self, k: u64) -> bool {
        let used = self.wpos - self.cached_read;
        used + k <= self.geo.nslots as u64 && (used == 0 || used + k <= self.geo.soft_slots as u64)
    }

    /// Whether a message of `len` bytes fits now (reloads the consumer's
    /// position if the cached one says no).
    #[inline]
    pub fn has_room(&mut self, len: usize) -> bool {
        let k = slots_for(len) as u64;
        if self.fits(k) {
            return true;
        }
        // Pairs with the consumer's release store in `Consumer::publish`:
        // slots below `read` are no longer read.
        self.cached_read = unsafe { (*self.line).read.load(Ordering::Acquire) };
        self.fits(k)
    }

    /// Like `has_room`, but when there is none, ask the consumer to say when
    /// it gives slots back (see `ConsumerLine::room_wanted`). For a producer
    /// about to wait; the answer comes as a ring of its doorbell.
    #[inline]
    pub fn want_room(&mut self, len: usize) -> bool {
        if self.has_room(len) {
            return true;
        }
        // Announce, then look again; pairs with the fence in `Consumer::publish_now`.
        unsafe { (*self.line).room_wanted.store(1, Ordering::SeqCst) };
        fence(Ordering::SeqCst);
        self.has_room(len)
    }

    /// Whether every message written so far has been consumed and given back.
    pub fn is_drained(&mut self) -> bool {
        self.cached_read = unsafe { (*self.line).read.load(Ordering::Acquire) };
        self.cached_read == self.wpos
    }

    /// Write one message made of the concatenation of `parts`. Returns false
    /// (and writes nothing) when the ring has no room; the caller must have
    /// checked the length against `capacity_bytes`.
    #[inline]
    pub fn try_send(&mut self, kind: u8, parts: &[&[u8]]) -> bool {
        debug_assert!(kind != 0 && kind != KIND_CONT);
        let len: usize = parts.iter().map(|p| p.len()).sum();
        debug_assert!(len <= self.capacity_bytes() && len <= u32::MAX as usize);
        if !self.has_room(len) {
            return false;
        }
        let k = slots_for(len) as u64;
        let mask = self.geo.nslots as u64 - 1;
        let shift = self.geo.shift();
        // Payloads, slot by slot, in order.
        if let [src] = parts {
            // One part (the common case): whole 56-byte chunks, then the tail.
            let mut chunks = src.chunks_exact(SLOT_PAYLOAD);
            let mut j = 0u64;
            for chunk in &mut chunks {
                let slot = unsafe { &mut *self.slots.add(((self.wpos + j) & mask) as usize) };
                // Fixed size: a straight 56-byte move, no memcpy call.
                slot.payload = *<&[u8; SLOT_PAYLOAD]>::try_from(chunk).expect("exact chunk");
                j += 1;
            }
            let tail = chunks.remainder();
            if !tail.is_empty() {
                let slot = unsafe { &mut *self.slots.add(((self.wpos + j) & mask) as usize) };
                slot.payload[..tail.len()].copy_from_slice(tail);
            }
        } else {
            let mut part = 0usize;
            let mut off = 0usize;
            for j in 0..k {
                let slot = unsafe { &mut *self.slots.add(((self.wpos + j) & mask) as usize) };
                let mut filled = 0usize;
                while filled < SLOT_PAYLOAD && part < parts.len() {
                    let src = parts[part];
                    let n = (src.len() - off).min(SLOT_PAYLOAD - filled);
                    slot.payload[filled..filled + n].copy_from_slice(&src[off..off + n]);
                    filled += n;
                    off += n;
                    if off == src.len() {
                        part += 1;
                        off = 0;
                    }
                }
            }
        }
        // Continuation control words: only ever read after the head's acquire.
        for j in 1..k {
            let pos = self.wpos + j;
            let slot = unsafe { &*self.slots.add((pos & mask) as usize) };
            slot.ctrl.store(ctrl_word(tag_of(pos, shift), KIND_CONT, 0), Ordering::Relaxed);
        }
        let head = unsafe { &*self.slots.add((self.wpos & mask) as usize) };
        // Publishes the whole message; pairs with the acquire load in `Consumer::peek`.
        head.ctrl.store(ctrl_word(tag_of(self.wpos, shift), kind, len as u32), Ordering::Release);
        self.wpos += k;
        true
    }
}

impl Consumer {
    /// # Safety
    /// As for [`Producer::new`], with at most one consumer at a time.
    /// `max_len` is the longest message the consumer accepts: a longer
    /// announced length is a protocol error, never an overrun.
    pub unsafe fn new(base: *mut u8, geo: RingGeometry, max_len: usize) -> Consumer {
        let line = base as *const ConsumerLine;
        let read = (*line).read.load(Ordering::Acquire);
        let publish_every = (geo.soft_slots as u64 / 4).max(1);
        Consumer {
            line,
            slots: base.add(RING_HEADER_BYTES) as *const Slot,
            geo,
            rpos: read,
            published: read,
            publish_every,
            max_len: max_len.min(geo.nslots * SLOT_PAYLOAD),
        }
    }

    /// The header of the next message, if one has been published.
    #[inline]
    pub fn peek(&self) -> Result<Option<Header>> {
        let mask = self.geo.nslots as u64 - 1;
        let slot = unsafe { &*self.slots.add((self.rpos & mask) as usize) };
        // Pairs with the producer's release store of the head control word.
        let cw = slot.ctrl.load(Ordering::Acquire);
        if (cw >> 40) as u32 != tag_of(self.rpos, self.geo.shift()) {
            return Ok(None);
        }
        let kind = (cw >> 32) as u8;
        let len = (cw & 0xFFFF_FFFF) as usize;
        if kind == 0 || kind == KIND_CONT || len > self.max_len {
            return Err(Error::protocol(format!(
                "corrupt ring slot at position {}: kind {kind}, length {len} (max {})",
                self.rpos, self.max_len
            )));
        }
        Ok(Some(Header { kind, len }))
    }

    /// Copy the payload of the message `h` (just returned by `peek`) into
    /// `dst`, which must be exactly `h.len` bytes.
    #[inline]
    pub fn copy_out(&self, h: Header, dst: &mut [u8]) {
        assert_eq!(dst.len(), h.len);
        let mask = self.geo.nslots as u64 - 1;
        let mut pos = self.rpos;
        let mut chunks = dst.chunks_exact_mut(SLOT_PAYLOAD);
        for chunk in &mut chunks {
            let slot = unsafe { &*self.slots.add((pos & mask) as usize) };
            // Fixed size: a straight 56-byte move, no memcpy call.
            *<&mut [u8; SLOT_PAYLOAD]>::try_from(chunk).expect("exact chunk") = slot.payload;
            pos += 1;
        }
        let tail = chunks.into_remainder();
        if !tail.is_empty() {
            let slot = unsafe { &*self.slots.add((pos & mask) as usize) };
            tail.copy_from_slice(&slot.payload[..tail.len()]);
        }
    }

    /// Consume the message `h`. Returns true when this published the read
    /// position to a producer waiting for room (so the caller should ring
    /// the producer's doorbell).
    #[inline]
    pub fn advance(&mut self, h: Header) -> bool {
        self.rpos += slots_for(h.len) as u64;
        if self.rpos - self.published >= self.publish_every {
            return self.publish_now();
        }
        false
    }

    /// Give back every consumed slot now. Returns true when a producer
    /// waiting for room should be rung. Call when the ring is found empty.
    #[inline]
    pub fn publish(&mut self) -> bool {
        if self.rpos != self.published {
            return self.publish_now();
        }
        false
    }

    /// Publish the read position; true if the producer asked to hear of it.
    #[inline]
    fn publish_now(&mut self) -> bool {
        let line = unsafe { &*self.line };
        // Hands slots below rpos back; pairs with the acquire load in `Producer::has_room`.
        line.read.store(self.rpos, Ordering::Release);
        self.published = self.rpos;
        // Orders the store above before the flag load; pairs with the SeqCst
        // store and fence in `Producer::want_room`.
        fence(Ordering::SeqCst);
        if line.room_wanted.load(Ordering::Relaxed) != 0 {
            line.room_wanted.store(0, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Convenience: receive one message into `out` (replacing its contents).
    pub fn try_recv(&mut self, out: &mut Vec<u8>) -> Result<Option<u8>> {
        match self.peek()? {
            None => Ok(None),
            Some(h) => {
                out.resize(h.len, 0);
                self.copy_out(h, out);
                self.advance(h);
                Ok(Some(h.kind))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::Segment;
    use std::sync::Arc;

    fn ring(nslots: usize, soft: usize) -> (Arc<Segment>, Producer, Consumer) {
        let geo = RingGeometry::new(nslots, soft).unwrap();
        let seg = Arc::new(Segment::create("ring-test", ring_bytes(nslots)).unwrap());
        let p = unsafe { Producer::new(seg.as_ptr(), geo) };
        let c = unsafe { Consumer::new(seg.as_ptr(), geo, usize::MAX) };
        (seg, p, c)
    }

    fn pattern(seed: u64, len: usize) -> Vec<u8> {
        (0..len).map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8).collect()
    }

    #[test]
    fn wraps_around_many_times_keeping_order_and_content() {
        let (_s, mut p, mut c) = ring(64, 64);
        let mut out = Vec::new();
        for i in 0..10_000u64 {
            let len = (i % 200) as usize;
            let msg = pattern(i, len);
            assert!(p.try_send(1, &[&msg]));
            assert_eq!(c.try_recv(&mut out).unwrap(), Some(1));
            assert_eq!(out, msg, "message {i}");
            assert_eq!(c.try_recv(&mut out).unwrap(), None);
            c.publish();
        }
    }

    #[test]
    fn multi_slot_messages_and_gathered_parts() {
        let (_s, mut p, mut c) = ring(1024, 1024);
        let mut out = Vec::new();
        for len in [0usize, 1, 55, 56, 57, 111, 112, 113, 4096, 50_000] {
            let msg = pattern(len as u64, len);
            let (a, b) = msg.split_at(len / 3);
            assert!(p.try_send(7, &[a, &[], b]));
            assert_eq!(c.try_recv(&mut out).unwrap(), Some(7));
            assert_eq!(out, msg, "len {len}");
            c.publish();
        }
    }

    #[test]
    fn full_ring_is_busy_without_loss_or_reorder() {
        let (_s, mut p, mut c) = ring(64, 64);
        let mut sent = 0u64;
        while p.try_send(1, &[&sent.to_le_bytes(), &[0u8; 60]]) {
            sent += 1;
        }
        assert_eq!(sent, 32, "two slots per 68-byte message in a 64-slot ring");
        // Still busy, still nothing written.
        assert!(!p.try_send(1, &[&[0u8; 10]]));
        let mut out = Vec::new();
        for i in 0..sent {
            assert!(c.try_recv(&mut out).unwrap().is_some());
            assert_eq!(u64::from_le_bytes(out[..8].try_into().unwrap()), i);
        }
        assert_eq!(c.try_recv(&mut out).unwrap(), None);
        c.publish();
        assert!(p.try_send(1, &[&[1u8; 10]]));
    }

    #[test]
    fn soft_capacity_bounds_small_messages_but_not_large_ones() {
        let (_s, mut p, mut c) = ring(256, 16);
        let mut n = 0;
        while p.try_send(1, &[&[0u8; 8]]) {
            n += 1;
        }
        assert_eq!(n, 16);
        let mut out = Vec::new();
        while c.try_recv(&mut out).unwrap().is_some() {}
        c.publish();
        // A message bigger than the soft capacity goes into an empty ring.
        let big = pattern(3, 100 * SLOT_PAYLOAD);
        assert!(p.try_send(2, &[&big]));
        assert!(!p.try_send(1, &[&[0u8; 8]]));
        assert_eq!(c.try_recv(&mut out).unwrap(), Some(2));
        assert_eq!(out, big);
    }

    #[test]
    fn corrupt_length_is_a_protocol_error_not_an_overrun() {
        let geo = RingGeometry::new(64, 64).unwrap();
        let seg = Segment::create("ring-test", ring_bytes(64)).unwrap();
        let mut p = unsafe { Producer::new(seg.as_ptr(), geo) };
        let c = unsafe { Consumer::new(seg.as_ptr(), geo, 100) };
        assert!(p.try_send(1, &[&[0u8; 200]]));
        assert!(c.peek().is_err());
    }

    #[test]
    fn concurrent_producer_consumer_stress_with_content_checks() {
        let geo = RingGeometry::new(256, 128).unwrap();
        let seg = Arc::new(Segment::create("ring-stress", ring_bytes(256)).unwrap());
        let base = seg.as_ptr() as usize;
        const N: u64 = 300_000;
        let prod = std::thread::spawn(move || {
            let mut p = unsafe { Producer::new(base as *mut u8, geo) };
            let mut i = 0u64;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while i < N {
                let len = 8 + (i.wrapping_mul(2654435761) % 300) as usize;
                let mut msg = pattern(i, len);
                msg[..8].copy_from_slice(&i.to_le_bytes());
                if p.try_send(1 + (i % 200) as u8, &[&msg]) {
                    i += 1;
                } else {
                    assert!(std::time::Instant::now() < deadline, "producer stuck");
                    std::hint::spin_loop();
                }
            }
        });
        let mut c = unsafe { Consumer::new(seg.as_ptr(), geo, usize::MAX) };
        let mut out = Vec::new();
        let mut next = 0u64;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while next < N {
            match c.try_recv(&mut out).unwrap() {
                Some(kind) => {
                    let len = 8 + (next.wrapping_mul(2654435761) % 300) as usize;
                    let mut want = pattern(next, len);
                    want[..8].copy_from_slice(&next.to_le_bytes());
                    assert_eq!(kind, 1 + (next % 200) as u8);
                    assert_eq!(out, want, "message {next}");
                    next += 1;
                }
                None => {
                    c.publish();
                    assert!(std::time::Instant::now() < deadline, "consumer stuck at {next}");
                    std::hint::spin_loop();
                }
            }
        }
        prod.join().unwrap();
    }
}
