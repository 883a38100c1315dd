//! The monitor's data plane: its links and the forwarding loop.
//!
//! A link is a ring pair (the same structure as a UMP channel) with a
//! dispatcher of this core or with a neighbouring monitor named by the
//! routing tables.  One thread drains every inbound ring in batches: a
//! multi-hop message's VCI is looked up in the forwarding table, rewritten,
//! and the message goes out on the entry's link.  When that link's ring is
//! full, or messages already wait for it, the message joins that link's
//! queue (`link_queue.rs`): one FIFO per channel direction, so order is kept
//! per channel (as Barrelfish does), served by deficit round robin over the
//! channels, so a flooding channel cannot hold another's messages back
//! (issue 16 §2).  The forwarder keeps a monitor link's ring short
//! ([`LINK_FAIR_SLOTS`]): what waits is ordered fairly here, not first come
//! first served in the ring.  The credit window bounds what the queues can
//! hold.
//!
//! An unknown VCI (a forged one, or a channel already torn down) is dropped
//! and counted: a data frame under `dropped`, a teardown or credit frame
//! under `late` (both ends closing at once send teardowns that cross, and
//! the second finds the entries gone: that is not a lost message).  A TEARDOWN is forwarded, then the channel's entries here are
//! removed.  A link whose peer dies takes every channel through it down: a
//! TEARDOWN goes out on the other side of each.
//!
//! Control never waits behind data here: bind and teardown decisions are
//! made by the control threads (over the control sockets) and only touch the
//! table under the same lock, between forwarding rounds.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::json;

use crate::idle_poll::{poll_cap, IdlePoll, PollStatus};
use crate::link_queue::{LinkQueue, QUANTUM};
use crate::multicast::table::GroupTable;
use crate::vci::{Entry, ForwardTable, LinkId};
use multihop_base::error::ErrorKind;
use multihop_base::park::{relay_spin_budget, spin_until, wait_until, Doorbell, Waited};
use multihop_base::ringpair::RingPair;
use multihop_base::wire::multicast::is_group_frame;
use multihop_base::wire::{messages_in, Header, Kind, DIR_TO_SERVER, HEADER_BYTES};

/// One step in this many has its thread CPU time measured (a system call).
const STEP_SAMPLE_EVERY: u64 = 64;

/// CLOCK_MONOTONIC in milliseconds (convergecast deadlines of the group table).
fn monotonic_ms() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// CPU time of the calling thread, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out pointer; CLOCK_THREAD_CPUTIME_ID always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Ring slots a monitor fills at most on a link to another monitor before
/// the rest waits in its fair queue: 16 KiB, 128 messages of 64 bytes (a
/// window-64 stream of small messages never waits). A message that arrives
/// behind a flood waits for at most this much in the ring plus one turn of
/// each other channel in the queue. Links to dispatchers are not limited:
/// their channels all belong to one process.
pub(crate) const LINK_FAIR_SLOTS: usize = 256;

/// The deficit round robin quantum of this monitor's link queues: the
/// environment's `MULTIHOP_LINK_QUANTUM` (bytes; for benchmarks that compare
/// against an unfair queue: a quantum of a gigabyte serves each channel's
/// whole backlog in turn), else `link_queue::QUANTUM`.
fn link_quantum() -> usize {
    std::env::var("MULTIHOP_LINK_QUANTUM").ok().and_then(|v| v.parse().ok()).filter(|&q| q > 0).unwrap_or(QUANTUM)
}

/// Passes over the inbound rings in one step before waking readers.
const DRAIN_PASSES: usize = 4;

/// A TEARDOWN frame for `vci` made by a monitor (monitors route by VCI
/// alone, so the direction field is not read).
fn teardown_frame(vci: u64) -> [u8; HEADER_BYTES] {
    Header { vci, dir: DIR_TO_SERVER, kind: Kind::Teardown, flags: 0, ack: 0 }.encode()
}

/// Who is at the other end of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LinkPeer {
    Monitor(u32),
    Dispatcher(u64),
}

struct LinkSlot {
    ch: Arc<RingPair>,
    peer: LinkPeer,
    queue: LinkQueue,
    forwarded_out: u64,
    /// Messages written this round whose reader has not been rung yet.
    unrung: bool,
}

/// Links, forwarding table and counters, behind one lock.
pub(crate) struct Fwd {
    links: Vec<Option<LinkSlot>>,
    pub table: ForwardTable,
    pub forwarded: u64,
    /// Data messages in the DATA frames forwarded (a BATCH frame counts its messages).
    pub messages: u64,
    pub dropped: u64,
    /// Teardown and credit frames for a VCI with no entry (crossed teardowns).
    pub late: u64,
    pub malformed: u64,
    /// Largest number of messages any link queue ever held.
    pub max_queue: usize,
    /// Bytes per turn in the link queues.
    quantum: usize,
    /// Fan-out entries of group frames (`multicast/table.rs`).
    pub group: GroupTable,
}

impl Fwd {
    fn new() -> Fwd {
        Fwd {
            links: Vec::new(),
            table: ForwardTable::new(),
            forwarded: 0,
            messages: 0,
            dropped: 0,
            late: 0,
            malformed: 0,
            max_queue: 0,
            quantum: link_quantum(),
            group: GroupTable::new(),
        }
    }

    pub(crate) fn add_link(&mut self, ch: RingPair, peer: LinkPeer) -> LinkId {
        if matches!(peer, LinkPeer::Monitor(_)) {
            ch.limit_fill(LINK_FAIR_SLOTS);
        }
        let slot = LinkSlot { ch: Arc::new(ch), peer, queue: LinkQueue::new(self.quantum), forwarded_out: 0, unrung: false };
        if let Some(i) = self.links.iter().position(|l| l.is_none()) {
            self.links[i] = Some(slot);
            i as LinkId
        } else {
            self.links.push(Some(slot));
            (self.links.len() - 1) as LinkId
        }
    }

    pub(crate) fn link_to(&self, peer: LinkPeer) -> Option<LinkId> {
        self.links.iter().position(|l| l.as_ref().is_some_and(|l| l.peer == peer)).map(|i| i as LinkId)
    }

    /// Who is at the other end of `link` (the handles of a message follow
    /// its channel's entries to the same peer, over the control sockets).
    pub(crate) fn peer_of(&self, link: LinkId) -> Option<LinkPeer> {
        self.links.get(link as usize).and_then(|l| l.as_ref()).map(|l| l.peer)
    }

    pub(crate) fn monitor_links(&self) -> Vec<u32> {
        self.links
            .iter()
            .flatten()
            .filter_map(|l| match l.peer {
                LinkPeer::Monitor(c) => Some(c),
                LinkPeer::Dispatcher(_) => None,
            })
            .collect()
    }

    /// Queue a message of the channel `vci` names on `out`, or send it now
    /// if nothing waits for that link.
    fn send_or_queue(&mut self, out: LinkId, vci: u64, msg: &[u8]) -> bool {
        let Some(Some(slot)) = self.links.get_mut(out as usize) else {
            return false;
        };
        if slot.queue.is_empty() {
            match slot.ch.try_send_quiet(&[msg]) {
                Ok(()) => {
                    slot.forwarded_out += 1;
                    slot.unrung = true;
                    return true;
                }
                Err(e) if e.kind == ErrorKind::TxBusy => {}
                Err(_) => return false, // dead link: torn down when its turn comes
            }
        }
        slot.queue.push(vci, msg);
        self.max_queue = self.max_queue.max(slot.queue.len());
        true
    }

    /// Forward one message that arrived on `link`.
    fn handle(&mut self, link: LinkId, msg: &mut [u8]) {
        self.handle_in_run(link, msg, &mut None);
    }

    /// Forward one message of a run read from `link` in one go, under one
    /// hold of the lock: `last` keeps the entry of the previous message's
    /// VCI, so a batch of one channel is looked up once (a TEARDOWN, the
    /// only change to the table made here, forgets it).
    fn handle_in_run(&mut self, link: LinkId, msg: &mut [u8], last: &mut Option<(u64, Entry)>) {
        if is_group_frame(msg) {
            let mut out = Vec::new();
            self.group.on_frame(link, msg, monotonic_ms(), &mut out);
            self.send_group(out);
            return;
        }
        let h = match Header::decode(msg) {
            Ok(h) => h,
            Err(_) => {
                self.malformed += 1;
                return;
            }
        };
        let e = match *last {
            Some((vci, e)) if vci == h.vci => e,
            _ => {
                let Some(e) = self.table.lookup(link, h.vci).copied() else {
                    match h.kind {
                        Kind::Data => self.dropped += 1,
                        Kind::Teardown | Kind::Dummy => self.late += 1,
                    }
                    return;
                };
                *last = Some((h.vci, e));
                e
            }
        };
        Header::rewrite_vci(msg, e.out_vci);
        if self.send_or_queue(e.out_link, e.out_vci, msg) {
            self.forwarded += 1;
            if h.kind == Kind::Data {
                self.messages += messages_in(h.flags, msg);
            }
        }
        if h.kind == Kind::Teardown {
            self.table.remove_pair(link, h.vci);
            *last = None;
        }
    }

    /// Forward whatever is in `link`'s ring now (bounded: the ring's size).
    fn drain(&mut self, link: LinkId) {
        let Some(Some(slot)) = self.links.get(link as usize) else { return };
        let ch = slot.ch.clone();
        let mut scratch = Vec::new();
        for _ in 0..1_000_000 {
            let got = ch.try_recv_many(1024, &mut |len, copy| {
                scratch.resize(len, 0);
                copy(&mut scratch);
                self.handle(link, &mut scratch);
                Ok(true)
            });
            if !matches!(got, Ok(n) if n > 0) {
                break;
            }
        }
    }

    /// Forward whatever is still in `link`'s ring (its peer is gone, so
    /// nothing new arrives), then tear it down. A process that sends, closes
    /// and exits must not lose its last messages or its TEARDOWN.
    pub(crate) fn drain_and_remove(&mut self, link: LinkId) {
        self.drain(link);
        self.remove_link(link);
    }

    /// A dispatcher closed the channel it sends to us with `vci` but its
    /// link was too full for the TEARDOWN: forward what it wrote before,
    /// then the TEARDOWN, as if it had come in band.
    pub(crate) fn teardown_after_drain(&mut self, link: LinkId, vci: u64) {
        self.drain(link);
        let mut hdr = teardown_frame(vci);
        self.handle(link, &mut hdr);
        self.ring_unrung();
    }

    /// Send what the group table decided (group frames share the links'
    /// queues under VCI 0: one FIFO per link for all of them).
    pub(crate) fn send_group(&mut self, out: Vec<(LinkId, Vec<u8>)>) {
        for (l, m) in out {
            self.send_or_queue(l, 0, &m);
        }
    }

    /// Tear down every channel through `link` and forget the link.
    pub(crate) fn remove_link(&mut self, link: LinkId) {
        let mut out = Vec::new();
        self.group.remove_link(link, &mut out);
        self.send_group(out);
        for ((l, v), e) in self.table.entries_on(link) {
            let hdr = teardown_frame(e.out_vci);
            self.send_or_queue(e.out_link, e.out_vci, &hdr);
            self.table.remove_pair(l, v);
        }
        // Left now: halves of binds still in flight that lead into `link`.
        // Their bind finds its entry gone and tears the other side down.
        for ((l, v), _) in self.table.entries_to(link) {
            self.table.remove_pair(l, v);
        }
        if let Some(slot) = self.links.get_mut(link as usize) {
            *slot = None;
        }
        self.ring_unrung();
    }

    /// Send a TEARDOWN for `vci` on `link` (a bind that completed after its
    /// channel was torn down on this side).
    pub(crate) fn send_teardown(&mut self, link: LinkId, vci: u64) {
        let hdr = teardown_frame(vci);
        self.send_or_queue(link, vci, &hdr);
        self.ring_unrung();
    }

    /// Move queued messages onto their rings while they fit, in the fair
    /// order of each link's queue.
    fn flush(&mut self) -> usize {
        let mut n = 0;
        for slot in self.links.iter_mut().flatten() {
            while let Some(m) = slot.queue.front() {
                if slot.ch.try_send_quiet(&[m]).is_err() {
                    break;
                }
                slot.queue.pop();
                slot.forwarded_out += 1;
                slot.unrung = true;
                n += 1;
            }
        }
        n
    }

    /// One forwarding round: flush queues, then drain every inbound ring
    /// until a pass finds nothing new (at most [`DRAIN_PASSES`] passes), then
    /// wake each reader once. A neighbour monitor writing a burst is read
    /// whole, so the dispatcher behind us is woken once per burst, not once
    /// per fragment of it (each wake costs it a context switch on our CPU).
    /// Returns the frames moved, the messages among them (channel data, a
    /// BATCH frame counting its messages, and group frames), and whether a
    /// dispatcher was woken.
    fn step(&mut self, scratch: &mut Vec<u8>) -> (usize, u64, bool) {
        let moved = |f: &Fwd| f.messages + f.group.forwarded;
        let messages = moved(self);
        let mut n = self.flush();
        for _ in 0..DRAIN_PASSES {
            let k = self.drain_pass(scratch);
            n += k;
            if k == 0 {
                break;
            }
        }
        let woke = self.ring_unrung();
        (n, moved(self) - messages, woke)
    }

    /// Drain every inbound ring once (at most 64 messages each).
    fn drain_pass(&mut self, scratch: &mut Vec<u8>) -> usize {
        let mut n = 0;
        let mut dead = Vec::new();
        for i in 0..self.links.len() {
            let Some(slot) = &self.links[i] else { continue };
            let ch = slot.ch.clone();
            let mut last = None;
            let got = ch.try_recv_many(64, &mut |len, copy| {
                scratch.resize(len, 0);
                copy(scratch);
                self.handle_in_run(i as LinkId, scratch, &mut last);
                Ok(true)
            });
            match got {
                Ok(k) => n += k,
                Err(e) if e.kind == ErrorKind::ChannelClosed => dead.push(i as LinkId),
                Err(_) => self.malformed += 1,
            }
        }
        for l in dead {
            self.remove_link(l);
        }
        n
    }

    /// One wake-up per link, however many messages went out on it. Returns
    /// true when a parked dispatcher of this core was woken.
    fn ring_unrung(&mut self) -> bool {
        let mut woke = false;
        for slot in self.links.iter_mut().flatten() {
            if std::mem::take(&mut slot.unrung) && slot.ch.ring_peer() {
                woke |= matches!(slot.peer, LinkPeer::Dispatcher(_));
            }
        }
        woke
    }

    fn any_ready(&self) -> bool {
        self.links.iter().flatten().any(|l| l.ch.readable() || l.queue.front().is_some_and(|m| l.ch.want_room(m.len())))
    }

    pub(crate) fn status(&self) -> serde_json::Value {
        let links: Vec<_> = self
            .links
            .iter()
            .enumerate()
            .filter_map(|(i, l)| l.as_ref().map(|l| (i, l)))
            .map(|(i, l)| {
                let (kind, peer) = match l.peer {
                    LinkPeer::Monitor(c) => ("monitor", c as u64),
                    LinkPeer::Dispatcher(d) => ("dispatcher", d),
                };
                json!({"id": i, "kind": kind, "peer": peer, "queued": l.queue.len(), "max_queued": l.queue.max_len(),
                    "queued_channels": l.queue.channels(), "max_overtaken": l.queue.max_overtaken(),
                    "quantum": l.queue.quantum(), "forwarded_out": l.forwarded_out})
            })
            .collect();
        let mut v = json!({
            "links": links,
            "forwarding_entries": self.table.len(),
            "forwarded": self.forwarded,
            "forwarded_messages": self.messages,
            "dropped": self.dropped,
            "late": self.late,
            "malformed": self.malformed,
            "max_queue": self.max_queue,
        });
        if let (Some(o), serde_json::Value::Object(g)) = (v.as_object_mut(), self.group.status()) {
            o.extend(g);
        }
        v
    }
}

/// The forwarding thread's handle.
pub(crate) struct Forwarder {
    fwd: Mutex<Fwd>,
    bell: Arc<Doorbell>,
    stop: AtomicBool,
    /// Times the forwarding thread parked on its doorbell (status only).
    parks: AtomicU64,
    /// Times it polled at idle priority instead of parking (status only).
    polls: AtomicU64,
    /// Thread CPU time (ns) of the sampled steps that moved messages, and
    /// the messages they moved (status only): what forwarding costs this
    /// monitor's CPU per message, wake-ups included, idle polling not.
    sampled_cpu_ns: AtomicU64,
    sampled_messages: AtomicU64,
    /// Times its starvation guard promoted it (status only).
    promotions: AtomicU64,
    /// Whether the process's scheduling group is ours to manage (a monitor).
    own_group: bool,
    /// The poller's status handle, once the loop runs.
    poll_status: Mutex<Option<PollStatus>>,
}

impl Forwarder {
    /// A forwarder waking on `bell`; with `own_group` its polling manages the
    /// process's scheduling group (`sched/session.rs`; monitors only).
    pub(crate) fn new(bell: Arc<Doorbell>, own_group: bool) -> Arc<Forwarder> {
        Arc::new(Forwarder {
            fwd: Mutex::new(Fwd::new()),
            bell,
            stop: AtomicBool::new(false),
            parks: AtomicU64::new(0),
            polls: AtomicU64::new(0),
            sampled_cpu_ns: AtomicU64::new(0),
            sampled_messages: AtomicU64::new(0),
            promotions: AtomicU64::new(0),
            own_group,
            poll_status: Mutex::new(None),
        })
    }

    /// Lock the data plane (control threads: bind, teardown, status).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Fwd> {
        multihop_base::sync::lock(&self.fwd)
    }

    /// The data plane's status, with the forwarding thread's own counters.
    /// Convergecasts whose time ran out give up first.
    pub(crate) fn status(&self) -> serde_json::Value {
        self.group_timers();
        let mut v = self.lock().status();
        v["parks"] = json!(self.parks.load(Ordering::Relaxed));
        v["polls"] = json!(self.polls.load(Ordering::Relaxed));
        v["sampled_cpu_ns"] = json!(self.sampled_cpu_ns.load(Ordering::Relaxed));
        v["sampled_messages"] = json!(self.sampled_messages.load(Ordering::Relaxed));
        v["poll_promotions"] = json!(self.promotions.load(Ordering::Relaxed));
        let poll = multihop_base::sync::lock(&self.poll_status).clone();
        v["sched_group"] = poll.map_or(serde_json::Value::Null, |p| p.group());
        v
    }

    /// Give up the convergecasts whose time ran out (`multicast/table.rs`). The
    /// idle loop calls it before parking, and a park lasts at most a slice
    /// (`park::PARK_SLICE`), so a deadline is kept to within a slice.
    fn group_timers(&self) {
        let mut f = self.lock();
        let mut out = Vec::new();
        f.group.expire(monotonic_ms(), &mut out);
        if !out.is_empty() {
            f.send_group(out);
            f.ring_unrung();
        }
    }

    /// Wake the forwarding thread (after changing links or queues).
    pub(crate) fn poke(&self) {
        self.bell.ring();
    }

    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.poke();
    }

    /// The forwarding loop; returns when stopped.
    pub(crate) fn run(&self) {
        let mut scratch = Vec::with_capacity(HEADER_BYTES + 4096);
        let mut poll = IdlePoll::start(poll_cap(), self.own_group);
        *multihop_base::sync::lock(&self.poll_status) = Some(poll.status_handle());
        let mut steps: u64 = 0;
        // What reading the thread clock itself adds to a sample.
        let clock_cost = (0..64).map(|_| thread_cpu_ns().wrapping_neg().wrapping_add(thread_cpu_ns())).min().unwrap_or(0);
        while !self.stop.load(Ordering::Relaxed) {
            steps = steps.wrapping_add(1);
            let sample = steps.is_multiple_of(STEP_SAMPLE_EVERY);
            let started = if sample { thread_cpu_ns() } else { 0 };
            let (n, messages, woke) = self.lock().step(&mut scratch);
            if sample && messages > 0 {
                let spent = thread_cpu_ns().saturating_sub(started).saturating_sub(clock_cost);
                self.sampled_cpu_ns.fetch_add(spent, Ordering::Relaxed);
                self.sampled_messages.fetch_add(messages, Ordering::Relaxed);
            }
            if woke {
                // The woken dispatcher shares our CPU. Under SCHED_IDLE it has
                // preempted us already; but a dispatcher of another session
                // (another autogroup) would wait out our time slice: give way.
                std::thread::yield_now();
            }
            if n > 0 {
                poll.on_work();
                continue;
            }
            self.group_timers();
            let budget = poll.budget();
            if !budget.is_zero() {
                poll.begin();
                self.polls.fetch_add(1, Ordering::Relaxed);
                let found = spin_until(budget, &mut || {
                    poll.beat();
                    self.stop.load(Ordering::Relaxed) || self.lock().any_ready()
                });
                if found {
                    continue;
                }
            }
            poll.before_park();
            self.promotions.store(poll.promotions(), Ordering::Relaxed);
            let w = wait_until(
                &self.bell,
                &self.parks,
                relay_spin_budget(),
                None,
                &mut || self.stop.load(Ordering::Relaxed) || self.lock().any_ready(),
                &mut || false,
            );
            if w == Waited::Interrupted {
                continue;
            }
        }
        poll.before_park();
    }
}
