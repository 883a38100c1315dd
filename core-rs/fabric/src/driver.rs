//! The Zenoh driver of a bridge (feature `zenoh`): the I/O around the sans-IO [`Bridge`].
//!
//! ```text
//!  Zenoh callbacks (data/hb/bind subscriber, liveliness subscriber) --\
//!  the local side (Handle::local: frames, binds, answers, exports) -----+--> event queue --> LOOP (owns the Bridge)
//!  a clock (the loop sleeps until Bridge::poll_timeout or an event) --/                        |
//!                                                                                                 | actions
//!    Put ------------------> the sender of the peer runtime the key names (one thread each, a bounded queue;
//!                             heartbeats have a sender of their own per peer)
//!    Declare/UndeclareToken -> the token thread (one, in order)
//!    Deliver, Closed, BindDone, IncomingBind, PeerUp/Down -> the Local trait (called in the loop thread)
//! ```
//!
//! The loop never calls into Zenoh itself (only the sender and token threads do, and `close` at the end), so a
//! put blocked by a frozen peer (Block congestion control) holds only that peer's sender: the loop keeps
//! hearing every other peer, its timers fire on time and that peer is declared dead within its lease (cf.
//! Zenoh issue 1876). Zenoh's callbacks only push onto the loop's unbounded queue, so they never block either.
//!
//! The local side (the runtime's monitor link, later; an in-process test service in `multihop-bridge` today) is
//! the [`Local`] trait (what the loop tells it) and [`LocalEvent`] (what it tells the loop, through a [`Handle`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

use zenoh::Wait;

use multihop_base::park::{process_doorbell, Doorbell};

use crate::bridge::{Action, Bridge, ChanId, Nanos, Status};
use crate::config::{FabricConfig, Priority};
use crate::reason::{BindRefused, Teardown};

/// Puts waiting for one peer's sender, at most (a full queue drops the put and counts it: the sequence numbers
/// turn a dropped frame into a named teardown; the channels' credit windows keep the queue far below this unless
/// the peer is frozen, and a frozen peer is declared dead, its queue emptied, within its lease).
pub const SENDER_QUEUE: usize = 4096;

/// How long a bridge told to stop goes on delivering what its channels already sent (until every frame is acked
/// by the other side, every local end read), before it withdraws its tokens and closes its session.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The driver's monotonic clock: `CLOCK_MONOTONIC` in nanoseconds (the one every process of the machine and every
/// network namespace shares, so a test can compare a bridge's times with its own).
pub fn monotonic_ns() -> Nanos {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

/// What the local side tells the loop (through [`Handle::local`]).
#[derive(Debug)]
pub enum LocalEvent {
    /// Export a service to the fabric ([`Bridge::export`]).
    Export(String),
    Unexport(String),
    /// Bind `service@runtime`; the answer is [`Local::bind_done`] with the same `tag`.
    Bind {
        tag: u64,
        service: String,
        runtime: String,
        window: u32,
        timeout: Duration,
        priority: Option<Priority>,
    },
    /// Answer a [`Local::incoming_bind`].
    Accept(ChanId),
    Refuse(ChanId, String),
    /// A link message (multi-hop header and payload) from the local end of `chan`.
    Frame(ChanId, Vec<u8>),
    /// The local end of `chan` is gone without a TEARDOWN of its own.
    Close(ChanId, String),
    /// The local side can take frames again after [`Local::deliver`] said no.
    Writable,
    /// Print [`Bridge::status`] through [`Local::status`].
    Status,
    /// Stop the bridge: withdraw its tokens, close the session, return from [`Driver::run`].
    Stop,
}

/// What the loop tells the local side. Every method is called in the loop thread and must not block.
pub trait Local {
    /// A frame for the local end of `chan` (its VCI is the driver's to rewrite, once there is a monitor link).
    /// False: the local side cannot take it now; the driver keeps it (and what follows for `chan`) and offers it
    /// again after a [`LocalEvent::Writable`] or at the loop's next turn.
    fn deliver(&mut self, chan: ChanId, frame: &[u8]) -> bool;
    /// A bind asked with [`LocalEvent::Bind`] is done.
    fn bind_done(&mut self, tag: u64, chan: ChanId, result: Result<(), BindRefused>);
    /// A client on runtime `from` binds exported `service`: answer with [`LocalEvent::Accept`] or
    /// [`LocalEvent::Refuse`] (a [`Local::closed`] comes if its timeout passes first).
    fn incoming_bind(&mut self, chan: ChanId, from: &str, service: &str, window: u32, priority: Priority);
    /// `chan` is gone (every frame delivered before it stays delivered); with `tell_end` its local end does not
    /// know yet and is to be told `reason`.
    fn closed(&mut self, chan: ChanId, reason: &Teardown, tell_end: bool);
    /// A peer runtime came up (`up`, `detail` its incarnation) or is dead (`detail` why).
    fn peer(&mut self, _runtime: &str, _up: bool, _detail: &str) {}
    /// The answer to [`LocalEvent::Status`].
    fn status(&mut self, _status: &Status, _driver: &DriverStats) {}
    /// Runtime `runtime` exports `service` to the fabric (`up`), or no longer does.
    fn remote_export(&mut self, _runtime: &str, _service: &str, _up: bool) {}
    /// Whether a local end can go on now (a message to read within its credit, room for a frame that waits): the
    /// loop, parked on this process's doorbell, looks at this before it sleeps and after every ring. Never blocks.
    fn ready(&self) -> bool {
        false
    }
    /// Whether the local side has nothing more to hand the loop (every end read, every frame it sent acked): a
    /// stopping bridge waits for this (and for the fabric's acks), at most [`DRAIN_TIMEOUT`].
    fn quiet(&self) -> bool {
        true
    }
    /// Called once every turn of the loop, after the events it took (a [`LocalEvent::Writable`] makes a turn):
    /// the local side looks at its ends and hands the loop what they have.
    fn idle(&mut self) {}
}

/// Everything the loop takes.
#[derive(Debug)]
enum Event {
    Put { key: String, payload: Vec<u8> },
    Liveliness { key: String, alive: bool },
    Local(LocalEvent),
}

/// The loop's queue, as its producers hold it: a send, then a ring of this process's doorbell, on which the loop
/// parks (so one wake-up reaches it whether the news is an event or a local end that can go on).
#[derive(Clone)]
struct EventTx {
    tx: Sender<Event>,
    bell: Option<Arc<Doorbell>>,
}

impl EventTx {
    fn send(&self, ev: Event) -> bool {
        let ok = self.tx.send(ev).is_ok();
        if let Some(b) = &self.bell {
            // After the send (published): pairs with the loop's park, which counts itself a waiter and then
            // looks at the queue (Doorbell::park), so the event is seen or the ring wakes it.
            b.ring();
        }
        ok
    }
}

impl std::fmt::Debug for EventTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventTx")
    }
}

/// How the local side (and anything else) reaches the loop. Cheap to clone; usable from any thread.
#[derive(Clone, Debug)]
pub struct Handle {
    tx: EventTx,
}

impl Handle {
    /// Hand `ev` to the loop (false: the bridge has stopped).
    pub fn local(&self, ev: LocalEvent) -> bool {
        self.tx.send(Event::Local(ev))
    }
}

/// Longest the loop parks with nothing to do: it takes a turn ([`Local::idle`]) at least this often.
pub const IDLE_TURN: Duration = Duration::from_millis(50);

/// [`Bridge::status`] and the driver's counters as the JSON `multihop status` shows (and the test binary prints).
pub fn status_json(s: &Status, d: &DriverStats) -> serde_json::Value {
    let peers: Vec<serde_json::Value> = s
        .peers
        .iter()
        .map(|p| {
            serde_json::json!({"runtime": p.runtime, "alive": p.alive, "silent_ms": p.silent_for / 1_000_000,
                               "unacked_teardowns": p.unacked_teardowns, "services": p.services,
                               "incarnation": p.incarnation.map(|i| format!("{i:#x}"))})
        })
        .collect();
    let chans: Vec<serde_json::Value> = s
        .channels
        .iter()
        .map(|c| {
            serde_json::json!({"chan": c.chan.0, "peer": c.peer, "wire": c.wire, "opened_here": c.opened_here, "state": c.state,
                               "window": c.window, "frames_out": c.frames_out, "frames_in": c.frames_in, "bytes_out": c.bytes_out,
                               "bytes_in": c.bytes_in, "queued": c.queued, "in_flight": c.in_flight, "undelivered": c.undelivered,
                               "seq_out": c.seq_out, "seq_in": c.seq_in})
        })
        .collect();
    serde_json::json!({
        "runtime": s.runtime, "fabric": s.fabric, "incarnation": format!("{:#x}", s.incarnation), "exports": s.exports,
        "peers": peers, "channels": chans,
        "stale_puts": s.stats.stale_puts, "late_frames": s.stats.late_frames, "unknown_frames": s.stats.unknown_frames,
        "puts_in": d.puts_in, "puts_out": d.puts_out, "bytes_in": d.bytes_in, "bytes_out": d.bytes_out, "bad_inputs": d.bad_inputs,
        "dropped_puts": d.dropped_puts, "discarded_puts": d.discarded_puts, "failed_puts": d.failed_puts,
    })
}

/// The driver's own counters (besides [`Bridge::status`]).
#[derive(Clone, Debug, Default)]
pub struct DriverStats {
    pub puts_in: u64,
    pub bytes_in: u64,
    pub puts_out: u64,
    pub bytes_out: u64,
    /// Inputs the bridge refused (another fabric's key, a malformed put): logged and counted.
    pub bad_inputs: u64,
    /// Puts dropped because their peer's sender queue was full (see [`SENDER_QUEUE`]).
    pub dropped_puts: u64,
    /// Puts thrown away when their peer was declared dead.
    pub discarded_puts: u64,
    /// Puts Zenoh refused (the session closing, the transport closed under a blocked put).
    pub failed_puts: u64,
}

fn zprio(p: Priority) -> zenoh::qos::Priority {
    use zenoh::qos::Priority as Z;
    match p {
        Priority::RealTime => Z::RealTime,
        Priority::InteractiveHigh => Z::InteractiveHigh,
        Priority::InteractiveLow => Z::InteractiveLow,
        Priority::DataHigh => Z::DataHigh,
        Priority::Data => Z::Data,
        Priority::DataLow => Z::DataLow,
        Priority::Background => Z::Background,
    }
}

/// The Zenoh config of `cfg` ([`FabricConfig::zenoh_settings`], each key checked by Zenoh as it is inserted).
pub fn zenoh_config(cfg: &FabricConfig) -> Result<zenoh::Config, String> {
    let mut z = zenoh::Config::default();
    for (key, value) in cfg.zenoh_settings() {
        z.insert_json5(key, &value).map_err(|e| format!("zenoh config {key} = {value}: {e}"))?;
    }
    Ok(z)
}

// ---- one sender per peer runtime ----

struct Queue {
    items: VecDeque<(String, Priority, Vec<u8>)>,
    stop: bool,
}

/// The sending side of one peer runtime: a bounded queue and a thread that puts (Block) what it holds.
struct PeerSender {
    q: Arc<(Mutex<Queue>, Condvar)>,
    thread: Option<thread::JoinHandle<()>>,
}

impl PeerSender {
    fn start(session: zenoh::Session, peer: &str, heartbeats: bool, stats: Arc<Mutex<DriverStats>>) -> PeerSender {
        let q = Arc::new((Mutex::new(Queue { items: VecDeque::new(), stop: false }), Condvar::new()));
        let q2 = q.clone();
        let thread = thread::Builder::new()
            .name(format!("fabric-{}-{peer}", if heartbeats { "hb" } else { "tx" }))
            .spawn(move || sender_loop(&session, &q2, &stats))
            .expect("a thread for a peer's sender");
        PeerSender { q, thread: Some(thread) }
    }

    /// Queue a put; false if the queue is full (the put is dropped).
    fn push(&self, key: String, prio: Priority, payload: Vec<u8>) -> bool {
        let (m, cv) = &*self.q;
        let mut q = m.lock().unwrap_or_else(|e| e.into_inner());
        if q.items.len() >= SENDER_QUEUE {
            return false;
        }
        q.items.push_back((key, prio, payload));
        cv.notify_one();
        true
    }

    /// Throw away what waits (the peer is dead); returns how many puts.
    fn clear(&self) -> usize {
        let mut q = self.q.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = q.items.len();
        q.items.clear();
        n
    }

    fn stop(&mut self) {
        {
            let mut q = self.q.0.lock().unwrap_or_else(|e| e.into_inner());
            q.stop = true;
            q.items.clear();
        }
        self.q.1.notify_one();
        // A thread blocked in a put returns once Zenoh gives up on the peer (wait_before_close) or the session
        // closes; it is not waited for.
        drop(self.thread.take());
    }
}

fn sender_loop(session: &zenoh::Session, q: &(Mutex<Queue>, Condvar), stats: &Mutex<DriverStats>) {
    let mut pubs: HashMap<(String, Priority), zenoh::pubsub::Publisher<'static>> = HashMap::new();
    loop {
        let (key, prio, payload) = {
            let mut g = q.0.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if g.stop {
                    return;
                }
                if let Some(item) = g.items.pop_front() {
                    break item;
                }
                g = q.1.wait(g).unwrap_or_else(|e| e.into_inner());
            }
        };
        let len = payload.len() as u64;
        let publisher = match pubs.entry((key.clone(), prio)) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let p = session.declare_publisher(key.clone()).congestion_control(zenoh::qos::CongestionControl::Block).priority(zprio(prio)).wait();
                match p {
                    Ok(p) => v.insert(p),
                    Err(e) => {
                        eprintln!("multihop-bridge: cannot declare a publisher on {key}: {e}");
                        stats.lock().unwrap_or_else(|e| e.into_inner()).failed_puts += 1;
                        continue;
                    }
                }
            }
        };
        let ok = publisher.put(payload).wait().is_ok();
        let mut s = stats.lock().unwrap_or_else(|e| e.into_inner());
        if ok {
            s.puts_out += 1;
            s.bytes_out += len;
        } else {
            s.failed_puts += 1;
        }
    }
}

// ---- liveliness tokens, in order, off the loop ----

enum TokenOp {
    Declare(String),
    Undeclare(String),
}

fn token_loop(session: &zenoh::Session, rx: &Receiver<TokenOp>) {
    let mut tokens: HashMap<String, zenoh::liveliness::LivelinessToken> = HashMap::new();
    while let Ok(op) = rx.recv() {
        match op {
            TokenOp::Declare(key) => match session.liveliness().declare_token(key.clone()).wait() {
                Ok(t) => {
                    tokens.insert(key, t);
                }
                Err(e) => eprintln!("multihop-bridge: cannot declare liveliness token {key}: {e}"),
            },
            TokenOp::Undeclare(key) => {
                if let Some(t) = tokens.remove(&key) {
                    if let Err(e) = t.undeclare().wait() {
                        eprintln!("multihop-bridge: cannot withdraw liveliness token {key}: {e}");
                    }
                }
            }
        }
    }
    // The channel closed (the driver stops): withdraw every token before the session closes.
    for (_, t) in tokens {
        let _ = t.undeclare().wait();
    }
}

/// Something a frame waits behind for the local side.
enum Pending {
    Frame(Vec<u8>),
    Closed(Teardown, bool),
}

/// The driver: a Zenoh session, its subscribers, the senders, the token thread, and the loop that owns the
/// [`Bridge`] and the [`Local`] side.
pub struct Driver<L: Local> {
    bridge: Bridge,
    local: L,
    session: zenoh::Session,
    tx: EventTx,
    rx: Receiver<Event>,
    /// This process's doorbell, which the loop parks on (None: it could not be made; the loop waits on its queue).
    bell: Option<Arc<Doorbell>>,
    subscribers: Vec<zenoh::pubsub::Subscriber<()>>,
    liveliness: Option<zenoh::pubsub::Subscriber<()>>,
    tokens: Option<Sender<TokenOp>>,
    token_thread: Option<thread::JoinHandle<()>>,
    /// Per peer runtime, two senders: (peer, false) for data and bind puts, (peer, true) for heartbeats, so that a
    /// heartbeat never waits behind a data put blocked in Zenoh (a slow link's back-pressure is not death).
    senders: BTreeMap<(String, bool), PeerSender>,
    stats: Arc<Mutex<DriverStats>>,
    pending: BTreeMap<ChanId, VecDeque<Pending>>,
    binds: BTreeMap<ChanId, u64>,
    verbose: bool,
    /// Told to stop: the deadline of the drain (a second Stop stops at once).
    draining: Option<Nanos>,
}

impl<L: Local> Driver<L> {
    /// Open the Zenoh session of runtime `runtime` in `cfg`'s fabric and subscribe to its keys; `make_local` is
    /// given the [`Handle`] by which the local side reaches the loop. Nothing runs until [`Driver::run`].
    pub fn open(cfg: FabricConfig, runtime: &str, make_local: impl FnOnce(Handle) -> L) -> Result<Driver<L>, String> {
        let incarnation = loop {
            let r = multihop_base::random::random_u64().map_err(|e| e.to_string())?;
            if r != 0 {
                break r;
            }
        };
        let zcfg = zenoh_config(&cfg)?;
        let bridge = Bridge::new(cfg, runtime, incarnation, monotonic_ns())?;
        let session = zenoh::open(zcfg).wait().map_err(|e| format!("cannot open the Zenoh session: {e}"))?;
        let (tx, rx) = mpsc::channel();
        let bell = match process_doorbell() {
            Ok(b) => Some(b),
            Err(e) => {
                eprintln!("multihop-bridge: no process doorbell ({e}): the loop waits on its queue alone");
                None
            }
        };
        let tx = EventTx { tx, bell: bell.clone() };
        let mut subscribers = Vec::new();
        for key in bridge.subscriptions() {
            let t = tx.clone();
            let sub = session
                .declare_subscriber(key.clone())
                .callback(move |s: zenoh::sample::Sample| {
                    let _ = t.send(Event::Put { key: s.key_expr().as_str().to_string(), payload: s.payload().to_bytes().into_owned() });
                })
                .wait()
                .map_err(|e| format!("cannot subscribe to {key}: {e}"))?;
            subscribers.push(sub);
        }
        let t = tx.clone();
        let all = bridge.keys().all(None);
        // history: the tokens alive now come first, as PUTs (the liveliness `get` at start).
        let liveliness = session
            .liveliness()
            .declare_subscriber(all.clone())
            .history(true)
            .callback(move |s: zenoh::sample::Sample| {
                let alive = s.kind() == zenoh::sample::SampleKind::Put;
                let _ = t.send(Event::Liveliness { key: s.key_expr().as_str().to_string(), alive });
            })
            .wait()
            .map_err(|e| format!("cannot subscribe to the liveliness of {all}: {e}"))?;
        let (ttx, trx) = mpsc::channel();
        let s2 = session.clone();
        let token_thread = thread::Builder::new().name("fabric-tokens".into()).spawn(move || token_loop(&s2, &trx)).map_err(|e| e.to_string())?;
        let local = make_local(Handle { tx: tx.clone() });
        Ok(Driver {
            bridge,
            local,
            session,
            tx,
            rx,
            bell,
            subscribers,
            liveliness: Some(liveliness),
            tokens: Some(ttx),
            token_thread: Some(token_thread),
            senders: BTreeMap::new(),
            stats: Arc::new(Mutex::new(DriverStats::default())),
            pending: BTreeMap::new(),
            binds: BTreeMap::new(),
            draining: None,
            verbose: std::env::var_os("MULTIHOP_BRIDGE_DEBUG").is_some(),
        })
    }

    /// A handle to the loop (for the local side's threads, or to stop it).
    pub fn handle(&self) -> Handle {
        Handle { tx: self.tx.clone() }
    }

    pub fn bridge(&self) -> &Bridge {
        &self.bridge
    }

    pub fn local(&self) -> &L {
        &self.local
    }

    /// The loop: until [`LocalEvent::Stop`]. Then the tokens are withdrawn and the session closed.
    pub fn run(&mut self) -> Result<(), String> {
        let mut stop = false;
        while !stop {
            self.drain_actions();
            self.retry_pending();
            let now = monotonic_ns();
            if let Some(deadline) = self.draining {
                if now >= deadline || (self.bridge.unacked_frames() == 0 && self.pending.is_empty() && self.local.quiet()) {
                    break;
                }
            }
            let timeout = match self.draining {
                // Draining: look again every 5 ms at least.
                Some(_) => Some(self.bridge.poll_timeout().unwrap_or(u64::MAX).min(now + 5_000_000)),
                None => self.bridge.poll_timeout(),
            };
            let wait = match timeout {
                Some(t) if t <= now => Some(Duration::ZERO),
                Some(t) => Some(Duration::from_nanos(t - now)),
                None => None,
            };
            let first = self.next_event(wait.map_or(IDLE_TURN, |d| d.min(IDLE_TURN)))?;
            // Take what is there (bounded, so timers are not starved), then act on it all at once: records for one
            // peer go out packed into few puts.
            // (An event is taken off the queue only when it will be handled: none is dropped at the bound.)
            let mut next = first;
            let mut taken = 0;
            while let Some(ev) = next.take() {
                if self.on_event(ev) {
                    stop = true;
                    break;
                }
                taken += 1;
                if taken < 1024 {
                    next = self.rx.try_recv().ok();
                }
            }
            let now = monotonic_ns();
            if self.bridge.poll_timeout().is_some_and(|t| t <= now) {
                self.bridge.handle_timeout(now);
            }
            if !stop {
                self.local.idle();
            }
        }
        self.drain_actions();
        self.shutdown();
        Ok(())
    }

    /// The next event within `wait`, or None: the wait passed, or the doorbell rang (a local end may go on: the
    /// loop takes a turn).
    fn next_event(&mut self, wait: Duration) -> Result<Option<Event>, String> {
        match self.rx.try_recv() {
            Ok(ev) => return Ok(Some(ev)),
            Err(TryRecvError::Disconnected) => return Err("the event queue closed".into()),
            Err(TryRecvError::Empty) => {}
        }
        if wait.is_zero() || self.local.ready() {
            return Ok(None);
        }
        let Some(bell) = self.bell.clone() else {
            return match self.rx.recv_timeout(wait) {
                Ok(ev) => Ok(Some(ev)),
                Err(RecvTimeoutError::Timeout) => Ok(None),
                Err(RecvTimeoutError::Disconnected) => Err("the event queue closed".into()),
            };
        };
        let (rx, local) = (&self.rx, &self.local);
        let mut got = None;
        bell.park(wait, &mut || {
            if got.is_none() {
                got = rx.try_recv().ok();
            }
            got.is_some() || local.ready()
        });
        Ok(got)
    }

    /// True to stop.
    fn on_event(&mut self, ev: Event) -> bool {
        let now = monotonic_ns();
        match ev {
            Event::Put { key, payload } => {
                {
                    let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
                    s.puts_in += 1;
                    s.bytes_in += payload.len() as u64;
                }
                if let Err(e) = self.bridge.handle_put(now, &key, &payload) {
                    self.bad_input(&format!("put on {key}: {e}"));
                }
            }
            Event::Liveliness { key, alive } => {
                if self.verbose {
                    eprintln!("multihop-bridge: liveliness {key} {}", if alive { "PUT" } else { "DELETE" });
                }
                if let Err(e) = self.bridge.handle_liveliness(now, &key, alive) {
                    self.bad_input(&format!("liveliness {key}: {e}"));
                }
            }
            Event::Local(ev) => return self.on_local(now, ev),
        }
        false
    }

    fn bad_input(&mut self, what: &str) {
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).bad_inputs += 1;
        eprintln!("multihop-bridge: refused {what}");
    }

    fn on_local(&mut self, now: Nanos, ev: LocalEvent) -> bool {
        let r = match ev {
            LocalEvent::Export(s) => self.bridge.export(&s),
            LocalEvent::Unexport(s) => {
                self.bridge.unexport(&s);
                Ok(())
            }
            LocalEvent::Bind { tag, service, runtime, window, timeout, priority } => {
                let chan = self.bridge.bind(now, &service, &runtime, window, timeout, priority);
                self.binds.insert(chan, tag);
                Ok(())
            }
            LocalEvent::Accept(c) => self.bridge.accept(now, c),
            LocalEvent::Refuse(c, why) => self.bridge.refuse(now, c, &why),
            LocalEvent::Frame(c, f) => self.bridge.send(now, c, f),
            LocalEvent::Close(c, why) => self.bridge.close(now, c, &why),
            LocalEvent::Writable => Ok(()),
            LocalEvent::Status => {
                let st = self.bridge.status(now);
                let ds = self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone();
                self.local.status(&st, &ds);
                Ok(())
            }
            LocalEvent::Stop => {
                if self.draining.is_some() {
                    return true;
                }
                self.draining = Some(now + DRAIN_TIMEOUT.as_nanos() as u64);
                return false;
            }
        };
        if let Err(e) = r {
            if self.verbose {
                eprintln!("multihop-bridge: local call refused: {e}");
            }
        }
        false
    }

    fn drain_actions(&mut self) {
        while let Some(a) = self.bridge.poll_action() {
            self.act(a);
        }
    }

    fn act(&mut self, a: Action) {
        match a {
            Action::Put { key, priority, payload } => self.put(key, priority, payload),
            Action::DeclareToken { key } => self.token(TokenOp::Declare(key)),
            Action::UndeclareToken { key } => self.token(TokenOp::Undeclare(key)),
            Action::Deliver { chan, frame } => {
                if let Some(q) = self.pending.get_mut(&chan) {
                    q.push_back(Pending::Frame(frame));
                } else if self.local.deliver(chan, &frame) {
                    let _ = self.bridge.handle_delivered(monotonic_ns(), chan, 1);
                } else {
                    self.pending.entry(chan).or_default().push_back(Pending::Frame(frame));
                }
            }
            Action::Closed { chan, reason, tell_end } => {
                self.binds.remove(&chan);
                if let Some(q) = self.pending.get_mut(&chan) {
                    q.push_back(Pending::Closed(reason, tell_end));
                } else {
                    self.local.closed(chan, &reason, tell_end);
                }
            }
            Action::BindDone { chan, result } => {
                let tag = self.binds.remove(&chan).unwrap_or(0);
                self.local.bind_done(tag, chan, result);
            }
            Action::IncomingBind { chan, from, service, window, priority } => self.local.incoming_bind(chan, &from, &service, window, priority),
            Action::RemoteExport { runtime, service, up } => self.local.remote_export(&runtime, &service, up),
            Action::PeerUp { runtime, incarnation } => self.local.peer(&runtime, true, &format!("incarnation {incarnation:#x}")),
            Action::PeerDown { runtime, reason } => {
                for hb in [false, true] {
                    if let Some(s) = self.senders.get(&(runtime.clone(), hb)) {
                        let n = s.clear() as u64;
                        self.stats.lock().unwrap_or_else(|e| e.into_inner()).discarded_puts += n;
                    }
                }
                self.local.peer(&runtime, false, &reason);
            }
        }
    }

    fn put(&mut self, key: String, priority: Priority, payload: Vec<u8>) {
        let (peer, hb) = match self.bridge.keys().parse(&key) {
            Ok(k) => (k.runtime, k.kind == crate::keys::KeyKind::Heartbeat),
            Err(e) => {
                eprintln!("multihop-bridge: a put on a key that is not the fabric's: {e}");
                return;
            }
        };
        let sender = self.senders.entry((peer.clone(), hb)).or_insert_with(|| PeerSender::start(self.session.clone(), &peer, hb, self.stats.clone()));
        if !sender.push(key, priority, payload) {
            self.stats.lock().unwrap_or_else(|e| e.into_inner()).dropped_puts += 1;
            eprintln!("multihop-bridge: the sender queue of runtime {peer} is full ({SENDER_QUEUE} puts): a put dropped");
        }
    }

    fn token(&mut self, op: TokenOp) {
        if let Some(t) = &self.tokens {
            let _ = t.send(op);
        }
    }

    /// Offer the local side the frames it could not take before, in order per channel.
    fn retry_pending(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let chans: Vec<ChanId> = self.pending.keys().copied().collect();
        for chan in chans {
            let q = self.pending.get_mut(&chan).expect("listed");
            while let Some(p) = q.front() {
                match p {
                    Pending::Frame(f) => {
                        if !self.local.deliver(chan, f) {
                            break;
                        }
                        q.pop_front();
                        let _ = self.bridge.handle_delivered(monotonic_ns(), chan, 1);
                    }
                    Pending::Closed(reason, tell) => {
                        self.local.closed(chan, reason, *tell);
                        q.pop_front();
                    }
                }
            }
            if self.pending[&chan].is_empty() {
                self.pending.remove(&chan);
            }
        }
        self.drain_actions();
    }

    /// The driver's counters so far.
    pub fn stats(&self) -> DriverStats {
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn shutdown(&mut self) {
        for s in self.senders.values_mut() {
            s.stop();
        }
        // The token thread withdraws every token (its queue closes), then the session closes.
        drop(self.tokens.take());
        if let Some(t) = self.token_thread.take() {
            let _ = t.join();
        }
        self.subscribers.clear();
        drop(self.liveliness.take());
        if let Err(e) = self.session.close().wait() {
            eprintln!("multihop-bridge: closing the Zenoh session: {e}");
        }
    }
}
