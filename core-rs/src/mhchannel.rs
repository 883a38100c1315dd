//! Multi-hop channel endpoints (TN-006 2.5, 2.10) and the dispatcher's link
//! to its monitor that they share.
//!
//! A dispatcher has one [`DispatcherLink`] (a ring pair with its core's
//! monitor).  Every multi-hop channel of the dispatcher is a virtual circuit
//! on it: outgoing messages carry the VCI the monitor gave us, incoming ones
//! the VCI we gave the monitor.  Whichever thread reads the link ("pumps")
//! sorts what it finds into each channel's queue, so channels never steal
//! each other's messages; pumping another channel's message rings this
//! process's doorbell so that channel's waiter looks again.
//!
//! Flow control is the credit window of `flow.rs`.  Closing sends a
//! TEARDOWN behind the data, which removes the forwarding entries hop by hop
//! and closes the other end once it has read what came before.  If the
//! monitor dies, every channel on the link is closed.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

use crate::channel::{ChannelInfo, CloseHook, UmpChannel, Want};
use crate::error::{Error, ErrorKind, Result};
use crate::flow::Credits;
use crate::park::{relay_spin_budget, wait_until, Waited};
use crate::wire::{Header, Kind, HEADER_BYTES};

/// Largest message on a link: a full-size channel message and its header.
pub const LINK_MAX_MESSAGE: usize = crate::channel::DEFAULT_MAX_MESSAGE + HEADER_BYTES;
/// Largest credit window a bind may ask for.
pub const MAX_WINDOW: u32 = 4096;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// VCIs are drawn uniformly from the OS random source, so a VCI is its own
/// hash: no need to run SipHash over it for every message.
#[derive(Default)]
struct VciHasher(u64);

impl std::hash::Hasher for VciHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ *b as u64;
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

type VciMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<VciHasher>>;

/// Payloads up to this size are sent from one contiguous stack buffer
/// (header and payload together): the ring's fast one-part path.
const SMALL_SEND: usize = 512;

struct MhState {
    queue: VecDeque<Vec<u8>>,
    credits: Credits,
    peer_closed: bool,
    received: u64,
    bytes_received: u64,
    sent: u64,
    bytes_sent: u64,
    busy: u64,
}

struct MhShared {
    state: Mutex<MhState>,
}

/// A dispatcher's ring pair with its monitor, shared by its multi-hop channels.
pub struct DispatcherLink {
    link: UmpChannel,
    demux: Mutex<VciMap<Weak<MhShared>>>,
    /// Messages for a VCI we do not know (a channel already closed): counted.
    pub dropped: AtomicU64,
    dead: AtomicBool,
}

impl DispatcherLink {
    pub fn new(link: UmpChannel) -> DispatcherLink {
        DispatcherLink { link, demux: Mutex::new(VciMap::default()), dropped: AtomicU64::new(0), dead: AtomicBool::new(false) }
    }

    pub fn ring(&self) -> &UmpChannel {
        &self.link
    }

    /// Largest payload of a multi-hop message on this link.
    pub fn max_payload(&self) -> usize {
        self.link.max_message() - HEADER_BYTES
    }

    /// A fresh incoming VCI, registered for `shared` before anyone can use it.
    fn register(&self, shared: &Arc<MhShared>) -> u64 {
        let mut d = lock(&self.demux);
        loop {
            let v = crate::control::random_u64();
            if v != 0 && !d.contains_key(&v) {
                d.insert(v, Arc::downgrade(shared));
                return v;
            }
        }
    }

    fn unregister(&self, vci: u64) {
        lock(&self.demux).remove(&vci);
    }

    /// Sort what is on the link into the channels' queues. Returns how many
    /// messages were handled.
    fn pump(&self) -> usize {
        if self.dead.load(Ordering::Relaxed) {
            return 0;
        }
        let mut others = false;
        let mut sorter = Sorter { link: self, last: None };
        let got = self.link.try_recv_many(256, &mut |len, copy| {
            others |= sorter.deliver(len, copy);
            Ok(true)
        });
        drop(sorter);
        match got {
            Ok(n) => {
                if others {
                    self.link.doorbell().ring();
                }
                n
            }
            Err(e) if e.kind == ErrorKind::ChannelClosed => {
                self.die();
                0
            }
            Err(_) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                0
            }
        }
    }

    /// The monitor is gone: every channel on the link is closed.
    fn die(&self) {
        if self.dead.swap(true, Ordering::Relaxed) {
            return;
        }
        for w in lock(&self.demux).values() {
            if let Some(ch) = w.upgrade() {
                lock(&ch.state).peer_closed = true;
            }
        }
        self.link.doorbell().ring();
    }

    fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Relaxed)
    }
}

/// Sorts one pump's messages into their channels: the channel of the last
/// message is kept, so a run of messages for one channel looks it up once.
struct Sorter<'a> {
    link: &'a DispatcherLink,
    last: Option<(u64, Arc<MhShared>)>,
}

impl Sorter<'_> {
    /// Hand one link message (`len` bytes, `copy` fills a buffer with it) to
    /// its channel. Returns true when it went to a channel (whose waiter may
    /// be another thread: the caller rings this process's doorbell once).
    fn deliver(&mut self, len: usize, copy: &mut dyn FnMut(&mut [u8])) -> bool {
        if len < HEADER_BYTES {
            let mut junk = vec![0u8; len];
            copy(&mut junk);
            self.link.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let mut buf = vec![0u8; len];
        copy(&mut buf);
        let Ok(h) = Header::decode(&buf) else {
            self.link.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        let ch = match &self.last {
            Some((v, ch)) if *v == h.vci => ch.clone(),
            _ => match lock(&self.link.demux).get(&h.vci).and_then(|w| w.upgrade()) {
                Some(ch) => {
                    self.last = Some((h.vci, ch.clone()));
                    ch
                }
                None => {
                    self.link.dropped.fetch_add(1, Ordering::Relaxed);
                    return false;
                }
            },
        };
        let mut st = lock(&ch.state);
        st.credits.on_ack(h.ack);
        match h.kind {
            Kind::Data => {
                buf.drain(..HEADER_BYTES);
                st.queue.push_back(buf);
            }
            Kind::Dummy => {}
            Kind::Teardown => st.peer_closed = true,
        }
        true
    }
}

/// One end of a multi-hop channel.
pub struct MhChannel {
    link: Arc<DispatcherLink>,
    shared: Arc<MhShared>,
    info: ChannelInfo,
    vci_in: u64,
    vci_out: u64,
    dir: u8,
    hops: u32,
    closed_here: AtomicBool,
    parks: AtomicU64,
    on_close: Mutex<Option<CloseHook>>,
}

/// A multi-hop channel end before its bind completes: it already receives.
pub struct PendingMh {
    link: Arc<DispatcherLink>,
    shared: Arc<MhShared>,
    pub vci_in: u64,
    window: u32,
}

impl PendingMh {
    /// Register a new channel end on `link` with `window` credits.
    pub fn new(link: &Arc<DispatcherLink>, window: u32) -> PendingMh {
        let shared = Arc::new(MhShared {
            state: Mutex::new(MhState {
                queue: VecDeque::new(),
                credits: Credits::new(window),
                peer_closed: false,
                received: 0,
                bytes_received: 0,
                sent: 0,
                bytes_sent: 0,
                busy: 0,
            }),
        });
        let vci_in = link.register(&shared);
        PendingMh { link: link.clone(), shared, vci_in, window }
    }

    /// The bind completed: messages go out with `vci_out` in direction `dir`.
    pub fn complete(self, mut info: ChannelInfo, vci_out: u64, dir: u8, hops: u32) -> MhChannel {
        info.max_message = self.link.max_payload();
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: fields moved out exactly once; `me` is never dropped.
        let (link, shared) = unsafe { (std::ptr::read(&me.link), std::ptr::read(&me.shared)) };
        MhChannel {
            link,
            shared,
            info,
            vci_in: me.vci_in,
            vci_out,
            dir,
            hops,
            closed_here: AtomicBool::new(false),
            parks: AtomicU64::new(0),
            on_close: Mutex::new(None),
        }
    }

    pub fn window(&self) -> u32 {
        self.window
    }
}

impl Drop for PendingMh {
    fn drop(&mut self) {
        self.link.unregister(self.vci_in);
    }
}

/// Counters of a multi-hop end.
#[derive(Clone, Debug, Default)]
pub struct MhStats {
    pub sent: u64,
    pub received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub busy_count: u64,
    pub acks_sent: u64,
    pub dummies_sent: u64,
    pub in_flight: u32,
    pub window: u32,
    pub queued: usize,
    pub parks: u64,
}

impl MhChannel {
    pub fn info(&self) -> &ChannelInfo {
        &self.info
    }

    pub fn hops(&self) -> u32 {
        self.hops
    }

    /// (VCI we receive on, VCI we send with) on the link to our monitor.
    pub fn vcis(&self) -> (u64, u64) {
        (self.vci_in, self.vci_out)
    }

    pub fn max_message(&self) -> usize {
        self.info.max_message
    }

    pub fn is_closed(&self) -> bool {
        self.closed_here.load(Ordering::Relaxed)
    }

    pub fn set_on_close(&self, f: CloseHook) {
        *lock(&self.on_close) = Some(f);
    }

    fn closed_error(&self) -> Error {
        if self.is_closed() {
            Error::closed(format!("multi-hop channel {:#x} to {:?} was closed by this end", self.info.id, self.info.service))
        } else if self.link.is_dead() {
            Error::closed(format!("multi-hop channel {:#x} to {:?}: this core's monitor is gone", self.info.id, self.info.service))
        } else {
            Error::closed(format!(
                "multi-hop channel {:#x} to {:?}: the peer closed it, died, or a monitor on the path died",
                self.info.id, self.info.service
            ))
        }
    }

    fn header(&self, kind: Kind, ack: u32) -> [u8; HEADER_BYTES] {
        Header { vci: self.vci_out, dir: self.dir, kind, ack }.encode()
    }

    /// Send one message if the window and the link have room now.
    pub fn try_send(&self, parts: &[&[u8]]) -> Result<()> {
        let r = self.try_send_quiet(parts);
        if r.is_ok() {
            self.link.ring().ring_peer();
        }
        r
    }

    /// `try_send` without waking the monitor (the caller rings once after a batch).
    fn try_send_quiet(&self, parts: &[&[u8]]) -> Result<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.info.max_message {
            return Err(Error::new(
                ErrorKind::MessageTooLarge,
                format!("message of {len} bytes exceeds the channel maximum of {} bytes", self.info.max_message),
            ));
        }
        if self.is_closed() {
            return Err(self.closed_error());
        }
        let mut st = lock(&self.shared.state);
        if st.peer_closed {
            return Err(self.closed_error());
        }
        if !st.credits.can_send() {
            drop(st);
            self.link.pump(); // acks may be waiting on the link
            st = lock(&self.shared.state);
            if st.peer_closed {
                return Err(self.closed_error());
            }
            if !st.credits.can_send() {
                st.busy += 1;
                return Err(Error::new(ErrorKind::TxBusy, format!("credit window of {} messages is full", st.credits.window())));
            }
        }
        let ack = st.credits.on_send();
        let hdr = self.header(Kind::Data, ack);
        let sent = if len <= SMALL_SEND {
            // Header and payload in one buffer: the ring's one-part fast path.
            let mut small = [0u8; HEADER_BYTES + SMALL_SEND];
            small[..HEADER_BYTES].copy_from_slice(&hdr);
            let mut at = HEADER_BYTES;
            for p in parts {
                small[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
            self.link.ring().try_send_quiet(&[&small[..at]])
        } else {
            let mut all: Vec<&[u8]> = Vec::with_capacity(parts.len() + 1);
            all.push(&hdr);
            all.extend_from_slice(parts);
            self.link.ring().try_send_quiet(&all)
        };
        match sent {
            Ok(()) => {
                st.sent += 1;
                st.bytes_sent += len as u64;
                Ok(())
            }
            Err(e) => {
                st.credits.undo_send(ack);
                if e.kind == ErrorKind::TxBusy {
                    st.busy += 1;
                    Err(Error::new(ErrorKind::TxBusy, "link to the monitor is full"))
                } else {
                    drop(st);
                    self.link.die();
                    Err(self.closed_error())
                }
            }
        }
    }

    /// Send as many of `msgs` as fit now; returns how many.
    pub fn try_send_many(&self, msgs: &mut dyn Iterator<Item = &[u8]>) -> Result<usize> {
        let mut n = 0;
        let mut result = Ok(());
        for m in msgs {
            match self.try_send_quiet(&[m]) {
                Ok(()) => n += 1,
                Err(e) if e.kind == ErrorKind::TxBusy => break,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if n > 0 {
            self.link.ring().ring_peer(); // one wake-up for the whole batch
            return Ok(n);
        }
        result.map(|()| 0)
    }

    /// Take the queued message at the front (the caller has used it),
    /// acknowledging as flow control requires.
    fn take_front(&self, st: &mut MhState) {
        let Some(m) = st.queue.pop_front() else { return };
        st.received += 1;
        st.bytes_received += m.len() as u64;
        if st.credits.on_consume() {
            self.send_dummy(st);
        }
    }

    /// Send a dummy ack now. If the link is full it stays due, and is tried
    /// again on this end's next consume, receive attempt, wait or poll.
    fn send_dummy(&self, st: &mut MhState) {
        let ack = st.credits.on_dummy();
        let hdr = self.header(Kind::Dummy, ack);
        if self.link.ring().try_send(&[&hdr]).is_err() {
            st.credits.undo_dummy(ack);
        }
    }

    /// Retry a dummy ack that is due but did not fit on the link before.
    fn retry_due_ack(&self) {
        let mut st = lock(&self.shared.state);
        if st.credits.ack_due() {
            self.send_dummy(&mut st);
        }
    }

    /// Receive one message if one is there (see `UmpChannel::try_recv_with`).
    pub fn try_recv_with<T>(&self, make: impl FnOnce(usize, &mut dyn FnMut(&mut [u8])) -> Result<T>) -> Result<Option<T>> {
        if self.is_closed() {
            return Err(self.closed_error());
        }
        let mut st = lock(&self.shared.state);
        if st.queue.is_empty() {
            if st.credits.ack_due() {
                self.send_dummy(&mut st); // one that did not fit before
            }
            drop(st);
            self.link.pump();
            st = lock(&self.shared.state);
        }
        // Build the result from the queued message first and take it off
        // the queue only once that succeeded (the C ABI's "too large for
        // your buffer" keeps the message).
        let Some(m) = st.queue.front() else {
            return if st.peer_closed { Err(self.closed_error()) } else { Ok(None) };
        };
        let made = make(m.len(), &mut |dst: &mut [u8]| dst.copy_from_slice(m))?;
        self.take_front(&mut st);
        Ok(Some(made))
    }

    /// Receive up to `max` queued messages (see `UmpChannel::try_recv_many`).
    pub fn try_recv_many(
        &self,
        max: usize,
        each: &mut dyn FnMut(usize, &mut dyn FnMut(&mut [u8])) -> Result<bool>,
    ) -> Result<usize> {
        if self.is_closed() {
            return Err(self.closed_error());
        }
        self.link.pump();
        let mut st = lock(&self.shared.state);
        let mut n = 0;
        while n < max {
            let Some(m) = st.queue.front() else { break };
            if !each(m.len(), &mut |dst: &mut [u8]| dst.copy_from_slice(m))? {
                break;
            }
            self.take_front(&mut st);
            n += 1;
        }
        if n == 0 && st.peer_closed {
            return Err(self.closed_error());
        }
        Ok(n)
    }

    fn ready(&self, want: Want) -> bool {
        if self.is_closed() || self.link.is_dead() {
            return true;
        }
        {
            let st = lock(&self.shared.state);
            if st.peer_closed {
                return true;
            }
            match want {
                Want::Readable if !st.queue.is_empty() => return true,
                Want::Writable(_) if st.credits.can_send() => {
                    drop(st);
                    return self.link.ring().readable() || self.writable_link(want);
                }
                _ => {}
            }
        }
        if self.link.ring().readable() {
            self.link.pump();
            let st = lock(&self.shared.state);
            return match want {
                Want::Readable => !st.queue.is_empty() || st.peer_closed,
                Want::Writable(_) => st.credits.can_send() || st.peer_closed,
            };
        }
        false
    }

    fn writable_link(&self, want: Want) -> bool {
        match want {
            Want::Writable(len) => self.link.ring().want_room(len + HEADER_BYTES),
            Want::Readable => false,
        }
    }

    /// Wait until `want` may succeed, the channel closes, or `deadline`
    /// passes, for at most one park slice.
    pub fn wait(&self, want: Want, deadline: Option<Instant>) -> Waited {
        self.retry_due_ack();
        let bell = self.link.ring().doorbell().clone();
        wait_until(&bell, &self.parks, relay_spin_budget(), deadline, &mut || self.ready(want), &mut || {
            self.link.pump();
            self.link.is_dead()
        })
    }

    /// Whether a message is there or the channel is closed (for pollers).
    pub fn readable(&self) -> bool {
        self.retry_due_ack();
        self.ready(Want::Readable)
    }

    /// Close this end: a TEARDOWN follows the data already sent, in band.
    /// If the link to the monitor is full, the close hook asks the monitor
    /// (over the control socket) to send it once it has drained the link,
    /// which keeps it behind the data and never blocks here. Idempotent.
    pub fn close(&self) {
        if self.closed_here.swap(true, Ordering::Relaxed) {
            return;
        }
        let hdr = self.header(Kind::Teardown, 0);
        let in_band = self.link.is_dead() || self.link.ring().try_send(&[&hdr]).is_ok();
        self.link.unregister(self.vci_in);
        if let Some(f) = lock(&self.on_close).take() {
            f(self.info.id, (!in_band).then_some(self.vci_out));
        }
    }

    pub fn stats(&self) -> MhStats {
        let st = lock(&self.shared.state);
        MhStats {
            sent: st.sent,
            received: st.received,
            bytes_sent: st.bytes_sent,
            bytes_received: st.bytes_received,
            busy_count: st.busy,
            acks_sent: st.credits.acks_sent,
            dummies_sent: st.credits.dummies_sent,
            in_flight: st.credits.in_flight(),
            window: st.credits.window(),
            queued: st.queue.len(),
            parks: self.parks.load(Ordering::Relaxed),
        }
    }

    pub fn note_busy(&self) {
        lock(&self.shared.state).busy += 1;
    }
}

impl Drop for MhChannel {
    fn drop(&mut self) {
        self.close();
    }
}
