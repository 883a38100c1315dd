//! A dispatcher's link to its monitor, shared by its multi-hop channels.
//!
//! A dispatcher has one [`DispatcherLink`] (a ring pair with its core's
//! monitor).  Every multi-hop channel of the dispatcher is a virtual circuit
//! on it: outgoing messages carry the VCI the monitor gave us, incoming ones
//! the VCI we gave the monitor.  Whichever thread reads the link ("pumps")
//! sorts what it finds into each channel's queue, so channels never steal
//! each other's messages; pumping another channel's message rings this
//! process's doorbell so that channel's waiter looks again.  If the monitor
//! dies, every channel on the link is closed.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use multihop_base::defaults::FLUSH_TICK;
use multihop_base::error::{ErrorKind, Result};
use multihop_base::flow::Credits;
use multihop_base::random::random_u64;
use multihop_base::ringpair::RingPair;
use multihop_base::sync::lock;
use multihop_base::wire::multicast::is_group_frame;
use multihop_base::wire::{decode_batch, Header, Kind, FLAG_ACK_NOW, FLAG_BATCH, FLAG_HANDLES, HEADER_BYTES};

use super::cork::Corks;
use super::held::Held;
use crate::multicast::inbox::GroupInbox;

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

/// Longest close reason a TEARDOWN may carry (longer is cut).
pub(crate) const MAX_CLOSE_REASON: usize = 1024;

/// What the link's pump and a channel end share: its queue and credits.
pub(crate) struct MhState {
    pub queue: VecDeque<Vec<u8>>,
    /// Arrival numbers (`arrived` at the time) of the queued messages that
    /// carry handles (their payload starts with a `handles::marker` prefix).
    pub marks: VecDeque<u64>,
    pub credits: Credits,
    pub peer_closed: bool,
    /// Why the other end closed, when its TEARDOWN said (a payload of UTF-8 text: the fabric's bridge names a lost
    /// peer, a gap or a duplicate this way). At most [`MAX_CLOSE_REASON`] bytes are kept.
    pub close_reason: Option<String>,
    /// Data messages sorted into the queue so far.
    pub arrived: u64,
    /// Data frames (a message, or a batch of them) sorted in so far: what
    /// an ack request counts in, as the credits do.
    pub arrived_frames: u64,
    /// Arrival numbers of queued messages that return no credit when taken:
    /// all but the last of each batch frame (the last one returns its
    /// frame's credit). Runs of them, in arrival order.
    pub no_credit: VecDeque<std::ops::Range<u64>>,
    /// Sending side: data frames sent so far, and the batch frames among
    /// them not known to be consumed yet, as (frame number, messages beyond
    /// the first): what turns credits in flight into messages unconsumed.
    pub frames_sent: u64,
    pub batches_in_flight: VecDeque<(u64, u32)>,
    pub received: u64,
    pub bytes_received: u64,
    pub sent: u64,
    pub bytes_sent: u64,
    pub busy: u64,
    /// Sending side: messages a blocking send accepted while no credit was
    /// free (`held.rs`); they are the next frame this end sends.
    pub held: Held,
    /// A flush waits for the held frame: it asks for its ack at once (ACK_NOW).
    pub held_ack_now: bool,
    /// Held messages a close could not hand to a monitor that took nothing (stopped).
    pub held_lost: u64,
}

impl MhState {
    /// Forget the batch frames the peer has consumed (their credits came back).
    fn prune_batches(&mut self) {
        // Credits in flight are the last frames sent (acks come in order).
        let consumed = self.frames_sent.saturating_sub(u64::from(self.credits.in_flight()));
        while self.batches_in_flight.front().is_some_and(|&(f, _)| f < consumed) {
            self.batches_in_flight.pop_front();
        }
    }

    /// A data frame of `messages` went out (its credit is taken already).
    pub(crate) fn on_frame_sent(&mut self, messages: u32) {
        let f = self.frames_sent;
        self.frames_sent += 1;
        if messages > 1 {
            self.prune_batches();
            self.batches_in_flight.push_back((f, messages - 1));
        }
    }

    /// Messages sent (held ones included) and not yet acknowledged as consumed by the peer.
    pub(crate) fn unconsumed_messages(&mut self) -> usize {
        self.prune_batches();
        self.credits.in_flight() as usize
            + self.batches_in_flight.iter().map(|&(_, extra)| extra as usize).sum::<usize>()
            + self.held.count() as usize
    }

    /// Whether taking the message of arrival number `n` (the queue's front)
    /// returns a credit: false for all but the last message of a batch.
    pub(crate) fn takes_credit(&mut self, n: u64) -> bool {
        match self.no_credit.front_mut() {
            Some(r) if r.contains(&n) => {
                r.start = n + 1;
                if r.is_empty() {
                    self.no_credit.pop_front();
                }
                false
            }
            _ => true,
        }
    }
}

pub(crate) struct MhShared {
    pub state: Mutex<MhState>,
    /// (VCI we send with, direction), set once the bind completes.
    pub out: OnceLock<(u64, u8)>,
}

impl MhShared {
    pub(crate) fn new(window: u32) -> MhShared {
        MhShared {
            state: Mutex::new(MhState {
                queue: VecDeque::new(),
                marks: VecDeque::new(),
                credits: Credits::new(window),
                peer_closed: false,
                close_reason: None,
                arrived: 0,
                arrived_frames: 0,
                no_credit: VecDeque::new(),
                frames_sent: 0,
                batches_in_flight: VecDeque::new(),
                received: 0,
                bytes_received: 0,
                sent: 0,
                bytes_sent: 0,
                busy: 0,
                held: Held::default(),
                held_ack_now: false,
                held_lost: 0,
            }),
            out: OnceLock::new(),
        }
    }

    /// Send a dummy ack (with `flags`) now. If the link is full (or the end
    /// is not bound yet) it stays due, and is tried again on this end's next
    /// consume, receive attempt, wait or poll. True if it went.
    pub(crate) fn send_dummy(&self, st: &mut MhState, link: &RingPair, flags: u16) -> bool {
        let Some(&(vci, dir)) = self.out.get() else { return false };
        let ack = st.credits.on_dummy();
        let hdr = Header { vci, dir, kind: Kind::Dummy, flags, ack }.encode();
        if link.try_send(&[&hdr]).is_err() {
            st.credits.undo_dummy(ack);
            return false;
        }
        true
    }

    /// Send the held frames (`held.rs`) that a credit (with `closing`, one
    /// beyond the window: `Credits::on_send_closing`) and the link have room
    /// for now, oldest first, without waking the monitor: the caller rings if
    /// `sent`. Err only if the link is gone.
    pub(crate) fn write_held(&self, st: &mut MhState, link: &RingPair, closing: bool) -> Result<HeldWrite> {
        let mut sent = false;
        let Some(&(vci, dir)) = self.out.get() else { return Ok(HeldWrite { sent, empty: st.held.is_empty() }) };
        while let Some((payload, batch, n)) = st.held.front() {
            if !closing && !st.credits.can_send() {
                return Ok(HeldWrite { sent, empty: false });
            }
            let ack = if closing { st.credits.on_send_closing() } else { st.credits.on_send() };
            let last = st.held.count() == n;
            let ack_now = st.held_ack_now && last;
            let flags = if batch { FLAG_BATCH } else { 0 } | if ack_now { FLAG_ACK_NOW } else { 0 };
            let hdr = Header { vci, dir, kind: Kind::Data, flags, ack }.encode();
            match link.try_send_quiet(&[&hdr, payload]) {
                Ok(()) => {
                    st.held.pop_front();
                    st.on_frame_sent(n);
                    sent = true;
                    if last {
                        st.held_ack_now = false;
                    }
                }
                Err(e) => {
                    st.credits.undo_send(ack);
                    return if e.kind == ErrorKind::TxBusy { Ok(HeldWrite { sent, empty: false }) } else { Err(e) };
                }
            }
        }
        Ok(HeldWrite { sent, empty: true })
    }
}

/// What `MhShared::write_held` did.
pub(crate) struct HeldWrite {
    /// At least one frame went (the monitor is to be woken).
    pub sent: bool,
    /// Nothing is held any more.
    pub empty: bool,
}

/// A dispatcher's ring pair with its monitor, shared by its multi-hop channels.
pub struct DispatcherLink {
    link: RingPair,
    demux: Mutex<VciMap<Weak<MhShared>>>,
    /// Messages for a VCI we do not know (a channel already closed): counted.
    pub dropped: AtomicU64,
    /// Set (never cleared) once the monitor is gone; Relaxed: a latch read
    /// by pollers, every channel state it implies is set under its lock.
    dead: AtomicBool,
    /// Group frames (kinds 4-7) that came on the link (`multicast/inbox.rs`).
    pub(crate) group: GroupInbox,
    /// The ends holding messages for their next credit, and the thread that
    /// sends them when nobody else pumps the link (`held.rs`).
    flusher: Arc<Flusher>,
    /// Threads that defer their wake-ups of the monitor (`cork.rs`).
    pub corks: Corks,
    /// Wake-ups this process's multi-hop sends gave the monitor (a counter, Relaxed).
    wakeups: AtomicU64,
}

/// The ends of a link that hold messages, shared with the flusher thread
/// (which holds no strong reference to the link: a dropped link ends it).
#[derive(Default)]
struct Flusher {
    holding: Mutex<Vec<Weak<MhShared>>>,
    wake: std::sync::Condvar,
    started: OnceLock<()>,
}

impl Flusher {
    /// Messages the ends of this link still hold, of channels not over.
    fn held_count(&self) -> u64 {
        lock(&self.holding).iter().filter_map(Weak::upgrade).map(|s| u64::from(lock(&s.state).held.count())).sum()
    }

    /// Send every held frame of the holding ends that can go now (with
    /// `closing`, beyond the window, as `close` does), and forget the ends
    /// that hold nothing any more (or are gone). (a frame went, something is
    /// still held). One held because the link was full gets no ack to send
    /// it: this is what sends it.
    fn send_held(&self, link: &RingPair, closing: bool) -> (bool, bool) {
        let (mut sent, mut left) = (false, false);
        lock(&self.holding).retain(|w| {
            w.upgrade().is_some_and(|s| {
                let mut st = lock(&s.state);
                if st.peer_closed {
                    return false;
                }
                if let Ok(w) = s.write_held(&mut st, link, closing) {
                    sent |= w.sent; // (a broken link is found by the pump)
                }
                let holding = !st.held.is_empty();
                left |= holding;
                holding
            })
        });
        (sent, left)
    }
}

impl DispatcherLink {
    pub fn new(link: RingPair) -> DispatcherLink {
        DispatcherLink {
            link,
            demux: Mutex::new(VciMap::default()),
            dropped: AtomicU64::new(0),
            dead: AtomicBool::new(false),
            group: Default::default(),
            flusher: Arc::new(Flusher::default()),
            corks: Default::default(),
            wakeups: AtomicU64::new(0),
        }
    }

    /// Wake the monitor after a send, unless this thread corked the link
    /// (`cork.rs`): then the cork's end does.
    #[inline]
    pub(crate) fn ring_monitor(&self) {
        if !self.corks.defer() {
            self.wake_monitor();
        }
    }

    /// Wake the monitor if it is parked (counted in `wakeups`).
    pub fn wake_monitor(&self) {
        if self.link.ring_peer() {
            self.wakeups.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How often sends on this link woke the monitor.
    pub fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }

    /// `shared` started holding messages: make sure they leave once credit
    /// comes back even if this program never calls into the runtime again
    /// (the flusher thread, started on the link's first hold, pumps the
    /// link every `FLUSH_TICK` while any end holds something).
    pub(crate) fn note_held(self: &Arc<Self>, shared: &Arc<MhShared>) {
        {
            let mut h = lock(&self.flusher.holding);
            if !h.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(shared))) {
                h.push(Arc::downgrade(shared));
            }
        }
        self.flusher.wake.notify_one();
        let (flusher, link) = (self.flusher.clone(), Arc::downgrade(self));
        self.flusher.started.get_or_init(move || {
            lock(&HOLDING_LINKS).push((flusher.clone(), link.clone()));
            at_exit_send_held();
            let _ = std::thread::Builder::new().name("mh-flusher".into()).spawn(move || flush_loop(&flusher, &link));
        });
    }

    pub fn ring(&self) -> &RingPair {
        &self.link
    }

    /// The link is about to end (its dispatcher detaches): send every frame its ends hold, beyond
    /// the window as a close does, waiting up to `wait` for room (the monitor drains the link before
    /// it tears the channels down). Returns how many held messages did not leave.
    pub(crate) fn send_held_before_end(&self, wait: std::time::Duration) -> u64 {
        let deadline = std::time::Instant::now() + wait;
        loop {
            if self.is_dead() {
                return self.flusher.held_count();
            }
            let (sent, left) = self.flusher.send_held(&self.link, true);
            if sent {
                self.wake_monitor();
            }
            if !left {
                return 0;
            }
            if std::time::Instant::now() > deadline {
                return self.flusher.held_count();
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Largest payload of a multi-hop message on this link.
    pub fn max_payload(&self) -> usize {
        self.link.max_message() - HEADER_BYTES
    }

    /// A fresh incoming VCI, registered for `shared` before anyone can use it.
    pub(crate) fn register(&self, shared: &Arc<MhShared>) -> Result<u64> {
        let mut d = lock(&self.demux);
        loop {
            let v = random_u64()?;
            if v != 0 && !d.contains_key(&v) {
                d.insert(v, Arc::downgrade(shared));
                return Ok(v);
            }
        }
    }

    pub(crate) fn unregister(&self, vci: u64) {
        lock(&self.demux).remove(&vci);
    }

    /// Sort what is on the link into the channels' queues. Returns how many
    /// messages were handled.
    pub(crate) fn pump(&self) -> usize {
        if self.dead.load(Ordering::Relaxed) {
            return 0;
        }
        let mut others = false;
        let mut sorter = Sorter { link: self, last: None, flushed: false };
        let got = self.link.try_recv_many(256, &mut |len, copy| {
            others |= sorter.deliver(len, copy);
            Ok(true)
        });
        let flushed = sorter.flushed;
        drop(sorter);
        if flushed {
            self.wake_monitor(); // held frames went out: one wake-up for them all
        }
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
    pub(crate) fn die(&self) {
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

    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Relaxed)
    }
}

/// How long the exit hook tries to hand held messages to the monitors.
const AT_EXIT_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Every link of this process that ever held messages (its flusher and the link), for the exit hook.
static HOLDING_LINKS: Mutex<Vec<(Arc<Flusher>, Weak<DispatcherLink>)>> = Mutex::new(Vec::new());

/// Make sure what is held leaves when the process exits normally (`exit`, the end of `main`, a Python
/// interpreter's exit) even if a channel is never closed or dropped (one a daemon thread still holds):
/// an `atexit` hook, registered once, sends every held frame beyond the window, as `close` does, and
/// wakes the monitor; the dispatcher's link then ends and the monitor drains it before tearing the
/// channels down. `_exit` and SIGKILL skip it: those messages are lost, as a stdio buffer's are.
fn at_exit_send_held() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        extern "C" fn send_held_at_exit() {
            // A panic must not unwind into C's exit path.
            let _ = std::panic::catch_unwind(|| {
                let links: Vec<_> = lock(&HOLDING_LINKS).iter().filter_map(|(f, l)| Some((f.clone(), l.upgrade()?))).collect();
                let mut lost = 0u64;
                for (flusher, link) in links {
                    if link.is_dead() {
                        lost += flusher.held_count();
                        continue;
                    }
                    // A link that is full now is drained by its monitor at once: a few tries, 100 ms at most.
                    let deadline = std::time::Instant::now() + AT_EXIT_WAIT;
                    loop {
                        let (sent, left) = flusher.send_held(&link.link, true);
                        if sent {
                            link.wake_monitor();
                        }
                        if !left {
                            break;
                        }
                        if std::time::Instant::now() > deadline {
                            lost += flusher.held_count();
                            break;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
                if lost > 0 {
                    super::held::warn_lost(&format!(
                        "the process exits with {lost} message(s) held on unclosed multi-hop channels that did not leave \
                         (the monitor took nothing from the link for {} ms, or the channel was over): they are lost; \
                         close() channels before exit to be told, with an error",
                        AT_EXIT_WAIT.as_millis()
                    ));
                }
            });
        }
        // SAFETY: registers a plain `extern "C" fn()` with the C library; it touches only our own
        // statics and locks, and catches any panic before returning to C.
        unsafe { libc::atexit(send_held_at_exit) };
    });
}

/// The flusher thread: idle until an end holds messages, then pumps the
/// link every `FLUSH_TICK` (the pump sends a held frame as its credit comes
/// back) until none holds anything. Ends with the link.
fn flush_loop(flusher: &Flusher, link: &Weak<DispatcherLink>) {
    loop {
        {
            let mut h = lock(&flusher.holding);
            while h.is_empty() {
                h = match flusher.wake.wait_timeout(h, std::time::Duration::from_secs(1)) {
                    Ok((g, _)) => g,
                    Err(p) => p.into_inner().0,
                };
                if h.is_empty() && link.strong_count() == 0 {
                    return;
                }
            }
        }
        std::thread::sleep(FLUSH_TICK);
        let Some(l) = link.upgrade() else { return };
        if l.is_dead() {
            return;
        }
        l.pump();
        if flusher.send_held(&l.link, false).0 {
            l.wake_monitor();
        }
    }
}

/// Sorts one pump's messages into their channels: the channel of the last
/// message is kept, so a run of messages for one channel looks it up once.
struct Sorter<'a> {
    link: &'a DispatcherLink,
    last: Option<(u64, Arc<MhShared>)>,
    /// A held frame was written (the monitor is rung once, after the pump).
    flushed: bool,
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
        if is_group_frame(&buf) {
            self.link.group.take(buf, &self.link.link);
            return true; // a group port's waiter may be another thread
        }
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
        if h.ack > 0 && !st.held.is_empty() {
            // Credit came back to an end holding messages: they leave now, whoever pumps.
            if let Ok(w) = ch.write_held(&mut st, &self.link.link, false) {
                self.flushed |= w.sent; // (a broken link: found by the pump)
            }
        }
        match h.kind {
            Kind::Data if h.flags & FLAG_BATCH != 0 => match decode_batch(&buf[HEADER_BYTES..]) {
                Ok(msgs) => {
                    let first = st.arrived;
                    let n = msgs.len() as u64;
                    st.queue.extend(msgs.into_iter().map(<[u8]>::to_vec));
                    st.no_credit.push_back(first..first + n - 1);
                    st.arrived += n;
                    st.arrived_frames += 1;
                }
                Err(_) => {
                    // Not from our library: dropped, and its credit given back.
                    self.link.dropped.fetch_add(1, Ordering::Relaxed);
                    st.arrived_frames += 1;
                    if st.credits.on_consume() {
                        ch.send_dummy(&mut st, &self.link.link, 0);
                    }
                }
            },
            Kind::Data => {
                buf.drain(..HEADER_BYTES);
                if h.flags & FLAG_HANDLES != 0 {
                    let at = st.arrived;
                    st.marks.push_back(at);
                }
                st.queue.push_back(buf);
                st.arrived += 1;
                st.arrived_frames += 1;
            }
            Kind::Dummy => {}
            Kind::Teardown => {
                st.peer_closed = true;
                if buf.len() > HEADER_BYTES {
                    let end = buf.len().min(HEADER_BYTES + MAX_CLOSE_REASON);
                    st.close_reason = Some(String::from_utf8_lossy(&buf[HEADER_BYTES..end]).into_owned());
                }
            }
        }
        if h.flags & FLAG_ACK_NOW != 0 && !st.peer_closed {
            // The sender flushes: ack what is consumed now, and again once
            // everything that came before this is.
            let arrived = st.arrived_frames;
            st.credits.request_ack(arrived);
            if st.credits.unacked() > 0 {
                ch.send_dummy(&mut st, &self.link.link, 0);
            }
        }
        true
    }
}
