//! The bridge of one runtime, as a sans-IO state machine: inputs are events with the time (`now`, nanoseconds
//! on any monotonic clock the driver chooses), outputs are [`Action`]s the driver carries out. No thread, no
//! socket, no sleep: the Zenoh driver feeds it what its subscribers, liveliness watchers and monitor link
//! bring, and asks [`Bridge::poll_timeout`] when to call [`Bridge::handle_timeout`] next.
//!
//! Per peer runtime: a session (the peer's incarnation and epoch as this bridge knows them, this bridge's epoch
//! towards it), liveness by heartbeats (one every lease / 4; no sign of life for a lease: dead, every channel to
//! it torn down), outgoing records batched per priority into puts of up to `batch_bytes`. Per channel: the two
//! directions ([`crate::channel`]), bind state, teardown.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::time::Duration;

use multihop_base::defaults::MAX_WINDOW;
use multihop_base::wire::{Header, Kind};

use crate::channel::{fabric_window, RxDir, TxDir};
use crate::config::{FabricConfig, Priority};
use crate::keys::{check_runtime, check_service, KeyKind, KeySpace, NameError};
use crate::reason::{BindRefused, Refusal, Teardown, TeardownCode};
use crate::wire::{decode_put, DecodeError, Dir, Envelope, PutKind, Record, MAX_TIMEOUT_MS};

/// Nanoseconds on the driver's monotonic clock.
pub type Nanos = u64;

fn ns(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn secs(n: Nanos) -> String {
    format!("{:.3} s", n as f64 / 1e9)
}

/// A bridged channel, as this bridge's driver knows it (local to this bridge).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChanId(pub u64);

impl fmt::Display for ChanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// What the driver does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Put `payload` on `key` (Reliable, Block, at `priority`).
    Put {
        key: String,
        priority: Priority,
        payload: Vec<u8>,
    },
    /// Declare a liveliness token (this runtime's, an exported service's, a channel this bridge opened).
    DeclareToken {
        key: String,
    },
    UndeclareToken {
        key: String,
    },
    /// Write `frame` to the monitor link (its VCI rewritten to the channel's), or queue it when the ring is
    /// full; report it with [`Bridge::handle_delivered`] once written.
    Deliver {
        chan: ChanId,
        frame: Vec<u8>,
    },
    /// The channel is gone: forget its VCI. With `tell_end`, write a TEARDOWN carrying `reason` to the local
    /// end first (everything delivered before it stays delivered); without, the end already knows (its own
    /// TEARDOWN crossed, or the other end's was delivered).
    Closed {
        chan: ChanId,
        reason: Teardown,
        tell_end: bool,
    },
    /// A bind this bridge made ([`Bridge::bind`]) is done.
    BindDone {
        chan: ChanId,
        result: Result<(), BindRefused>,
    },
    /// A client on runtime `from` binds `service` here: bind it locally as a monitor would, then
    /// [`Bridge::accept`] or [`Bridge::refuse`] (a `Closed` comes if the client's timeout passes first).
    IncomingBind {
        chan: ChanId,
        from: String,
        service: String,
        window: u32,
        priority: Priority,
    },
    /// A runtime was heard from (first time, or after it was dead: a new session, no channel resumed).
    PeerUp {
        runtime: String,
        incarnation: u64,
    },
    /// A runtime is dead to this bridge (every channel to it is already closed).
    PeerDown {
        runtime: String,
        reason: String,
    },
    /// Runtime `runtime` exports `service` to the fabric (`up`: its token appeared), or no longer does (its
    /// token went, or the runtime is dead). The runtime's side offers such a service locally as
    /// `service@runtime`.
    RemoteExport {
        runtime: String,
        service: String,
        up: bool,
    },
}

/// An input the bridge refuses (the driver counts and logs it; nothing else changes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InputError {
    /// A key that is not this fabric's, or not for this runtime.
    Key(String),
    /// A put whose bytes are not the wire's.
    Decode(DecodeError),
    /// The put's kind and its key's disagree, or it came from this runtime itself.
    Mismatch(String),
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::Key(s) | InputError::Mismatch(s) => f.write_str(s),
            InputError::Decode(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for InputError {}

/// A local call the bridge refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalError {
    /// No such channel (never was, or already closed: a frame after the close is late, the driver drops it).
    NoChannel(ChanId),
    /// The channel exists but is not in the state the call needs.
    State(ChanId, &'static str),
    /// A frame that is not a multi-hop message.
    BadFrame(String),
    Name(NameError),
}

impl fmt::Display for LocalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LocalError::NoChannel(c) => write!(f, "no bridged channel {c}"),
            LocalError::State(c, s) => write!(f, "bridged channel {c} is {s}"),
            LocalError::BadFrame(s) => write!(f, "not a multi-hop frame: {s}"),
            LocalError::Name(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for LocalError {}

/// Counters of what the bridge dropped, for `multihop status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Puts addressed to an earlier session (of this bridge or of the sender): ignored.
    pub stale_puts: u64,
    /// Frames for a channel no longer open (its end closed): dropped, acked.
    pub late_frames: u64,
    /// Frames for a channel this bridge does not know: answered with a TEARDOWN.
    pub unknown_frames: u64,
}

/// What `multihop status` shows of one peer runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerStatus {
    pub runtime: String,
    pub alive: bool,
    /// Its incarnation, once heard from.
    pub incarnation: Option<u64>,
    /// How long ago it was last heard from.
    pub silent_for: Nanos,
    /// TEARDOWNs to it not acked yet.
    pub unacked_teardowns: usize,
    /// The services it exports to the fabric (from their liveliness tokens).
    pub services: Vec<String>,
}

/// What `multihop status` shows of one bridged channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelStatus {
    pub chan: ChanId,
    pub peer: String,
    /// The fabric channel id (the opener's).
    pub wire: u64,
    /// This side bound it (the client's side).
    pub opened_here: bool,
    /// "binding", "incoming", "open", "closing" or "peer-closed".
    pub state: &'static str,
    pub window: u32,
    pub priority: Priority,
    pub frames_out: u64,
    pub bytes_out: u64,
    pub frames_in: u64,
    pub bytes_in: u64,
    /// Frames waiting for fabric credit.
    pub queued: usize,
    /// Frames sent and not acked.
    pub in_flight: u64,
    /// Received frames not yet taken by the monitor link.
    pub undelivered: u64,
    /// Next sequence number out, next expected in.
    pub seq_out: u64,
    pub seq_in: u64,
}

/// The bridge's state for `multihop status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub runtime: String,
    pub fabric: String,
    pub incarnation: u64,
    pub exports: Vec<String>,
    pub peers: Vec<PeerStatus>,
    pub channels: Vec<ChannelStatus>,
    pub stats: Stats,
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    /// Client side: the bind request is out (or waits for the runtime to be heard from, `sent` false).
    Binding {
        deadline: Nanos,
        service: String,
        timeout_ms: u32,
        sent: bool,
    },
    /// Server side: the local bind is under way.
    Incoming {
        deadline: Nanos,
    },
    Open,
    /// This side's end closed: its TEARDOWN went out; forgotten once every frame is acked.
    Closing,
    /// The other end closed: its TEARDOWN is being delivered; forgotten once it is.
    PeerClosed,
}

#[derive(Debug)]
struct Chan {
    peer: String,
    wire: u64,
    opened_here: bool,
    priority: Priority,
    window: u32,
    state: State,
    tx: TxDir,
    rx: RxDir,
}

impl Chan {
    /// The direction this side sends in.
    fn out_dir(&self) -> Dir {
        if self.opened_here {
            Dir::ToServer
        } else {
            Dir::ToClient
        }
    }
}

#[derive(Debug)]
struct Peer {
    /// The peer's (incarnation, epoch) of the session this bridge holds with it (kept while it is dead).
    view: Option<(u64, u32)>,
    /// Incarnations of the peer that are over.
    buried: VecDeque<u64>,
    alive: bool,
    /// This bridge's epoch towards the peer: bumped when this bridge declares it dead.
    my_epoch: u32,
    last_seen: Nanos,
    next_hb: Nanos,
    out: BTreeMap<Priority, VecDeque<Vec<u8>>>,
    /// TEARDOWNs sent and not acked: repeated every heartbeat until they are.
    tombstones: BTreeMap<(bool, u64), Tombstone>,
    /// This bridge declared the peer dead and withdrew its services from the runtime; their liveliness tokens may
    /// still stand (a peer frozen for about the lease can keep its Zenoh link): they are exported again, as the
    /// tokens then stand, when the peer is heard from again.
    exports_withdrawn: bool,
}

const BURIED_KEPT: usize = 8;

/// A TEARDOWN this bridge repeats until it is acked.
#[derive(Clone, Debug)]
struct Tombstone {
    dir: Dir,
    code: TeardownCode,
    text: String,
    priority: Priority,
    /// The channel's liveliness token is still declared (this side opened it): withdrawn once the TEARDOWN is
    /// acked, so that the other side hears the reason before the token's DELETE.
    token: bool,
}

/// The bridge of one runtime.
#[derive(Debug)]
pub struct Bridge {
    cfg: FabricConfig,
    keys: KeySpace,
    me: String,
    inc: u64,
    started: Nanos,
    lease: Nanos,
    hb: Nanos,
    peers: BTreeMap<String, Peer>,
    chans: BTreeMap<ChanId, Chan>,
    /// (peer, opened here, wire id) -> channel.
    wire: BTreeMap<(String, bool, u64), ChanId>,
    exports: BTreeSet<String>,
    /// What each other runtime exports to the fabric (from its services' liveliness tokens).
    remote_exports: BTreeMap<String, BTreeSet<String>>,
    next_id: u64,
    actions: VecDeque<Action>,
    pub stats: Stats,
}

impl Bridge {
    /// The bridge of runtime `me` (checked) in `cfg`'s fabric (checked), with `incarnation` (random, not 0: the
    /// driver draws it) starting at `now`. Declares the runtime's liveliness token.
    pub fn new(cfg: FabricConfig, me: &str, incarnation: u64, now: Nanos) -> Result<Bridge, String> {
        cfg.check().map_err(|e| e.to_string())?;
        check_runtime(me).map_err(|e| e.to_string())?;
        if incarnation == 0 {
            return Err("incarnation 0 is reserved".into());
        }
        let keys = KeySpace::new(&cfg.name).map_err(|e| e.to_string())?;
        let mut b = Bridge {
            lease: ns(cfg.lease),
            hb: ns(cfg.heartbeat_interval()),
            keys,
            cfg,
            me: me.to_string(),
            inc: incarnation,
            started: now,
            peers: BTreeMap::new(),
            chans: BTreeMap::new(),
            wire: BTreeMap::new(),
            exports: BTreeSet::new(),
            remote_exports: BTreeMap::new(),
            next_id: 1,
            actions: VecDeque::new(),
            stats: Stats::default(),
        };
        let key = b.keys.runtime(me).expect("checked");
        b.actions.push_back(Action::DeclareToken { key });
        Ok(b)
    }

    pub fn runtime(&self) -> &str {
        &self.me
    }

    pub fn incarnation(&self) -> u64 {
        self.inc
    }

    pub fn keys(&self) -> &KeySpace {
        &self.keys
    }

    /// The keys the driver subscribes to: this runtime's data, heartbeat and bind keys.
    pub fn subscriptions(&self) -> [String; 3] {
        let k = &self.keys;
        [k.data(&self.me).expect("checked"), k.heartbeat(&self.me).expect("checked"), k.bind(&self.me).expect("checked")]
    }

    /// The live peers, by name.
    pub fn live_peers(&self) -> Vec<&str> {
        self.peers.iter().filter(|(_, p)| p.alive).map(|(n, _)| n.as_str()).collect()
    }

    /// Whether a channel is open (bound and not closing).
    pub fn is_open(&self, chan: ChanId) -> bool {
        self.chans.get(&chan).is_some_and(|c| c.state == State::Open)
    }

    /// Channels known (in any state).
    /// Frames this bridge sent (or queued) that the other side has not acked yet, over every channel: a bridge that
    /// stops waits for this to reach 0 (bounded) so that what its runtime's channels sent is not lost at its exit.
    pub fn unacked_frames(&self) -> u64 {
        self.chans.values().map(|c| c.tx.in_flight() + c.tx.queued() as u64).sum()
    }

    pub fn channel_count(&self) -> usize {
        self.chans.len()
    }

    /// Peers, exports and channels with their counters, at `now`.
    pub fn status(&self, now: Nanos) -> Status {
        let peers = self
            .peers
            .iter()
            .map(|(n, p)| PeerStatus {
                runtime: n.clone(),
                alive: p.alive,
                incarnation: p.view.map(|v| v.0),
                silent_for: now.saturating_sub(p.last_seen),
                unacked_teardowns: p.tombstones.len(),
                services: if p.exports_withdrawn {
                    Vec::new()
                } else {
                    self.remote_exports.get(n).map(|s| s.iter().cloned().collect()).unwrap_or_default()
                },
            })
            .collect();
        let channels = self
            .chans
            .iter()
            .map(|(&chan, c)| ChannelStatus {
                chan,
                peer: c.peer.clone(),
                wire: c.wire,
                opened_here: c.opened_here,
                state: match c.state {
                    State::Binding { .. } => "binding",
                    State::Incoming { .. } => "incoming",
                    State::Open => "open",
                    State::Closing => "closing",
                    State::PeerClosed => "peer-closed",
                },
                window: c.window,
                priority: c.priority,
                frames_out: c.tx.frames,
                bytes_out: c.tx.bytes,
                frames_in: c.rx.frames,
                bytes_in: c.rx.bytes,
                queued: c.tx.queued(),
                in_flight: c.tx.in_flight(),
                undelivered: c.rx.undelivered(),
                seq_out: c.tx.next_seq(),
                seq_in: c.rx.expected(),
            })
            .collect();
        Status {
            runtime: self.me.clone(),
            fabric: self.keys.fabric().to_string(),
            incarnation: self.inc,
            exports: self.exports.iter().cloned().collect(),
            peers,
            channels,
            stats: self.stats.clone(),
        }
    }

    // ---- services ----

    /// Export `service` to the fabric (declares its token); a service not exported is "not found" for the fabric.
    pub fn export(&mut self, service: &str) -> Result<(), LocalError> {
        let key = self.keys.service(&self.me, service).map_err(LocalError::Name)?;
        if self.exports.insert(service.to_string()) {
            self.actions.push_back(Action::DeclareToken { key });
        }
        Ok(())
    }

    /// Stop exporting `service` (its open channels stay).
    pub fn unexport(&mut self, service: &str) {
        if self.exports.remove(service) {
            let key = self.keys.service(&self.me, service).expect("was checked");
            self.actions.push_back(Action::UndeclareToken { key });
        }
    }

    // ---- binds ----

    fn alloc(&mut self) -> ChanId {
        let id = ChanId(self.next_id);
        self.next_id += 1;
        id
    }

    /// Bind `service@runtime` across the fabric with the channel's `window`, giving up after `timeout`. The
    /// answer is a [`Action::BindDone`] for the returned channel (a refusal may come at once).
    pub fn bind(&mut self, now: Nanos, service: &str, runtime: &str, window: u32, timeout: Duration, priority: Option<Priority>) -> ChanId {
        let id = self.alloc();
        let refuse = |code, text: String| Action::BindDone { chan: id, result: Err(BindRefused { code, text }) };
        let invalid = check_service(service)
            .and_then(|()| check_runtime(runtime))
            .map_err(|e| e.to_string())
            .and_then(|()| if runtime == self.me { Err(format!("{runtime} is this runtime: bind {service:?} without @")) } else { Ok(()) })
            .and_then(|()| if (1..=MAX_WINDOW).contains(&window) { Ok(()) } else { Err(format!("window {window} outside 1..={MAX_WINDOW}")) });
        if let Err(text) = invalid {
            self.actions.push_back(refuse(Refusal::Invalid, format!("cannot bind {service}@{runtime}: {text}")));
            return id;
        }
        let alive = self.peers.get(runtime).is_some_and(|p| p.alive);
        let heard = self.peers.get(runtime).is_some_and(|p| p.view.is_some());
        if !alive && (heard || now >= self.started + self.lease) {
            let why = self.not_in_fabric(now, runtime);
            self.actions.push_back(refuse(Refusal::NotInFabric, why));
            return id;
        }
        let timeout_ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX).clamp(1, MAX_TIMEOUT_MS);
        let priority = priority.unwrap_or(self.cfg.priority);
        let fw = fabric_window(window);
        self.chans.insert(
            id,
            Chan {
                peer: runtime.to_string(),
                wire: id.0,
                opened_here: true,
                priority,
                window,
                state: State::Binding { deadline: now + ns(timeout), service: service.to_string(), timeout_ms, sent: false },
                tx: TxDir::new(fw),
                rx: RxDir::new(fw),
            },
        );
        self.wire.insert((runtime.to_string(), true, id.0), id);
        if alive {
            self.send_bind_request(id);
        } else {
            // Within the first lease after this bridge started: the runtime may not have been heard from yet.
            self.peer_mut(now, runtime);
        }
        id
    }

    fn not_in_fabric(&self, now: Nanos, runtime: &str) -> String {
        let f = self.keys.fabric();
        match self.peers.get(runtime) {
            Some(p) if p.view.is_some() => {
                format!("runtime {runtime} is not in fabric {f}: no sign of life for {}", secs(now.saturating_sub(p.last_seen)))
            }
            _ => format!("runtime {runtime} is not in fabric {f}"),
        }
    }

    fn send_bind_request(&mut self, id: ChanId) {
        let c = self.chans.get_mut(&id).expect("caller checked");
        let State::Binding { service, timeout_ms, sent, .. } = &mut c.state else { return };
        *sent = true;
        let rec = Record::BindRequest { chan: c.wire, window: c.window, timeout_ms: *timeout_ms, priority: c.priority, service };
        let mut body = Vec::new();
        rec.encode(&mut body);
        let (peer, priority) = (c.peer.clone(), c.priority);
        let key = self.keys.bind(&peer).expect("checked");
        let payload = self.envelope(PutKind::Bind, &peer, &body);
        self.actions.push_back(Action::Put { key, priority, payload });
    }

    /// Accept an [`Action::IncomingBind`]: the local bind succeeded; the channel is open.
    pub fn accept(&mut self, _now: Nanos, chan: ChanId) -> Result<(), LocalError> {
        let c = self.chans.get_mut(&chan).ok_or(LocalError::NoChannel(chan))?;
        if !matches!(c.state, State::Incoming { .. }) {
            return Err(LocalError::State(chan, "not an incoming bind"));
        }
        c.state = State::Open;
        let (peer, wire, prio) = (c.peer.clone(), c.wire, c.priority);
        self.record(&peer, prio, &Record::BindAccept { chan: wire });
        Ok(())
    }

    /// Refuse an [`Action::IncomingBind`] (the local bind failed, or the service's connect callback said no).
    pub fn refuse(&mut self, _now: Nanos, chan: ChanId, why: &str) -> Result<(), LocalError> {
        let c = self.chans.get(&chan).ok_or(LocalError::NoChannel(chan))?;
        if !matches!(c.state, State::Incoming { .. }) {
            return Err(LocalError::State(chan, "not an incoming bind"));
        }
        let c = self.forget(chan).expect("exists");
        self.record(&c.peer, c.priority, &Record::BindRefuse { chan: c.wire, code: Refusal::Refused, text: why });
        Ok(())
    }

    // ---- local frames ----

    /// A frame from the monitor link for `chan` (multi-hop header included). Its own TEARDOWN closes the channel
    /// once everything before it is acked.
    pub fn send(&mut self, now: Nanos, chan: ChanId, frame: Vec<u8>) -> Result<(), LocalError> {
        let h = Header::decode(&frame).map_err(|e| LocalError::BadFrame(e.to_string()))?;
        let c = self.chans.get_mut(&chan).ok_or(LocalError::NoChannel(chan))?;
        match c.state {
            State::Open => {}
            State::Closing | State::PeerClosed => {
                self.stats.late_frames += 1;
                return Err(LocalError::State(chan, "closed"));
            }
            _ => return Err(LocalError::State(chan, "not bound yet")),
        }
        if h.kind == Kind::Teardown {
            c.state = State::Closing;
        }
        match c.tx.push(frame) {
            Ok(Some((seq, f))) => {
                let (peer, wire, dir, prio) = (c.peer.clone(), c.wire, c.out_dir(), c.priority);
                self.record(&peer, prio, &Record::Frame { chan: wire, dir, seq, frame: &f });
            }
            Ok(None) => {}
            Err(t) => self.teardown(now, chan, t, true),
        }
        Ok(())
    }

    /// The monitor link took `n` more frames of `chan` (written from [`Action::Deliver`]).
    pub fn handle_delivered(&mut self, now: Nanos, chan: ChanId, n: u64) -> Result<(), LocalError> {
        let c = self.chans.get_mut(&chan).ok_or(LocalError::NoChannel(chan))?;
        let ack = match c.rx.on_delivered(n) {
            Ok(a) => a,
            Err(t) => {
                self.teardown(now, chan, t, true);
                return Ok(());
            }
        };
        let done = c.state == State::PeerClosed && c.rx.undelivered() == 0;
        let ack = if done { Some(c.rx.take_ack()) } else { ack };
        if let Some(upto) = ack {
            let (peer, wire, dir, prio) = (c.peer.clone(), c.wire, c.out_dir(), c.priority);
            self.record(&peer, prio, &Record::Ack { chan: wire, dir, upto });
        }
        if done {
            let text = format!("closed by its other end on runtime {}", self.chans[&chan].peer);
            self.close_quietly(chan, Teardown { code: TeardownCode::Closed, text });
        }
        Ok(())
    }

    /// The local side of `chan` is gone without a TEARDOWN of its own (the monitor link died, the driver gave
    /// up): the channel closes both ways with `why`.
    pub fn close(&mut self, now: Nanos, chan: ChanId, why: &str) -> Result<(), LocalError> {
        if !self.chans.contains_key(&chan) {
            return Err(LocalError::NoChannel(chan));
        }
        self.teardown(now, chan, Teardown { code: TeardownCode::Local, text: why.to_string() }, true);
        Ok(())
    }

    // ---- liveliness ----

    /// A liveliness token of this fabric appeared (`alive`) or went. A runtime's token makes it known (heartbeats
    /// go to it) and its going makes it dead at once; a channel's token going closes the channel.
    pub fn handle_liveliness(&mut self, now: Nanos, key: &str, alive: bool) -> Result<(), InputError> {
        let k = self.keys.parse(key).map_err(InputError::Key)?;
        if k.runtime == self.me {
            return Ok(());
        }
        match (k.kind, alive) {
            (KeyKind::Runtime, true) => {
                self.peer_mut(now, &k.runtime);
            }
            (KeyKind::Runtime, false) if self.peers.get(&k.runtime).is_some_and(|p| p.alive) => {
                let why = format!("runtime {} left fabric {}: its liveliness token was withdrawn", k.runtime, self.keys.fabric());
                self.peer_dead(now, &k.runtime, why);
            }
            (KeyKind::Service, up) => {
                // `remote_exports` follows the tokens; the runtime hears of a change only while the peer's
                // services are not withdrawn (a peer declared dead gets them back when it is heard from again).
                let service = k.service.expect("a svc key has one");
                let known = self.remote_exports.entry(k.runtime.clone()).or_default();
                let changed = if up { known.insert(service.clone()) } else { known.remove(&service) };
                let withdrawn = self.peers.get(&k.runtime).is_some_and(|p| p.exports_withdrawn);
                if changed && !withdrawn {
                    self.actions.push_back(Action::RemoteExport { runtime: k.runtime, service, up });
                }
            }
            (KeyKind::Channel, false) => {
                let wire = k.channel.expect("a ch key has one");
                if let Some(&id) = self.wire.get(&(k.runtime.clone(), false, wire)) {
                    let text = format!("runtime {} withdrew the channel's liveliness token", k.runtime);
                    self.teardown(now, id, Teardown { code: TeardownCode::PeerLost, text }, false);
                }
            }
            _ => {}
        }
        Ok(())
    }

    // ---- puts from the fabric ----

    /// A put arrived on `key` (one of [`Bridge::subscriptions`]).
    pub fn handle_put(&mut self, now: Nanos, key: &str, payload: &[u8]) -> Result<(), InputError> {
        let k = self.keys.parse(key).map_err(InputError::Key)?;
        if k.runtime != self.me {
            return Err(InputError::Key(format!("key {key:?} is not for runtime {}", self.me)));
        }
        let (env, recs) = decode_put(payload).map_err(InputError::Decode)?;
        let want = match k.kind {
            KeyKind::Data => PutKind::Data,
            KeyKind::Heartbeat => PutKind::Heartbeat,
            KeyKind::Bind => PutKind::Bind,
            _ => return Err(InputError::Key(format!("key {key:?} carries no put for a bridge"))),
        };
        if env.kind != want {
            return Err(InputError::Mismatch(format!("a {:?} put on key {key:?}", env.kind)));
        }
        if env.src == self.me {
            return Err(InputError::Mismatch(format!("a put from this runtime itself on {key:?}")));
        }
        if !self.admit(now, &env) {
            self.stats.stale_puts += 1;
            return Ok(());
        }
        if env.dst_inc != 0 && (env.dst_inc != self.inc || env.dst_epoch != self.peers[&env.src].my_epoch) {
            // A live peer that has not yet heard of this bridge's new session (restart, or this bridge declared it
            // dead): it counts as a sign of life and its session is taken, but its records were for channels of
            // the old session, all closed here. It learns the new session from the next heartbeat.
            self.stats.stale_puts += u64::from(!recs.is_empty());
            return Ok(());
        }
        for r in recs {
            self.on_record(now, &env.src, env.dst_inc != 0, r);
        }
        Ok(())
    }

    /// The session checks of a put from `env.src`: false for a put of one of the sender's earlier sessions
    /// (ignored); else the sender is alive, in the session the put names (a newer one closes the channels of the
    /// one before).
    fn admit(&mut self, now: Nanos, env: &Envelope) -> bool {
        let src = env.src.clone();
        let (inc, epoch) = (env.src_inc, env.src_epoch);
        let p = self.peer_mut(now, &src);
        if p.buried.contains(&inc) {
            return false;
        }
        let reset = match p.view {
            Some((vi, ve)) if vi == inc && epoch < ve => return false, // an earlier epoch of the same incarnation
            Some((vi, ve)) if vi == inc && epoch == ve => None,
            Some((vi, _)) if vi == inc => {
                Some(format!("runtime {src} reset its session with this runtime (it had lost sight of it and closed its channels)"))
            }
            Some((vi, _)) => {
                p.buried.push_back(vi);
                if p.buried.len() > BURIED_KEPT {
                    p.buried.pop_front();
                }
                Some(format!("runtime {src} restarted (a new incarnation): its channels are not resumed"))
            }
            None => None,
        };
        p.view = Some((inc, epoch));
        p.last_seen = now;
        let was_alive = p.alive;
        p.alive = true;
        let restore = std::mem::take(&mut p.exports_withdrawn);
        if let Some(why) = &reset {
            self.drop_session(&src, why);
        }
        if !was_alive || reset.is_some() {
            self.actions.push_back(Action::PeerUp { runtime: src.clone(), incarnation: inc });
            // Tell it this bridge's session now (it may still hold channels of an earlier one).
            self.peers.get_mut(&src).expect("admitted").next_hb = now;
        }
        if restore {
            // Its services whose tokens stood through its absence (a new incarnation's tokens, if it restarted).
            for service in self.remote_exports.get(&src).into_iter().flatten() {
                self.actions.push_back(Action::RemoteExport { runtime: src.clone(), service: service.clone(), up: true });
            }
        }
        // Binds that waited for this runtime to be heard from.
        let waiting: Vec<ChanId> =
            self.chans.iter().filter(|(_, c)| c.peer == src && matches!(c.state, State::Binding { sent: false, .. })).map(|(&id, _)| id).collect();
        for id in waiting {
            self.send_bind_request(id);
        }
        true
    }

    fn on_record(&mut self, now: Nanos, peer: &str, knows_me: bool, r: Record<'_>) {
        if !knows_me && !matches!(r, Record::BindRequest { .. }) {
            // A put from a peer that does not know this bridge's session carries no channel of it.
            self.stats.stale_puts += 1;
            return;
        }
        let dir = match r {
            Record::Frame { dir, .. }
            | Record::Ack { dir, .. }
            | Record::Probe { dir, .. }
            | Record::Teardown { dir, .. }
            | Record::TeardownAck { dir, .. } => dir,
            Record::BindRequest { .. } => Dir::ToServer,
            Record::BindAccept { .. } | Record::BindRefuse { .. } => Dir::ToClient,
        };
        // Travelling to the client: this bridge opened the channel.
        let opened_here = dir == Dir::ToClient;
        let wkey = (peer.to_string(), opened_here, r.chan());
        let id = self.wire.get(&wkey).copied();
        let prio = id.and_then(|i| self.chans.get(&i)).map_or(self.cfg.priority, |c| c.priority);
        match r {
            Record::Frame { chan, seq, frame, .. } => {
                let Some(id) = id else {
                    self.stats.unknown_frames += 1;
                    self.unknown_channel(peer, opened_here, chan, dir, prio);
                    return;
                };
                let c = self.chans.get_mut(&id).expect("mapped");
                match c.state {
                    State::Open | State::PeerClosed => {}
                    State::Closing => {
                        // This end is gone: the frame is late; ack it so the other side's credit is not held.
                        self.stats.late_frames += 1;
                        let teardown = Header::decode(frame).is_ok_and(|h| h.kind == Kind::Teardown);
                        match c.rx.on_frame(seq, frame.len()).and_then(|()| c.rx.on_delivered(1)) {
                            Ok(_) => {
                                let (upto, dir) = (c.rx.take_ack(), c.out_dir());
                                self.record(peer, prio, &Record::Ack { chan, dir, upto });
                                if teardown {
                                    let text = format!("closed by both ends (runtime {peer}'s too)");
                                    self.close_quietly(id, Teardown { code: TeardownCode::Closed, text });
                                }
                            }
                            Err(t) => self.teardown_named(now, id, t, true),
                        }
                        return;
                    }
                    _ => {
                        let t = Teardown { code: TeardownCode::Protocol, text: "a frame before the bind completed".into() };
                        self.teardown_named(now, id, t, true);
                        return;
                    }
                }
                if c.state == State::PeerClosed {
                    let t = Teardown { code: TeardownCode::Protocol, text: format!("frame {seq} after the other end's TEARDOWN") };
                    self.teardown_named(now, id, t, true);
                    return;
                }
                if let Err(t) = c.rx.on_frame(seq, frame.len()) {
                    self.teardown_named(now, id, t, true);
                    return;
                }
                if Header::decode(frame).is_ok_and(|h| h.kind == Kind::Teardown) {
                    c.state = State::PeerClosed;
                }
                self.actions.push_back(Action::Deliver { chan: id, frame: frame.to_vec() });
            }
            Record::Ack { chan, upto, .. } => {
                let Some(id) = id else { return };
                let c = self.chans.get_mut(&id).expect("mapped");
                if !matches!(c.state, State::Open | State::Closing | State::PeerClosed) {
                    return;
                }
                match c.tx.on_ack(upto) {
                    Ok(released) => {
                        let out = c.out_dir();
                        let done = c.state == State::Closing && c.tx.idle();
                        for (seq, f) in released {
                            self.record(peer, prio, &Record::Frame { chan, dir: out, seq, frame: &f });
                        }
                        if done {
                            self.close_quietly(id, Teardown { code: TeardownCode::Closed, text: "closed by this end".into() });
                        }
                    }
                    Err(t) => self.teardown_named(now, id, t, true),
                }
            }
            Record::Probe { chan, next, .. } => {
                let Some(id) = id else {
                    self.stats.unknown_frames += 1;
                    self.unknown_channel(peer, opened_here, chan, dir, prio);
                    return;
                };
                let c = self.chans.get_mut(&id).expect("mapped");
                match c.rx.on_probe(next) {
                    Ok(upto) => {
                        let out = c.out_dir();
                        self.record(peer, prio, &Record::Ack { chan, dir: out, upto });
                    }
                    Err(t) => self.teardown_named(now, id, t, true),
                }
            }
            Record::Teardown { chan, code, text, .. } => {
                self.record(peer, prio, &Record::TeardownAck { chan, dir: dir.reverse() });
                if let Some(id) = id {
                    if self.chans[&id].state == State::Closing {
                        self.close_quietly(id, Teardown { code: TeardownCode::Closed, text: "closed by this end".into() });
                    } else {
                        let text = format!("fabric channel closed by runtime {peer}: {text}");
                        self.teardown(now, id, Teardown { code, text }, false);
                    }
                }
            }
            Record::TeardownAck { chan, .. } => {
                let t = self.peers.get_mut(peer).and_then(|p| p.tombstones.remove(&(opened_here, chan)));
                if t.is_some_and(|t| t.token) {
                    let key = self.keys.channel(&self.me, chan).expect("checked");
                    self.actions.push_back(Action::UndeclareToken { key });
                }
            }
            Record::BindRequest { chan, window, timeout_ms, priority, service } => {
                if id.is_some() {
                    return; // a duplicate request: the first one is being answered
                }
                if !self.exports.contains(service) {
                    let text = format!("runtime {} exports no service {service:?} to fabric {}", self.me, self.keys.fabric());
                    self.record(peer, priority, &Record::BindRefuse { chan, code: Refusal::NotExported, text: &text });
                    return;
                }
                let id = self.alloc();
                let fw = fabric_window(window);
                let deadline = now + u64::from(timeout_ms) * 1_000_000;
                let c = Chan {
                    peer: peer.to_string(),
                    wire: chan,
                    opened_here: false,
                    priority,
                    window,
                    state: State::Incoming { deadline },
                    tx: TxDir::new(fw),
                    rx: RxDir::new(fw),
                };
                self.chans.insert(id, c);
                self.wire.insert(wkey, id);
                self.actions.push_back(Action::IncomingBind { chan: id, from: peer.to_string(), service: service.to_string(), window, priority });
            }
            Record::BindAccept { chan } => match id {
                Some(id) if matches!(self.chans[&id].state, State::Binding { sent: true, .. }) => {
                    self.chans.get_mut(&id).expect("mapped").state = State::Open;
                    let key = self.keys.channel(&self.me, chan).expect("checked");
                    self.actions.push_back(Action::DeclareToken { key });
                    self.actions.push_back(Action::BindDone { chan: id, result: Ok(()) });
                }
                Some(_) => {}
                None => {
                    // The bind was given up (timeout): the server's side is open; close it, reliably.
                    let text = format!("the client on runtime {} gave up the bind before the accept came", self.me);
                    let t = Tombstone { dir: Dir::ToServer, code: TeardownCode::BindAbandoned, text, priority: prio, token: false };
                    self.tombstone(peer, true, chan, t);
                }
            },
            Record::BindRefuse { code, text, .. } => {
                if let Some(id) = id.filter(|i| matches!(self.chans[i].state, State::Binding { .. })) {
                    let svc = match &self.chans[&id].state {
                        State::Binding { service, .. } => service.clone(),
                        _ => unreachable!("filtered"),
                    };
                    self.forget(id);
                    let text = format!("bind {svc}@{peer} refused: {text}");
                    self.actions.push_back(Action::BindDone { chan: id, result: Err(BindRefused { code, text }) });
                }
            }
        }
    }

    /// A frame or probe for a channel this bridge does not know: answered with a TEARDOWN, the one this bridge
    /// closed it with if it is still repeating that one (its reason is the better news), else "unknown".
    fn unknown_channel(&mut self, peer: &str, opened_here: bool, chan: u64, dir: Dir, prio: Priority) {
        let tomb = self.peers.get(peer).and_then(|p| p.tombstones.get(&(opened_here, chan))).cloned();
        let (code, text) = match tomb {
            Some(t) => (t.code, t.text),
            None => {
                (TeardownCode::UnknownChannel, format!("runtime {} has no fabric channel {chan} with {peer} (restarted, or already closed)", self.me))
            }
        };
        self.record(peer, prio, &Record::Teardown { chan, dir: dir.reverse(), code, text: &text });
    }

    // ---- time ----

    /// When [`Bridge::handle_timeout`] is due next (None: nothing is timed).
    pub fn poll_timeout(&self) -> Option<Nanos> {
        let peers = self.peers.values().flat_map(|p| [Some(p.next_hb), p.alive.then_some(p.last_seen + self.lease)]).flatten();
        let chans = self.chans.values().filter_map(|c| match c.state {
            State::Binding { deadline, .. } | State::Incoming { deadline } => Some(deadline),
            _ => None,
        });
        peers.chain(chans).min()
    }

    /// Run what is due at `now`: peers silent for a lease die, heartbeats (with probes and repeated teardowns)
    /// go out, binds past their timeout are refused.
    pub fn handle_timeout(&mut self, now: Nanos) {
        let names: Vec<String> = self.peers.keys().cloned().collect();
        for name in names {
            let p = &self.peers[&name];
            if p.alive && now >= p.last_seen + self.lease {
                let why = format!(
                    "runtime {name}: no sign of life for {} (lease {}): it died, froze or the link to it is cut",
                    secs(now - p.last_seen),
                    secs(self.lease)
                );
                self.peer_dead(now, &name, why);
            }
            if now >= self.peers[&name].next_hb {
                self.heartbeat(now, &name);
            }
        }
        let due: Vec<ChanId> = self
            .chans
            .iter()
            .filter(|(_, c)| matches!(c.state, State::Binding { deadline, .. } | State::Incoming { deadline } if now >= deadline))
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            let c = self.forget(id).expect("listed");
            match c.state {
                State::Binding { service, timeout_ms, sent, .. } => {
                    let (code, text) = if sent {
                        (Refusal::Timeout, format!("bind {service}@{}: no answer within {timeout_ms} ms", c.peer))
                    } else {
                        (
                            Refusal::NotInFabric,
                            format!("runtime {} is not in fabric {}: not heard from within {timeout_ms} ms", c.peer, self.keys.fabric()),
                        )
                    };
                    self.actions.push_back(Action::BindDone { chan: id, result: Err(BindRefused { code, text }) });
                }
                _ => {
                    let text = format!("the local bind did not complete within the client's timeout on runtime {}", self.me);
                    self.record(&c.peer, c.priority, &Record::BindRefuse { chan: c.wire, code: Refusal::Timeout, text: &text });
                    let reason = Teardown { code: TeardownCode::BindAbandoned, text };
                    self.actions.push_back(Action::Closed { chan: id, reason, tell_end: true });
                }
            }
        }
    }

    fn heartbeat(&mut self, now: Nanos, name: &str) {
        let hb_prio = self.cfg.heartbeat_priority;
        let key = self.keys.heartbeat(name).expect("checked");
        let payload = self.envelope(PutKind::Heartbeat, name, &[]);
        self.actions.push_back(Action::Put { key, priority: hb_prio, payload });
        let p = self.peers.get_mut(name).expect("caller");
        p.next_hb = now + self.hb;
        if !p.alive {
            return;
        }
        // Repeat the TEARDOWNs not acked yet.
        let tombs: Vec<_> = p.tombstones.iter().map(|(&(_, chan), t)| (chan, t.dir, t.code, t.text.clone(), t.priority)).collect();
        for (chan, dir, code, text, prio) in tombs {
            self.record(name, prio, &Record::Teardown { chan, dir, code, text: &text });
        }
        // Probe each direction with frames unacked and no ack since the last heartbeat; ack what was delivered.
        let mut recs = Vec::new();
        for c in self.chans.values_mut().filter(|c| c.peer == name) {
            if !matches!(c.state, State::Open | State::Closing | State::PeerClosed) {
                continue;
            }
            if let Some(next) = c.tx.probe_due() {
                recs.push((c.priority, c.wire, c.out_dir(), false, next));
            }
            if c.rx.ack_pending() {
                recs.push((c.priority, c.wire, c.out_dir(), true, c.rx.take_ack()));
            }
        }
        for (prio, chan, dir, ack, n) in recs {
            let r = if ack { Record::Ack { chan, dir, upto: n } } else { Record::Probe { chan, dir, next: n } };
            self.record(name, prio, &r);
        }
    }

    // ---- peers and teardown ----

    fn peer_mut(&mut self, now: Nanos, name: &str) -> &mut Peer {
        self.peers.entry(name.to_string()).or_insert_with(|| Peer {
            view: None,
            buried: VecDeque::new(),
            alive: false,
            my_epoch: 1,
            last_seen: now,
            next_hb: now,
            out: BTreeMap::new(),
            tombstones: BTreeMap::new(),
            exports_withdrawn: false,
        })
    }

    /// Every channel with `name` closes (the peer's side knows or will: no TEARDOWN is sent), pending binds to
    /// it are refused, what was queued for it is dropped.
    fn drop_session(&mut self, name: &str, why: &str) {
        let ids: Vec<ChanId> = self.chans.iter().filter(|(_, c)| c.peer == name).map(|(&id, _)| id).collect();
        for id in ids {
            let c = self.forget(id).expect("listed");
            match c.state {
                State::Binding { service, .. } => {
                    let text = format!("bind {service}@{name}: {why}");
                    self.actions.push_back(Action::BindDone { chan: id, result: Err(BindRefused { code: Refusal::PeerLost, text }) });
                }
                _ => {
                    let reason = Teardown { code: TeardownCode::PeerLost, text: why.to_string() };
                    self.actions.push_back(Action::Closed { chan: id, reason, tell_end: true });
                }
            }
        }
        if let Some(p) = self.peers.get_mut(name) {
            p.out.clear();
            let held: Vec<u64> = std::mem::take(&mut p.tombstones).into_iter().filter(|(_, t)| t.token).map(|((_, c), _)| c).collect();
            for chan in held {
                let key = self.keys.channel(&self.me, chan).expect("checked");
                self.actions.push_back(Action::UndeclareToken { key });
            }
        }
    }

    fn peer_dead(&mut self, _now: Nanos, name: &str, why: String) {
        self.drop_session(name, &why);
        let p = self.peers.get_mut(name).expect("caller");
        p.alive = false;
        // A new epoch: when the peer is heard from again, it learns that its channels with this bridge are gone.
        p.my_epoch += 1;
        // Its services go with it from the runtime's view, but are remembered as their tokens stand: a peer frozen
        // for about the lease may keep its Zenoh link, and so its tokens, and is exported again when heard from.
        if !std::mem::replace(&mut p.exports_withdrawn, true) {
            for service in self.remote_exports.get(name).into_iter().flatten() {
                self.actions.push_back(Action::RemoteExport { runtime: name.to_string(), service: service.clone(), up: false });
            }
        }
        self.actions.push_back(Action::PeerDown { runtime: name.to_string(), reason: why });
    }

    fn forget(&mut self, id: ChanId) -> Option<Chan> {
        self.forget_with(id, false)
    }

    /// Forget a channel; its liveliness token (if this side holds one) is withdrawn unless `keep_token`.
    fn forget_with(&mut self, id: ChanId, keep_token: bool) -> Option<Chan> {
        let c = self.chans.remove(&id)?;
        self.wire.remove(&(c.peer.clone(), c.opened_here, c.wire));
        if c.opened_here && !keep_token && !matches!(c.state, State::Binding { .. }) {
            let key = self.keys.channel(&self.me, c.wire).expect("checked");
            self.actions.push_back(Action::UndeclareToken { key });
        }
        Some(c)
    }

    /// Forget a channel whose end already knows it is closed.
    fn close_quietly(&mut self, id: ChanId, reason: Teardown) {
        if self.forget(id).is_some() {
            self.actions.push_back(Action::Closed { chan: id, reason, tell_end: false });
        }
    }

    /// [`Bridge::teardown`] with the reason prefixed by the channel and peer it concerns.
    fn teardown_named(&mut self, now: Nanos, id: ChanId, t: Teardown, tell_peer: bool) {
        let Some(c) = self.chans.get(&id) else { return };
        let dir = if c.opened_here { "to this runtime's client" } else { "to this runtime's server" };
        let text = format!("fabric channel {} with runtime {} ({dir}): {}", c.wire, c.peer, t.text);
        self.teardown(now, id, Teardown { code: t.code, text }, tell_peer);
    }

    /// Close a channel both ways: the local end is told `reason`; with `tell_peer`, so is the other side (a
    /// TEARDOWN repeated every heartbeat until it is acked).
    fn teardown(&mut self, _now: Nanos, id: ChanId, reason: Teardown, tell_peer: bool) {
        let Some(c) = self.chans.get(&id) else { return };
        let token = c.opened_here && !matches!(c.state, State::Binding { .. });
        let hold = tell_peer && token && self.peers.get(&c.peer).is_some_and(|p| p.alive);
        let c = self.forget_with(id, hold).expect("exists");
        if tell_peer {
            let dir = c.out_dir();
            let t = Tombstone { dir, code: reason.code, text: reason.text.clone(), priority: c.priority, token: hold };
            self.tombstone(&c.peer, c.opened_here, c.wire, t);
        }
        match c.state {
            State::Binding { .. } => {
                let r = BindRefused { code: Refusal::PeerLost, text: reason.text };
                self.actions.push_back(Action::BindDone { chan: id, result: Err(r) });
            }
            _ => self.actions.push_back(Action::Closed { chan: id, reason, tell_end: true }),
        }
    }

    fn tombstone(&mut self, peer: &str, opened_here: bool, chan: u64, t: Tombstone) {
        let Some(p) = self.peers.get_mut(peer) else { return };
        if !p.alive {
            return; // the session is over: the peer drops its channels itself
        }
        let (prio, dir, code) = (t.priority, t.dir, t.code);
        let text = t.text.clone();
        p.tombstones.insert((opened_here, chan), t);
        self.record(peer, prio, &Record::Teardown { chan, dir, code, text: &text });
    }

    // ---- output ----

    fn envelope(&self, kind: PutKind, peer: &str, body: &[u8]) -> Vec<u8> {
        let p = self.peers.get(peer);
        let (dst_inc, dst_epoch) = p.and_then(|p| p.view).unwrap_or((0, 0));
        let env = Envelope { kind, src: self.me.clone(), src_inc: self.inc, dst_inc, src_epoch: p.map_or(1, |p| p.my_epoch), dst_epoch };
        let mut out = Vec::with_capacity(env.len() + body.len());
        env.encode(&mut out);
        out.extend_from_slice(body);
        out
    }

    fn record(&mut self, peer: &str, prio: Priority, r: &Record<'_>) {
        let Some(p) = self.peers.get_mut(peer) else { return };
        let mut b = Vec::new();
        r.encode(&mut b);
        p.out.entry(prio).or_default().push_back(b);
    }

    /// The next thing for the driver to do. Records queued for a peer go out as puts of up to `batch_bytes`
    /// (one record larger than that goes alone), one priority per put.
    pub fn poll_action(&mut self) -> Option<Action> {
        if self.actions.is_empty() {
            self.pack();
        }
        self.actions.pop_front()
    }

    fn pack(&mut self) {
        let cap = self.cfg.batch_bytes;
        let names: Vec<String> = self.peers.iter().filter(|(_, p)| !p.out.is_empty()).map(|(n, _)| n.clone()).collect();
        for name in names {
            let out = std::mem::take(&mut self.peers.get_mut(&name).expect("listed").out);
            let key = self.keys.data(&name).expect("checked");
            let head = self.envelope(PutKind::Data, &name, &[]);
            for (priority, recs) in out {
                let mut put = head.clone();
                for r in recs {
                    if put.len() > head.len() && put.len() + r.len() > cap {
                        let full = std::mem::replace(&mut put, head.clone());
                        self.actions.push_back(Action::Put { key: key.clone(), priority, payload: full });
                    }
                    put.extend_from_slice(&r);
                }
                if put.len() > head.len() {
                    self.actions.push_back(Action::Put { key: key.clone(), priority, payload: put });
                }
            }
        }
    }
}
