//! Multi-hop channel endpoints (TN-006 2.5, 2.10), virtual circuits on the
//! dispatcher's link to its monitor (`link.rs`).
//!
//! Flow control is the credit window of `flow.rs`.  Closing sends a
//! TEARDOWN behind the data, which removes the forwarding entries hop by hop
//! and closes the other end once it has read what came before.
//!
//! An end holds what it needs to live: its link, and a keep-alive handle on
//! its dispatcher's connection to the monitor (dropping the last other
//! handle on the dispatcher must not tear the link down under it).
//!
//! An end is *over* once it was closed here, the peer closed it or died, or
//! the monitor went away; the moment it learns so, it tells its monitor
//! (the close hook), which releases the channel's records then, not when
//! the end is dropped.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use multihop_base::defaults::DROP_HELD_WAIT;
use multihop_base::error::{Error, ErrorKind, Progress, Result};
use multihop_base::handles::marker::{decode, MARK_BYTES};
use multihop_base::park::{relay_spin_budget, wait_until, Waited};
use multihop_base::ringpair::{ChannelInfo, CloseHook, Want};
use multihop_base::sync::lock;
use multihop_base::wire::{
    encode_batch, Header, Kind, BATCH_ENTRY_BYTES, BATCH_PREFIX_BYTES, FLAG_ACK_NOW, FLAG_BATCH, FLAG_HANDLES, HEADER_BYTES, MAX_BATCH_MESSAGES,
};

use super::link::{DispatcherLink, MhShared, MhState};
use crate::handles::end::CapEnd;

/// Payloads up to this size are sent from one contiguous stack buffer
/// (header and payload together): the ring's fast one-part path.
const SMALL_SEND: usize = 512;

/// The link to the monitor broke (the caller tears the link down once it
/// no longer holds this end's state lock).
struct LinkGone;

/// Why a frame was not written.
enum WriteError {
    /// The link to the monitor has no room now.
    Busy,
    /// The link is gone.
    Gone,
}

/// Something an end keeps alive for as long as it lives.
pub(crate) type KeepAlive = Arc<dyn Any + Send + Sync>;

/// One end of a multi-hop channel.
pub struct MhChannel {
    link: Arc<DispatcherLink>,
    shared: Arc<MhShared>,
    info: ChannelInfo,
    vci_in: u64,
    vci_out: u64,
    dir: u8,
    hops: u32,
    /// Set once by `close` (Relaxed: a latch; the TEARDOWN it sends is
    /// ordered by the link ring's own release/acquire).
    closed_here: AtomicBool,
    /// Set once the close hook has run (by `close` or on learning the end
    /// is over).
    released: AtomicBool,
    parks: AtomicU64,
    on_close: Mutex<Option<CloseHook>>,
    _keep: Option<KeepAlive>,
    /// Handles: this end's inbox and route.
    caps: std::sync::OnceLock<Arc<CapEnd>>,
}

/// A multi-hop channel end before its bind completes: it already receives.
pub(crate) struct PendingMh {
    link: Arc<DispatcherLink>,
    shared: Arc<MhShared>,
    pub vci_in: u64,
}

impl PendingMh {
    /// Register a new channel end on `link` with `window` credits.
    pub(crate) fn new(link: &Arc<DispatcherLink>, window: u32) -> Result<PendingMh> {
        let shared = Arc::new(MhShared::new(window));
        let vci_in = link.register(&shared)?;
        Ok(PendingMh { link: link.clone(), shared, vci_in })
    }

    /// The bind completed: messages go out with `vci_out` in direction `dir`.
    pub(crate) fn complete(self, mut info: ChannelInfo, vci_out: u64, dir: u8, hops: u32, keep: Option<KeepAlive>) -> MhChannel {
        info.max_message = self.link.max_payload();
        let _ = self.shared.out.set((vci_out, dir));
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
            released: AtomicBool::new(false),
            parks: AtomicU64::new(0),
            on_close: Mutex::new(None),
            _keep: keep,
            caps: std::sync::OnceLock::new(),
        }
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
    pub held: u32,
    pub held_lost: u64,
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

    /// Whether `close` was called on this end.
    pub fn closed_here(&self) -> bool {
        self.closed_here.load(Ordering::Relaxed)
    }

    /// Whether this end is over: closed here, or (looking at the link now)
    /// the peer closed it, died, or the monitor went away. Messages that
    /// arrived before can still be read.
    pub fn is_closed(&self) -> bool {
        if self.closed_here() {
            return true;
        }
        self.link.pump();
        let over = self.link.is_dead() || lock(&self.shared.state).peer_closed;
        if over {
            self.release();
        }
        over
    }

    pub fn set_on_close(&self, f: CloseHook) {
        *lock(&self.on_close) = Some(f);
    }

    /// Run the close hook once (the monitor forgets the channel).
    fn release(&self) {
        if !self.released.swap(true, Ordering::Relaxed) {
            if let Some(f) = lock(&self.on_close).take() {
                f(self.info.id, None);
            }
        }
    }

    /// Why this end is over, if it is: "this end" (closed here), "monitor
    /// gone" (this core's monitor died) or "teardown" (the circuit was torn
    /// down: the peer closed it, died, or a monitor on the path died; a
    /// TEARDOWN does not say which).
    pub fn close_cause(&self) -> Option<&'static str> {
        if self.closed_here() {
            return Some("this end");
        }
        if self.link.is_dead() {
            return Some("monitor gone");
        }
        lock(&self.shared.state).peer_closed.then_some("teardown")
    }

    fn closed_error(&self) -> Error {
        if self.closed_here() {
            return Error::closed(format!("multi-hop channel {:#x} to {:?} was closed by this end", self.info.id, self.info.service));
        }
        self.release(); // we know it is over: say so to the monitor now
        if self.link.is_dead() {
            Error::closed(format!("multi-hop channel {:#x} to {:?}: this core's monitor is gone", self.info.id, self.info.service))
        } else if let Some(why) = lock(&self.shared.state).close_reason.clone() {
            Error::closed(format!("multi-hop channel {:#x} to {:?} closed by its other end: {why}", self.info.id, self.info.service))
        } else {
            Error::closed(format!(
                "multi-hop channel {:#x} to {:?}: the peer closed it, died, or a monitor on the path died",
                self.info.id, self.info.service
            ))
        }
    }

    fn header(&self, kind: Kind, ack: u32) -> [u8; HEADER_BYTES] {
        Header { vci: self.vci_out, dir: self.dir, kind, flags: 0, ack }.encode()
    }

    /// Give this end its part in carrying handles (set once, by its dispatcher).
    pub fn set_caps(&self, c: Arc<CapEnd>) {
        let _ = self.caps.set(c);
    }

    /// This end's part in carrying handles, if it has one.
    pub fn caps(&self) -> Option<&Arc<CapEnd>> {
        self.caps.get()
    }

    /// Send `data` as the message of handle group `mark` (a `handles::marker`
    /// prefix, flag HANDLES) if the window and the link have room now.
    pub fn try_send_marked(&self, mark: &[u8], data: &[u8]) -> Result<()> {
        let r = self.try_send_flags(&[mark, data], FLAG_HANDLES, mark.len());
        if r.is_ok() {
            self.link.ring_monitor();
        }
        r
    }

    /// Send one message if the window and the link have room now.
    pub fn try_send(&self, parts: &[&[u8]]) -> Result<()> {
        let r = self.try_send_quiet(parts);
        if r.is_ok() {
            self.link.ring_monitor();
        }
        r
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

    /// `try_send` without waking the monitor (the caller rings once after a batch).
    fn try_send_quiet(&self, parts: &[&[u8]]) -> Result<()> {
        self.try_send_flags(parts, 0, 0)
    }

    /// One DATA message with header `flags`, made of `parts` of which the
    /// first `extra` bytes are not the caller's (not counted against its maximum).
    fn try_send_flags(&self, parts: &[&[u8]], flags: u16, extra: usize) -> Result<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.check_len(len - extra)?;
        self.try_send_frame(parts, flags, 1, (len - extra) as u64)
    }

    /// One DATA frame of `parts` carrying `messages` messages of `bytes`
    /// bytes (the caller has checked its size), if a credit and the link
    /// have room now.
    fn try_send_frame(&self, parts: &[&[u8]], flags: u16, messages: u32, bytes: u64) -> Result<()> {
        if self.closed_here() {
            return Err(self.closed_error());
        }
        let mut st = lock(&self.shared.state);
        if st.peer_closed {
            drop(st);
            return Err(self.closed_error());
        }
        if !st.held.is_empty() || !st.credits.can_send() {
            drop(st);
            self.link.pump(); // acks may be waiting on the link (and send what is held)
            st = lock(&self.shared.state);
            if st.peer_closed {
                drop(st);
                return Err(self.closed_error());
            }
            match self.send_held(&mut st) {
                Ok(true) => {}
                Ok(false) => {
                    st.busy += 1;
                    return Err(Error::new(ErrorKind::TxBusy, "messages held for the next credit go first"));
                }
                Err(LinkGone) => {
                    drop(st);
                    return Err(self.gone());
                }
            }
            if !st.credits.can_send() {
                st.busy += 1;
                return Err(Error::new(ErrorKind::TxBusy, format!("credit window of {} messages is full", st.credits.window())));
            }
        }
        match self.write_frame(&mut st, parts, flags, messages, bytes) {
            Err(WriteError::Busy) => Err(Error::new(ErrorKind::TxBusy, "link to the monitor is full")),
            Err(WriteError::Gone) => {
                drop(st);
                Err(self.gone())
            }
            Ok(()) => Ok(()),
        }
    }

    /// Write the held frame if a credit and the link have room (waking the
    /// monitor if it went). True when nothing is held any more; Err(LinkGone)
    /// if the link is gone (the caller drops the state lock, then `gone`).
    fn send_held(&self, st: &mut MhState) -> std::result::Result<bool, LinkGone> {
        if st.held.is_empty() {
            return Ok(true);
        }
        let w = self.shared.write_held(st, self.link.ring(), false).map_err(|_| LinkGone)?;
        if w.sent {
            self.link.ring_monitor(); // some frames went, maybe all
        }
        Ok(w.empty)
    }

    /// The link to the monitor broke under a write: every channel on it is
    /// over (call without this end's state lock: `die` takes every end's).
    fn gone(&self) -> Error {
        self.link.die();
        self.closed_error()
    }

    /// Send one plain message, or, when no credit is free now, hold it for
    /// the next credit (`held.rs`) if the held frame has room. TxBusy when it
    /// has none, or when only link room is missing (the monitor is behind):
    /// then the caller waits, as a blocking send does. Messages keep their
    /// order either way.
    pub fn send_or_hold(&self, parts: &[&[u8]]) -> Result<()> {
        if !super::held::enabled() {
            return self.try_send(parts);
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.check_len(len)?;
        if self.closed_here() {
            return Err(self.closed_error());
        }
        let mut st = lock(&self.shared.state);
        for look in 0..2 {
            if st.peer_closed {
                drop(st);
                return Err(self.closed_error());
            }
            let sendable = match self.send_held(&mut st) {
                Ok(nothing_held) => nothing_held && st.credits.can_send(),
                Err(LinkGone) => {
                    drop(st);
                    return Err(self.gone());
                }
            };
            if sendable {
                match self.write_frame(&mut st, parts, 0, 1, len as u64) {
                    Ok(()) => {
                        drop(st);
                        self.link.ring_monitor();
                        return Ok(());
                    }
                    // The link is full (the monitor is behind): wait for room as before, rather
                    // than hold a message that nothing but room is missing for.
                    Err(WriteError::Busy) => return Err(Error::new(ErrorKind::TxBusy, "link to the monitor is full")),
                    Err(WriteError::Gone) => {
                        drop(st);
                        return Err(self.gone());
                    }
                }
            }
            if look == 0 {
                // No credit (or something held): the acks may be on the link already.
                drop(st);
                self.link.pump();
                st = lock(&self.shared.state);
            }
        }
        if !st.held.fits(len, self.info.max_message) {
            st.busy += 1;
            return Err(Error::new(ErrorKind::TxBusy, format!("credit window of {} messages is full", st.credits.window())));
        }
        let first = st.held.is_empty();
        st.held.push(parts, self.info.max_message);
        st.sent += 1;
        st.bytes_sent += len as u64;
        drop(st);
        if first {
            self.link.note_held(&self.shared);
        }
        Ok(())
    }

    /// Write one frame now (a credit is free: the caller checked), or
    /// TxBusy if the link has no room.
    fn write_frame(&self, st: &mut MhState, parts: &[&[u8]], flags: u16, messages: u32, bytes: u64) -> std::result::Result<(), WriteError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let ack = st.credits.on_send();
        let mut hdr = self.header(Kind::Data, ack);
        if flags != 0 {
            hdr[10..12].copy_from_slice(&flags.to_le_bytes());
        }
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
                st.sent += u64::from(messages);
                st.bytes_sent += bytes;
                st.on_frame_sent(messages);
                Ok(())
            }
            Err(e) => {
                st.credits.undo_send(ack);
                if e.kind == ErrorKind::TxBusy {
                    st.busy += 1;
                    Err(WriteError::Busy)
                } else {
                    Err(WriteError::Gone)
                }
            }
        }
    }

    /// Send as many of `msgs` as fit now; returns how many (messages taken
    /// from `msgs` beyond that count were not sent). The caller has checked
    /// their sizes (`check_len`). Consecutive messages go packed in BATCH
    /// frames (`wire.rs`) of up to `MAX_BATCH_MESSAGES` and the channel's
    /// maximum message size, each taking one credit; a batch that finds no
    /// room on the link falls back to its first message alone. One wake-up
    /// of the monitor for the whole call.
    pub fn try_send_many(&self, msgs: &mut dyn Iterator<Item = &[u8]>) -> Result<usize> {
        let max = self.info.max_message;
        let mut msgs = msgs.peekable();
        let mut n = 0;
        let mut result = Ok(());
        let mut group: Vec<&[u8]> = Vec::new();
        let mut packed = Vec::new();
        while let Some(first) = msgs.next() {
            group.clear();
            group.push(first);
            let mut size = BATCH_PREFIX_BYTES + BATCH_ENTRY_BYTES + first.len();
            while group.len() < MAX_BATCH_MESSAGES {
                match msgs.peek() {
                    Some(m) if size + BATCH_ENTRY_BYTES + m.len() <= max => {
                        size += BATCH_ENTRY_BYTES + m.len();
                        group.push(m);
                        msgs.next();
                    }
                    _ => break,
                }
            }
            let mut sent = 0;
            let mut r = Ok(());
            if group.len() > 1 {
                packed.clear();
                encode_batch(&group, &mut packed);
                let bytes = group.iter().map(|m| m.len() as u64).sum();
                r = self.try_send_frame(&[&packed], FLAG_BATCH, group.len() as u32, bytes);
                if r.is_ok() {
                    sent = group.len();
                }
            }
            if sent == 0 && matches!(&r, Ok(()) | Err(Error { kind: ErrorKind::TxBusy, .. })) {
                r = self.try_send_quiet(&[first]);
                if r.is_ok() {
                    sent = 1;
                }
            }
            n += sent;
            match r {
                Ok(()) if sent == group.len() => {}
                Ok(()) => break, // the rest of the group did not fit
                Err(e) if e.kind == ErrorKind::TxBusy => break,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if n > 0 {
            self.link.ring_monitor(); // one wake-up for the whole batch
            return Ok(n);
        }
        result.map(|()| 0)
    }

    /// Take the queued message at the front (the caller has used it),
    /// acknowledging as flow control requires.
    fn take_front(&self, st: &mut MhState) {
        if st.marks.front() == Some(&st.received) {
            st.marks.pop_front();
        }
        let Some(m) = st.queue.pop_front() else { return };
        let n = st.received;
        st.received += 1;
        st.bytes_received += m.len() as u64;
        if st.takes_credit(n) && st.credits.on_consume() {
            self.shared.send_dummy(st, self.link.ring(), 0);
        }
    }

    /// Retry a dummy ack that is due but did not fit on the link before.
    fn retry_due_ack(&self) {
        let mut st = lock(&self.shared.state);
        if st.credits.ack_due() {
            self.shared.send_dummy(&mut st, self.link.ring(), 0);
        }
    }

    /// Receive one message if one is there (see `RingPair::try_recv_with`).
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

    fn try_recv_into<T>(
        &self,
        make: impl FnOnce(usize, &mut dyn FnMut(&mut [u8])) -> Result<T>,
        handles: Option<&mut Vec<std::os::fd::OwnedFd>>,
    ) -> Result<Option<T>> {
        if self.closed_here() {
            return Err(self.closed_error());
        }
        let mut st = lock(&self.shared.state);
        if st.queue.is_empty() {
            if st.credits.ack_due() {
                self.shared.send_dummy(&mut st, self.link.ring(), 0); // one that did not fit before
            }
            drop(st);
            self.link.pump();
            st = lock(&self.shared.state);
        }
        if st.marks.front() == Some(&st.received) && !st.queue.is_empty() {
            return self.take_marked(&mut st, make, handles).map(Some);
        }
        // Build the result from the queued message first and take it off
        // the queue only once that succeeded (the C ABI's "too large for
        // your buffer" keeps the message).
        let Some(m) = st.queue.front() else {
            let closed = st.peer_closed;
            drop(st);
            return if closed { Err(self.closed_error()) } else { Ok(None) };
        };
        let made = make(m.len(), &mut |dst: &mut [u8]| dst.copy_from_slice(m))?;
        self.take_front(&mut st);
        Ok(Some(made))
    }

    /// Take the front message, which carries handles: its payload (prefix
    /// stripped) goes to `make`, its group to `handles` (or is closed when
    /// the caller takes none). A marker without its group is a protocol
    /// error (the message is consumed, so the next one can be read).
    #[cold]
    fn take_marked<T>(
        &self,
        st: &mut MhState,
        make: impl FnOnce(usize, &mut dyn FnMut(&mut [u8])) -> Result<T>,
        handles: Option<&mut Vec<std::os::fd::OwnedFd>>,
    ) -> Result<T> {
        let m = st.queue.front().expect("a queued message");
        let group = decode(m).and_then(|(seq, _)| match self.caps.get() {
            Some(c) if c.inbox().has(seq) => Ok((seq, c.inbox().clone())),
            _ => Err(Error::protocol(format!("a message of group {seq} arrived without its handles"))),
        });
        match group {
            Ok((seq, inbox)) => {
                let made = make(m.len() - MARK_BYTES, &mut |dst: &mut [u8]| dst.copy_from_slice(&m[MARK_BYTES..]))?;
                match handles {
                    Some(out) => *out = inbox.take(seq).unwrap_or_default(),
                    None => inbox.discard(seq),
                }
                self.take_front(st);
                Ok(made)
            }
            Err(e) => {
                self.take_front(st);
                Err(e)
            }
        }
    }

    /// Receive up to `max` queued messages (see `RingPair::try_recv_many`).
    pub fn try_recv_many(&self, max: usize, each: &mut dyn FnMut(usize, &mut dyn FnMut(&mut [u8])) -> Result<bool>) -> Result<usize> {
        if self.closed_here() {
            return Err(self.closed_error());
        }
        self.link.pump();
        let mut st = lock(&self.shared.state);
        let mut n = 0;
        while n < max {
            if st.marks.front() == Some(&st.received) && !st.queue.is_empty() {
                // Carries handles: the caller takes none, so they are closed
                // (unless it leaves the message queued).
                let mut go = true;
                let r = self.take_marked(
                    &mut st,
                    |len, copy| {
                        go = each(len, copy)?;
                        if go {
                            Ok(())
                        } else {
                            Err(Error::new(ErrorKind::Interrupted, "left queued"))
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
            let Some(m) = st.queue.front() else { break };
            if !each(m.len(), &mut |dst: &mut [u8]| dst.copy_from_slice(m))? {
                break;
            }
            self.take_front(&mut st);
            n += 1;
        }
        if n == 0 && st.peer_closed && st.queue.is_empty() {
            drop(st);
            return Err(self.closed_error());
        }
        Ok(n)
    }

    fn ready(&self, want: Want) -> bool {
        if self.closed_here() || self.link.is_dead() {
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
                Want::Flushed if st.credits.in_flight() == 0 && st.held.is_empty() => return true,
                _ => {}
            }
        }
        if self.link.ring().readable() {
            self.link.pump();
            let st = lock(&self.shared.state);
            return match want {
                Want::Readable => !st.queue.is_empty() || st.peer_closed,
                Want::Writable(_) => st.credits.can_send() || st.peer_closed,
                Want::Flushed => (st.credits.in_flight() == 0 && st.held.is_empty()) || st.peer_closed,
            };
        }
        false
    }

    /// Whether a message of `len` bytes could go now (credit and link room).
    pub fn can_send_now(&self, len: usize) -> bool {
        let free = |me: &Self| {
            let mut st = lock(&me.shared.state);
            matches!(me.send_held(&mut st), Ok(true)) && st.credits.can_send()
        };
        if !free(self) {
            self.link.pump();
            if !free(self) {
                return false;
            }
        }
        self.link.ring().want_room(len + HEADER_BYTES)
    }

    fn writable_link(&self, want: Want) -> bool {
        match want {
            Want::Writable(len) => self.link.ring().want_room(len + HEADER_BYTES),
            Want::Readable | Want::Flushed => false,
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
        self.is_ready(Want::Readable)
    }

    /// Whether `want` may succeed now or the channel is over (one look, no
    /// waiting; for event loops that wait on the doorbell themselves).
    pub fn is_ready(&self, want: Want) -> bool {
        self.retry_due_ack();
        self.ready(want)
    }

    /// Messages sent and not yet acknowledged as consumed by the peer.
    pub fn unconsumed(&self) -> usize {
        self.link.pump();
        lock(&self.shared.state).unconsumed_messages()
    }

    /// One look for `flush`: true once every message sent so far has been
    /// consumed by the peer (its credits came back). The first look asks
    /// the peer to ack at once (`asked` remembers it). ChannelClosed (with
    /// the unconsumed count) if the channel ended first.
    pub fn flush_poll(&self, asked: &mut bool) -> Result<bool> {
        if self.closed_here() {
            let n = lock(&self.shared.state).unconsumed_messages();
            return Err(self.closed_error().with_progress(Progress::Unconsumed(n)));
        }
        self.link.pump();
        let mut st = lock(&self.shared.state);
        let n = st.unconsumed_messages();
        if n == 0 {
            return Ok(true);
        }
        if st.peer_closed || self.link.is_dead() {
            drop(st);
            return Err(self.closed_error().with_progress(Progress::Unconsumed(n)));
        }
        if !st.held.is_empty() {
            // The held frame leaves with the next credit and asks for its own
            // ack at once (ACK_NOW), so the flush does not wait for window / 2.
            st.held_ack_now = true;
            if let Err(LinkGone) = self.send_held(&mut st) {
                drop(st);
                return Err(self.gone().with_progress(Progress::Unconsumed(n)));
            }
        }
        if !*asked {
            *asked = self.shared.send_dummy(&mut st, self.link.ring(), FLAG_ACK_NOW);
        }
        Ok(false)
    }

    /// Close this end as `close_within` does, trying for `DROP_HELD_WAIT` to
    /// hand what it holds to the monitor; one that could not says so on
    /// stderr (what `Drop` and other callers that cannot be told use).
    pub fn close(&self) {
        if let Err(e) = self.close_within(Some(DROP_HELD_WAIT), &mut || Ok(())) {
            super::held::warn_lost(&e.message);
        }
    }

    /// Close this end: what it holds for the next credit goes first
    /// (`send_held_closing`), then a TEARDOWN follows the data, in band.
    /// If the link to the monitor is full, the close hook asks the monitor
    /// (over the control socket) to send the TEARDOWN once it has drained
    /// the link, which keeps it behind the data and never blocks here. No
    /// TEARDOWN when the channel is already over (the path is gone).
    ///
    /// Err(HeldLost) when held messages did not leave because the monitor
    /// took nothing from the link for `wait` (None: no limit), with their
    /// count; an error of `interrupt` (run between waits) ends the wait the
    /// same way and is returned. Either way the end is closed. A channel
    /// already over loses what it held with it (counted in `held_lost`, no
    /// error: its next call said ChannelClosed, as for messages in flight).
    /// Idempotent: Ok once closed.
    pub fn close_within(&self, wait: Option<std::time::Duration>, interrupt: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        self.close_saying(wait, interrupt, "")
    }

    /// Close this end telling the other one why (`reason`, UTF-8, at most `MAX_CLOSE_REASON` bytes kept): its next
    /// call after the messages before the TEARDOWN raises ChannelClosed naming it. What this end holds goes first,
    /// as in [`Self::close`].
    pub fn close_with_reason(&self, reason: &str) {
        if let Err(e) = self.close_saying(Some(DROP_HELD_WAIT), &mut || Ok(()), reason) {
            super::held::warn_lost(&e.message);
        }
    }

    fn close_saying(&self, wait: Option<std::time::Duration>, interrupt: &mut dyn FnMut() -> Result<()>, reason: &str) -> Result<()> {
        if self.closed_here.swap(true, Ordering::Relaxed) {
            return Ok(());
        }
        let over = self.link.is_dead() || lock(&self.shared.state).peer_closed;
        let outcome = if over {
            self.forget_held();
            Ok(())
        } else {
            self.send_held_closing(wait, interrupt)
        };
        let hdr = self.header(Kind::Teardown, 0);
        let why = &reason.as_bytes()[..reason.len().min(super::link::MAX_CLOSE_REASON)];
        let in_band = over || self.link.ring().try_send(&[&hdr, why]).is_ok();
        self.link.unregister(self.vci_in);
        if let Some(c) = self.caps.get() {
            c.close(); // handles waiting here can no longer be read: closed now
        }
        if !self.released.swap(true, Ordering::Relaxed) {
            if let Some(f) = lock(&self.on_close).take() {
                f(self.info.id, (!in_band).then_some(self.vci_out));
            }
        }
        // Wake our own waiters on this channel (another thread, an event loop), as a UMP end does.
        self.link.ring().doorbell().ring();
        outcome
    }

    /// The channel is over: what this end held can never leave. Counted in
    /// `held_lost`; returns how many.
    fn forget_held(&self) -> u32 {
        let mut st = lock(&self.shared.state);
        let n = st.held.count();
        st.held_lost += u64::from(n);
        st.held.clear();
        n
    }

    /// Closing: what this end holds for the next credit goes now, beyond
    /// the window, right before the TEARDOWN. If the link to the monitor has
    /// no room it waits for some (the monitor drains its links whatever the
    /// credits say) up to `wait`; a monitor that takes nothing for that long
    /// (stopped) loses those messages: counted in `held_lost` and returned
    /// as HeldLost. The channel ending meanwhile loses them without an error
    /// (see `close_within`).
    fn send_held_closing(&self, wait: Option<std::time::Duration>, interrupt: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        let deadline = wait.map(|w| Instant::now() + w);
        loop {
            let mut st = lock(&self.shared.state);
            if st.held.is_empty() {
                return Ok(());
            }
            if st.peer_closed {
                drop(st);
                self.forget_held();
                return Ok(());
            }
            let r = self.shared.write_held(&mut st, self.link.ring(), true);
            let len = st.held.front().map_or(0, |f| f.0.len());
            if r.as_ref().is_ok_and(|w| w.sent) {
                self.link.wake_monitor(); // what went may be what the monitor needs to drain the link
            }
            match r {
                Ok(w) if w.empty => return Ok(()),
                Ok(_) => {}
                Err(_) => {
                    // The link broke: the monitor is gone, and the channel with it.
                    drop(st);
                    self.forget_held();
                    return Ok(());
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                drop(st);
                let n = self.forget_held();
                let secs = wait.map_or(0.0, |w| w.as_secs_f64());
                return Err(Error::new(
                    ErrorKind::HeldLost,
                    format!(
                        "closing multi-hop channel {:#x} to {:?}: {n} held message(s) did not leave: this core's monitor took nothing \
                         from the link for {secs} s (stopped or overloaded); they are lost, and the channel is closed",
                        self.info.id, self.info.service
                    ),
                )
                .with_progress(Progress::Lost(n as usize)));
            }
            drop(st);
            let bell = self.link.ring().doorbell().clone();
            let room = len + HEADER_BYTES;
            let waited = wait_until(&bell, &self.parks, relay_spin_budget(), deadline, &mut || self.link.ring().want_room(room), &mut || {
                self.link.pump();
                self.link.is_dead()
            });
            if waited != Waited::Ready {
                if let Err(e) = interrupt() {
                    let n = self.forget_held();
                    return Err(Error::new(
                        e.kind,
                        format!("{}; closing multi-hop channel {:#x}: {n} held message(s) did not leave and are lost", e.message, self.info.id),
                    ));
                }
            }
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
            held: st.held.count(),
            held_lost: st.held_lost,
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
