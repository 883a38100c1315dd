//! What the event routing needs from the control plane, as the Python broker pushes it: the live
//! gateways, the connectivity graph's nodes and edges, the routing cache's rows (cost and best hop
//! per node), the deciders of the broker's units and the levels it decides. The control plane
//! (GPP, PPP: `python/multihop/ges/gpp.py`, `routing_cache.py`, `ppp.py`) computes all of it; a new
//! [`Snapshot`] replaces the old one whole, between rounds.
//!
//! The queries are the reference's (`GatewayPropagation.hop_to`, `leaving`, `cost_to`,
//! `routing_cache.constrained_hop`): the best hop toward a unit is the cache's, except when the
//! message carries units it left (its routing information) and the cached path goes back into one:
//! then a search over the pushed graph finds the best path around them, with the cache's tie rule
//! (cheapest, then fewest links, then lowest hop).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::address::{ancestor, contains, level_of_difference, unit_id, unit_level, Units};
use crate::fxhash::{FxHashMap, FxHashSet};

/// One node of the connectivity graph.
#[derive(Clone, Debug, Default)]
pub struct NodeInfo {
    /// its level
    pub level: u32,
    /// the routing cache's cost to reach it (infinite: unreachable)
    pub cost: f64,
    /// the routing cache's best hop (None: unreachable, or the vertex)
    pub hop: Option<u64>,
    /// neighbours in the graph (its `L_D` and `L_UL` sets) with the weights of the edges
    pub edges: Vec<(u64, f64)>,
    /// for the vertex's neighbours: the hop a path from the vertex over that edge takes
    /// (`RoutingCache._hop_via(vertex, node, edge)`)
    pub vertex_hop: Option<u64>,
}

/// Everything the event routing reads of the control plane's state (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// the GPP version this is of
    pub version: u64,
    /// live gateways: peer broker -> the gateway's level
    pub links: FxHashMap<u64, u32>,
    /// the graph's nodes (the vertex among them)
    pub nodes: FxHashMap<u64, NodeInfo>,
    /// deciders of this broker's unit of each level (index = level, 1 ..= N + 1; 0 unused)
    pub deciders: Vec<Vec<u64>>,
    /// levels this broker decides (a bit per level)
    pub decided: u32,
}

/// A cost, a link count and a hop label, ordered as the reference's tuples `(cost, links, hop)`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Label {
    cost: f64,
    links: u32,
    hop: i64,
}

impl Label {
    fn cmp(&self, o: &Label) -> Ordering {
        self.cost.partial_cmp(&o.cost).unwrap_or(Ordering::Equal).then(self.links.cmp(&o.links)).then(self.hop.cmp(&o.hop))
    }
}

/// A heap entry `(cost, links, hop, node)`, popped smallest first.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Entry(Label, u64);

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Entry {
    fn cmp(&self, o: &Self) -> Ordering {
        // reversed: BinaryHeap pops the largest
        o.0.cmp(&self.0).then(o.1.cmp(&self.1))
    }
}

/// The vertex's own label: no hop needed.
const NO_HOP: i64 = -1;

/// The routing state of one broker and the memory of its constrained searches.
#[derive(Debug)]
pub struct Routing {
    pub code: u64,
    pub levels: u32,
    pub snap: Snapshot,
    /// `(target code, units left) -> hop`, for this snapshot
    hops: FxHashMap<(u64, Vec<u64>), Option<u64>>,
}

impl Routing {
    /// The routing of broker `code` in a system of `levels` levels, with nothing pushed yet.
    pub fn new(code: u64, levels: u32) -> Self {
        let deciders = vec![Vec::new(); levels as usize + 2];
        Routing { code, levels, snap: Snapshot { deciders, ..Snapshot::default() }, hops: FxHashMap::default() }
    }

    /// Replace the control plane's state (between rounds).
    pub fn set(&mut self, snap: Snapshot) {
        self.snap = snap;
        self.hops.clear();
    }

    /// The level of the live gateway to `peer`.
    #[inline]
    pub fn link_level(&self, peer: u64) -> Option<u32> {
        self.snap.links.get(&peer).copied()
    }

    /// Whether this broker decides its unit of `level`.
    #[inline]
    pub fn decides(&self, level: u32) -> bool {
        level < 32 && self.snap.decided & (1 << level) != 0
    }

    /// The deciders of this broker's unit of `level`.
    pub fn deciders(&self, level: u32) -> &[u64] {
        self.snap.deciders.get(level as usize).map(|v| v.as_slice()).unwrap_or(&[])
    }

    /// The graph node standing for unit `uid`: the unit itself, or its ancestor that is a sibling of
    /// the vertex's; None if the unit contains the vertex.
    pub fn node_for(&self, uid: u64) -> Option<u64> {
        if unit_level(uid) > self.levels || contains(uid, self.code) {
            return None;
        }
        let diff = level_of_difference(uid & ((1 << 60) - 1), self.code);
        Some(ancestor(uid, diff as u32, self.levels))
    }

    /// The routing cost to broker or unit `code` (0 here, infinite if unreachable).
    pub fn cost_to(&self, code: u64) -> f64 {
        match self.node_for(code) {
            None => 0.0,
            Some(n) => self.snap.nodes.get(&n).map(|i| i.cost).unwrap_or(f64::INFINITY),
        }
    }

    /// The neighbour to send to for broker or unit `code`; None if unreachable or it is here.
    /// `avoid`: units the message already left; a hop into one of them is replaced by the best path
    /// around them.
    pub fn hop_to(&mut self, code: u64, avoid: &[u64]) -> Option<u64> {
        if self.snap.links.contains_key(&code) {
            return Some(code);
        }
        let node = self.node_for(code)?;
        if !avoid.is_empty() {
            // level-0 entries (the publisher's broker) are no units left: a message never "leaves" over a level-0 link
            let nodes: FxHashSet<u64> =
                avoid.iter().filter(|&&u| unit_level(u) > 0).filter_map(|&u| self.node_for(u)).filter(|n| self.snap.nodes.contains_key(n)).collect();
            if !nodes.is_empty() {
                let key = (code, avoid.to_vec());
                if let Some(&h) = self.hops.get(&key) {
                    return h;
                }
                let h = self.constrained_hop(node, &nodes);
                self.hops.insert(key, h);
                return h;
            }
        }
        self.snap.nodes.get(&node).and_then(|i| i.hop)
    }

    /// The best hop toward graph node `target` on paths that pass through none of `avoid`
    /// (`routing_cache.constrained_hop`).
    fn constrained_hop(&self, target: u64, avoid: &FxHashSet<u64>) -> Option<u64> {
        if avoid.contains(&target) || !self.snap.nodes.contains_key(&target) {
            return None;
        }
        let vertex = self.code;
        let mut best: FxHashMap<u64, Label> = FxHashMap::default();
        let start = Label { cost: 0.0, links: 0, hop: NO_HOP };
        best.insert(vertex, start);
        let mut heap = BinaryHeap::new();
        heap.push(Entry(start, vertex));
        let mut done: FxHashSet<u64> = FxHashSet::default();
        while let Some(Entry(lab, u)) = heap.pop() {
            if !done.insert(u) {
                continue;
            }
            if u == target {
                return if lab.hop == NO_HOP { None } else { Some(lab.hop as u64) };
            }
            let Some(info) = self.snap.nodes.get(&u) else { continue };
            let lu = info.level;
            for &(v, w) in &info.edges {
                if done.contains(&v) || avoid.contains(&v) {
                    continue;
                }
                let Some(vi) = self.snap.nodes.get(&v) else { continue };
                if vi.level < lu {
                    continue;
                }
                let hop = if u == vertex {
                    match vi.vertex_hop {
                        Some(h) => h as i64,
                        None => v as i64,
                    }
                } else {
                    lab.hop
                };
                let cand = Label { cost: lab.cost + w, links: lab.links + 1, hop };
                let better = match best.get(&v) {
                    None => true,
                    Some(old) => cand.cmp(old) == Ordering::Less,
                };
                if better {
                    best.insert(v, cand);
                    heap.push(Entry(cand, v));
                }
            }
        }
        None
    }

    /// Routing information for a message crossing the gateway to `peer`: drop what only made sense
    /// below that gateway's level, and add the unit being left.
    pub fn leaving(&self, peer: u64, left: &[u64]) -> Units {
        let Some(p) = self.link_level(peer) else { return Units::from_slice(left) };
        if p == 0 {
            return Units::from_slice(left);
        }
        let mut kept = Units::collect_from(left.iter().copied().filter(|&u| unit_level(u) >= p));
        let mine = unit_id(self.code, p, self.levels);
        if !kept.contains(&mine) {
            kept.push(mine);
        }
        kept
    }

    /// The nearest of `candidates` by routing cost (ties: the lowest code), this broker and
    /// unreachable ones left out.
    pub fn nearest(&self, candidates: impl Iterator<Item = u64>) -> Option<u64> {
        let mut best: Option<(f64, u64)> = None;
        for d in candidates {
            if d == self.code {
                continue;
            }
            let c = self.cost_to(d);
            if c == f64::INFINITY {
                continue;
            }
            let better = match best {
                None => true,
                Some((bc, bd)) => c < bc || (c == bc && d < bd),
            };
            if better {
                best = Some((c, d));
            }
        }
        best.map(|b| b.1)
    }
}
