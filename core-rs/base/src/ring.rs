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
//!
//! Soundness: producer and consumer never hold a Rust reference to a slot's
//! payload.  Payloads live in `UnsafeCell<[MaybeUninit<u8>; 56]>` and are
//! written and read through raw pointers (as crossbeam's `array_queue.rs`
//! does), each access ordered by the control word's release/acquire pair:
//! the producer writes a slot only while the consumer's published read
//! position says it is free, the consumer reads it only after the acquire
//! load of the head that publishes it.  A `Slot` is only ever borrowed
//! shared (`&Slot`), which `UnsafeCell` and the atomic allow.  The protocol
//! is checked by a loom model (`cargo test` under `RUSTFLAGS="--cfg loom"`,
//! see `loom_model` below) and the heap-backed tests run under Miri.

use std::mem::MaybeUninit;

use crate::error::{Error, Result};
use crate::sync::{fence, AtomicU64, Cell, Ordering};

pub(crate) const SLOT_BYTES: usize = 64;
pub(crate) const SLOT_PAYLOAD: usize = 56;
/// Bytes before the slots: the consumer's padded line.
pub(crate) const RING_HEADER_BYTES: usize = 128;
/// Control-word kind of a continuation slot. User kinds are 1..=254.
pub(crate) const KIND_CONT: u8 = 0xFF;
/// Default soft capacity, in slots (64 KiB of slots).
pub(crate) const DEFAULT_SOFT_SLOTS: usize = 4096;
/// Smallest ring, in slots.
pub(crate) const MIN_SLOTS: usize = 64;

type Payload = [MaybeUninit<u8>; SLOT_PAYLOAD];

#[repr(C, align(64))]
pub(crate) struct Slot {
    /// Written by the producer through raw pointers while the slot is free;
    /// read by the consumer through raw pointers after the head's acquire.
    payload: Cell<Payload>,
    /// Written by the producer last (release) for a head slot; polled by the
    /// consumer (acquire). Pairs with the release store in `Producer::try_send`.
    ctrl: AtomicU64,
}

#[repr(C, align(128))]
pub(crate) struct ConsumerLine {
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

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Slot>() == SLOT_BYTES);
#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<ConsumerLine>() == RING_HEADER_BYTES);

/// Number of slots a message of `len` bytes occupies.
#[inline]
pub(crate) fn slots_for(len: usize) -> usize {
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
pub(crate) fn slots_for_max_message(max_len: usize) -> usize {
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
        if !nslots.is_power_of_two() || !(MIN_SLOTS..=(1 << 28)).contains(&nslots) {
            return Err(Error::invalid(format!("ring slot count {nslots} must be a power of two in {MIN_SLOTS}..=2^28")));
        }
        Ok(RingGeometry { nslots, soft_slots: soft_slots.clamp(1, nslots) })
    }

    /// A ring smaller than [`MIN_SLOTS`], for models and tests that want to
    /// wrap around within a few messages.
    #[cfg(loom)]
    pub(crate) fn tiny(nslots: usize) -> RingGeometry {
        assert!(nslots.is_power_of_two());
        RingGeometry { nslots, soft_slots: nslots }
    }

    fn shift(&self) -> u32 {
        self.nslots.trailing_zeros()
    }
}

/// The writing end. Lives in exactly one thread at a time.
pub struct Producer {
    line: *const ConsumerLine,
    slots: *const Slot,
    geo: RingGeometry,
    wpos: u64,
    cached_read: u64,
}

// SAFETY: the producer only touches the ring through the pointers it was
// built with, whose validity `new`'s caller guarantees for its whole life;
// moving it to another thread changes nothing about that.
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

// SAFETY: as for `Producer`.
unsafe impl Send for Consumer {}

/// Copy `n` bytes from `src` into slot payload `p` at `off` (producer only).
///
/// # Safety
/// `p` points at a slot payload the producer owns now (free per the
/// consumer's published read position); `off + n <= SLOT_PAYLOAD`.
#[inline(always)]
unsafe fn write_payload(p: *mut Payload, off: usize, src: *const u8, n: usize) {
    std::ptr::copy_nonoverlapping(src, (p as *mut u8).add(off), n);
}

/// Copy `n` bytes of slot payload `p` into `dst` (consumer only).
///
/// # Safety
/// `p` points at a slot payload published to the consumer by a head's
/// acquire load, whose first `n` bytes the producer wrote.
#[inline(always)]
unsafe fn read_payload(p: *const Payload, dst: *mut u8, n: usize) {
    std::ptr::copy_nonoverlapping(p as *const u8, dst, n);
}

impl Producer {
    /// # Safety
    /// `base` points at `ring_bytes(geo.nslots)` bytes of shared memory,
    /// 128-byte aligned, zero-filled at creation, outliving the producer, with
    /// at most one producer at a time.
    pub unsafe fn new(base: *mut u8, geo: RingGeometry) -> Producer {
        Producer::from_parts(base as *const ConsumerLine, base.add(RING_HEADER_BYTES) as *const Slot, geo)
    }

    /// # Safety
    /// `line` and `geo.nslots` slots at `slots` are valid for the producer's
    /// life, with at most one producer at a time.
    pub(crate) unsafe fn from_parts(line: *const ConsumerLine, slots: *const Slot, geo: RingGeometry) -> Producer {
        // Pairs with the consumer's release store of `read`.
        let read = (*line).read.load(Ordering::Acquire);
        Producer { line, slots, geo, wpos: read, cached_read: read }
    }

    #[inline(always)]
    fn line(&self) -> &ConsumerLine {
        // SAFETY: valid for our life (constructor contract); only atomics in it.
        unsafe { &*self.line }
    }

    #[inline(always)]
    fn slot(&self, pos: u64) -> &Slot {
        // SAFETY: the index is masked into 0..nslots (valid per the
        // constructor contract); `Slot` is shared-borrowable (UnsafeCell + atomic).
        unsafe { &*self.slots.add((pos & (self.geo.nslots as u64 - 1)) as usize) }
    }

    /// The largest message this ring can ever take.
    pub(crate) fn capacity_bytes(&self) -> usize {
        self.geo.nslots * SLOT_PAYLOAD
    }

    /// Lower this producer's soft capacity to `slots` (never raised, at
    /// least one): it then writes small messages only while fewer slots are
    /// unconsumed. Local to this end; a message larger than that still goes
    /// into an empty ring.
    pub fn limit_fill(&mut self, slots: usize) {
        self.geo.soft_slots = self.geo.soft_slots.min(slots.max(1));
    }

    /// Let small messages fill the whole ring (this end only): for a stream whose reader may lag by
    /// more than the soft capacity and that reads everything there at each look, so that what waits
    /// waits here rather than in the writer's memory, and the writer is woken once per ring drained,
    /// not once per soft capacity (the live GES engine's links: see `docs/ges.md`).
    pub fn fill_whole_ring(&mut self) {
        self.geo.soft_slots = self.geo.nslots;
    }

    #[inline]
    fn fits(&self, k: u64) -> bool {
        let used = self.wpos - self.cached_read;
        used + k <= self.geo.nslots as u64 && (used == 0 || used + k <= self.geo.soft_slots as u64)
    }

    /// Whether a message of `len` bytes fits now (reloads the consumer's
    /// position if the cached one says no).
    #[inline]
    pub(crate) fn has_room(&mut self, len: usize) -> bool {
        let k = slots_for(len) as u64;
        if self.fits(k) {
            return true;
        }
        // Pairs with the consumer's release store in `Consumer::publish_now`:
        // slots below `read` are no longer read.
        self.cached_read = self.line().read.load(Ordering::Acquire);
        self.fits(k)
    }

    /// Raise the flag that makes the consumer's next give-back ring us.
    fn announce_wait(&self) {
        // Announce, then look again; pairs with the fence in `Consumer::publish_now`.
        self.line().room_wanted.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Like `has_room`, but when there is none, ask the consumer to say when
    /// it gives slots back (see `ConsumerLine::room_wanted`). For a producer
    /// about to wait; the answer comes as a ring of its doorbell.
    #[inline]
    pub fn want_room(&mut self, len: usize) -> bool {
        if self.has_room(len) {
            return true;
        }
        self.announce_wait();
        self.has_room(len)
    }

    /// Whether every message written so far has been consumed and given back.
    pub(crate) fn is_drained(&mut self) -> bool {
        // Pairs with the consumer's release store in `Consumer::publish_now`.
        self.cached_read = self.line().read.load(Ordering::Acquire);
        self.cached_read == self.wpos
    }

    /// Like `is_drained`, for a producer about to wait for it (a flush): if
    /// not drained, the consumer's next give-back rings us.
    pub(crate) fn want_drained(&mut self) -> bool {
        if self.is_drained() {
            return true;
        }
        self.announce_wait();
        self.is_drained()
    }

    /// How many messages are written but not yet given back by the consumer.
    /// Walks our own head slots from the consumer's published position (a
    /// message boundary) to ours.
    pub fn unconsumed_messages(&mut self) -> usize {
        self.is_drained();
        let mut pos = self.cached_read;
        let mut n = 0;
        while pos < self.wpos {
            // Our own earlier store: no other thread writes control words.
            let cw = self.slot(pos).ctrl.load(Ordering::Relaxed);
            pos += slots_for((cw & 0xFFFF_FFFF) as usize) as u64;
            n += 1;
        }
        n
    }

    /// Write one message made of the concatenation of `parts`. Returns false
    /// (and writes nothing) when the ring has no room; the caller must have
    /// checked the length against `capacity_bytes`.
    #[inline]
    pub fn try_send(&mut self, kind: u8, parts: &[&[u8]]) -> bool {
        debug_assert!(kind != 0 && kind != KIND_CONT);
        let len: usize = parts.iter().map(|p| p.len()).sum();
        assert!(len <= self.capacity_bytes() && len <= u32::MAX as usize, "message larger than the ring");
        if !self.has_room(len) {
            return false;
        }
        let k = slots_for(len) as u64;
        let shift = self.geo.shift();
        // Payloads, slot by slot, in order. Every slot in wpos..wpos+k is free:
        // `has_room` saw the consumer's release of it.
        if let [src] = parts {
            // One part (the common case): whole 56-byte chunks, then the tail.
            let mut chunks = src.chunks_exact(SLOT_PAYLOAD);
            let mut j = 0u64;
            for chunk in &mut chunks {
                // SAFETY: a free slot (see above); a whole payload's worth.
                self.slot(self.wpos + j).payload.with_mut(|p| unsafe { write_payload(p, 0, chunk.as_ptr(), SLOT_PAYLOAD) });
                j += 1;
            }
            let tail = chunks.remainder();
            if !tail.is_empty() {
                // SAFETY: a free slot; tail.len() < SLOT_PAYLOAD.
                self.slot(self.wpos + j).payload.with_mut(|p| unsafe { write_payload(p, 0, tail.as_ptr(), tail.len()) });
            }
        } else {
            let mut part = 0usize;
            let mut off = 0usize;
            for j in 0..k {
                self.slot(self.wpos + j).payload.with_mut(|p| {
                    let mut filled = 0usize;
                    while filled < SLOT_PAYLOAD && part < parts.len() {
                        let src = parts[part];
                        let n = (src.len() - off).min(SLOT_PAYLOAD - filled);
                        // SAFETY: a free slot; filled + n <= SLOT_PAYLOAD; src has n bytes at off.
                        unsafe { write_payload(p, filled, src.as_ptr().add(off), n) };
                        filled += n;
                        off += n;
                        if off == src.len() {
                            part += 1;
                            off = 0;
                        }
                    }
                });
            }
        }
        // Continuation control words: only ever read after the head's acquire.
        for j in 1..k {
            let pos = self.wpos + j;
            self.slot(pos).ctrl.store(ctrl_word(tag_of(pos, shift), KIND_CONT, 0), Ordering::Relaxed);
        }
        // Publishes the whole message; pairs with the acquire load in `Consumer::peek`.
        self.slot(self.wpos).ctrl.store(ctrl_word(tag_of(self.wpos, shift), kind, len as u32), Ordering::Release);
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
        Consumer::from_parts(base as *const ConsumerLine, base.add(RING_HEADER_BYTES) as *const Slot, geo, max_len)
    }

    /// # Safety
    /// As for [`Producer::from_parts`], with at most one consumer at a time.
    pub(crate) unsafe fn from_parts(line: *const ConsumerLine, slots: *const Slot, geo: RingGeometry, max_len: usize) -> Consumer {
        // Our own earlier publication (a consumer taking over a ring).
        let read = (*line).read.load(Ordering::Acquire);
        let publish_every = (geo.soft_slots as u64 / 4).max(1);
        Consumer { line, slots, geo, rpos: read, published: read, publish_every, max_len: max_len.min(geo.nslots * SLOT_PAYLOAD) }
    }

    #[inline(always)]
    fn line(&self) -> &ConsumerLine {
        // SAFETY: valid for our life (constructor contract); only atomics in it.
        unsafe { &*self.line }
    }

    #[inline(always)]
    fn slot(&self, pos: u64) -> &Slot {
        // SAFETY: masked index into the valid slots; shared borrow only.
        unsafe { &*self.slots.add((pos & (self.geo.nslots as u64 - 1)) as usize) }
    }

    /// The header of the next message, if one has been published.
    #[inline]
    pub fn peek(&self) -> Result<Option<Header>> {
        // Pairs with the producer's release store of the head control word.
        let cw = self.slot(self.rpos).ctrl.load(Ordering::Acquire);
        if (cw >> 40) as u32 != tag_of(self.rpos, self.geo.shift()) {
            return Ok(None);
        }
        let kind = (cw >> 32) as u8;
        let len = (cw & 0xFFFF_FFFF) as usize;
        if kind == 0 || kind == KIND_CONT || len > self.max_len {
            return Err(Error::protocol(format!("corrupt ring slot at position {}: kind {kind}, length {len} (max {})", self.rpos, self.max_len)));
        }
        Ok(Some(Header { kind, len }))
    }

    /// Copy the payload of the message `h` (just returned by `peek`) into
    /// `dst`, which must be exactly `h.len` bytes.
    #[inline]
    pub fn copy_out(&self, h: Header, dst: &mut [u8]) {
        assert_eq!(dst.len(), h.len);
        let mut pos = self.rpos;
        let mut chunks = dst.chunks_exact_mut(SLOT_PAYLOAD);
        for chunk in &mut chunks {
            // SAFETY: slots of the message `peek` acquired; whole payloads written.
            self.slot(pos).payload.with(|p| unsafe { read_payload(p, chunk.as_mut_ptr(), SLOT_PAYLOAD) });
            pos += 1;
        }
        let tail = chunks.into_remainder();
        if !tail.is_empty() {
            // SAFETY: the message's last slot; the producer wrote its first tail.len() bytes.
            self.slot(pos).payload.with(|p| unsafe { read_payload(p, tail.as_mut_ptr(), tail.len()) });
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
        // Hands slots below rpos back; pairs with the acquire load in `Producer::has_room`.
        self.line().read.store(self.rpos, Ordering::Release);
        self.published = self.rpos;
        // Orders the store above before the flag load; pairs with the SeqCst
        // store and fence in `Producer::announce_wait`.
        fence(Ordering::SeqCst);
        if self.line().room_wanted.load(Ordering::Relaxed) != 0 {
            self.line().room_wanted.store(0, Ordering::Relaxed);
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

/// A ring in ordinary heap memory (for tests, Miri and the loom model:
/// neither runs on a shared-memory segment).
#[cfg(any(test, loom))]
pub(crate) struct HeapRing {
    line: Box<ConsumerLine>,
    slots: Box<[Slot]>,
    geo: RingGeometry,
}

// SAFETY: the ring's memory is only reached through one Producer and one
// Consumer, whose accesses the ring protocol orders (see the module notes).
#[cfg(any(test, loom))]
unsafe impl Sync for HeapRing {}
// SAFETY: as above; the boxes move with it.
#[cfg(any(test, loom))]
unsafe impl Send for HeapRing {}

#[cfg(any(test, loom))]
impl HeapRing {
    pub(crate) fn new(geo: RingGeometry) -> HeapRing {
        let line = Box::new(ConsumerLine { read: AtomicU64::new(0), _pad: [0; 56], room_wanted: AtomicU64::new(0) });
        let slots = (0..geo.nslots).map(|_| Slot { payload: Cell::new([MaybeUninit::uninit(); SLOT_PAYLOAD]), ctrl: AtomicU64::new(0) }).collect();
        HeapRing { line, slots, geo }
    }

    /// The two ends. The caller keeps `self` alive while they are used.
    pub(crate) fn ends(&self, max_len: usize) -> (Producer, Consumer) {
        let line: *const ConsumerLine = &*self.line;
        // SAFETY: both point into `self`, which the caller keeps alive; one end each.
        unsafe { (Producer::from_parts(line, self.slots.as_ptr(), self.geo), Consumer::from_parts(line, self.slots.as_ptr(), self.geo, max_len)) }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Many fewer messages under Miri, which runs the same tests ~1000x slower.
    fn scaled(n: u64) -> u64 {
        if cfg!(miri) {
            (n / 500).max(50)
        } else {
            n
        }
    }

    fn pattern(seed: u64, len: usize) -> Vec<u8> {
        (0..len).map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8).collect()
    }

    #[test]
    fn wraps_around_many_times_keeping_order_and_content() {
        let r = HeapRing::new(RingGeometry::new(64, 64).unwrap());
        let (mut p, mut c) = r.ends(usize::MAX);
        let mut out = Vec::new();
        for i in 0..scaled(10_000) {
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
        let r = HeapRing::new(RingGeometry::new(1024, 1024).unwrap());
        let (mut p, mut c) = r.ends(usize::MAX);
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
        let r = HeapRing::new(RingGeometry::new(64, 64).unwrap());
        let (mut p, mut c) = r.ends(usize::MAX);
        let mut sent = 0u64;
        while p.try_send(1, &[&sent.to_le_bytes(), &[0u8; 60]]) {
            sent += 1;
        }
        assert_eq!(sent, 32, "two slots per 68-byte message in a 64-slot ring");
        assert_eq!(p.unconsumed_messages(), 32);
        // Still busy, still nothing written.
        assert!(!p.try_send(1, &[&[0u8; 10]]));
        let mut out = [0u8; 68];
        let mut told = false;
        for i in 0..sent {
            let h = c.peek().unwrap().expect("a message");
            c.copy_out(h, &mut out);
            assert_eq!(u64::from_le_bytes(out[..8].try_into().unwrap()), i);
            told |= c.advance(h);
            if i == 9 {
                c.publish();
                assert_eq!(p.unconsumed_messages(), 22);
                assert!(!p.want_drained());
                told = false;
            }
        }
        assert_eq!(c.peek().unwrap(), None);
        told |= c.publish();
        assert!(told, "the producer asked to hear of the give-back");
        assert!(p.want_drained());
        assert_eq!(p.unconsumed_messages(), 0);
        assert!(p.try_send(1, &[&[1u8; 10]]));
    }

    #[test]
    fn fill_whole_ring_lets_small_messages_use_every_slot() {
        let r = HeapRing::new(RingGeometry::new(256, 64).unwrap());
        let (mut p, _c) = r.ends(usize::MAX);
        let mut n = 0;
        while p.try_send(1, &[&[0u8; 8]]) {
            n += 1;
        }
        assert_eq!(n, 64, "the soft capacity");
        p.fill_whole_ring();
        while p.try_send(1, &[&[0u8; 8]]) {
            n += 1;
        }
        assert_eq!(n, 256, "every slot");
    }

    #[test]
    fn limit_fill_lowers_the_producers_soft_capacity_only() {
        let r = HeapRing::new(RingGeometry::new(256, 64).unwrap());
        let (mut p, mut c) = r.ends(usize::MAX);
        p.limit_fill(1000); // never raised above the ring's own
        p.limit_fill(8);
        let mut n = 0;
        while p.try_send(1, &[&[0u8; 8]]) {
            n += 1;
        }
        assert_eq!(n, 8);
        let mut out = Vec::new();
        assert!(c.try_recv(&mut out).unwrap().is_some());
        c.publish();
        assert!(p.try_send(1, &[&[0u8; 8]]), "a consumed slot makes room again");
        assert!(!p.try_send(1, &[&[0u8; 8]]));
    }

    #[test]
    fn soft_capacity_bounds_small_messages_but_not_large_ones() {
        let r = HeapRing::new(RingGeometry::new(256, 16).unwrap());
        let (mut p, mut c) = r.ends(usize::MAX);
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
        let r = HeapRing::new(RingGeometry::new(64, 64).unwrap());
        let (mut p, c) = r.ends(100);
        assert!(p.try_send(1, &[&[0u8; 200]]));
        assert!(c.peek().is_err());
    }

    #[test]
    fn works_on_a_shared_memory_segment() {
        #[cfg(not(miri))]
        {
            let geo = RingGeometry::new(64, 64).unwrap();
            let seg = crate::shm::Segment::create("ring-test", ring_bytes(64)).unwrap();
            // SAFETY: a fresh zeroed segment of the right size, one end each.
            let (mut p, mut c) = unsafe { (Producer::new(seg.as_ptr(), geo), Consumer::new(seg.as_ptr(), geo, usize::MAX)) };
            let mut out = Vec::new();
            for i in 0..1000u64 {
                assert!(p.try_send(1, &[&i.to_le_bytes()]));
                assert_eq!(c.try_recv(&mut out).unwrap(), Some(1));
                assert_eq!(out, i.to_le_bytes());
                c.publish();
            }
        }
    }

    #[test]
    fn concurrent_producer_consumer_stress_with_content_checks() {
        let r = Arc::new(HeapRing::new(RingGeometry::new(256, 128).unwrap()));
        let n = scaled(300_000);
        let (mut p, mut c) = r.ends(usize::MAX);
        let keep = r.clone();
        let prod = std::thread::spawn(move || {
            let _ring = keep;
            let mut i = 0u64;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
            while i < n {
                let len = 8 + (i.wrapping_mul(2654435761) % 300) as usize;
                let mut msg = pattern(i, len);
                msg[..8].copy_from_slice(&i.to_le_bytes());
                if p.try_send(1 + (i % 200) as u8, &[&msg]) {
                    i += 1;
                } else {
                    assert!(std::time::Instant::now() < deadline, "producer stuck");
                    std::thread::yield_now();
                }
            }
        });
        let mut out = Vec::new();
        let mut next = 0u64;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while next < n {
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
                    std::thread::yield_now();
                }
            }
        }
        prod.join().unwrap();
    }
}

/// The ring protocol under loom: every interleaving (within loom's bounds)
/// of a producer and a consumer on a tiny ring that wraps, checking content,
/// order, the give-back and the "room wanted" wake-up. Run with
/// `RUSTFLAGS="--cfg loom" cargo test --release -p multihop-base --lib loom_model --target-dir target/loom`.
#[cfg(all(test, loom))]
mod loom_model {
    use super::*;
    use loom::sync::Arc;

    fn msg(i: u8, len: usize) -> Vec<u8> {
        (0..len).map(|j| i.wrapping_mul(17).wrapping_add(j as u8)).collect()
    }

    /// Producer sends 3 messages (one spanning two slots) into a 4-slot
    /// ring; the consumer reads them in order with their content. Slots are
    /// reused across laps, so any write to a slot the consumer still reads,
    /// or a read of a slot not yet published, is a data race loom reports.
    #[test]
    fn wrapping_stream_keeps_content_and_order() {
        loom::model(|| {
            let ring = Arc::new(HeapRing::new(RingGeometry::tiny(4)));
            let (mut p, mut c) = ring.ends(usize::MAX);
            let lens = [60usize, 8, 30];
            let keep = ring.clone();
            let t = loom::thread::spawn(move || {
                let _ring = keep;
                for (i, len) in lens.iter().enumerate() {
                    while !p.try_send(1, &[&msg(i as u8, *len)]) {
                        loom::thread::yield_now();
                    }
                }
            });
            let mut out = Vec::new();
            for (i, len) in lens.iter().enumerate() {
                loop {
                    if c.try_recv(&mut out).unwrap().is_some() {
                        break;
                    }
                    c.publish();
                    loom::thread::yield_now();
                }
                c.publish();
                assert_eq!(out, msg(i as u8, *len));
            }
            t.join().unwrap();
        });
    }

    /// A producer that finds the ring full and announces it waits is always
    /// told: either its re-check sees the freed slots, or the consumer's
    /// give-back reports the flag (it would ring the doorbell).
    #[test]
    fn a_waiting_producer_is_never_missed() {
        loom::model(|| {
            let ring = Arc::new(HeapRing::new(RingGeometry::tiny(2)));
            let (mut p, mut c) = ring.ends(usize::MAX);
            assert!(p.try_send(1, &[b"a"]));
            assert!(p.try_send(1, &[b"b"]));
            let keep = ring.clone();
            let consumer = loom::thread::spawn(move || {
                let _ring = keep;
                let h = c.peek().unwrap().expect("a message is there");
                let mut out = vec![0u8; h.len];
                c.copy_out(h, &mut out);
                // advance may publish at once (tiny ring); either way says whether to ring.
                let rung = c.advance(h);
                rung | c.publish()
            });
            let room_now = p.want_room(1);
            let rung = consumer.join().unwrap();
            assert!(room_now || rung, "a producer waiting for room was neither shown it nor rung");
        });
    }
}
