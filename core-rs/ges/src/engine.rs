//! The native event engine of one live broker: per round it takes the frames the broker's links
//! delivered, decodes the event batches and acknowledgements of its gateways and the publications
//! of its clients, hands them to the event routing ([`crate::erp`]: duplicates, matching, next
//! hops, routing information), and at the end of the round encodes what the routing made (one
//! `events` batch and an acknowledgement per gateway, one `deliver` per client, the same bytes for
//! clients that get the same events) and writes every link's frames, in order after what the
//! control plane queued for it. Anything else (connection records, profiles, joins, a client's
//! subscriptions, a malformed frame) goes to the control plane, in Python, *in its place*: the
//! engine stops at that frame, and goes on once the control plane handled it (and pushed what it
//! changed), so the broker sees its messages in the order they came, as the Python event path does.
//!
//! The logic is a state machine over [`FrameChannel`]s: [`Engine::receive`] reads (the only reads),
//! [`Engine::flush`] writes (the only writes), [`Engine::process`] neither (tests drive it with
//! in-memory channels). [`Engine::run`] is the broker's loop between two visits of the control
//! plane: it waits on the dispatcher, reads what is readable, routes, writes (corked), fires the
//! acknowledgement timer, and returns only when the control plane has something to do (a frame of
//! its own, a closed link, one of its own channels readable, its deadline, a slice to look at
//! signals). So a broker's event path runs without the interpreter: the control plane runs when
//! control messages come. The Python glue (`crate::python::engine`) calls it with the GIL released.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::codec::{self, CopyFields, CopyRef, EventFields, BATCH_TEXT, EVENTS, EVENT_ACK, EVENT_ACK_ALSO, PUBLISH};
use crate::erp::{Copy, Erp, Event, Units};
use crate::fxhash::FxHashMap;
use crate::io::{Closed, Dispatcher, FrameChannel, Sent, Waited};

/// Most frames read from one link at a time (as the Python loop's `recv_batch(256)`).
pub const RECV_BATCH: usize = 256;

/// Bytes a round reads, all links together, before it writes what they made (it reads each
/// readable link once, up to [`RECV_BATCH`] frames, then checks): under a steady stream every link
/// stays readable, and a round that read on until none was grew to thousands of events (measured:
/// ~1,000-4,000 in the testbed flat out), held all their output (memory the kernel had to fault in,
/// caches that no longer held the round) and starved the next brokers of input until it ended. A
/// round bounded by what a core's cache holds writes while its events are still there and keeps the
/// brokers of a path working as a pipeline. Bytes, not frames: a client's publication is a frame of
/// ~100 bytes, a neighbour's batch one of up to hundreds of events. At low rates a round reads one
/// frame anyway.
pub const ROUND_BYTES: usize = 256 * 1024;

/// How many of the round's distinct deliveries a client's events are compared with (the last made)
/// before they are encoded anew: clients with the same profiles get the same events, and a broker's
/// clients mostly fall in a few such groups; bounded so that many clients with different events
/// cost a few comparisons each, not one per client before them.
const MADE_COMPARED: usize = 8;

/// What is at the other end of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// a neighbour broker, over a gateway (its code: the broker's address code)
    Broker,
    /// an attached client (its code: the broker's id for the channel, negative)
    Client,
}

struct Link {
    ch: Arc<dyn FrameChannel>,
    kind: Kind,
    /// a client's id and incarnation (its publications carry them)
    session: Option<(Arc<str>, u64)>,
    /// frames to write, in order (a delivery's frames are shared by the clients that get them)
    out: OutQueue,
    /// a client given up as a slow consumer: nothing more is queued or written for it (a later frame
    /// after the dropped ones would be a gap its reader could not see) until the control plane removes it
    given_up: bool,
}

/// A link's frames waiting for room in its channel, and their bytes.
#[derive(Default)]
struct OutQueue {
    frames: VecDeque<Arc<Vec<u8>>>,
    bytes: usize,
}

impl OutQueue {
    fn push(&mut self, f: Arc<Vec<u8>>) {
        self.bytes += f.len();
        self.frames.push_back(f);
    }

    fn extend(&mut self, frames: impl IntoIterator<Item = Arc<Vec<u8>>>) {
        for f in frames {
            self.push(f);
        }
    }

    fn front(&self) -> Option<&Arc<Vec<u8>>> {
        self.frames.front()
    }

    fn pop(&mut self) -> Option<Arc<Vec<u8>>> {
        let f = self.frames.pop_front()?;
        self.bytes -= f.len();
        Some(f)
    }

    fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Every frame dropped (its buffer back to the pool if nobody else holds it).
    fn clear(&mut self) {
        while let Some(f) = self.pop() {
            if let Ok(b) = Arc::try_unwrap(f) {
                crate::pool::give(b);
            }
        }
    }
}

/// Bytes that may wait in a broker for one client, beyond what its channel holds, before the engine
/// gives the client up as a slow consumer ([`Item::Slow`]): a subscriber that stops reading, or
/// reads slower than its events come for long enough, must not grow its broker's memory without
/// end (NATS's default pending limit for a subscription is the same 64 MiB). Neighbour brokers are
/// not cut: their credit and acknowledgements already bound what waits for them.
pub const CLIENT_QUEUE_LIMIT: usize = 64 << 20;
/// The least [`CLIENT_QUEUE_LIMIT`] a broker may be given: a batch of events for one client can be
/// hundreds of KiB, and a limit below what one round makes would cut clients that keep up.
pub const MIN_CLIENT_QUEUE_LIMIT: usize = 1 << 20;

enum Incoming {
    Frame(Vec<u8>),
    Closed,
    /// a client given up as a slow consumer, with the bytes that waited for it
    Slow(usize),
}

/// What the engine hands to the control plane.
#[derive(Debug, PartialEq, Eq)]
pub enum Item {
    /// a frame of link `code` for the control plane
    Frame(i64, Vec<u8>),
    /// link `code` is closed (its frames before that came first)
    Closed(i64),
    /// client link `code` was given up as a slow consumer: more than the engine's
    /// `client_queue_limit` bytes waited for it; its queue is dropped (the control plane closes it
    /// and detaches the client, saying why)
    Slow(i64, String),
}

/// How long the acknowledgement timer waits (`erp.ACK_DELAY`, which says why 250 ms).
pub const ACK_DELAY: Duration = Duration::from_millis(250);
/// How soon a link without credit is tried again at the latest. A link without room wakes the loop
/// when its peer makes room ([`FrameChannel::writable`]'s promise), so this is only a safety net.
/// Not 1 ms (the Python loop's poll): on the testbed flat out, brokers whose subscribers lag woke
/// every millisecond to find the ring still full; at 20 ms, alternated runs, 40,000 events: the
/// brokers' waits 26,677-32,043 -> 5,573-7,205, their CPU per event 40-46 -> 30-35 us.
pub const RETRY: Duration = Duration::from_millis(20);

/// How long [`Engine::run`] stays in its loop through slices with nothing to do before it returns
/// ([`Ran::Slice`]) for the program's signal handlers: a signal that interrupts the wait returns at
/// once, but one delivered to another thread of the process only leaves a handler pending. It was
/// every slice (50 ms): 20 returns a second into the Python loop, ~130 µs of CPU each, for every idle
/// broker (measured on the testbed: 22.6 wake-ups and 3.0 ms of CPU a second per idle broker).
pub const RETURN_EVERY: Duration = Duration::from_millis(500);

/// One wait in this many has its CPU time measured (see the counters' `wait_cpu_ns`).
pub const WAIT_SAMPLE_EVERY: u64 = 8;

/// Why [`Engine::run`] returned.
#[derive(Debug, PartialEq, Eq)]
pub enum Ran {
    /// an item for the control plane
    Item(Item),
    /// one of the control plane's own channels is readable
    Control,
    /// the control plane's deadline passed
    Deadline,
    /// a signal came, or [`RETURN_EVERY`] passed in slices with nothing to do: look at signals, then
    /// run again
    Slice,
    /// durable mode: the store has calls to do (its events to store, entries every next hop has);
    /// what the round made is written by the control plane's flush, once the store committed
    Store,
}

/// Counters (for the broker's status).
#[derive(Clone, Debug, Default)]
pub struct Counters {
    /// frames read from the links
    pub frames_in: u64,
    /// of which handled here (event batches, acknowledgements, publications)
    pub native_in: u64,
    /// frames written
    pub frames_out: u64,
    /// writes that found no credit (retried next round)
    pub busy: u64,
    /// rounds
    pub rounds: u64,
    /// times the loop parked or spun waiting for input
    pub waits: u64,
    /// this thread's CPU time in the loop's work (reading, routing, writing), ns
    pub work_cpu_ns: u64,
    /// this thread's CPU time while waiting (spinning, parking: the system calls), ns: measured on
    /// one wait in [`WAIT_SAMPLE_EVERY`] and counted for all of them (reading a thread's CPU clock is
    /// a system call: two per wait were a third of a live broker's system calls)
    pub wait_cpu_ns: u64,
    /// clients given up as slow consumers ([`CLIENT_QUEUE_LIMIT`])
    pub slow_clients: u64,
}

/// This thread's CPU time (ns; 0 where it cannot be read).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given, which lives on this stack frame.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One broker's engine (see the module docs).
pub struct Engine {
    pub erp: Arc<Mutex<Erp>>,
    links: FxHashMap<i64, Link>,
    pending: VecDeque<(i64, Incoming)>,
    batch: Vec<Vec<u8>>,
    /// a neighbour's batch decoded, then made into copies (kept for their capacity: see [`reuse`])
    refs: Vec<CopyRef<'static>>,
    copies: Vec<Copy>,
    /// the deliveries encoded in the round being written: (the first client that gets them, its
    /// frames); kept for its capacity
    made: Vec<(usize, Vec<Arc<Vec<u8>>>)>,
    /// when the acknowledgement timer fires (None: not set)
    ack_at: Option<Instant>,
    /// bytes read since the round's writes (see [`ROUND_BYTES`])
    round_bytes: usize,
    /// [`RETURN_EVERY`] (the tests' engines return at the first slice)
    pub return_every: Duration,
    /// [`CLIENT_QUEUE_LIMIT`] (the control plane may set another)
    pub client_queue_limit: usize,
    /// clients found over the limit by a flush, with the bytes that waited: reported by the next run
    slow: Vec<(i64, usize)>,
    pub counters: Counters,
}

fn lock(e: &Mutex<Erp>) -> std::sync::MutexGuard<'_, Erp> {
    e.lock().unwrap_or_else(|p| p.into_inner())
}

/// `v` emptied, as a list of borrows of another lifetime, in the same allocation: the decoded copies
/// of a frame borrow it, and the list is kept between frames for its capacity (a list of a few hundred
/// copies was a large allocation per frame). The collect of an empty list into a list of elements
/// of the same size and alignment reuses its buffer (std's in-place collect; were it not to, this
/// would only allocate again).
fn reuse<'b>(mut v: Vec<CopyRef<'_>>) -> Vec<CopyRef<'b>> {
    v.clear();
    v.into_iter().map(|_| -> CopyRef<'b> { unreachable!("the list is empty") }).collect()
}

fn fields(ev: &Event) -> EventFields<'_> {
    EventFields {
        timestamp: ev.timestamp,
        sequence: ev.sequence,
        incarnation: ev.incarnation,
        publisher: ev.publisher.as_bytes(),
        signature: ev.signature.as_bytes(),
        values: ev.values().as_bytes(),
        payload: ev.payload(),
    }
}

impl Engine {
    /// An engine over the event routing `erp` (shared with the control plane's calls).
    pub fn new(erp: Arc<Mutex<Erp>>) -> Self {
        Engine {
            erp,
            links: FxHashMap::default(),
            pending: VecDeque::new(),
            batch: Vec::new(),
            refs: Vec::new(),
            copies: Vec::new(),
            made: Vec::new(),
            ack_at: None,
            round_bytes: 0,
            return_every: RETURN_EVERY,
            client_queue_limit: CLIENT_QUEUE_LIMIT,
            slow: Vec::new(),
            counters: Counters::default(),
        }
    }

    /// Handle link `code` here from now on (a gateway that came up, a client that attached).
    /// Its writes may fill the channel's whole buffer ([`FrameChannel::fill_whole_buffer`], which says why).
    pub fn add_link(&mut self, code: i64, ch: Arc<dyn FrameChannel>, kind: Kind, session: Option<(Arc<str>, u64)>) {
        ch.fill_whole_buffer();
        self.links.insert(code, Link { ch, kind, session, out: OutQueue::default(), given_up: false });
    }

    /// Forget link `code` (lost or closed): what was queued for it is dropped.
    pub fn remove_link(&mut self, code: i64) {
        self.links.remove(&code);
        self.pending.retain(|(c, _)| *c != code);
        self.slow.retain(|(c, _)| *c != code);
    }

    /// Whether link `code` is handled here.
    pub fn has_link(&self, code: i64) -> bool {
        self.links.contains_key(&code)
    }

    /// Read what the links `ready` delivered (up to [`RECV_BATCH`] frames each), in that order.
    pub fn receive(&mut self, ready: &[i64]) {
        self.counters.rounds += 1;
        for &code in ready {
            let Some(link) = self.links.get(&code) else { continue };
            self.batch.clear();
            let r = link.ch.recv_frames(RECV_BATCH, &mut crate::pool::take_sized, &mut self.batch);
            self.counters.frames_in += self.batch.len() as u64;
            self.round_bytes += self.batch.iter().map(Vec::len).sum::<usize>();
            for f in self.batch.drain(..) {
                self.pending.push_back((code, Incoming::Frame(f)));
            }
            if r == Err(Closed) {
                self.pending.push_back((code, Incoming::Closed));
            }
        }
    }

    /// Handle the frames read, in order, until one is for the control plane (given back: handle it,
    /// push what it changed, and call again) or none is left (None).
    pub fn process(&mut self) -> Option<Item> {
        while let Some((code, inc)) = self.pending.pop_front() {
            let frame = match inc {
                Incoming::Closed => return Some(Item::Closed(code)),
                Incoming::Slow(bytes) => {
                    let limit = self.client_queue_limit;
                    let why = format!(
                        "slow consumer: {bytes} bytes of events waited for the client in its broker, beyond what its channel holds (limit {limit})"
                    );
                    return Some(Item::Slow(code, why));
                }
                Incoming::Frame(f) => f,
            };
            let Some(link) = self.links.get(&code) else {
                return Some(Item::Frame(code, frame));
            };
            let handled = match link.kind {
                Kind::Broker => self.broker_frame(code as u64, &frame),
                Kind::Client => match &link.session {
                    Some((client, inc)) => {
                        let (client, inc) = (client.clone(), *inc);
                        self.client_frame(&client, inc, &frame)
                    }
                    None => false,
                },
            };
            if !handled {
                return Some(Item::Frame(code, frame));
            }
            crate::pool::give(frame);
            self.counters.native_in += 1;
        }
        None
    }

    fn broker_frame(&mut self, peer: u64, frame: &[u8]) -> bool {
        match codec::message_number(frame) {
            Some(EVENTS) => {
                let mut erp = lock(&self.erp);
                if erp.routing.link_level(peer).is_none() {
                    return false; // a gateway the routing does not know (the control plane refuses it)
                }
                let mut refs = reuse(std::mem::take(&mut self.refs));
                let Ok(first) = codec::decode_events(frame, &mut refs) else { return false }; // (the control plane says what is wrong)
                self.copies.clear();
                self.copies.extend(refs.iter().map(|c| Copy {
                    event: erp.event(c.publisher, c.timestamp, c.sequence, c.incarnation, c.signature, c.values, c.payload, None),
                    origin: c.origin,
                    mode: c.mode,
                    level: c.level,
                    targets: Units::collect_from(c.targets.iter()),
                    reached: Units::collect_from(c.reached.iter()),
                    hops: c.hops,
                    left: Units::collect_from(c.left.iter()),
                }));
                self.refs = reuse(refs);
                erp.on_events(peer, first, self.copies.drain(..));
                true
            }
            Some(EVENT_ACK) => match codec::decode_event_ack(frame) {
                Some(upto) => {
                    lock(&self.erp).on_ack(peer, upto.min(i64::MAX as u64) as i64, &[]);
                    true
                }
                None => false,
            },
            // durable mode's selective acknowledgements (copies done out of order)
            Some(EVENT_ACK_ALSO) => match codec::decode_event_ack_also(frame) {
                Some((upto, also)) => {
                    lock(&self.erp).on_ack(peer, upto, &also);
                    true
                }
                None => false,
            },
            _ => false,
        }
    }

    fn client_frame(&self, client: &str, incarnation: u64, frame: &[u8]) -> bool {
        if codec::message_number(frame) != Some(PUBLISH) {
            return false;
        }
        let Some(p) = codec::decode_publish(frame) else { return false };
        if !codec::canonical_event(p.signature, p.values) {
            return false; // (the control plane takes it or refuses it, saying why)
        }
        let mut erp = lock(&self.erp);
        let ev = erp.event(client, p.timestamp, p.sequence, incarnation, p.signature, p.values, p.payload, None);
        erp.publish(ev);
        true
    }

    /// Queue frames of the control plane for link `code` (before the routing's outputs of the round).
    pub fn queue(&mut self, code: i64, frames: impl IntoIterator<Item = Vec<u8>>) {
        if let Some(link) = self.links.get_mut(&code).filter(|l| !l.given_up) {
            link.out.extend(frames.into_iter().map(Arc::new));
        }
    }

    /// Durable mode: hold the routing's acknowledgements (the store cannot write) or let them go.
    pub fn hold_acks(&mut self, hold: bool) {
        lock(&self.erp).hold_acks(hold);
    }

    /// Whether frames wait for credit on some link.
    pub fn queued(&self) -> bool {
        self.links.values().any(|l| !l.out.is_empty())
    }

    /// Encode what the routing made this round and write every link's frames (until a link has no
    /// credit: the rest waits for the next round). Returns the links found closed.
    pub fn flush(&mut self) -> Vec<i64> {
        self.encode_outputs();
        let mut closed = Vec::new();
        // neighbour brokers first (the events' onward path), then clients
        for kind in [Kind::Broker, Kind::Client] {
            for (&code, link) in self.links.iter_mut().filter(|(_, l)| l.kind == kind && !l.out.is_empty()) {
                while let Some(f) = link.out.front() {
                    match link.ch.try_send(f) {
                        Sent::Sent => {
                            if let Some(f) = link.out.pop() {
                                if let Ok(b) = Arc::try_unwrap(f) {
                                    crate::pool::give(b);
                                }
                            }
                            self.counters.frames_out += 1;
                        }
                        Sent::Busy => {
                            self.counters.busy += 1;
                            break;
                        }
                        Sent::Closed => {
                            closed.push(code);
                            break;
                        }
                    }
                }
            }
        }
        let limit = self.client_queue_limit;
        for (&code, link) in self.links.iter_mut().filter(|(_, l)| l.kind == Kind::Client && !l.given_up && l.out.bytes > limit) {
            self.slow.push((code, link.out.bytes));
            link.out.clear();
            link.given_up = true;
            self.counters.slow_clients += 1;
        }
        closed
    }

    /// The broker's loop until the control plane has something to do (see the module docs):
    /// `control` are the control plane's own channels (watched, never read here), `until` its next
    /// deadline. Reads what is readable, routes it, and writes what that made (corked) before it
    /// waits again; fires the acknowledgement timer when it is due.
    pub fn run(&mut self, dispatcher: &dyn Dispatcher, control: &[Arc<dyn FrameChannel>], until: Option<Instant>) -> Ran {
        let c0 = thread_cpu_ns();
        let waited0 = self.counters.wait_cpu_ns;
        let ran = self.run_loop(dispatcher, control, until);
        let spent = thread_cpu_ns().saturating_sub(c0);
        self.counters.work_cpu_ns += spent.saturating_sub(self.counters.wait_cpu_ns - waited0);
        ran
    }

    fn run_loop(&mut self, dispatcher: &dyn Dispatcher, control: &[Arc<dyn FrameChannel>], until: Option<Instant>) -> Ran {
        let entered = Instant::now();
        loop {
            // (clients a flush gave up, the control plane's flush's too: after what was read before)
            self.pending.extend(self.slow.drain(..).map(|(c, bytes)| (c, Incoming::Slow(bytes))));
            if let Some(item) = self.process() {
                return Ran::Item(item);
            }
            if self.round_bytes < ROUND_BYTES {
                let ready: Vec<i64> = self.links.iter().filter(|(_, l)| l.ch.readable()).map(|(&c, _)| c).collect();
                if !ready.is_empty() {
                    self.receive(&ready);
                    continue;
                }
            }
            // everything readable is routed, or the round read its share: the timer, then write what it made
            self.round_bytes = 0;
            let now = Instant::now();
            {
                let mut erp = lock(&self.erp);
                if self.ack_at.is_some_and(|t| now >= t) {
                    self.ack_at = None;
                    erp.fire_ack();
                }
                if erp.take_timer() {
                    self.ack_at = Some(now + ACK_DELAY);
                }
            }
            {
                let mut erp = lock(&self.erp);
                if erp.dur.on && erp.parked_due() {
                    erp.retry_parked(); // (before the store's calls: what they store is committed before any ack)
                }
                if erp.has_store_calls() {
                    return Ran::Store; // (nothing of the round is written before the store has what it vouches for)
                }
            }
            let mut closed = Vec::new();
            dispatcher.corked(&mut || closed = self.flush());
            if lock(&self.erp).has_store_calls() {
                return Ran::Store; // (parked copies routed again finished entries: the store launches the next)
            }
            if !closed.is_empty() || !self.slow.is_empty() {
                // (handed to the control plane at once, not after the next wait: a client given up is told now)
                self.pending.extend(closed.into_iter().map(|c| (c, Incoming::Closed)));
                continue;
            }
            if control.iter().any(|c| c.readable()) {
                return Ran::Control;
            }
            if until.is_some_and(|u| now >= u) {
                return Ran::Deadline;
            }
            if self.links.values().any(|l| l.ch.readable()) {
                continue; // (a round that ended at its share: the next one reads on without waiting)
            }
            let mut wake = until;
            for t in [self.ack_at, self.queued().then(|| now + RETRY)].into_iter().flatten() {
                wake = Some(wake.map_or(t, |w| w.min(t)));
            }
            self.counters.waits += 1;
            let links = &self.links;
            let sample = self.counters.waits.is_multiple_of(WAIT_SAMPLE_EVERY);
            let w0 = if sample { thread_cpu_ns() } else { 0 };
            // (a link with frames waiting for credit wakes the loop when its peer makes room)
            let w = dispatcher.wait(wake, &mut || {
                links.values().any(|l| l.ch.readable() || l.out.front().is_some_and(|f| l.ch.writable(f.len())))
                    || control.iter().any(|c| c.readable())
            });
            if sample {
                self.counters.wait_cpu_ns += thread_cpu_ns().saturating_sub(w0) * WAIT_SAMPLE_EVERY;
            }
            match w {
                Waited::Interrupted => return Ran::Slice,
                // (a slice with nothing to do stays here: the next pass looks at every link again)
                Waited::Slice if entered.elapsed() >= self.return_every => return Ran::Slice,
                _ => {}
            }
        }
    }

    fn encode_outputs(&mut self) {
        let mut erp = lock(&self.erp);
        if !erp.pending() {
            return;
        }
        let links = &mut self.links;
        erp.take(|tp| {
            let Some(link) = links.get_mut(&(tp.peer as i64)) else { return };
            if let Some((first, copies)) = tp.events {
                let copy = |i: usize| {
                    let c: &Copy = &copies[i];
                    CopyFields {
                        event: fields(&c.event),
                        origin: c.origin,
                        mode: c.mode,
                        level: c.level,
                        hops: c.hops,
                        targets: &c.targets,
                        reached: &c.reached,
                        left: &c.left,
                    }
                };
                // (cannot fail: the routing's copies fit the wire; a batch that did not would be dropped)
                if let Ok(frames) = codec::encode_events(first, BATCH_TEXT, copies.len(), copy) {
                    link.out.extend(frames.into_iter().map(Arc::new));
                }
            }
            if let Some((upto, also)) = tp.ack {
                link.out.push(Arc::new(if upto >= 0 && also.is_empty() {
                    codec::encode_event_ack(upto as u64)
                } else {
                    codec::encode_event_ack_also(upto as u64, &also)
                }));
            }
        });
        let made = &mut self.made;
        erp.take_deliveries(|deliveries| {
            // clients that get the same events (the same indices) get the same bytes: the same frames,
            // written to each; a client's list is compared with the last few distinct ones made
            made.clear();
            let (lists, events) = (deliveries.lists, deliveries.events);
            for (k, (client, evs)) in lists.iter().enumerate() {
                let same = |j: &usize| lists[*j].1 == *evs;
                let g = match made.iter().rev().take(MADE_COMPARED).position(|(j, _)| same(j)) {
                    Some(back) => made.len() - 1 - back,
                    None => {
                        let frames = codec::encode_deliver(BATCH_TEXT, evs.len(), |i| fields(&events[evs[i] as usize])).unwrap_or_default();
                        made.push((k, frames.into_iter().map(Arc::new).collect()));
                        made.len() - 1
                    }
                };
                if let Some(link) = links.get_mut(client).filter(|l| !l.given_up) {
                    link.out.extend(made[g].1.iter().cloned());
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile_graph::ProfileGraph;
    use crate::routing::{NodeInfo, Snapshot};

    /// An in-memory channel end: frames to read, frames written, a credit limit.
    #[derive(Default)]
    struct Mem {
        inbox: Mutex<VecDeque<Vec<u8>>>,
        sent: Mutex<Vec<Vec<u8>>>,
        credit: Mutex<usize>,
        closed: Mutex<bool>,
    }

    impl FrameChannel for Mem {
        fn recv_frames(&self, max: usize, _buf: &mut dyn FnMut(usize) -> Vec<u8>, out: &mut Vec<Vec<u8>>) -> Result<(), Closed> {
            let mut q = self.inbox.lock().unwrap();
            if q.is_empty() && *self.closed.lock().unwrap() {
                return Err(Closed);
            }
            while out.len() < max {
                match q.pop_front() {
                    Some(f) => out.push(f),
                    None => break,
                }
            }
            Ok(())
        }
        fn readable(&self) -> bool {
            !self.inbox.lock().unwrap().is_empty() || *self.closed.lock().unwrap()
        }
        fn writable(&self, _len: usize) -> bool {
            *self.credit.lock().unwrap() > 0 || *self.closed.lock().unwrap()
        }
        fn try_send(&self, frame: &[u8]) -> Sent {
            if *self.closed.lock().unwrap() {
                return Sent::Closed;
            }
            let mut c = self.credit.lock().unwrap();
            if *c == 0 {
                return Sent::Busy;
            }
            *c -= 1;
            self.sent.lock().unwrap().push(frame.to_vec());
            Sent::Sent
        }
    }

    /// A dispatcher whose waits never block (the tests' channels are filled before the run): nothing
    /// ready is a wait a signal interrupted.
    struct NoWait;

    impl Dispatcher for NoWait {
        fn wait(&self, _until: Option<Instant>, ready: &mut dyn FnMut() -> bool) -> Waited {
            if ready() {
                Waited::Ready
            } else {
                Waited::Interrupted
            }
        }
        fn corked(&self, f: &mut dyn FnMut()) {
            f()
        }
    }

    fn publish_frame(ts: u64, seq: u64, sig: &str, vals: &str) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&PUBLISH.to_le_bytes());
        b.extend_from_slice(&ts.to_le_bytes());
        b.extend_from_slice(&seq.to_le_bytes());
        for part in [sig.as_bytes(), vals.as_bytes(), b"pay"] {
            b.extend_from_slice(&(part.len() as u64).to_le_bytes());
            b.extend_from_slice(part);
        }
        b
    }

    /// A broker 1 with a gateway to broker 2 (level 0) and two clients: publications are delivered
    /// to the subscribed client, go down to the neighbour (interested) and climb to it (the decider of
    /// the super-cluster), and what is not the engine's goes to the control plane in its place.
    #[test]
    fn a_round_delivers_routes_and_hands_the_rest_up_in_order() {
        let levels = 3;
        let (me, other) = (1u64, 2u64);
        let mut erp = Erp::new(me, levels);
        let mut snap = Snapshot { version: 1, deciders: vec![Vec::new(); 5], ..Snapshot::default() };
        snap.links.insert(other, 0);
        snap.nodes.insert(me, NodeInfo { level: 0, cost: 0.0, hop: None, edges: vec![(other, 0.0)], vertex_hop: None });
        snap.nodes.insert(other, NodeInfo { level: 0, cost: 0.0, hop: Some(other), edges: vec![(me, 0.0)], vertex_hop: Some(other) });
        snap.deciders[1] = vec![me, other];
        snap.deciders[2] = vec![other];
        snap.decided = 1 << 1; // (a broker with a gateway decides its cluster)
        erp.routing.set(snap);
        let cluster = Arc::new(Mutex::new(ProfileGraph::new()));
        cluster.lock().unwrap().add(&[("a", "*")], other as i128, 1); // the neighbour has a subscriber
        erp.set_graphs(vec![(1, cluster)]);
        let local = Arc::new(Mutex::new(ProfileGraph::new()));
        local.lock().unwrap().add(&[("a", "*")], -1, 1);
        erp.set_local(local);
        let mut eng = Engine::new(Arc::new(Mutex::new(erp)));
        let (gw, c1, c2) = (Arc::new(Mem::default()), Arc::new(Mem::default()), Arc::new(Mem::default()));
        *gw.credit.lock().unwrap() = 1;
        *c1.credit.lock().unwrap() = 10;
        eng.add_link(other as i64, gw.clone(), Kind::Broker, None);
        eng.add_link(-1, c1.clone(), Kind::Client, Some(("sub".into(), 1)));
        eng.add_link(-2, c2.clone(), Kind::Client, Some(("pub".into(), 7)));
        c2.inbox.lock().unwrap().extend([
            publish_frame(5, 0, "a:int", "i1"),
            b"\x02\x00subscribe".to_vec(),       // not the engine's: handed up in its place
            publish_frame(5, 1, "a:int", "i+2"), // not canonical: handed up
            publish_frame(5, 2, "a:int", "i3"),
        ]);
        eng.receive(&[-2, -1]);
        assert_eq!(eng.process(), Some(Item::Frame(-2, b"\x02\x00subscribe".to_vec())));
        assert!(matches!(eng.process(), Some(Item::Frame(-2, _))));
        assert_eq!(eng.process(), None);
        eng.queue(-1, [b"control first".to_vec()]);
        assert!(eng.flush().is_empty());
        let got = c1.sent.lock().unwrap().clone();
        assert_eq!(got[0], b"control first");
        assert_eq!(got.len(), 2); // one deliver of both events
        assert_eq!(&got[1][..2], &codec::DELIVER.to_le_bytes());
        // the gateway had credit for one frame: the events batch went, nothing else waited
        let sent = gw.sent.lock().unwrap().clone();
        let mut refs = Vec::new();
        assert_eq!(sent.len(), 1);
        assert_eq!(codec::decode_events(&sent[0], &mut refs).unwrap(), 0);
        assert_eq!(
            refs.iter().map(|c| (c.publisher, c.sequence, c.mode, c.level)).collect::<Vec<_>>(),
            vec![("pub", 0, 1, 2), ("pub", 0, 2, 0), ("pub", 2, 1, 2), ("pub", 2, 2, 0)]
        );
        assert_eq!((refs[0].targets.to_vec(), refs[1].targets.to_vec()), (vec![other], vec![other]));
        assert!(!eng.queued());
        // the neighbour's acknowledgement is taken here; a closed client is handed up after its frames
        gw.inbox.lock().unwrap().push_back(codec::encode_event_ack(3));
        *c1.closed.lock().unwrap() = true;
        eng.receive(&[other as i64, -1]);
        assert_eq!(eng.process(), Some(Item::Closed(-1)));
        assert_eq!(lock(&eng.erp).in_flight(), 0);
    }

    /// The loop routes and writes what comes, hands the control plane its frames, says when the
    /// control plane's channels are readable, and waits otherwise.
    #[test]
    fn the_loop_returns_only_for_the_control_plane() {
        let mut erp = Erp::new(1, 3);
        let local = Arc::new(Mutex::new(ProfileGraph::new()));
        local.lock().unwrap().add(&[("a", "*")], -1, 1);
        erp.set_local(local);
        let mut eng = Engine::new(Arc::new(Mutex::new(erp)));
        let (sub, publ, ctl) = (Arc::new(Mem::default()), Arc::new(Mem::default()), Arc::new(Mem::default()));
        *sub.credit.lock().unwrap() = 10;
        eng.add_link(-1, sub.clone(), Kind::Client, Some(("sub".into(), 1)));
        eng.add_link(-2, publ.clone(), Kind::Client, Some(("pub".into(), 1)));
        publ.inbox.lock().unwrap().extend([publish_frame(1, 0, "a:int", "i1"), b"\x02\x00other".to_vec(), publish_frame(1, 1, "a:int", "i2")]);
        let control: Vec<Arc<dyn FrameChannel>> = vec![ctl.clone()];
        assert_eq!(eng.run(&NoWait, &control, None), Ran::Item(Item::Frame(-2, b"\x02\x00other".to_vec())));
        assert_eq!(eng.run(&NoWait, &control, None), Ran::Slice); // nothing left: it waited (a signal came)
        assert_eq!(sub.sent.lock().unwrap().len(), 1); // one delivery of both (the round's outputs go together)
        ctl.inbox.lock().unwrap().push_back(b"hello".to_vec());
        assert_eq!(eng.run(&NoWait, &control, None), Ran::Control);
        assert_eq!(ctl.inbox.lock().unwrap().len(), 1); // (watched, not read)
        ctl.inbox.lock().unwrap().clear();
        assert_eq!(eng.run(&NoWait, &control, Some(Instant::now())), Ran::Deadline);
    }

    /// A dispatcher whose waits end in slices with nothing ready; the fourth makes the control channel
    /// readable.
    struct Slices {
        waits: Mutex<u32>,
        control: Arc<Mem>,
    }

    impl Dispatcher for Slices {
        fn wait(&self, _until: Option<Instant>, ready: &mut dyn FnMut() -> bool) -> Waited {
            let mut n = self.waits.lock().unwrap();
            *n += 1;
            if *n == 4 {
                self.control.inbox.lock().unwrap().push_back(b"hello".to_vec());
            }
            if ready() {
                Waited::Ready
            } else {
                Waited::Slice
            }
        }
        fn corked(&self, f: &mut dyn FnMut()) {
            f()
        }
    }

    /// Slices with nothing to do keep the loop in the engine (no return to the control plane for each);
    /// after `return_every` in slices it returns.
    #[test]
    fn slices_with_nothing_to_do_stay_in_the_loop_until_return_every() {
        let mut eng = Engine::new(Arc::new(Mutex::new(Erp::new(1, 3))));
        let ctl = Arc::new(Mem::default());
        let control: Vec<Arc<dyn FrameChannel>> = vec![ctl.clone()];
        let d = Slices { waits: Mutex::new(0), control: ctl.clone() };
        assert_eq!(eng.run(&d, &control, None), Ran::Control);
        assert_eq!(*d.waits.lock().unwrap(), 4); // three slices passed inside the call
        ctl.inbox.lock().unwrap().clear();
        eng.return_every = Duration::ZERO; // (as if that long had passed)
        assert_eq!(eng.run(&d, &control, None), Ran::Slice);
        assert_eq!(*d.waits.lock().unwrap(), 5);
    }

    /// Durable mode, a storage broker: a copy delivered here is handed to the store (a store call) and the
    /// round comes back to the control plane before anything is written; its acknowledgement goes out only
    /// with a flush that does not hold it (the store committed).
    #[test]
    fn a_storage_brokers_round_waits_for_the_store_before_its_acknowledgement() {
        let (me, other) = (1u64, 2u64);
        let mut erp = Erp::new(me, 3);
        let mut snap = Snapshot { version: 1, deciders: vec![Vec::new(); 5], ..Snapshot::default() };
        snap.links.insert(other, 0);
        snap.nodes.insert(other, NodeInfo { level: 0, cost: 0.0, hop: Some(other), edges: vec![(me, 0.0)], vertex_hop: Some(other) });
        erp.routing.set(snap);
        let local = Arc::new(Mutex::new(ProfileGraph::new()));
        local.lock().unwrap().add(&[("a", "*")], -1000, 1); // a homed client's profile
        erp.set_local(local);
        erp.set_durable();
        erp.set_durable_state(false, 0, true, 0);
        let mut eng = Engine::new(Arc::new(Mutex::new(erp)));
        let gw = Arc::new(Mem::default());
        *gw.credit.lock().unwrap() = 10;
        eng.add_link(other as i64, gw.clone(), Kind::Broker, None);
        let ev = EventFields { timestamp: 1, sequence: 0, incarnation: 0, publisher: b"p", signature: b"a:int", values: b"i1", payload: b"" };
        let c = CopyFields { event: ev, origin: other, mode: crate::erp::DOWN, level: 0, hops: 1, targets: &[me], reached: &[], left: &[] };
        gw.inbox.lock().unwrap().extend(codec::encode_events(0, BATCH_TEXT, 1, |_| c).unwrap());
        assert_eq!(eng.run(&NoWait, &[], None), Ran::Store);
        assert!(gw.sent.lock().unwrap().is_empty()); // nothing of the round before the store has it
        let calls = lock(&eng.erp).take_store_calls();
        assert!(matches!(&calls[..], [crate::erp::StoreCall::Match(e, peers)] if e.sequence == 0 && peers == &vec![-1000]));
        eng.hold_acks(true); // the store could not commit
        assert!(eng.flush().is_empty());
        assert!(gw.sent.lock().unwrap().is_empty());
        eng.hold_acks(false); // it did
        assert!(eng.flush().is_empty());
        assert_eq!(gw.sent.lock().unwrap().clone(), vec![codec::encode_event_ack(0)]);
    }

    #[test]
    fn a_decoded_list_is_kept_in_its_allocation_between_frames() {
        let frame = vec![0u8; 8];
        let mut v: Vec<CopyRef<'_>> = Vec::with_capacity(300);
        v.push(CopyRef {
            origin: 1,
            timestamp: 2,
            sequence: 3,
            incarnation: 4,
            hops: 0,
            mode: codec::DOWN,
            level: 0,
            targets: codec::Units(&frame),
            reached: codec::Units(&frame[..0]),
            left: codec::Units(&frame[..0]),
            publisher: "p",
            signature: "",
            values: "",
            payload: &frame,
        });
        let at = v.as_ptr() as usize;
        let kept: Vec<CopyRef<'static>> = reuse(v);
        assert_eq!((kept.len(), kept.capacity(), kept.as_ptr() as usize), (0, 300, at));
    }

    /// A client that does not read: once more than the limit waits for it, the engine drops its queue,
    /// writes nothing more to it (a later frame would be a gap it could not see), and hands it to the
    /// control plane as a slow consumer, saying why; a client that reads gets every event meanwhile.
    #[test]
    fn a_client_that_does_not_read_is_given_up_past_the_limit_and_the_others_go_on() {
        let mut erp = Erp::new(1, 3);
        let local = Arc::new(Mutex::new(ProfileGraph::new()));
        local.lock().unwrap().add(&[("a", "*")], -1, 1);
        local.lock().unwrap().add(&[("a", "*")], -2, 1);
        erp.set_local(local);
        let mut eng = Engine::new(Arc::new(Mutex::new(erp)));
        eng.client_queue_limit = 4096;
        eng.return_every = Duration::ZERO;
        let (reader, stuck, publisher) = (Arc::new(Mem::default()), Arc::new(Mem::default()), Arc::new(Mem::default()));
        *reader.credit.lock().unwrap() = usize::MAX;
        *stuck.credit.lock().unwrap() = 2; // its channel takes two frames, then nothing more
        eng.add_link(-1, reader.clone(), Kind::Client, Some(("reader".into(), 1)));
        eng.add_link(-2, stuck.clone(), Kind::Client, Some(("stuck".into(), 1)));
        eng.add_link(-3, publisher.clone(), Kind::Client, Some(("pub".into(), 1)));
        let mut given_up = None;
        for seq in 0..200u64 {
            publisher.inbox.lock().unwrap().push_back(publish_frame(5, seq, "a:int", "i1"));
            match eng.run(&NoWait, &[], None) {
                Ran::Item(Item::Slow(code, why)) => {
                    assert!(given_up.is_none(), "told once");
                    given_up = Some((seq, code, why));
                    eng.remove_link(code); // (as the control plane does)
                }
                Ran::Slice => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        let (seq, code, why) = given_up.expect("the client that does not read was given up");
        assert_eq!(code, -2);
        assert!(why.starts_with("slow consumer: ") && why.contains("(limit 4096)"), "{why}");
        assert!(seq < 100, "given up once past the limit, at event {seq}");
        assert_eq!(stuck.sent.lock().unwrap().len(), 2, "nothing written to it after its queue was dropped");
        assert_eq!(eng.counters.slow_clients, 1);
        // the client that reads got all 200 events, in order
        let mut got = Vec::new();
        for f in reader.sent.lock().unwrap().iter() {
            // a deliver: its number, the count, then a 38-byte head per event (timestamp, sequence, ...)
            assert_eq!(codec::message_number(f), Some(codec::DELIVER));
            let n = u64::from_le_bytes(f[2..10].try_into().unwrap()) as usize;
            let head = |i: usize| 10 + i * codec::DELIVERY_HEAD;
            got.extend((0..n).map(|i| u64::from_le_bytes(f[head(i) + 8..head(i) + 16].try_into().unwrap())));
        }
        assert_eq!(got, (0..200).collect::<Vec<_>>());
    }
}
