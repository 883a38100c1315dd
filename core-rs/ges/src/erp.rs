//! The event routing protocol (ERP, routing paper 3.4-3.5) of one broker, sans-IO: the native twin
//! of `python/multihop/ges/erp.py` (the reference; read its module docstring for the protocol),
//! making the same decisions in the same order (a differential test runs whole simulated systems
//! with each and requires the same trace, event by event).
//!
//! The broker of the publishing client delivers to its own interested clients and starts the event
//! **up**: at each level the event reaches a decider of the publisher's unit of that level (found
//! inside the unit it is already in), which sends it **down** into each interested child; a broker
//! entered by a copy for unit T decides among T's children, recursively, down to the brokers that
//! deliver. Copies travel along best hops ([`crate::routing`]); copies of one event going the same
//! way are merged; the routing information (`reached`, `left`) is stripped of the levels below each
//! gateway crossed. Each gateway numbers its copies; the receiver acknowledges lazily; when a
//! gateway is lost its unacknowledged copies are routed again, first. Duplicates are dropped per
//! stream (publisher, incarnation) and role (delivering, deciding at a level, climbing at a level).
//!
//! Inputs: [`Erp::publish`], [`Erp::on_events`], [`Erp::on_ack`], [`Erp::link_down`],
//! [`Erp::client_gone`], [`Erp::fire_ack`]. Outputs: [`Erp::take`] (per neighbour: its copies,
//! numbered, and an acknowledgement), [`Erp::take_deliveries`] (per client: its events) and
//! [`Erp::take_timer`] (the acknowledgement timer asked for). No I/O, no clock. The Python event
//! path's remembered decisions (plans) are an optimisation of the interpreter only: they give the
//! same decisions as handling every copy in full, which is what this does.
//!
//! **Durable mode** ([`Erp::set_durable`], `erp.py`'s "Durable mode"): a copy is acknowledged only
//! once everything made of it is safe (its copies acknowledged by the next hops: causes, with the
//! acknowledgements' `also` lists), copies with no route are parked and routed again when the graph
//! changes, and a storage broker's store is told what to store and which entries every next hop has
//! as [`StoreCall`]s ([`Erp::take_store_calls`]), in the order the reference makes them: the driver
//! (the Python store) stores them and routes the entries it launches ([`Erp::originate`]).

use std::any::Any;
use std::sync::{Arc, Mutex};

use crate::address::{contains, level_of_difference, unit_id, unit_level};
use crate::fxhash::FxHashMap;
use crate::ordered::OrderedMap;
use crate::profile_graph::{Dest, Di, ProfileGraph, Scratch, Sym};
use crate::routing::Routing;
use crate::small::Small;
use crate::unacked::Unacked;

/// Most brokers a copy may pass (legs are loop-free; this is the safety net).
pub const TTL: u16 = 255;
/// Acknowledge a gateway at once when this many copies wait for it (else when the timer fires).
pub const ACK_EVERY: u64 = 64;
/// Event copy modes.
pub const UP: u8 = 1;
pub const DOWN: u8 = 2;
/// The duplicate filter's role of delivering to local clients (deciding at level l is -l, climbing l).
const DELIVER: i32 = 0;

/// The "hop" of targets with no route now (durable mode parks them).
const PARK: u64 = u64::MAX;

/// What a copy (or entry) being handled is owed to, in durable mode (`erp.py`'s `Cause`): a copy
/// that came from `peer` as link sequence `seq` in the link's `epoch`, or a stored entry routed from
/// here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    In { peer: u64, epoch: u64, seq: u64 },
    Entry(u64),
}

/// What the store of a storage broker must do (durable mode), in order.
#[derive(Debug)]
pub enum StoreCall {
    /// the event was delivered here and matched these homed clients' profile peers (`on_match`)
    Match(Arc<Event>, Vec<Dest>),
    /// every next hop acknowledged the copies of this entry (`route_done`)
    RouteDone(u64),
}

/// An event's identity (publisher, incarnation, timestamp, sequence).
type EvKey = (u32, u64, u64, u64);

fn ev_key(ev: &Event) -> EvKey {
    (ev.pub_id, ev.incarnation, ev.timestamp, ev.sequence)
}

/// A profile graph shared with the control plane (which changes it between rounds).
pub type SharedGraph = Arc<Mutex<ProfileGraph<Dest>>>;

fn lock(g: &SharedGraph) -> std::sync::MutexGuard<'_, ProfileGraph<Dest>> {
    g.lock().unwrap_or_else(|p| p.into_inner())
}

/// Bytes of an event's values and payload kept in the event itself (beyond, they go to the heap): a
/// reading of a few attributes with a short payload fits (the testbed's: ~20 bytes of values, 50 of
/// payload).
pub const TEXT_INLINE: usize = 120;

/// An event as brokers carry it: its id, signature and values as canonical text, its payload.
/// `publisher` and `signature` are interned by the [`Erp`] that made the event (ids `pub_id`,
/// `sig_id`). The values and the payload are kept together (`text`: the values' UTF-8, then the
/// payload), inline up to [`TEXT_INLINE`] bytes: making a small event allocates once (its `Arc`), a
/// larger one twice.
pub struct Event {
    pub publisher: Arc<str>,
    pub timestamp: u64,
    pub sequence: u64,
    pub incarnation: u64,
    pub signature: Arc<str>,
    /// the values' text (its first `values_len` bytes, valid UTF-8) and the payload (the rest)
    text: Small<u8, TEXT_INLINE>,
    values_len: u32,
    pub pub_id: u32,
    pub sig_id: u32,
    /// where each value lies in `values` (they are split by \x1f)
    spans: Small<(u32, u32), 8>,
    /// what the driver keeps with the event (the Python glue: the `EventData` it came as)
    pub attachment: Option<Box<dyn Any + Send + Sync>>,
}

impl Event {
    /// Its `i`-th value (in signature order) (`i` below the number of values).
    pub fn value(&self, i: usize) -> &str {
        let (a, b) = self.spans[i];
        &self.values()[a as usize..b as usize]
    }

    /// Its values as canonical text (split by \x1f).
    pub fn values(&self) -> &str {
        // SAFETY: `Erp::event`, the only maker of an `Event`, copied these bytes from a `&str` (valid
        // UTF-8) and set `values_len` to its length; the text is never written afterwards.
        unsafe { std::str::from_utf8_unchecked(&self.text[..self.values_len as usize]) }
    }

    /// Its payload.
    pub fn payload(&self) -> &[u8] {
        &self.text[self.values_len as usize..]
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Event({}, {}, {}, {}, {:?})", self.publisher, self.timestamp, self.sequence, self.incarnation, self.values())
    }
}

/// Events the routing let go of that nothing else holds, kept to be made again in place by
/// [`Erp::event`]: a broker makes one event per copy it gets and lets go of it when the next hop
/// acknowledges the copy (or once it is delivered), a few hundred at a time, and the allocator's
/// per-thread cache holds a few of a size, so most of those frees and the next mallocs went the
/// allocator's slow way (its bins, chunks merged and split again).
#[derive(Default)]
struct EventPool(Vec<Arc<Event>>);

/// Most events an [`EventPool`] keeps (~300 bytes each): a round's worth.
const EVENT_POOL: usize = 1024;

impl EventPool {
    /// Keep `ev` if nothing else holds it, it is small (its text and spans inline: a kept event never
    /// holds more than its own ~300 bytes) and the pool has room; else just let go of it.
    fn give(&mut self, mut ev: Arc<Event>) {
        // (a plain load first: most events let go of here are still held by another client's list or a
        // copy not acknowledged yet, and `get_mut`'s compare-and-swap would be wasted on them)
        if self.0.len() >= EVENT_POOL || Arc::strong_count(&ev) != 1 {
            return;
        }
        if let Some(e) = Arc::get_mut(&mut ev) {
            if e.text.is_inline() && e.spans.is_inline() {
                e.attachment = None; // (what the driver kept with it goes now, as it would have)
                self.0.push(ev);
            }
        }
    }

    /// An event nothing else holds, to be made again (the one after it is fetched into the cache
    /// meanwhile: a broker makes its events one after the other, and a kept event's memory is
    /// mostly no longer in the cache when it comes back).
    fn take(&mut self) -> Option<Arc<Event>> {
        let ev = self.0.pop();
        if let Some(next) = self.0.last() {
            prefetch(Arc::as_ptr(next));
        }
        ev
    }
}

/// Ask the CPU to bring in the cache lines of the `Arc` whose value `p` points at, its counts (the 16
/// bytes before the value) included: a hint, nothing is read and nothing can fault.
#[inline]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let at = p.cast::<i8>().wrapping_sub(16);
        let lines = (std::mem::size_of::<T>() + 16).div_ceil(64) + 1;
        for k in 0..lines {
            // SAFETY: a prefetch reads nothing and cannot fault, whatever the address (SSE, which every
            // x86_64 CPU has); the addresses are computed with wrapping arithmetic, never dereferenced.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(64 * k)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// An event with its routing information (`messages.EventCopy`).
#[derive(Clone, Debug)]
pub struct Copy {
    pub event: Arc<Event>,
    pub origin: u64,
    pub mode: u8,
    pub level: u8,
    pub targets: Units,
    pub reached: Units,
    pub hops: u16,
    pub left: Units,
}

pub use crate::address::Units;

/// A round's deliveries ([`Erp::take_deliveries`]): per client, in the order clients were first
/// delivered to, its events in order, as indices into `events`.
#[derive(Clone, Copy)]
pub struct Deliveries<'a> {
    pub lists: &'a [(i64, Vec<u32>)],
    pub events: &'a [Arc<Event>],
}

impl<'a> Deliveries<'a> {
    /// Client `k`'s events (the `k`th list), in order.
    pub fn events_of(&self, k: usize) -> impl ExactSizeIterator<Item = &'a Arc<Event>> + '_ {
        let events = self.events;
        self.lists[k].1.iter().map(move |&i| &events[i as usize])
    }
}

/// The counters of `EventRouting.counters`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub published: u64,
    pub delivered: u64,
    pub copies_in: u64,
    pub copies_out: u64,
    pub decisions: u64,
    pub duplicates: u64,
    pub ttl: u64,
    pub unroutable: u64,
    pub rerouted: u64,
    pub not_decider: u64,
    pub parked: u64,
    /// matches answered by the graph's remembered last match (`LastMatch`; not a counter of the
    /// reference, whose plans remember decisions their own way: left out of `items`)
    pub remembered_matches: u64,
}

impl Counters {
    /// `(name, value)` in the reference's order (`replayed`, of its plans, is 0 here).
    pub fn items(&self) -> [(&'static str, u64); 12] {
        [
            ("published", self.published),
            ("delivered", self.delivered),
            ("copies_in", self.copies_in),
            ("copies_out", self.copies_out),
            ("decisions", self.decisions),
            ("duplicates", self.duplicates),
            ("ttl", self.ttl),
            ("unroutable", self.unroutable),
            ("rerouted", self.rerouted),
            ("not_decider", self.not_decider),
            ("parked", self.parked),
            ("replayed", 0),
        ]
    }
}

/// What one neighbour gets from a round: its copies (numbered from the first), then maybe an
/// acknowledgement of what it sent. The copies are lent to [`Erp::take`]'s caller, which encodes
/// them; the routing keeps them afterwards (unacknowledged) without copying them.
#[derive(Debug)]
pub struct ToPeer<'a> {
    pub peer: u64,
    pub events: Option<(u64, &'a [Copy])>,
    /// `(upto, also)`: every copy up to `upto` and those in `also` (durable mode) were handled
    pub ack: Option<(i64, Vec<u64>)>,
}

/// What a graph's symbols are for the names of each signature (valid while the graph's generation
/// is `generation`).
#[derive(Default)]
struct Resolved {
    generation: u64,
    names: FxHashMap<u32, Vec<Option<Sym>>>,
    /// the graph's last match, for the next event that would walk the same way
    last: Option<LastMatch>,
}

/// A match remembered: the walk of an event of signature `sig_id` with `nvalues` values read the
/// first `read` of them, `prefix` (the values text up to the end of the last one read), and gave
/// `dests`; while the graph's [`ProfileGraph::changes`] stay `changes`, any such event whose text
/// starts with `prefix` followed by a separator (or nothing) walks the same way (a stream's events
/// mostly share the attributes profiles constrain, and differ in the others).
#[derive(Default)]
struct LastMatch {
    sig_id: u32,
    nvalues: usize,
    changes: u64,
    read: usize,
    prefix: Vec<u8>,
    dests: Dests,
}

impl LastMatch {
    fn fits(&self, ev: &Event, changes: u64) -> bool {
        if self.sig_id != ev.sig_id || self.nvalues != ev.spans.len() || self.changes != changes {
            return false;
        }
        // the first `read` values are the same texts: the same bytes, ending at the same separator
        self.read == 0 || (ev.spans[self.read - 1].1 as usize == self.prefix.len() && ev.values().as_bytes().starts_with(&self.prefix))
    }
}

/// Targets of a copy grouped by next hop, in the order the hops were first chosen.
type Fwd = Vec<(u64, Units)>;

/// Emptied forwarding lists an [`Erp`] keeps for reuse (a copy's routing takes two at most).
const FWD_SPARE: usize = 4;

/// Emptied per-neighbour and per-client output lists an [`Erp`] keeps for the next round's (a round
/// fills one per neighbour it sends to and one per client it delivers to).
const LIST_SPARE: usize = 64;

/// A match's destinations, ascending: held inline up to 8 (a broker's clients or a unit's children
/// matched by one event are mostly few), so a match allocates nothing.
type Dests = Small<Dest, 8>;

fn fwd_add(fwd: &mut Fwd, hop: u64, target: u64) {
    match fwd.iter_mut().find(|(h, _)| *h == hop) {
        Some((_, t)) => t.push(target),
        None => fwd.push((hop, Units::from_slice(&[target]))),
    }
}

/// The ERP state of one broker and what it reads of the control plane (see the module docs).
pub struct Erp {
    pub code: u64,
    pub levels: u32,
    pub routing: Routing,
    /// the profile graph of each level this broker decides (index = level)
    graphs: Vec<Option<SharedGraph>>,
    /// the local profile graph: destinations are client peer ids
    local: Option<SharedGraph>,
    scratch: Scratch,
    hits: Vec<Di>,
    /// per graph (by address; forgotten when the graphs are replaced): symbols resolved
    resolved: FxHashMap<usize, Resolved>,
    publishers: FxHashMap<Arc<str>, u32>,
    publisher_text: Vec<Arc<str>>,
    signatures: FxHashMap<Arc<str>, u32>,
    signature_names: Vec<(Arc<str>, Vec<Box<str>>)>,
    /// the publisher and signature of the last event made
    last_ids: (u32, u32),
    /// the duplicate filter: last `(timestamp, sequence)` per (publisher, incarnation, role)
    dedup: FxHashMap<(u32, u64, i32), (u64, u64)>,
    seq: FxHashMap<u64, u64>,
    /// peer -> the copies sent to it and not acknowledged, by number (this round's are in `out` until
    /// [`Erp::take`] lent them to be written: they move here then)
    pub unacked: FxHashMap<u64, Unacked<Copy>>,
    /// forwarding lists emptied by `send_down`, for the next copies (at most [`FWD_SPARE`])
    fwd_spare: Vec<Fwd>,
    recv: FxHashMap<u64, i64>,
    ack_due: OrderedMap<u64, u64>,
    ack_timer: bool,
    timer_wanted: bool,
    /// peer -> this round's copies for it (numbered up to `seq[peer]`)
    out: OrderedMap<u64, Vec<Copy>>,
    /// client -> this round's events for it, as indices into `delivered` (one reference to an event
    /// however many clients get it: a broker delivers most events to several)
    deliveries: OrderedMap<i64, Vec<u32>>,
    /// this round's events delivered to any client, in the order they were delivered
    delivered: Vec<Arc<Event>>,
    /// emptied lists of `out` and `deliveries` and the entries' list of each, for the next rounds
    /// (at most [`LIST_SPARE`] each)
    out_spare: Vec<Vec<Copy>>,
    deliveries_spare: Vec<Vec<u32>>,
    out_taken: Vec<(u64, Vec<Copy>)>,
    deliveries_taken: Vec<(i64, Vec<u32>)>,
    /// the numbers an acknowledgement settled (kept for its capacity)
    acked: Vec<u64>,
    /// events nothing else holds any more, to be made again in place (see [`EventPool`])
    event_pool: EventPool,
    pub counters: Counters,
    /// durable mode (see the module docs) and what it keeps
    pub dur: Durable,
}

/// Durable mode's state (`erp.py`'s fields of the same names).
#[derive(Default)]
pub struct Durable {
    pub on: bool,
    /// what the durability side says now (pushed before each call): a restarted broker that has not got
    /// its profiles back, the levels whose profiles it still misses (bit per level), whether it has a store
    pub restarting: bool,
    pub missing: u32,
    pub has_store: bool,
    /// per level (bit): the publisher's unit of that level has (or had) a decider inside this broker's
    /// unit one level down (`_had_deciders`), for the routing pushed
    pub had_deciders: u32,
    cause: Option<Cause>,
    open: FxHashMap<Cause, u32>,
    deps: FxHashMap<u64, FxHashMap<u64, Cause>>,
    inq: FxHashMap<u64, std::collections::BTreeSet<u64>>,
    done: FxHashMap<u64, Vec<u64>>,
    dup_hit: bool,
    ev_cause: FxHashMap<EvKey, Cause>,
    cause_ev: FxHashMap<Cause, EvKey>,
    listeners: FxHashMap<Cause, Vec<Cause>>,
    parked_n: FxHashMap<Cause, u32>,
    epoch: FxHashMap<u64, u64>,
    /// copies with no route now, routed again when the graph changes
    pub parked: Vec<(Option<Cause>, Copy)>,
    parked_at: Option<u64>,
    store_calls: Vec<StoreCall>,
    hold_acks: bool,
}

impl Erp {
    /// The event routing of broker `code` in a system of `levels` levels.
    pub fn new(code: u64, levels: u32) -> Self {
        Erp {
            code,
            levels,
            routing: Routing::new(code, levels),
            graphs: Vec::new(),
            local: None,
            scratch: Scratch::default(),
            hits: Vec::new(),
            resolved: FxHashMap::default(),
            publishers: FxHashMap::default(),
            publisher_text: Vec::new(),
            signatures: FxHashMap::default(),
            signature_names: Vec::new(),
            last_ids: (0, 0),
            dedup: FxHashMap::default(),
            seq: FxHashMap::default(),
            unacked: FxHashMap::default(),
            fwd_spare: Vec::new(),
            recv: FxHashMap::default(),
            ack_due: OrderedMap::default(),
            ack_timer: false,
            timer_wanted: false,
            out: OrderedMap::default(),
            deliveries: OrderedMap::default(),
            delivered: Vec::new(),
            out_spare: Vec::new(),
            deliveries_spare: Vec::new(),
            out_taken: Vec::new(),
            deliveries_taken: Vec::new(),
            acked: Vec::new(),
            event_pool: EventPool::default(),
            counters: Counters::default(),
            dur: Durable::default(),
        }
    }

    /// Turn durable mode on (before any event).
    pub fn set_durable(&mut self) {
        self.dur.on = true;
    }

    /// What the durability side says now (durable mode; see [`Durable`]).
    pub fn set_durable_state(&mut self, restarting: bool, missing: u32, has_store: bool, had_deciders: u32) {
        let d = &mut self.dur;
        d.restarting = restarting;
        d.missing = missing;
        d.has_store = has_store;
        d.had_deciders = had_deciders;
    }

    fn missing_profiles(&self, lvl: u32) -> bool {
        lvl < 32 && self.dur.missing & (1 << lvl) != 0
    }

    fn had_deciders(&self, lvl: u32) -> bool {
        lvl < 32 && self.dur.had_deciders & (1 << lvl) != 0
    }

    /// Whether the store has calls to do (durable mode).
    pub fn has_store_calls(&self) -> bool {
        !self.dur.store_calls.is_empty()
    }

    /// Hold every acknowledgement (durable mode: the store cannot write now, so what it was handed is
    /// not stored) until told otherwise; the held ones go out, merged, with the next take after that.
    pub fn hold_acks(&mut self, hold: bool) {
        self.dur.hold_acks = hold;
    }

    /// What the store must do, in order (durable mode); empties the list.
    pub fn take_store_calls(&mut self) -> Vec<StoreCall> {
        std::mem::take(&mut self.dur.store_calls)
    }

    // ---- what the control plane pushes ------------------------------------------------------

    /// The profile graphs of the levels this broker decides (`(level, graph)`), replacing the old.
    pub fn set_graphs(&mut self, graphs: Vec<(u32, SharedGraph)>) {
        self.resolved.clear();
        self.graphs.clear();
        for (lvl, g) in graphs {
            let i = lvl as usize;
            if self.graphs.len() <= i {
                self.graphs.resize(i + 1, None);
            }
            self.graphs[i] = Some(g);
        }
    }

    /// The local profile graph (destinations: client peer ids).
    pub fn set_local(&mut self, g: SharedGraph) {
        self.resolved.clear();
        self.local = Some(g);
    }

    // ---- events ------------------------------------------------------------------------------

    /// An event, its publisher and signature interned here.
    #[allow(clippy::too_many_arguments)]
    pub fn event(
        &mut self,
        publisher: &str,
        timestamp: u64,
        sequence: u64,
        incarnation: u64,
        signature: &str,
        values: &str,
        payload: &[u8],
        attachment: Option<Box<dyn Any + Send + Sync>>,
    ) -> Arc<Event> {
        // (the events of a batch mostly share publisher and signature: the last ones are looked at first)
        let (lp, ls) = self.last_ids;
        let pub_id =
            match self.publisher_text.get(lp as usize).filter(|t| ***t == *publisher).map(|_| lp).or_else(|| self.publishers.get(publisher).copied())
            {
                Some(k) => k,
                None => {
                    let t: Arc<str> = publisher.into();
                    self.publisher_text.push(t.clone());
                    self.publishers.insert(t, (self.publisher_text.len() - 1) as u32);
                    (self.publisher_text.len() - 1) as u32
                }
            };
        let sig_id = match self
            .signature_names
            .get(ls as usize)
            .filter(|t| *t.0 == *signature)
            .map(|_| ls)
            .or_else(|| self.signatures.get(signature).copied())
        {
            Some(k) => k,
            None => {
                let t: Arc<str> = signature.into();
                // (name:type) pairs joined by \x1f; the name is what precedes the last ':'
                let names = if signature.is_empty() {
                    Vec::new()
                } else {
                    signature.split('\x1f').map(|p| p.rsplit_once(':').map(|(n, _)| n).unwrap_or(p).into()).collect()
                };
                self.signature_names.push((t.clone(), names));
                self.signatures.insert(t, (self.signature_names.len() - 1) as u32);
                (self.signature_names.len() - 1) as u32
            }
        };
        self.last_ids = (pub_id, sig_id);
        // (a byte scan: the separator is ASCII, and values are short, so no searcher is set up)
        let mut spans = Small::new();
        let mut at = 0u32;
        for (k, &b) in values.as_bytes().iter().enumerate() {
            if b == 0x1f {
                spans.push((at, k as u32));
                at = k as u32 + 1;
            }
        }
        spans.push((at, values.len() as u32));
        let (publisher, signature) = (&self.publisher_text[pub_id as usize], &self.signature_names[sig_id as usize].0);
        if let Some(mut ev) = self.event_pool.take() {
            if let Some(e) = Arc::get_mut(&mut ev) {
                // (made again in place: the inline text and spans are overwritten, nothing allocated;
                // the interned texts are mostly the ones it had, kept without touching their counts)
                e.text.set_from_parts(&[values.as_bytes(), payload]);
                if !Arc::ptr_eq(&e.publisher, publisher) {
                    e.publisher = publisher.clone();
                }
                if !Arc::ptr_eq(&e.signature, signature) {
                    e.signature = signature.clone();
                }
                (e.spans, e.attachment) = (spans, attachment);
                (e.timestamp, e.sequence, e.incarnation, e.values_len, e.pub_id, e.sig_id) =
                    (timestamp, sequence, incarnation, values.len() as u32, pub_id, sig_id);
                return ev;
            }
        }
        let (publisher, signature) = (publisher.clone(), signature.clone());
        Arc::new(Event {
            spans,
            publisher,
            timestamp,
            sequence,
            incarnation,
            signature,
            text: Small::from_parts(&[values.as_bytes(), payload]),
            values_len: values.len() as u32,
            pub_id,
            sig_id,
            attachment,
        })
    }

    /// The duplicate filter: true (and remembered) if the event is later than the last of its
    /// stream in `role`.
    fn accept(&mut self, ev: &Event, role: i32) -> bool {
        let key = (ev.pub_id, ev.incarnation, role);
        let order = (ev.timestamp, ev.sequence);
        match self.dedup.get_mut(&key) {
            Some(last) if order <= *last => false,
            Some(last) => {
                *last = order;
                true
            }
            None => {
                self.dedup.insert(key, order);
                true
            }
        }
    }

    /// The destinations graph `g` gives `ev`, ascending (the reference iterates `sorted(...)`).
    fn match_sorted(&mut self, g: &SharedGraph, ev: &Event) -> Dests {
        let names = &self.signature_names[ev.sig_id as usize].1;
        if names.is_empty() {
            return Dests::new();
        }
        let graph = lock(g);
        // the graph's symbols for the signature's names (kept per signature while its strings stay);
        // the values are looked up as the walk reaches them
        let r = self.resolved.entry(Arc::as_ptr(g) as usize).or_default();
        if r.generation != graph.generation() {
            *r = Resolved { generation: graph.generation(), ..Resolved::default() };
        }
        if let Some(m) = r.last.as_ref().filter(|m| m.fits(ev, graph.changes())) {
            self.counters.remembered_matches += 1;
            return m.dests.clone();
        }
        let n = r.names.entry(ev.sig_id).or_insert_with(|| names.iter().map(|x| graph.resolve(x)).collect());
        let read = graph.match_lazy_by(n, ev.spans.len(), |i| ev.value(i), &mut self.scratch, &mut self.hits);
        let mut out = Dests::collect_from(self.hits.iter().map(|&k| graph.dest(k)));
        out.sort_unstable();
        let end = if read == 0 { 0 } else { ev.spans[read - 1].1 as usize };
        let mut m = r.last.take().unwrap_or_default(); // (its prefix buffer is reused)
        (m.sig_id, m.nvalues, m.changes, m.read, m.dests) = (ev.sig_id, ev.spans.len(), graph.changes(), read, out.clone());
        m.prefix.clear();
        m.prefix.extend_from_slice(&ev.values().as_bytes()[..end]);
        r.last = Some(m);
        out
    }

    // ---- inputs -------------------------------------------------------------------------------

    /// A local client published `ev`: deliver here, then climb.
    pub fn publish(&mut self, ev: Arc<Event>) {
        if !self.accept(&ev, DELIVER) {
            self.counters.duplicates += 1; // a client resent it
            return;
        }
        self.counters.published += 1;
        self.deliver(&ev);
        let me = self.code;
        self.up(Copy {
            event: ev,
            origin: me,
            mode: UP,
            level: 1,
            targets: Units::new(),
            reached: Units::from_slice(&[me]),
            hops: 0,
            left: Units::new(),
        });
    }

    /// Copies from neighbour `peer`, numbered from `first_seq` (the caller checked that a gateway to
    /// `peer` is live).
    pub fn on_events<I: IntoIterator<Item = Copy>>(&mut self, peer: u64, first_seq: u64, copies: I)
    where
        I::IntoIter: ExactSizeIterator,
    {
        let copies = copies.into_iter();
        let mut last = self.recv.get(&peer).copied().unwrap_or(-1);
        let n = copies.len() as u64;
        let durable = self.dur.on;
        for (seq, copy) in (first_seq as i64..).zip(copies) {
            if seq > last {
                last = seq;
                self.counters.copies_in += 1;
                if durable {
                    let s = seq as u64;
                    let cause = Cause::In { peer, epoch: self.dur.epoch.get(&peer).copied().unwrap_or(0), seq: s };
                    self.dur.inq.entry(peer).or_default().insert(s);
                    self.dur.open.insert(cause, 1);
                    self.dur.cause = Some(cause);
                    self.dur.dup_hit = false;
                    let key = ev_key(&copy.event);
                    if self.dur.restarting {
                        self.park(copy);
                    } else {
                        self.handle(copy);
                    }
                    self.dur.cause = None;
                    self.hold(cause, key);
                    self.release(cause);
                } else {
                    self.handle(copy);
                }
            }
        }
        self.recv.insert(peer, last);
        if !self.ack_due.contains_key(&peer) {
            self.ack_due.entry_or(peer, || 0);
            if !self.ack_timer {
                self.ack_timer = true;
                self.timer_wanted = true;
            }
        }
        *self.ack_due.get_mut(&peer).expect("made above") += n;
    }

    /// Neighbour `peer` handled our copies up to `upto`, and those in `also`.
    pub fn on_ack(&mut self, peer: u64, upto: i64, also: &[u64]) {
        let Some(b) = self.unacked.get_mut(&peer) else { return };
        if b.is_empty() {
            return;
        }
        let mut done = std::mem::take(&mut self.acked);
        done.clear();
        let pool = &mut self.event_pool;
        b.ack(upto, also, |s, c| {
            done.push(s);
            pool.give(c.event);
        });
        if let Some(deps) = self.dur.deps.get_mut(&peer) {
            let causes: Vec<Cause> = done.iter().filter_map(|s| deps.remove(s)).collect();
            for c in causes {
                self.release(c);
            }
        }
        self.acked = done;
    }

    /// Durable mode: this storage broker routes `ev` (stored in its cluster) as its origin; the store
    /// hears [`StoreCall::RouteDone`] for `entry` once every next hop acknowledged.
    pub fn originate(&mut self, ev: Arc<Event>, entry: u64) {
        self.counters.published += 1;
        self.accept(&ev, DELIVER);
        let me = self.code;
        let cause = Cause::Entry(entry);
        self.dur.cause = Some(cause);
        *self.dur.open.entry(cause).or_insert(0) += 1;
        let key = ev_key(&ev);
        let copy =
            Copy { event: ev, origin: me, mode: UP, level: 1, targets: Units::new(), reached: Units::from_slice(&[me]), hops: 0, left: Units::new() };
        self.dur.dup_hit = false;
        if self.dur.restarting {
            self.park(copy);
        } else {
            self.up(copy);
        }
        self.dur.cause = None;
        self.hold(cause, key);
        self.release(cause);
    }

    /// After handling a copy: remember the cause that waits for this event here, or make a pure
    /// duplicate wait for it (`erp.py`'s `_hold`).
    fn hold(&mut self, cause: Cause, key: EvKey) {
        let d = &mut self.dur;
        if d.open[&cause] > 1 {
            if let std::collections::hash_map::Entry::Vacant(v) = d.ev_cause.entry(key) {
                v.insert(cause);
                d.cause_ev.insert(cause, key);
            }
        } else if d.dup_hit {
            // only while the older copy is parked here (see the reference)
            if let Some(&older) = d.ev_cause.get(&key) {
                if d.open.contains_key(&older) && d.parked_n.get(&older).copied().unwrap_or(0) != 0 {
                    *d.open.get_mut(&cause).expect("open") += 1;
                    d.listeners.entry(older).or_default().push(cause);
                }
            }
        }
    }

    /// One thing `cause` waited for is safe; when nothing is left, the cause is done.
    fn release(&mut self, cause: Cause) {
        let d = &mut self.dur;
        let n = d.open[&cause] - 1;
        if n > 0 {
            d.open.insert(cause, n);
            return;
        }
        d.open.remove(&cause);
        if let Some(key) = d.cause_ev.remove(&cause) {
            d.ev_cause.remove(&key);
        }
        for waiting in d.listeners.remove(&cause).unwrap_or_default() {
            self.release(waiting);
        }
        let d = &mut self.dur;
        match cause {
            Cause::In { peer, epoch, seq } => {
                if d.epoch.get(&peer).copied().unwrap_or(0) != epoch {
                    return; // that gateway is gone: its sender routes the copy again itself
                }
                if let Some(q) = d.inq.get_mut(&peer) {
                    q.remove(&seq);
                }
                d.done.entry(peer).or_default().push(seq);
                *self.ack_due.entry_or(peer, || 0) = ACK_EVERY; // at once: the origin waits for it
            }
            Cause::Entry(e) => {
                if d.has_store {
                    d.store_calls.push(StoreCall::RouteDone(e));
                }
            }
        }
    }

    fn safe_upto(&self, peer: u64) -> i64 {
        match self.dur.inq.get(&peer).and_then(|q| q.first()) {
            Some(&first) => first as i64 - 1,
            None => self.recv[&peer],
        }
    }

    /// Durable mode: route the parked copies again (the graph changed; not while restarting).
    pub fn retry_parked(&mut self) {
        if self.dur.restarting {
            return;
        }
        self.dur.parked_at = Some(self.routing.snap.version);
        let parked = std::mem::take(&mut self.dur.parked);
        for (cause, copy) in parked {
            if let Some(c) = cause {
                let n = self.dur.parked_n.remove(&c).unwrap_or(0).saturating_sub(1);
                if n > 0 {
                    self.dur.parked_n.insert(c, n);
                }
            }
            self.dur.cause = cause;
            self.route_again(copy);
            self.dur.cause = None;
            if let Some(c) = cause {
                self.release(c);
            }
        }
    }

    /// The gateway to `peer` is lost: route its unacknowledged copies again, first (the routing
    /// must already say the gateway is gone).
    pub fn link_down(&mut self, peer: u64) {
        let held = self.unacked.remove(&peer).unwrap_or_default();
        // (this round's copies for it, not lent to be written yet, come after the held ones)
        let unsent = self.out.remove(&peer).unwrap_or_default();
        let first_unsent = self.seq.get(&peer).copied().unwrap_or(0) - unsent.len() as u64;
        let pending: Vec<(u64, Copy)> = held.into_copies().chain((first_unsent..).zip(unsent)).collect();
        self.seq.remove(&peer);
        self.recv.remove(&peer);
        self.ack_due.remove(&peer);
        let mut deps = self.dur.deps.remove(&peer).unwrap_or_default();
        if self.dur.on {
            *self.dur.epoch.entry(peer).or_insert(0) += 1;
            self.dur.inq.remove(&peer);
            self.dur.done.remove(&peer);
        }
        for (s, copy) in pending {
            self.counters.rerouted += 1;
            let cause = deps.remove(&s);
            self.dur.cause = cause;
            self.route_again(copy);
            self.dur.cause = None;
            if let Some(c) = cause {
                self.release(c);
            }
        }
    }

    /// A client detached.
    pub fn client_gone(&mut self, peer: i64) {
        self.deliveries.remove(&peer);
    }

    /// The acknowledgement timer fired: acknowledge every gateway that has copies to acknowledge.
    pub fn fire_ack(&mut self) {
        self.ack_timer = false;
        for (_, n) in self.ack_due.iter_mut() {
            *n = ACK_EVERY;
        }
    }

    /// Whether the acknowledgement timer must be set (asked once per need).
    pub fn take_timer(&mut self) -> bool {
        std::mem::take(&mut self.timer_wanted)
    }

    // ---- handling -------------------------------------------------------------------------------

    fn handle(&mut self, copy: Copy) {
        if copy.mode == UP {
            self.up(copy);
            return;
        }
        let (mut transit, mut decided) = (self.fwd(), self.fwd());
        let me = self.code;
        for &t in copy.targets.iter() {
            if contains(t, me) {
                self.down(t, &copy, &mut decided);
            } else {
                self.toward(t, &mut transit, &copy.left);
            }
        }
        // transit targets keep their leg (the units already left); targets decided here start a new one
        let left = copy.left.clone();
        self.send_down(&copy, transit, &left);
        self.send_down(&copy, decided, &[]);
    }

    fn route_again(&mut self, mut copy: Copy) {
        copy.left.clear();
        if copy.mode == UP {
            self.up(copy);
        } else {
            self.handle(copy);
        }
    }

    fn toward(&mut self, target: u64, fwd: &mut Fwd, avoid: &[u64]) {
        match self.routing.hop_to(target, avoid) {
            None if self.dur.on => fwd_add(fwd, PARK, target),
            None => self.counters.unroutable += 1,
            Some(hop) => fwd_add(fwd, hop, target),
        }
    }

    fn park(&mut self, copy: Copy) {
        self.counters.parked += 1;
        let d = &mut self.dur;
        if let Some(c) = d.cause {
            *d.open.entry(c).or_insert(0) += 1;
            *d.parked_n.entry(c).or_insert(0) += 1;
        }
        d.parked.push((d.cause, copy));
    }

    /// This broker is inside target `t`: deliver (t is this broker) or decide among t's children.
    fn down(&mut self, t: u64, copy: &Copy, fwd: &mut Fwd) {
        let ev = copy.event.clone();
        if t == self.code {
            if self.accept(&ev, DELIVER) {
                self.deliver(&ev);
            } else {
                self.counters.duplicates += 1;
                self.dur.dup_hit = true;
            }
            return;
        }
        let lvl = unit_level(t);
        if self.dur.on && self.missing_profiles(lvl) {
            fwd_add(fwd, PARK, t); // restarted: no profiles to decide with yet
            return;
        }
        if !self.accept(&ev, -(lvl as i32)) {
            self.counters.duplicates += 1;
            self.dur.dup_hit = true;
            return;
        }
        let g = if self.routing.decides(lvl) { self.graphs.get(lvl as usize).cloned().flatten() } else { None };
        let Some(g) = g else {
            // not a decider of t (a gateway changed meanwhile): hand the copy for t to the nearest one
            self.counters.not_decider += 1;
            self.dedup.remove(&(ev.pub_id, ev.incarnation, -(lvl as i32)));
            let d = self.routing.nearest(self.routing.deciders(lvl).to_vec().into_iter());
            match d.and_then(|d| self.routing.hop_to(d, &[])) {
                None if self.dur.on => fwd_add(fwd, PARK, t),
                None => self.counters.unroutable += 1,
                Some(hop) => fwd_add(fwd, hop, t),
            }
            return;
        };
        let dests = self.match_sorted(&g, &ev);
        self.counters.decisions += 1;
        let me = self.code;
        for &c in dests.iter() {
            let c = c as u64;
            if copy.reached.contains(&c) {
                continue;
            }
            if contains(c, me) {
                self.down(c, copy, fwd);
            } else {
                self.toward(c, fwd, &[]);
            }
        }
    }

    /// Climb: decide at each level this broker decides; hand the rest to the nearest decider.
    fn up(&mut self, copy: Copy) {
        let ev = copy.event.clone();
        let origin = copy.origin;
        let n1 = self.levels + 1;
        let mut lvl = copy.level as u32;
        let mut fwd = self.fwd();
        let mut reached = copy.reached.clone();
        while lvl <= n1 {
            if self.routing.decides(lvl) {
                if self.dur.on && self.missing_profiles(lvl) {
                    let c = Copy { level: lvl as u8, targets: Units::new(), reached: reached.clone(), left: Units::new(), ..copy.clone() };
                    self.park(c);
                    break;
                }
                if !self.accept(&ev, lvl as i32) {
                    self.counters.duplicates += 1;
                    self.dur.dup_hit = true;
                    break;
                }
                let dests = match self.graphs.get(lvl as usize).cloned().flatten() {
                    Some(g) => self.match_sorted(&g, &ev),
                    None => Dests::new(),
                };
                let came_from = unit_id(origin, lvl - 1, self.levels);
                self.counters.decisions += 1;
                reached.push(came_from);
                for &c in dests.iter() {
                    let c = c as u64;
                    if !reached.contains(&c) {
                        self.toward(c, &mut fwd, &[]);
                    }
                }
                lvl += 1;
                continue;
            }
            let (d, left) = if lvl == copy.level as u32 && !copy.targets.is_empty() {
                (Some(copy.targets[0]), copy.left.clone()) // on its way to the decider chosen for this level: keep the leg
            } else {
                // a decider of the publisher's level-lvl unit inside its level-(lvl-1) unit (where this broker is)
                let me = self.code;
                let ds: Vec<u64> = self.routing.deciders(lvl).iter().copied().filter(|&x| level_of_difference(x, me) < lvl as i32 - 1).collect();
                (self.routing.nearest(ds.into_iter()), Units::new())
            };
            if d.is_none() && self.dur.on && self.had_deciders(lvl) {
                // no decider reachable now (one is down, a gateway is lost): wait for the graph to change
                let c = Copy { level: lvl as u8, targets: Units::new(), reached: reached.clone(), left: Units::new(), ..copy.clone() };
                self.park(c);
            } else if let Some(d) = d {
                match self.routing.hop_to(d, &left) {
                    None if self.dur.on => {
                        let c =
                            Copy { level: lvl as u8, targets: Units::from_slice(&[d]), reached: reached.clone(), left: Units::new(), ..copy.clone() };
                        self.park(c);
                    }
                    None => self.counters.unroutable += 1,
                    Some(hop) => {
                        let c = Copy {
                            event: ev.clone(),
                            origin,
                            mode: copy.mode,
                            level: lvl as u8,
                            targets: Units::from_slice(&[d]),
                            reached: reached.clone(),
                            hops: copy.hops,
                            left,
                        };
                        self.send(hop, c);
                    }
                }
            }
            break;
        }
        if !fwd.is_empty() {
            let base = Copy { reached, ..copy };
            self.send_down(&base, fwd, &[]);
        }
    }

    fn deliver(&mut self, ev: &Arc<Event>) {
        let Some(g) = self.local.clone() else { return };
        if self.dur.on {
            // the only local subscribers are a storage broker's homed clients: store for them
            if self.dur.has_store {
                let matched = self.match_sorted(&g, ev);
                if !matched.is_empty() {
                    self.dur.store_calls.push(StoreCall::Match(ev.clone(), matched.to_vec()));
                }
            }
            return;
        }
        let clients = self.match_sorted(&g, ev);
        if clients.is_empty() {
            return;
        }
        let at = self.delivered.len() as u32;
        self.delivered.push(ev.clone());
        let spare = &mut self.deliveries_spare;
        for &c in clients.iter() {
            self.deliveries.entry_or(c as i64, || spare.pop().unwrap_or_default()).push(at);
            self.counters.delivered += 1;
        }
    }

    // ---- output -------------------------------------------------------------------------------

    /// An empty forwarding list: one [`send_down`](Self::send_down) gave back, or a new one.
    fn fwd(&mut self) -> Fwd {
        self.fwd_spare.pop().unwrap_or_default()
    }

    fn send_down(&mut self, copy: &Copy, mut fwd: Fwd, left: &[u64]) {
        for (hop, targets) in fwd.drain(..) {
            let c = Copy {
                event: copy.event.clone(),
                origin: copy.origin,
                mode: DOWN,
                level: 0,
                targets,
                reached: copy.reached.clone(),
                hops: copy.hops,
                left: Units::from_slice(left),
            };
            if hop == PARK {
                self.park(Copy { left: Units::new(), ..c });
            } else {
                self.send(hop, c);
            }
        }
        if self.fwd_spare.len() < FWD_SPARE {
            self.fwd_spare.push(fwd); // (kept with its capacity: the next copy's routing allocates nothing)
        }
    }

    fn send(&mut self, peer: u64, mut copy: Copy) {
        let Some(p) = self.routing.link_level(peer) else {
            if self.dur.on {
                self.park(copy);
                return;
            }
            self.counters.unroutable += 1;
            return;
        };
        if copy.hops >= TTL {
            self.counters.ttl += 1;
            return;
        }
        // strip what only made sense below this gateway's level; note the unit being left
        if p != 0 {
            copy.reached.retain(|&u| unit_level(u) >= p);
        }
        copy.left = self.routing.leaving(peer, &copy.left);
        copy.hops += 1;
        let seq = self.seq.entry(peer).or_insert(0);
        let s = *seq;
        *seq += 1;
        if let Some(c) = self.dur.cause {
            self.dur.deps.entry(peer).or_default().insert(s, c);
            *self.dur.open.get_mut(&c).expect("an open cause") += 1;
        }
        let spare = &mut self.out_spare;
        self.out.entry_or(peer, || spare.pop().unwrap_or_default()).push(copy);
        self.counters.copies_out += 1;
    }

    /// Per neighbour, in the reference's order: its copies (numbered) and/or an acknowledgement,
    /// handed to `each` (which encodes them); the copies are then held, unacknowledged, without a
    /// copy being made. Acks are lazy: a gateway is acknowledged with the next copies sent back over
    /// it, when [`ACK_EVERY`] copies wait, or when the ack timer fired.
    pub fn take(&mut self, mut each: impl FnMut(ToPeer<'_>)) {
        if self.parked_due() {
            self.retry_parked();
        }
        let mut acks: Vec<(u64, (i64, Vec<u64>))> = Vec::new();
        if !self.ack_due.is_empty() && !self.dur.hold_acks {
            let due: Vec<u64> = self.ack_due.iter().filter(|(p, n)| *n >= ACK_EVERY || self.out.contains_key(p)).map(|(p, _)| *p).collect();
            for peer in due {
                if self.routing.link_level(peer).is_some() {
                    let ack = if self.dur.on {
                        let upto = self.safe_upto(peer);
                        let also: Vec<u64> = self.dur.done.remove(&peer).unwrap_or_default().into_iter().filter(|&s| s as i64 > upto).collect();
                        (upto, also)
                    } else {
                        (self.recv[&peer], Vec::new())
                    };
                    acks.push((peer, ack));
                }
                self.ack_due.remove(&peer);
            }
        }
        let mut taken = std::mem::take(&mut self.out_taken);
        self.out.take_into(&mut taken);
        for (peer, mut copies) in taken.drain(..) {
            let first = self.seq[&peer] - copies.len() as u64;
            let ack = acks.iter().position(|(p, _)| *p == peer).map(|i| acks.remove(i).1);
            each(ToPeer { peer, events: Some((first, &copies)), ack });
            let held = self.unacked.entry(peer).or_default();
            for (s, c) in (first..).zip(copies.drain(..)) {
                held.push(s, c);
            }
            if self.out_spare.len() < LIST_SPARE {
                self.out_spare.push(copies);
            }
        }
        self.out_taken = taken;
        for (peer, ack) in acks {
            each(ToPeer { peer, events: None, ack: Some(ack) });
        }
    }

    /// Per client, in the reference's order: the events to deliver, handed to `each` at once (clients
    /// that get the same events can share what is made of them).
    pub fn take_deliveries(&mut self, each: impl FnOnce(Deliveries<'_>)) {
        let mut taken = std::mem::take(&mut self.deliveries_taken);
        self.deliveries.take_into(&mut taken);
        each(Deliveries { lists: &taken, events: &self.delivered });
        for ev in self.delivered.drain(..) {
            self.event_pool.give(ev);
        }
        for (_, mut evs) in taken.drain(..) {
            if self.deliveries_spare.len() < LIST_SPARE {
                evs.clear();
                self.deliveries_spare.push(evs);
            }
        }
        self.deliveries_taken = taken;
    }

    /// Whether [`Self::take`] or [`Self::take_deliveries`] would give anything, an acknowledgement
    /// is due, or parked copies wait for a graph that changed.
    pub fn pending(&self) -> bool {
        !self.out.is_empty() || !self.deliveries.is_empty() || !self.ack_due.is_empty() || self.parked_due()
    }

    /// Whether parked copies wait for a graph that changed since they were last routed.
    pub fn parked_due(&self) -> bool {
        !self.dur.parked.is_empty() && self.dur.parked_at != Some(self.routing.snap.version)
    }

    /// Copies sent (or to be written this round) and not acknowledged, all neighbours together.
    pub fn in_flight(&self) -> usize {
        self.unacked.values().map(|b| b.len()).sum::<usize>() + self.out.iter().map(|(_, c)| c.len()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile_graph::ProfileGraph;

    /// The clients a local publication of `values` is delivered to, ascending.
    fn delivered(erp: &mut Erp, values: &str, seq: u64) -> Vec<i64> {
        let ev = erp.event("p", 1, seq, 1, "a:int\x1fb:int\x1fc:int", values, b"", None);
        erp.publish(ev);
        let mut out: Vec<i64> = Vec::new();
        erp.take_deliveries(|d| out.extend(d.lists.iter().map(|(c, _)| *c)));
        out.sort_unstable();
        out
    }

    #[test]
    fn a_remembered_match_answers_only_events_that_would_walk_the_same_way() {
        let mut erp = Erp::new(10, 3);
        let g = Arc::new(Mutex::new(ProfileGraph::new()));
        g.lock().unwrap().add(&[("a", "1"), ("b", "2")], -1, 1);
        g.lock().unwrap().add(&[("a", "12")], -2, 1);
        erp.set_local(g.clone());
        assert_eq!(delivered(&mut erp, "1\x1f2\x1f7", 1), [-1]);
        // c is read by no profile: the same walk, answered from memory
        assert_eq!(delivered(&mut erp, "1\x1f2\x1f8", 2), [-1]);
        assert_eq!(erp.counters.remembered_matches, 1);
        // "1" is a prefix of "12" (not the same value): walked
        assert_eq!(delivered(&mut erp, "12\x1f2\x1f8", 3), [-2]);
        // b differs: walked, and nobody matches
        assert_eq!(delivered(&mut erp, "1\x1f3\x1f8", 4), [0i64; 0]);
        assert_eq!(delivered(&mut erp, "1\x1f3\x1f9", 5), [0i64; 0]);
        assert_eq!(erp.counters.remembered_matches, 2);
        // a change to the graph between two events that would walk the same way: walked again
        g.lock().unwrap().add(&[("a", "1")], -3, 1);
        assert_eq!(delivered(&mut erp, "1\x1f3\x1f9", 6), [-3]);
        g.lock().unwrap().remove(&[("a", "1")], -3, 1).unwrap();
        assert_eq!(delivered(&mut erp, "1\x1f3\x1f9", 7), [0i64; 0]);
        // fewer values than the signature names: not the walk remembered for three
        assert_eq!(delivered(&mut erp, "1\x1f3", 8), [0i64; 0]);
        assert_eq!(erp.counters.remembered_matches, 2);
        // another graph in its place: its own answers
        let h = Arc::new(Mutex::new(ProfileGraph::new()));
        h.lock().unwrap().add(&[("a", "1")], -4, 1);
        erp.set_local(h);
        drop(g);
        assert_eq!(delivered(&mut erp, "1\x1f3\x1f9", 9), [-4]);
    }

    #[test]
    fn an_event_is_made_again_in_place_only_once_nothing_else_holds_it() {
        let mut erp = Erp::new(10, 3);
        let g = Arc::new(Mutex::new(ProfileGraph::new()));
        g.lock().unwrap().add(&[("a", "1")], -1, 1);
        erp.set_local(g);
        let sig = "a:int\x1fb:int";
        let (first, second) = (erp.event("p", 1, 1, 1, sig, "1\x1f5", b"one", None), erp.event("p", 1, 2, 1, sig, "1\x1f6", b"two", None));
        let (at_first, at_second) = (Arc::as_ptr(&first), Arc::as_ptr(&second));
        let held = second.clone(); // (as a copy not acknowledged yet holds it)
        erp.publish(first);
        erp.publish(second);
        erp.take_deliveries(|d| assert_eq!(d.lists.len(), 1));
        // the first came back (nothing else held it); the second is still the holder's, unchanged
        let again = erp.event("q", 7, 3, 2, sig, "1\x1f9", b"three", None);
        assert_eq!(Arc::as_ptr(&again), at_first, "made again in the first's place");
        assert_eq!((&*again.publisher, again.timestamp, again.sequence, again.incarnation), ("q", 7, 3, 2));
        assert_eq!((again.values(), again.payload(), again.value(1)), ("1\x1f9", &b"three"[..], "9"));
        let fresh = erp.event("p", 1, 4, 1, sig, "1\x1f7", b"four", None);
        assert_ne!(Arc::as_ptr(&fresh), at_second, "the held one is not made again");
        assert_eq!((held.values(), held.payload(), held.sequence), ("1\x1f6", &b"two"[..], 2));
    }

    /// A broker 10 deciding its cluster (unit of level 1), whose profile graph sends everything to
    /// broker 12, over the gateway to 12 or, once that is lost, over 13.
    fn transit_broker() -> (Erp, u64) {
        use crate::routing::{NodeInfo, Snapshot};
        let (me, from, to, alt) = (10u64, 11u64, 12u64, 13u64);
        let mut erp = Erp::new(me, 3);
        let g = Arc::new(Mutex::new(ProfileGraph::new()));
        g.lock().unwrap().add(&[("a", "1")], to as i128, 1);
        erp.set_graphs(vec![(1, g)]);
        let snap = |version: u64, gateways: &[u64], hop_to: u64| {
            let mut s = Snapshot { version, deciders: vec![Vec::new(); 5], ..Snapshot::default() };
            for &p in gateways {
                s.links.insert(p, 0);
                s.nodes.insert(p, NodeInfo { level: 0, cost: 1.0, hop: Some(p), edges: vec![(me, 1.0)], vertex_hop: Some(p) });
            }
            s.nodes.insert(to, NodeInfo { level: 0, cost: 2.0, hop: Some(hop_to), edges: Vec::new(), vertex_hop: None });
            s.nodes.insert(me, NodeInfo { level: 0, cost: 0.0, hop: None, edges: gateways.iter().map(|&p| (p, 1.0)).collect(), vertex_hop: None });
            s.deciders[1] = vec![me];
            s.decided = 1 << 1;
            s
        };
        erp.routing.set(snap(1, &[from, to, alt], to));
        let cluster = crate::address::unit_id(me, 1, 3);
        let copies = |erp: &mut Erp, seqs: std::ops::Range<u64>| -> Vec<Copy> {
            seqs.map(|s| Copy {
                event: erp.event("p", 1, s, 1, "a:int", "1", b"", None),
                origin: 99,
                mode: DOWN,
                level: 0,
                targets: Units::from_slice(&[cluster]),
                reached: Units::from_slice(&[99]),
                hops: 1,
                left: Units::new(),
            })
            .collect()
        };
        // three copies sent and written (held until 12 acknowledges), then two made and not written
        let cs = copies(&mut erp, 0..3);
        erp.on_events(from, 0, cs);
        erp.take(|tp| assert!(tp.peer != to || tp.events.map(|(first, c)| (first, c.len())) == Some((0, 3))));
        let cs = copies(&mut erp, 3..5);
        erp.on_events(from, 3, cs);
        assert_eq!(erp.in_flight(), 5);
        erp.routing.set(snap(2, &[from, alt], alt));
        (erp, to)
    }

    #[test]
    fn a_lost_gateway_routes_again_its_copies_held_then_those_not_written_in_order() {
        let (mut erp, lost) = transit_broker();
        erp.link_down(lost);
        assert_eq!(erp.counters.rerouted, 5);
        let mut sent = Vec::new();
        erp.take(|tp| {
            if let Some((first, cs)) = tp.events {
                sent.push((tp.peer, first, cs.iter().map(|c| c.event.sequence).collect::<Vec<_>>()));
            }
        });
        assert_eq!(sent, vec![(13, 0, vec![0, 1, 2, 3, 4])], "every copy once, over the other gateway, in order");
        assert_eq!(erp.in_flight(), 5);
    }
}
