//! A deterministic in-memory fabric for the bridge's tests: bridges exchanging their actions through a "network"
//! that can drop, delay, duplicate, reorder and cut, with ends that send numbered messages within their channel's
//! credit, all on an injected clock (1 ms steps).
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use multihop_base::wire::{Header, Kind, DIR_TO_CLIENT, DIR_TO_SERVER};
use multihop_fabric::{Action, BindRefused, Bridge, ChanId, FabricConfig, Teardown};

pub const MS: u64 = 1_000_000;
pub const S: u64 = 1_000 * MS;
pub const LEASE: u64 = 3 * S;

/// splitmix64: a seeded generator, no crate needed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True with probability `ppm` per million.
    pub fn chance(&mut self, ppm: u32) -> bool {
        self.below(1_000_000) < u64::from(ppm)
    }
}

/// What the network may do to a data put (per million puts); heartbeats and binds are spared unless `all_keys`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    pub drop_ppm: u32,
    pub dup_ppm: u32,
    pub reorder_ppm: u32,
    pub all_keys: bool,
    /// Only puts sent by this node.
    pub only_from: Option<usize>,
}

#[derive(Debug)]
struct Msg {
    from: usize,
    to: usize,
    key: String,
    payload: Vec<u8>,
}

/// One channel end as the test sees it.
#[derive(Debug, Default)]
pub struct End {
    /// Counters of the messages delivered to this end, in order.
    pub got: Vec<u64>,
    /// Messages this end sent.
    pub sent: u64,
    /// This end sent its own TEARDOWN (closed in band).
    pub closed_in_band: bool,
    /// The other end's TEARDOWN was delivered here.
    pub saw_teardown: bool,
    /// When the bridge closed the channel, why, and whether the end was to be told.
    pub closed: Option<(u64, Teardown, bool)>,
}

/// A bind made through [`Sim::bind`]: the client's end and, once accepted, the server's.
#[derive(Debug)]
pub struct Pair {
    pub client: (usize, ChanId),
    pub server: Option<(usize, ChanId)>,
    pub service: String,
    pub result: Option<Result<(), BindRefused>>,
    /// Send traffic each way while true.
    pub active: bool,
}

pub struct Node {
    pub name: String,
    pub b: Bridge,
    pub ends: BTreeMap<ChanId, End>,
    /// Every action the bridge gave, with its time.
    pub log: Vec<(u64, Action)>,
    /// Incoming binds are answered by refusing with this text (None: accepted).
    pub refuse_with: Option<String>,
    /// Incoming binds are not answered at all.
    pub silent: bool,
    pub frozen_until: Option<u64>,
    /// Frames a tick the end's monitor link takes (None: all).
    pub ring_rate: Option<usize>,
    undelivered: BTreeMap<ChanId, u64>,
}

pub struct Sim {
    pub now: u64,
    pub nodes: Vec<Node>,
    net: BTreeMap<(u64, u64), Msg>,
    order: u64,
    pub rng: Rng,
    pub faults: Faults,
    pub latency: u64,
    /// Links cut (both ways), as (lower, higher) node index.
    pub cut: BTreeSet<(usize, usize)>,
    pub pairs: Vec<Pair>,
    /// The end's own credit window (messages in flight end to end).
    pub window: u32,
    /// Messages an end sends per tick at most.
    pub burst: u64,
    /// What the network did: (dropped, duplicated, reordered).
    pub done: (u64, u64, u64),
}

fn frame(dir: u8, kind: Kind, n: u64) -> Vec<u8> {
    let mut f = Header { vci: 0, dir, kind, flags: 0, ack: 0 }.encode().to_vec();
    if kind == Kind::Data {
        f.extend_from_slice(&n.to_le_bytes());
    }
    f
}

impl Sim {
    pub fn new(names: &[&str], seed: u64) -> Sim {
        Sim::with_config(names, seed, FabricConfig::new("lab").unwrap())
    }

    pub fn with_config(names: &[&str], seed: u64, cfg: FabricConfig) -> Sim {
        let nodes = names
            .iter()
            .enumerate()
            .map(|(i, n)| Node {
                name: n.to_string(),
                b: Bridge::new(cfg.clone(), n, 0x1000 + i as u64 + (seed << 8), 0).unwrap(),
                ends: BTreeMap::new(),
                log: Vec::new(),
                refuse_with: None,
                silent: false,
                frozen_until: None,
                ring_rate: None,
                undelivered: BTreeMap::new(),
            })
            .collect();
        let mut sim = Sim {
            now: 0,
            nodes,
            net: BTreeMap::new(),
            order: 0,
            rng: Rng(seed),
            faults: Faults::default(),
            latency: MS,
            cut: BTreeSet::new(),
            pairs: Vec::new(),
            window: 16,
            burst: 8,
            done: (0, 0, 0),
        };
        // Every runtime's liveliness token reaches every other bridge.
        for i in 0..sim.nodes.len() {
            for j in 0..sim.nodes.len() {
                if i != j {
                    let key = sim.nodes[i].b.keys().runtime(&sim.nodes[i].name).unwrap();
                    sim.nodes[j].b.handle_liveliness(0, &key, true).unwrap();
                }
            }
        }
        sim
    }

    pub fn idx(&self, name: &str) -> usize {
        self.nodes.iter().position(|n| n.name == name).expect("a node of the sim")
    }

    fn link(a: usize, b: usize) -> (usize, usize) {
        (a.min(b), a.max(b))
    }

    pub fn frozen(&self, n: usize) -> bool {
        self.nodes[n].frozen_until.is_some_and(|t| self.now < t)
    }

    fn send_put(&mut self, from: usize, key: String, payload: Vec<u8>) {
        let rt = key.split('/').nth(3).expect("a bridge key").to_string();
        let to = self.idx(&rt);
        if self.cut.contains(&Self::link(from, to)) {
            self.done.0 += 1;
            return;
        }
        let faulty = (self.faults.all_keys || key.contains("/data/")) && self.faults.only_from.is_none_or(|f| f == from);
        let mut copies = 1;
        if faulty && self.rng.chance(self.faults.drop_ppm) {
            self.done.0 += 1;
            return;
        }
        if faulty && self.rng.chance(self.faults.dup_ppm) {
            self.done.1 += 1;
            copies = 2;
        }
        // FIFO per link unless reordered: after the last message in flight on this link.
        let last = self.net.iter().rev().find(|(_, m)| m.from == from && m.to == to).map(|(&k, _)| k);
        let at = (self.now + self.latency).max(last.map_or(0, |k| k.0));
        // Reordered: overtakes the last message on the link (keys of ordinary messages are even).
        let ahead = last.map(|k| (k.0, k.1 - 1)).filter(|k| !self.net.contains_key(k));
        let reorder = faulty && ahead.is_some() && self.rng.chance(self.faults.reorder_ppm);
        for i in 0..copies {
            self.order += 2;
            let k = if reorder && i == 0 { ahead.expect("checked") } else { (at, self.order) };
            self.net.insert(k, Msg { from, to, key: key.clone(), payload: payload.clone() });
        }
        if reorder {
            self.done.2 += 1;
        }
    }

    /// Carry out everything node `n`'s bridge asks for.
    pub fn drain(&mut self, n: usize) {
        loop {
            while let Some(a) = self.nodes[n].b.poll_action() {
                let now = self.now;
                self.nodes[n].log.push((now, a.clone()));
                match a {
                    Action::Put { key, payload, .. } => self.send_put(n, key, payload),
                    Action::Deliver { chan, frame } => {
                        let node = &mut self.nodes[n];
                        let end = node.ends.get_mut(&chan).expect("a Deliver for a channel the end has");
                        assert!(end.closed.is_none(), "delivered after the close");
                        let h = Header::decode(&frame).unwrap();
                        if h.kind == Kind::Teardown {
                            end.saw_teardown = true;
                        } else {
                            end.got.push(u64::from_le_bytes(frame[16..24].try_into().unwrap()));
                        }
                        *node.undelivered.entry(chan).or_default() += 1;
                    }
                    Action::Closed { chan, reason, tell_end } => {
                        let end = self.nodes[n].ends.entry(chan).or_default();
                        assert!(end.closed.is_none(), "closed twice");
                        end.closed = Some((now, reason, tell_end));
                    }
                    Action::BindDone { chan, result } => {
                        if result.is_ok() {
                            self.nodes[n].ends.entry(chan).or_default();
                        }
                        if let Some(p) = self.pairs.iter_mut().find(|p| p.client == (n, chan)) {
                            p.result = Some(result);
                        }
                    }
                    Action::IncomingBind { chan, service, .. } => {
                        if self.nodes[n].silent {
                            continue;
                        }
                        if let Some(why) = self.nodes[n].refuse_with.clone() {
                            self.nodes[n].b.refuse(now, chan, &why).unwrap();
                            continue;
                        }
                        self.nodes[n].b.accept(now, chan).unwrap();
                        self.nodes[n].ends.insert(chan, End::default());
                        if let Some(p) = self.pairs.iter_mut().find(|p| p.service == service && p.server.is_none()) {
                            p.server = Some((n, chan));
                        }
                    }
                    Action::DeclareToken { .. }
                    | Action::UndeclareToken { .. }
                    | Action::PeerUp { .. }
                    | Action::PeerDown { .. }
                    | Action::RemoteExport { .. } => {}
                }
            }
            // The monitor link takes what was delivered: all of it at once, or `ring_rate` a tick (in `step`).
            if self.nodes[n].ring_rate.is_some() || !self.take_delivered(n, u64::MAX) {
                break;
            }
        }
    }

    /// The monitor link of node `n` takes up to `most` frames of each channel; whether it took any.
    fn take_delivered(&mut self, n: usize, most: u64) -> bool {
        let mut any = false;
        let chans: Vec<(ChanId, u64)> = self.nodes[n].undelivered.iter().map(|(&c, &v)| (c, v)).collect();
        for (chan, pending) in chans {
            let take = pending.min(most);
            *self.nodes[n].undelivered.get_mut(&chan).unwrap() -= take;
            if take > 0 && self.nodes[n].b.handle_delivered(self.now, chan, take).is_ok() {
                any = true;
            }
        }
        self.nodes[n].undelivered.retain(|_, v| *v > 0);
        any
    }

    /// Bind `service` (exported on `server` first) from `client`; the pair runs traffic once bound.
    pub fn bind(&mut self, client: &str, server: &str, service: &str) -> usize {
        self.bind_within(client, server, service, Duration::from_secs(5))
    }

    pub fn bind_within(&mut self, client: &str, server: &str, service: &str, timeout: Duration) -> usize {
        let (c, s) = (self.idx(client), self.idx(server));
        self.nodes[s].b.export(service).unwrap();
        let now = self.now;
        let window = self.window;
        let chan = self.nodes[c].b.bind(now, service, server, window, timeout, None);
        self.pairs.push(Pair { client: (c, chan), server: None, service: service.to_string(), result: None, active: true });
        self.drain(s);
        self.drain(c);
        self.pairs.len() - 1
    }

    /// The ends send what their credit allows (the channel's own window, end to end).
    fn traffic(&mut self) {
        for p in 0..self.pairs.len() {
            let pair = &self.pairs[p];
            let (Some(Ok(())), Some(server), true) = (&pair.result, pair.server, pair.active) else { continue };
            let client = pair.client;
            for (from, to, dir) in [(client, server, DIR_TO_SERVER), (server, client, DIR_TO_CLIENT)] {
                if self.frozen(from.0) {
                    continue;
                }
                for _ in 0..self.burst {
                    let consumed = self.nodes[to.0].ends.get(&to.1).map_or(0, |e| e.got.len() as u64);
                    let end = &self.nodes[from.0].ends[&from.1];
                    if end.closed.is_some() || end.closed_in_band || end.saw_teardown || end.sent - consumed >= u64::from(self.window) {
                        break;
                    }
                    let n = end.sent;
                    let now = self.now;
                    if self.nodes[from.0].b.send(now, from.1, frame(dir, Kind::Data, n)).is_err() {
                        break;
                    }
                    self.nodes[from.0].ends.get_mut(&from.1).unwrap().sent += 1;
                }
                self.drain(from.0);
            }
        }
    }

    /// An end closes its channel in band (its TEARDOWN goes after everything it sent).
    pub fn close_end(&mut self, node: usize, chan: ChanId) {
        let now = self.now;
        let dir = if self.pairs.iter().any(|p| p.client == (node, chan)) { DIR_TO_SERVER } else { DIR_TO_CLIENT };
        self.nodes[node].b.send(now, chan, frame(dir, Kind::Teardown, 0)).unwrap();
        self.nodes[node].ends.get_mut(&chan).unwrap().closed_in_band = true;
        self.drain(node);
    }

    /// One millisecond: messages due arrive, timers run, ends send.
    pub fn step(&mut self) {
        self.now += MS;
        let now = self.now;
        while let Some(k) = self.net.iter().find(|(k, m)| k.0 <= now && !self.frozen(m.to)).map(|(&k, _)| k) {
            let m = self.net.remove(&k).unwrap();
            if self.cut.contains(&Self::link(m.from, m.to)) {
                self.done.0 += 1;
                continue;
            }
            let _ = self.nodes[m.to].b.handle_put(now, &m.key, &m.payload);
            self.drain(m.to);
        }
        for n in 0..self.nodes.len() {
            if self.frozen(n) {
                continue;
            }
            if self.nodes[n].b.poll_timeout().is_some_and(|t| t <= now) {
                self.nodes[n].b.handle_timeout(now);
            }
            if let Some(rate) = self.nodes[n].ring_rate {
                self.take_delivered(n, rate as u64);
            }
            self.drain(n);
        }
        self.traffic();
    }

    pub fn run_for(&mut self, d: u64) {
        let end = self.now + d;
        while self.now < end {
            self.step();
        }
    }

    pub fn end(&self, (n, c): (usize, ChanId)) -> &End {
        &self.nodes[n].ends[&c]
    }

    /// Stop the traffic and let what is in flight arrive (or a lost tail be found: within two heartbeats).
    pub fn settle(&mut self) {
        for p in &mut self.pairs {
            p.active = false;
        }
        self.run_for(2 * S);
    }

    /// Settle, then check the rules every run keeps: each end got exactly 0, 1, 2, ... (FIFO, no duplicate); a
    /// direction where the receiver got less than was sent was closed at both ends with a reason (nothing lost
    /// silently). Returns the reasons of the directions that lost frames.
    pub fn check(&mut self) -> Vec<String> {
        self.settle();
        let mut lost = Vec::new();
        for p in &self.pairs {
            let (Some(Ok(())), Some(server)) = (&p.result, p.server) else { continue };
            for (from, to) in [(p.client, server), (server, p.client)] {
                let (f, t) = (self.end(from), self.end(to));
                for (i, &n) in t.got.iter().enumerate() {
                    assert_eq!(n, i as u64, "{}: message {i} is {n}: out of order or duplicated", p.service);
                }
                if (t.got.len() as u64) < f.sent && t.closed_in_band {
                    // The receiving end closed the channel itself: what came after is not for it, and the sending
                    // end learns it from that end's TEARDOWN (or from its bridge, with a reason).
                    assert!(f.saw_teardown || f.closed.as_ref().is_some_and(|c| c.2), "{}: the sender never learned of the close", p.service);
                } else if (t.got.len() as u64) < f.sent {
                    let told = |e: &End| e.closed.as_ref().is_some_and(|(_, r, tell)| *tell && !r.text.is_empty());
                    assert!(
                        told(f) && told(t),
                        "{}: {} sent, {} delivered, and not both ends were told why: {:?} / {:?}",
                        p.service,
                        f.sent,
                        t.got.len(),
                        f.closed,
                        t.closed
                    );
                    lost.push(t.closed.as_ref().unwrap().1.text.clone());
                }
            }
        }
        lost
    }
}
