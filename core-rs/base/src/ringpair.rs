//! A ring pair: two rings in one sealed segment, one per direction, and the
//! end ([`RingPair`]) each side holds. A UMP channel is one, directly between
//! two dispatchers with no monitor on the path (`multihop_dispatcher::ump`
//! adds its handles); a link is one, between a dispatcher and its monitor or
//! between two monitors.
//!
//! Segment layout (offsets in bytes):
//!
//! ```text
//! 0     ChannelHeader: magic, version, geometry, max message   (128 B)
//! 128   closed flags, one per side                           (128 B)
//! 256   ring 0: client -> server       ring_bytes(nslots)
//! ...   ring 1: server -> client       ring_bytes(nslots)
//! ```
//!
//! The client creates and fills the header; the server checks it before it
//! trusts a single offset.  Each side writes only its own ring's slots, its
//! own consumer line, and its own closed flag.
//!
//! End of life: `close` sets this side's flag and rings the peer.  A peer
//! that dies without closing is seen through its pidfd.  Either way the
//! other side can still read what was already sent, then gets
//! `ChannelClosed`; a send to a closed or dead peer fails at once.  An end
//! is *over* (`is_closed`) as soon as it learns either; it then runs its
//! close hook (its monitor forgets the channel) without waiting for `close`.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::defaults::LIMIT_MAX_MESSAGE;
use crate::error::{Error, ErrorKind, Progress, Result};
pub use crate::park::Waited;
use crate::park::{spin_budget, wait_until, Doorbell};
use crate::peer::PeerWatch;
use crate::ring::{ring_bytes, slots_for, slots_for_max_message, Consumer, Header, Producer, RingGeometry, DEFAULT_SOFT_SLOTS};
use crate::shm::Segment;
use crate::sync::lock;

const MAGIC: u64 = 0x4d48_5f55_4d50_0001; // "MH_UMP" v1
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 256;
/// Message kind of user data on a UMP ring.
const KIND_DATA: u8 = 1;
/// Message kind of user data that carries handles: a `handles::marker` prefix,
/// then the payload.
const KIND_HANDLES: u8 = 2;

#[repr(C, align(128))]
struct ChannelHeader {
    magic: u64,
    version: u32,
    nslots: u32,
    soft_slots: u32,
    _pad: u32,
    max_message: u64,
}

#[repr(C, align(128))]
struct ClosedFlags {
    /// `closed[side]` is set (release) by that side when it closes; read
    /// (acquire) by the other side before it reports ChannelClosed.
    closed: [AtomicU32; 2],
}

/// Which end of a channel this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Side {
    Client = 0,
    Server = 1,
}

impl Side {
    fn index(self) -> usize {
        self as usize
    }
    fn peer(self) -> Side {
        match self {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        }
    }
}

/// What a blocking caller waits for.
#[derive(Clone, Copy, Debug)]
pub enum Want {
    Readable,
    Writable(usize),
    /// Every message sent so far consumed by the peer (a flush).
    Flushed,
}

/// Counters of one endpoint.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RingPairStats {
    pub sent: u64,
    pub received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub busy_count: u64,
    pub parks: u64,
}

/// Everything fixed at bind time that callers may want to read.
#[derive(Clone, Debug, Serialize)]
pub struct ChannelInfo {
    pub id: u64,
    pub service: String,
    pub transport: &'static str,
    pub side: Side,
    pub peer_pid: u32,
    pub peer_core: u32,
    pub max_message: usize,
    pub ring_slots: usize,
}

struct TxState {
    producer: Producer,
    sent: u64,
    bytes: u64,
    busy: u64,
}

struct RxState {
    consumer: Consumer,
    received: u64,
    bytes: u64,
}

/// Run once when a channel end closes: `(channel id, teardown)`, where
/// `teardown` is the outgoing VCI of a multi-hop end whose TEARDOWN could not
/// go in band (its link was full), for the monitor to send instead.
pub type CloseHook = Box<dyn FnOnce(u64, Option<u64>) + Send>;

/// Where an end finds the handle groups of the messages that carry handles
/// (a UMP channel end's inbox, `multihop_dispatcher::handles`), and whom it
/// tells when it closes. An end without one (a link) reads such a message as
/// a protocol error.
pub trait HandleGroups: Send + Sync {
    /// Whether group `seq` is here.
    fn has(&self, seq: u64) -> bool;
    /// Take group `seq` (its message is being read).
    fn take(&self, seq: u64) -> Option<Vec<std::os::fd::OwnedFd>>;
    /// Close group `seq` (its message was read without its handles).
    fn discard(&self, seq: u64);
    /// This end closed: the groups it holds can no longer be read.
    fn close(&self);
}

/// One end of a ring pair (a UMP channel's, a link's).
pub struct RingPair {
    seg: Segment,
    info: ChannelInfo,
    tx: Mutex<TxState>,
    rx: Mutex<RxState>,
    my_doorbell: Arc<Doorbell>,
    peer_doorbell: Doorbell,
    peer: PeerWatch,
    /// Set once by `close`; Relaxed: a latch (the flag in the segment is
    /// what the peer reads, with release/acquire).
    closed_here: AtomicBool,
    /// Set once the close hook has run.
    released: AtomicBool,
    /// Blocking waits that parked; statistics only.
    parks: AtomicU64,
    on_close: Mutex<Option<CloseHook>>,
    /// Handles: where this end's groups wait (UMP ends made by a dispatcher).
    groups: std::sync::OnceLock<Arc<dyn HandleGroups>>,
}

/// Bytes of a channel segment for a maximum message size.
pub(crate) fn segment_bytes(max_message: usize) -> usize {
    HEADER_BYTES + 2 * ring_bytes(slots_for_max_message(max_message))
}

fn check_max_message(max_message: usize) -> Result<()> {
    if max_message == 0 || max_message > LIMIT_MAX_MESSAGE {
        return Err(Error::invalid(format!("max_message {max_message} out of range 1..={LIMIT_MAX_MESSAGE}")));
    }
    Ok(())
}

/// Create the segment of a new channel (the client does this before bind).
pub fn create_segment(max_message: usize) -> Result<Segment> {
    check_max_message(max_message)?;
    let nslots = slots_for_max_message(max_message);
    let seg = Segment::create("ump", segment_bytes(max_message))?;
    // SAFETY: fresh segment of at least HEADER_BYTES, nobody else maps it yet.
    unsafe {
        let h = &mut *seg.at::<ChannelHeader>(0);
        h.magic = MAGIC;
        h.version = VERSION;
        h.nslots = nslots as u32;
        h.soft_slots = DEFAULT_SOFT_SLOTS.min(nslots) as u32;
        h.max_message = max_message as u64;
    }
    Ok(seg)
}

/// Mark the client end of a channel segment closed: its bind failed, so a
/// server that set its end up too late sees ChannelClosed at once instead
/// of waiting on a client that never came.
pub fn abandon_segment(seg: &Segment) {
    // SAFETY: a segment made by `create_segment` (at least HEADER_BYTES long).
    let flags = unsafe { &*seg.at::<ClosedFlags>(128) };
    // Pairs with the acquire load in `peer_gone` on the server's side.
    flags.closed[Side::Client.index()].store(1, Ordering::Release);
}

impl RingPair {
    /// Open one end over a segment made by `create_segment` (ours, or the
    /// client's as received by the server, whose header is checked here).
    pub fn open(seg: Segment, mut info: ChannelInfo, my_doorbell: Arc<Doorbell>, peer_doorbell: Doorbell, peer: PeerWatch) -> Result<RingPair> {
        let (geo, max_message) = {
            // SAFETY: `at` checked bounds and alignment; the header is
            // written once by the creator before the segment is sent and only
            // read afterwards.
            let h = unsafe { &*seg.at::<ChannelHeader>(0) };
            if h.magic != MAGIC || h.version != VERSION {
                return Err(Error::protocol("channel segment has a bad magic number or version"));
            }
            let geo = RingGeometry::new(h.nslots as usize, h.soft_slots as usize)?;
            let max_message = h.max_message as usize;
            check_max_message(max_message)?;
            if slots_for(max_message) > geo.nslots || seg.len() < HEADER_BYTES + 2 * ring_bytes(geo.nslots) {
                return Err(Error::protocol("channel segment is too small for its declared geometry"));
            }
            (geo, max_message)
        };
        info.max_message = max_message;
        info.ring_slots = geo.nslots;
        // SAFETY: the length check above keeps both rings inside the segment.
        let ring = |i: usize| unsafe { seg.as_ptr().add(HEADER_BYTES + i * ring_bytes(geo.nslots)) };
        let (out_ring, in_ring) = match info.side {
            Side::Client => (ring(0), ring(1)),
            Side::Server => (ring(1), ring(0)),
        };
        // SAFETY: each side owns the producer of its outgoing ring and the
        // consumer of its incoming ring; the segment outlives both (it is a
        // field of the channel and dropped after them).
        let producer = unsafe { Producer::new(out_ring, geo) };
        // SAFETY: as above, for the incoming ring's consumer.
        let consumer = unsafe { Consumer::new(in_ring, geo, max_message) };
        Ok(RingPair {
            seg,
            info,
            tx: Mutex::new(TxState { producer, sent: 0, bytes: 0, busy: 0 }),
            rx: Mutex::new(RxState { consumer, received: 0, bytes: 0 }),
            my_doorbell,
            peer_doorbell,
            peer,
            closed_here: AtomicBool::new(false),
            released: AtomicBool::new(false),
            parks: AtomicU64::new(0),
            on_close: Mutex::new(None),
            groups: std::sync::OnceLock::new(),
        })
    }

    /// Give this end the groups of its messages that carry handles (set once, by its dispatcher).
    pub fn set_handle_groups(&self, g: Arc<dyn HandleGroups>) {
        let _ = self.groups.set(g);
    }

    pub fn info(&self) -> &ChannelInfo {
        &self.info
    }

    pub fn max_message(&self) -> usize {
        self.info.max_message
    }

    /// Run `f(channel id)` once when this end closes (bookkeeping hook).
    pub fn set_on_close(&self, f: CloseHook) {
        *lock(&self.on_close) = Some(f);
    }

    fn flags(&self) -> &ClosedFlags {
        // SAFETY: `at` checked bounds and alignment; ClosedFlags holds only
        // atomics, which both ends may touch concurrently.
        unsafe { &*self.seg.at::<ClosedFlags>(128) }
    }

    /// Whether this end was closed locally.
    pub fn closed_here(&self) -> bool {
        self.closed_here.load(Ordering::Relaxed)
    }

    /// Whether this end is over: closed here, or (looking now) the peer
    /// closed it or died. Messages that arrived before can still be read.
    pub fn is_closed(&self) -> bool {
        if self.closed_here() {
            return true;
        }
        let over = self.peer_gone(false);
        if over {
            self.release();
        }
        over
    }

    /// Run the close hook once (the monitor forgets the channel).
    fn release(&self) {
        if !self.released.swap(true, Ordering::Relaxed) {
            if let Some(f) = lock(&self.on_close).take() {
                f(self.info.id, None);
            }
        }
    }

    /// Whether the peer closed its end or died.
    #[inline]
    fn peer_gone(&self, throttled: bool) -> bool {
        // Pairs with the release store in `close` on the peer's side.
        if self.flags().closed[self.info.side.peer().index()].load(Ordering::Acquire) != 0 {
            return true;
        }
        if throttled {
            self.peer.is_dead_throttled()
        } else {
            self.peer.is_dead()
        }
    }

    /// Why this end is over, if it is: "this end" (closed here), "peer"
    /// (the peer closed it) or "peer died" (its process exited without closing).
    pub fn close_cause(&self) -> Option<&'static str> {
        if self.closed_here() {
            return Some("this end");
        }
        // Pairs with the release store in `close` on the peer's side.
        if self.flags().closed[self.info.side.peer().index()].load(Ordering::Acquire) != 0 {
            return Some("peer");
        }
        self.peer.is_dead().then_some("peer died")
    }

    fn closed_error(&self) -> Error {
        if self.closed_here() {
            return Error::closed(format!("channel {:#x} to {:?} was closed by this end", self.info.id, self.info.service));
        }
        self.release(); // we know it is over: say so to the monitor now
        if self.flags().closed[self.info.side.peer().index()].load(Ordering::Acquire) != 0 {
            Error::closed(format!("channel {:#x} to {:?}: the peer closed it", self.info.id, self.info.service))
        } else {
            Error::closed(format!("channel {:#x} to {:?}: the peer process {} died", self.info.id, self.info.service, self.peer.pid()))
        }
    }

    /// The error for a message of `len` bytes, if it is too large.
    pub fn check_len(&self, len: usize) -> Result<()> {
        if len > self.info.max_message {
            return Err(Error::new(
                ErrorKind::MessageTooLarge,
                format!("message of {len} bytes exceeds the channel maximum of {} bytes", self.info.max_message),
            ));
        }
        Ok(())
    }

    /// Send one message made of `parts` if there is room now.
    #[inline]
    pub fn try_send(&self, parts: &[&[u8]]) -> Result<()> {
        self.try_send_quiet(parts)?;
        self.peer_doorbell.ring();
        Ok(())
    }

    /// Like `try_send` but without ringing the peer: the caller rings once
    /// after a batch (`ring_peer`). For relays that write many messages.
    pub fn try_send_quiet(&self, parts: &[&[u8]]) -> Result<()> {
        self.try_send_kind(KIND_DATA, parts, 0)
    }

    /// Send `data` as the message of handle group `mark` (a
    /// `handles::marker` prefix) if there is room now, and ring the peer.
    pub fn try_send_marked(&self, mark: &[u8], data: &[u8]) -> Result<()> {
        self.try_send_kind(KIND_HANDLES, &[mark, data], mark.len())?;
        self.peer_doorbell.ring();
        Ok(())
    }

    /// One message of `kind` made of `parts`, of which the first `extra`
    /// bytes are not the caller's (not counted against its maximum).
    fn try_send_kind(&self, kind: u8, parts: &[&[u8]], extra: usize) -> Result<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.check_len(len - extra)?;
        if self.closed_here() || self.peer_gone(true) {
            return Err(self.closed_error());
        }
        let mut tx = lock(&self.tx);
        if !tx.producer.try_send(kind, parts) {
            tx.busy += 1;
            return Err(Error::new(ErrorKind::TxBusy, "ring full: the receiver has not caught up"));
        }
        tx.sent += 1;
        tx.bytes += len as u64;
        Ok(())
    }

    /// Write small messages only while fewer than `slots` ring slots are
    /// unconsumed (this end only; see `ring::Producer::limit_fill`). A
    /// monitor keeps its links' rings short this way, so the order it
    /// chooses for what waits (`link_queue.rs`) is the order that counts.
    pub fn limit_fill(&self, slots: usize) {
        lock(&self.tx).producer.limit_fill(slots);
    }

    /// Let small messages fill this end's whole ring (see `ring::Producer::fill_whole_ring`).
    pub fn fill_whole_ring(&self) {
        lock(&self.tx).producer.fill_whole_ring();
    }

    /// Wake the peer if it is parked (after `try_send_quiet`); true if it was.
    pub fn ring_peer(&self) -> bool {
        self.peer_doorbell.ring()
    }

    /// Send as many of `msgs` as fit now, in order; returns how many. The
    /// caller has checked their sizes (a message found too large ends the
    /// batch there with MessageTooLarge).
    pub fn try_send_many(&self, msgs: &mut dyn Iterator<Item = &[u8]>) -> Result<usize> {
        if self.closed_here() || self.peer_gone(true) {
            return Err(self.closed_error());
        }
        let mut tx = lock(&self.tx);
        let mut n = 0usize;
        for m in msgs {
            if let Err(e) = self.check_len(m.len()) {
                if n == 0 {
                    return Err(e);
                }
                break;
            }
            if !tx.producer.try_send(KIND_DATA, &[m]) {
                break;
            }
            tx.sent += 1;
            tx.bytes += m.len() as u64;
            n += 1;
        }
        drop(tx);
        if n > 0 {
            self.peer_doorbell.ring();
        }
        Ok(n)
    }

    /// Receive one message if one is there: `make(len, copy)` builds the
    /// result, where `copy(dst)` fills a `len`-byte buffer with the payload.
    /// Returns `ChannelClosed` only once the ring is drained.
    #[inline]
    pub fn try_recv_with<T>(&self, make: impl FnOnce(usize, &mut dyn FnMut(&mut [u8])) -> Result<T>) -> Result<Option<T>> {
        self.try_recv_into(make, None)
    }

    /// `try_recv_with` that also takes the message's handles into `handles`
    /// (left empty for a message sent without).
    pub fn try_recv_with_handles<T>(
        &self,
        make: impl FnOnce(usize, &mut dyn FnMut(&mut [u8])) -> Result<T>,
        handles: &mut Vec<std::os::fd::OwnedFd>,
    ) -> Result<Option<T>> {
        self.try_recv_into(make, Some(handles))
    }

    #[inline]
    fn try_recv_into<T>(
        &self,
        make: impl FnOnce(usize, &mut dyn FnMut(&mut [u8])) -> Result<T>,
        handles: Option<&mut Vec<std::os::fd::OwnedFd>>,
    ) -> Result<Option<T>> {
        if self.closed_here() {
            return Err(self.closed_error());
        }
        let mut rx = lock(&self.rx);
        match rx.consumer.peek()? {
            Some(h) => Ok(Some(self.take(&mut rx, h, make, handles)?)),
            None => {
                if rx.consumer.publish() {
                    self.peer_doorbell.ring();
                }
                drop(rx);
                if self.peer_gone(true) {
                    // The peer may have written just before it went: look once more.
                    let mut rx = lock(&self.rx);
                    if let Some(h) = rx.consumer.peek()? {
                        return Ok(Some(self.take(&mut rx, h, make, handles)?));
                    }
                    return Err(self.closed_error());
                }
                Ok(None)
            }
        }
    }

    #[inline]
    fn take<T>(
        &self,
        rx: &mut RxState,
        h: Header,
        make: impl FnOnce(usize, &mut dyn FnMut(&mut [u8])) -> Result<T>,
        handles: Option<&mut Vec<std::os::fd::OwnedFd>>,
    ) -> Result<T> {
        if h.kind != KIND_DATA {
            return self.take_marked(rx, h, make, handles);
        }
        let consumer = &rx.consumer;
        let v = make(h.len, &mut |dst: &mut [u8]| consumer.copy_out(h, dst))?;
        rx.received += 1;
        rx.bytes += h.len as u64;
        // Give the slots back before returning to the caller, who may not
        // receive again for a while: a writer must never wait on slots that
        // were read but not handed back.
        let advanced = rx.consumer.advance(h);
        if rx.consumer.publish() || advanced {
            self.peer_doorbell.ring();
        }
        Ok(v)
    }

    /// Take a message that carries handles: its payload (prefix stripped)
    /// goes to `make`, its group to `handles` (or is closed when the caller
    /// takes no handles). A marker without its group is a protocol error
    /// (the message is consumed, so the next one can be read).
    #[cold]
    fn take_marked<T>(
        &self,
        rx: &mut RxState,
        h: Header,
        make: impl FnOnce(usize, &mut dyn FnMut(&mut [u8])) -> Result<T>,
        handles: Option<&mut Vec<std::os::fd::OwnedFd>>,
    ) -> Result<T> {
        use crate::handles::marker::{decode, MARK_BYTES};
        let mut buf = vec![0u8; h.len];
        rx.consumer.copy_out(h, &mut buf);
        let group = decode(&buf).and_then(|(seq, _)| match self.groups.get() {
            Some(g) if g.has(seq) => Ok((seq, g.clone())),
            _ => Err(Error::protocol(format!("a message of group {seq} arrived without its handles"))),
        });
        let v = match group {
            Ok((seq, groups)) => {
                let v = make(h.len - MARK_BYTES, &mut |dst: &mut [u8]| dst.copy_from_slice(&buf[MARK_BYTES..]))?;
                match handles {
                    Some(out) => *out = groups.take(seq).unwrap_or_default(),
                    None => groups.discard(seq),
                }
                Ok(v)
            }
            Err(e) => Err(e),
        };
        rx.received += 1;
        rx.bytes += (h.len - MARK_BYTES.min(h.len)) as u64;
        let advanced = rx.consumer.advance(h);
        if rx.consumer.publish() || advanced {
            self.peer_doorbell.ring();
        }
        v
    }

    /// Receive up to `max` messages that are there now, under one lock.
    /// `each(len, copy)` handles one and says whether to take the next
    /// (`Ok(false)` leaves the message it was shown in the ring).
    /// Returns how many were taken; `ChannelClosed` only if none were and the
    /// peer is gone.
    pub fn try_recv_many(&self, max: usize, each: &mut dyn FnMut(usize, &mut dyn FnMut(&mut [u8])) -> Result<bool>) -> Result<usize> {
        if self.closed_here() {
            return Err(self.closed_error());
        }
        let mut rx = lock(&self.rx);
        let mut n = 0usize;
        let mut rang = false;
        while n < max {
            let Some(h) = rx.consumer.peek()? else { break };
            if h.kind != KIND_DATA {
                // Carries handles: the caller takes none, so they are closed
                // (unless it leaves the message in the ring).
                let mut go = true;
                let r = self.take_marked(
                    &mut rx,
                    h,
                    |len, copy| {
                        go = each(len, copy)?;
                        if go {
                            Ok(())
                        } else {
                            Err(Error::new(ErrorKind::Interrupted, "left in the ring"))
                        }
                    },
                    None,
                );
                if !go {
                    break;
                }
                r?;
                n += 1;
                continue;
            }
            let consumer = &rx.consumer;
            if !each(h.len, &mut |dst: &mut [u8]| consumer.copy_out(h, dst))? {
                break;
            }
            rx.received += 1;
            rx.bytes += h.len as u64;
            rang |= rx.consumer.advance(h);
            n += 1;
        }
        // Everything read goes back before we return (see `take`).
        if rx.consumer.publish() {
            rang = true;
        }
        drop(rx);
        if rang {
            self.peer_doorbell.ring();
        }
        if n == 0 && self.peer_gone(true) {
            // The peer may have written just before it went: only an empty
            // ring means closed; otherwise the caller comes back for it.
            if lock(&self.rx).consumer.peek()?.is_none() {
                return Err(self.closed_error());
            }
        }
        Ok(n)
    }

    /// Receive one message into a Vec, if one is there.
    pub fn try_recv(&self) -> Result<Option<Vec<u8>>> {
        self.try_recv_with(|len, copy| {
            let mut v = vec![0u8; len];
            copy(&mut v);
            Ok(v)
        })
    }

    /// Whether `want` may succeed now or the channel is over (one look,
    /// no waiting; for a writer it asks the reader to ring when it frees room).
    pub fn is_ready(&self, want: Want) -> bool {
        if self.closed_here() {
            return true;
        }
        let ready = match want {
            Want::Readable => {
                let mut rx = lock(&self.rx);
                let has = !matches!(rx.consumer.peek(), Ok(None));
                if !has && rx.consumer.publish() {
                    self.peer_doorbell.ring();
                }
                has
            }
            Want::Writable(len) => lock(&self.tx).producer.want_room(len),
            Want::Flushed => lock(&self.tx).producer.want_drained(),
        };
        ready || self.peer_gone(true)
    }

    /// Wait, without holding any lock, until `want` may succeed, the channel
    /// closes, `deadline` passes, or one park slice ends.
    pub fn wait(&self, want: Want, deadline: Option<Instant>) -> Waited {
        wait_until(&self.my_doorbell, &self.parks, spin_budget(), deadline, &mut || self.is_ready(want), &mut || self.peer.is_dead())
    }

    /// Whether a message of `len` bytes fits now; for a writer about to wait: when there is no room,
    /// the reader rings this process's doorbell as soon as it frees some.
    pub fn want_room(&self, len: usize) -> bool {
        lock(&self.tx).producer.want_room(len)
    }

    /// Whether a message is there or the peer is gone (readiness for pollers).
    pub fn readable(&self) -> bool {
        self.is_ready(Want::Readable)
    }

    /// This process's doorbell as used by this channel.
    pub fn doorbell(&self) -> &Arc<Doorbell> {
        &self.my_doorbell
    }

    /// Close this end: the peer sees `ChannelClosed` once it has read what
    /// was sent. Idempotent.
    pub fn close(&self) {
        if self.closed_here.swap(true, Ordering::Relaxed) {
            return;
        }
        // Publishes everything we sent before the flag; pairs with the acquire in `peer_gone`.
        self.flags().closed[self.info.side.index()].store(1, Ordering::Release);
        self.peer_doorbell.ring();
        self.my_doorbell.ring(); // wake our own threads blocked on this channel
        if let Some(g) = self.groups.get() {
            g.close(); // handles waiting here can no longer be read: closed now
        }
        self.release();
    }

    /// Messages sent and not yet consumed (given back) by the peer.
    pub fn unconsumed(&self) -> usize {
        lock(&self.tx).producer.unconsumed_messages()
    }

    /// One look for `flush`: true once every message sent so far has been
    /// consumed by the peer (it gave the ring's slots back). ChannelClosed
    /// (with the unconsumed count) if the channel ended first.
    pub fn flush_poll(&self, _asked: &mut bool) -> Result<bool> {
        if lock(&self.tx).producer.is_drained() {
            return Ok(true);
        }
        if self.closed_here() || self.peer_gone(false) {
            let n = self.unconsumed();
            return Err(self.closed_error().with_progress(Progress::Unconsumed(n)));
        }
        Ok(false)
    }

    pub fn stats(&self) -> RingPairStats {
        let (sent, bytes_sent, busy) = {
            let tx = lock(&self.tx);
            (tx.sent, tx.bytes, tx.busy)
        };
        let (received, bytes_received) = {
            let rx = lock(&self.rx);
            (rx.received, rx.bytes)
        };
        RingPairStats { sent, received, bytes_sent, bytes_received, busy_count: busy, parks: self.parks.load(Ordering::Relaxed) }
    }

    /// Record a busy event seen by a blocking sender.
    pub fn note_busy(&self) {
        lock(&self.tx).busy += 1;
    }
}

impl Drop for RingPair {
    fn drop(&mut self) {
        self.close();
    }
}

impl RingPair {
    /// Both ends of one channel inside this process (each with its own
    /// doorbell): for tests and benchmarks that need no monitor.
    pub fn pair_in_process(max_message: usize) -> Result<(RingPair, RingPair)> {
        let seg = create_segment(max_message)?;
        let seg2 = Segment::from_fd(crate::shm::dup_cloexec(seg.raw_fd())?, 0)?;
        let (da, db) = (Arc::new(Doorbell::create()?), Arc::new(Doorbell::create()?));
        let info = |side| ChannelInfo {
            id: 1,
            service: "in-process".into(),
            transport: "ump",
            side,
            peer_pid: std::process::id(),
            peer_core: 0,
            max_message: 0,
            ring_slots: 0,
        };
        let me = || PeerWatch::new(std::process::id());
        let peer_of_a = Doorbell::from_fd(crate::shm::dup_cloexec(db.segment().raw_fd())?)?;
        let peer_of_b = Doorbell::from_fd(crate::shm::dup_cloexec(da.segment().raw_fd())?)?;
        let a = RingPair::open(seg, info(Side::Client), da, peer_of_a, me()?)?;
        let b = RingPair::open(seg2, info(Side::Server), db, peer_of_b, me()?)?;
        Ok((a, b))
    }
}

/// Blocking helpers over `try_*` + `wait`, for callers that need no signal
/// handling between slices (Rust users, the C ABI).
impl RingPair {
    pub fn send_blocking(&self, parts: &[&[u8]], timeout: Option<Duration>) -> Result<()> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let len: usize = parts.iter().map(|p| p.len()).sum();
        loop {
            match self.try_send(parts) {
                Err(e) if e.kind == ErrorKind::TxBusy => {}
                other => return other,
            }
            match self.wait(Want::Writable(len), deadline) {
                Waited::TimedOut => return Err(Error::timeout("send timed out: the receiver did not make room")),
                Waited::Interrupted => return Err(Error::new(ErrorKind::Interrupted, "send interrupted by a signal")),
                _ => {}
            }
        }
    }

    pub fn recv_blocking(&self, timeout: Option<Duration>) -> Result<Vec<u8>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(v) = self.try_recv()? {
                return Ok(v);
            }
            match self.wait(Want::Readable, deadline) {
                Waited::TimedOut => return Err(Error::timeout("recv timed out: no message")),
                Waited::Interrupted => return Err(Error::new(ErrorKind::Interrupted, "recv interrupted by a signal")),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(max: usize) -> (RingPair, RingPair) {
        RingPair::pair_in_process(max).unwrap()
    }

    #[test]
    fn both_directions_and_max_message() {
        let (a, b) = pair(100_000);
        a.send_blocking(&[b"ping"], None).unwrap();
        assert_eq!(b.recv_blocking(Some(Duration::from_secs(1))).unwrap(), b"ping");
        let big = vec![7u8; 100_000];
        b.send_blocking(&[&big], None).unwrap();
        assert_eq!(a.recv_blocking(None).unwrap(), big);
        let err = a.try_send(&[&vec![0u8; 100_001]]).unwrap_err();
        assert_eq!(err.kind, ErrorKind::MessageTooLarge);
        assert_eq!(b.recv_blocking(Some(Duration::from_millis(20))).unwrap_err().kind, ErrorKind::Timeout);
    }

    #[test]
    fn fill_whole_ring_lets_one_end_queue_every_slot() {
        // A 2 MiB ring (32,768 slots) keeps 8-byte messages to its 4,096-slot soft capacity; the end
        // told to fill its whole ring queues one per slot, the other end is unchanged.
        let (a, b) = pair(2 * 1024 * 1024 - 64);
        let fill = |e: &RingPair| (0..100_000).take_while(|_| e.try_send(&[&[1u8; 8]]).is_ok()).count();
        assert_eq!(fill(&a), DEFAULT_SOFT_SLOTS);
        a.fill_whole_ring();
        assert_eq!(DEFAULT_SOFT_SLOTS + fill(&a), slots_for_max_message(2 * 1024 * 1024 - 64));
        assert_eq!(fill(&b), DEFAULT_SOFT_SLOTS);
        let mut got = 0;
        while b.try_recv().unwrap().is_some() {
            got += 1;
        }
        assert_eq!(got, slots_for_max_message(2 * 1024 * 1024 - 64), "every message there");
    }

    #[test]
    fn close_drains_then_reports_closed() {
        let (a, b) = pair(4096);
        a.try_send(&[b"last words"]).unwrap();
        a.close();
        assert_eq!(b.try_recv().unwrap().unwrap(), b"last words");
        assert_eq!(b.try_recv().unwrap_err().kind, ErrorKind::ChannelClosed);
        assert_eq!(b.try_send(&[b"x"]).unwrap_err().kind, ErrorKind::ChannelClosed);
        assert_eq!(a.try_send(&[b"x"]).unwrap_err().kind, ErrorKind::ChannelClosed);
    }

    #[test]
    fn blocked_receiver_is_woken_across_threads() {
        let (a, b) = pair(4096);
        let b = Arc::new(b);
        let b2 = b.clone();
        let h = std::thread::spawn(move || b2.recv_blocking(Some(Duration::from_secs(5))).unwrap());
        std::thread::sleep(Duration::from_millis(100));
        a.send_blocking(&[b"wake"], None).unwrap();
        assert_eq!(h.join().unwrap(), b"wake");
        assert!(b.stats().parks >= 1);
    }
}
