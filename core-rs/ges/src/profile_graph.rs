//! The profile graph (routing paper 3.3.2-3.3.4), after Gryphon's matching algorithm: the native
//! twin of `python/multihop/ges/profile_graph.py`, with the same semantics (a differential test
//! drives both with the same random scenarios and requires the same answers).
//!
//! Profiles (chains of constraints on successive attributes) are merged into one tree over
//! `(value, next attribute)` steps: a node stands for an attribute reached by a path of
//! constraints, an edge for one constraint (a value or `*`) leading to the node of the next
//! attribute, and the last constraint of a profile is a *destination edge*. Every edge carries the
//! destinations interested in its traversal with their predicate counts (delta-omega), so removing
//! a profile decrements the counts and removes the edges (and nodes) that reach zero.
//!
//! Matching an event walks the tree from the node of its first attribute, following at each node
//! the edge of the event's value and the `*` edge, into a child only if the child's attribute is the
//! event's next one; every destination edge met adds its destinations to the result, and the walk
//! stops once every destination the graph holds is in.
//!
//! Layout: attribute names and values are interned as numbers (`Sym`, reference counted, `*` is
//! [`WILDCARD`]), destinations too (`Di`), nodes live in one vector; small maps are sorted vectors
//! and grow into hash maps. A match marks the destinations it found in a [`Scratch`] (a stamp per
//! destination), so it allocates nothing once warm.

use std::hash::Hash;

use crate::fxhash::FxHashMap;

/// An interned attribute name or value.
pub type Sym = u32;
/// An interned destination.
pub type Di = u32;
/// The weakest constraint, `*`: always symbol 0.
pub const WILDCARD: Sym = 0;
/// The wildcard's text.
pub const WILDCARD_TEXT: &str = "*";
/// Small maps become hash maps beyond this many entries.
const SMALL: usize = 12;

/// A map from small numbers to values: a sorted vector while small, a hash map when large.
#[derive(Clone, Debug)]
enum NumMap<V> {
    Small(Vec<(u32, V)>),
    Large(FxHashMap<u32, V>),
}

impl<V> Default for NumMap<V> {
    fn default() -> Self {
        NumMap::Small(Vec::new())
    }
}

impl<V> NumMap<V> {
    #[inline]
    fn get(&self, k: u32) -> Option<&V> {
        match self {
            NumMap::Small(v) => {
                // (linear: a dozen entries fit in a few cache lines, and most maps hold one or two)
                for (key, val) in v {
                    if *key == k {
                        return Some(val);
                    }
                }
                None
            }
            NumMap::Large(m) => m.get(&k),
        }
    }

    fn get_mut(&mut self, k: u32) -> Option<&mut V> {
        match self {
            NumMap::Small(v) => v.iter_mut().find(|(key, _)| *key == k).map(|(_, val)| val),
            NumMap::Large(m) => m.get_mut(&k),
        }
    }

    fn insert(&mut self, k: u32, val: V) {
        match self {
            NumMap::Small(v) => {
                if v.len() < SMALL {
                    v.push((k, val));
                    return;
                }
                let mut m: FxHashMap<u32, V> = v.drain(..).collect();
                m.insert(k, val);
                *self = NumMap::Large(m);
            }
            NumMap::Large(m) => {
                m.insert(k, val);
            }
        }
    }

    fn remove(&mut self, k: u32) -> Option<V> {
        match self {
            NumMap::Small(v) => {
                let i = v.iter().position(|(key, _)| *key == k)?;
                Some(v.swap_remove(i).1)
            }
            NumMap::Large(m) => m.remove(&k),
        }
    }

    fn len(&self) -> usize {
        match self {
            NumMap::Small(v) => v.len(),
            NumMap::Large(m) => m.len(),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn for_each(&self, mut f: impl FnMut(u32, &V)) {
        match self {
            NumMap::Small(v) => v.iter().for_each(|(k, val)| f(*k, val)),
            NumMap::Large(m) => m.iter().for_each(|(k, val)| f(*k, val)),
        }
    }

    /// Heap bytes held (capacity-based estimate).
    fn heap_bytes(&self) -> usize {
        match self {
            NumMap::Small(v) => v.capacity() * std::mem::size_of::<(u32, V)>(),
            // a hashbrown table: a slot and a control byte per bucket, buckets ~8/7 of the capacity
            NumMap::Large(m) => m.capacity() * 8 / 7 * (std::mem::size_of::<(u32, V)>() + 1),
        }
    }
}

/// Destinations with their predicate counts.
type Counts = NumMap<u32>;

/// A node: an attribute reached by a path of constraints.
#[derive(Default, Debug)]
struct Node {
    /// destinations and counts of the edge that leads here (unused at a root)
    units: Counts,
    /// next attribute -> (value -> child): the edges `(value, next attribute)` out of here (a node
    /// seldom has more than one next attribute, so this is a short vector)
    next: Vec<(Sym, NumMap<u32>)>,
    /// value -> destinations: destination edges (a profile ends here)
    dests: NumMap<Counts>,
}

impl Node {
    fn children(&self, attr: Sym) -> Option<&NumMap<u32>> {
        self.next.iter().find(|(a, _)| *a == attr).map(|(_, m)| m)
    }
    fn heap_bytes(&self) -> usize {
        let mut n = self.units.heap_bytes() + self.next.capacity() * std::mem::size_of::<(Sym, NumMap<u32>)>() + self.dests.heap_bytes();
        for (_, m) in &self.next {
            n += m.heap_bytes();
        }
        self.dests.for_each(|_, c| n += c.heap_bytes());
        n
    }
}

/// Interned strings with reference counts (a string no edge uses any more is forgotten).
#[derive(Debug)]
struct Strings {
    ids: FxHashMap<Box<str>, Sym>,
    text: Vec<Box<str>>,
    uses: Vec<u32>,
    free: Vec<Sym>,
    /// raised whenever a string gets or loses its symbol (what a caller resolved before may differ)
    generation: u64,
}

impl Strings {
    fn new() -> Self {
        let mut s = Strings { ids: FxHashMap::default(), text: Vec::new(), uses: Vec::new(), free: Vec::new(), generation: 0 };
        s.ids.insert(WILDCARD_TEXT.into(), WILDCARD);
        s.text.push(WILDCARD_TEXT.into());
        s.uses.push(1); // never freed
        s
    }

    #[inline]
    fn get(&self, s: &str) -> Option<Sym> {
        self.ids.get(s).copied()
    }

    /// The symbol of `s`, with one more use.
    fn hold(&mut self, s: &str) -> Sym {
        if let Some(&k) = self.ids.get(s) {
            self.uses[k as usize] += 1;
            return k;
        }
        let k = match self.free.pop() {
            Some(k) => {
                self.text[k as usize] = s.into();
                self.uses[k as usize] = 1;
                k
            }
            None => {
                self.text.push(s.into());
                self.uses.push(1);
                (self.text.len() - 1) as Sym
            }
        };
        self.ids.insert(s.into(), k);
        self.generation += 1;
        k
    }

    /// One use of `k` less (forgotten at none).
    fn release(&mut self, k: Sym) {
        let u = &mut self.uses[k as usize];
        *u -= 1;
        if *u == 0 {
            let t = std::mem::take(&mut self.text[k as usize]);
            self.ids.remove(&t);
            self.free.push(k);
            self.generation += 1;
        }
    }

    fn text(&self, k: Sym) -> &str {
        &self.text[k as usize]
    }

    fn heap_bytes(&self) -> usize {
        let strings: usize = self.text.iter().map(|t| t.len() * 2).sum(); // each text is held twice (map key, vector)
        strings + self.ids.capacity() * 8 / 7 * (std::mem::size_of::<(Box<str>, Sym)>() + 1) + self.text.capacity() * 16 + self.uses.capacity() * 4
    }
}

/// Interned destinations: uses (edges naming it) and refs (destination edges naming it).
#[derive(Debug)]
struct Dests<D> {
    ids: FxHashMap<D, Di>,
    value: Vec<Option<D>>,
    uses: Vec<u32>,
    refs: Vec<u32>,
    free: Vec<Di>,
    /// destinations with at least one destination edge (Python's `len(_refs)`)
    live: usize,
}

impl<D: Copy + Eq + Hash> Dests<D> {
    fn new() -> Self {
        Dests { ids: FxHashMap::default(), value: Vec::new(), uses: Vec::new(), refs: Vec::new(), free: Vec::new(), live: 0 }
    }

    fn hold(&mut self, d: D) -> Di {
        if let Some(&k) = self.ids.get(&d) {
            self.uses[k as usize] += 1;
            return k;
        }
        let k = match self.free.pop() {
            Some(k) => {
                self.value[k as usize] = Some(d);
                self.uses[k as usize] = 1;
                self.refs[k as usize] = 0;
                k
            }
            None => {
                self.value.push(Some(d));
                self.uses.push(1);
                self.refs.push(0);
                (self.value.len() - 1) as Di
            }
        };
        self.ids.insert(d, k);
        k
    }

    fn release(&mut self, k: Di) {
        let u = &mut self.uses[k as usize];
        *u -= 1;
        if *u == 0 {
            if let Some(d) = self.value[k as usize].take() {
                self.ids.remove(&d);
            }
            self.free.push(k);
        }
    }

    fn heap_bytes(&self) -> usize {
        self.ids.capacity() * 8 / 7 * (std::mem::size_of::<(D, Di)>() + 1)
            + self.value.capacity() * std::mem::size_of::<Option<D>>()
            + self.uses.capacity() * 8
    }
}

/// Why a profile cannot be removed: the destination has fewer predicates for the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotHeld;

/// A match's working memory: a stamp per destination (so a match allocates nothing once warm).
#[derive(Default, Debug)]
pub struct Scratch {
    seen: Vec<u32>,
    stamp: u32,
    frontier: Vec<u32>,
    reached: Vec<u32>,
}

/// Graphs made so far: each one's [`ProfileGraph::changes`] start at its number times 2^32.
static GRAPHS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A profile graph whose destinations are `D` (unit ids at a gatekeeper, client ids at a broker).
#[derive(Debug)]
pub struct ProfileGraph<D> {
    roots: FxHashMap<Sym, u32>,
    nodes: Vec<Node>,
    free_nodes: Vec<u32>,
    strings: Strings,
    dests: Dests<D>,
    /// profiles held (sum of all predicate counts on destination edges)
    profiles: u64,
    /// edges in the graph (destination edges included)
    edges: u64,
    /// raised by every change (see [`Self::changes`])
    changes: u64,
}

impl<D: Copy + Eq + Hash> Default for ProfileGraph<D> {
    fn default() -> Self {
        Self::new()
    }
}

/// A destination as the engine's graphs hold it: any integer in -2**63 .. 2**64 (client peer ids
/// are negative, unit ids may use the top bit).
pub type Dest = i128;

/// A chain of constraints: `(attribute, canonical value or "*")`, at least one.
pub type ChainRef<'a> = [(&'a str, &'a str)];

impl<D: Copy + Eq + Hash> ProfileGraph<D> {
    /// An empty graph.
    pub fn new() -> Self {
        ProfileGraph {
            roots: FxHashMap::default(),
            nodes: Vec::new(),
            free_nodes: Vec::new(),
            strings: Strings::new(),
            dests: Dests::new(),
            profiles: 0,
            edges: 0,
            // (Relaxed: only uniqueness is asked of the counter, no other memory is ordered by it)
            changes: GRAPHS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) << 32,
        }
    }

    /// Raised by every call that may change what a match gives (adding, removing, clearing): a
    /// match remembered with this unchanged is still the graph's answer. Each graph counts in a
    /// range of its own (a graph made where a dropped one was is not mistaken for it).
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Profiles held (the sum of the predicate counts on destination edges).
    pub fn profiles(&self) -> u64 {
        self.profiles
    }

    /// Edges held (destination edges included).
    pub fn edges(&self) -> u64 {
        self.edges
    }

    /// Destinations with at least one destination edge.
    pub fn destinations(&self) -> usize {
        self.dests.live
    }

    /// The destination of an interned number (as a match gives it).
    #[inline]
    pub fn dest(&self, k: Di) -> D {
        self.dests.value[k as usize].expect("a destination a match gave is held")
    }

    fn new_node(&mut self) -> u32 {
        match self.free_nodes.pop() {
            Some(k) => k,
            None => {
                self.nodes.push(Node::default());
                (self.nodes.len() - 1) as u32
            }
        }
    }

    fn free_node(&mut self, k: u32) {
        let n = &mut self.nodes[k as usize];
        debug_assert!(n.units.is_empty() && n.next.is_empty() && n.dests.is_empty());
        *n = Node::default();
        self.free_nodes.push(k);
    }

    /// Add `count` (>= 1) predicates of `unit` for `chain` (non-empty); true if the chain was new
    /// for that unit.
    pub fn add(&mut self, chain: &ChainRef<'_>, unit: D, count: u32) -> bool {
        assert!(!chain.is_empty() && count > 0, "a chain has a constraint, a count is at least 1");
        self.changes += 1;
        let root_attr = chain[0].0;
        let mut node = match self.strings.get(root_attr).and_then(|a| self.roots.get(&a).copied()) {
            Some(n) => n,
            None => {
                let a = self.strings.hold(root_attr);
                let n = self.new_node();
                self.roots.insert(a, n);
                n
            }
        };
        let last = chain.len() - 1;
        for i in 0..last {
            let (value, nxt) = (chain[i].1, chain[i + 1].0);
            let existing = match (self.strings.get(nxt), self.strings.get(value)) {
                (Some(a), Some(v)) => self.nodes[node as usize].children(a).and_then(|m| m.get(v).copied()),
                _ => None,
            };
            let child = match existing {
                Some(c) => c,
                None => {
                    let a = self.strings.hold(nxt);
                    let v = self.strings.hold(value);
                    let c = self.new_node();
                    let n = &mut self.nodes[node as usize];
                    match n.next.iter_mut().find(|(x, _)| *x == a) {
                        Some((_, m)) => {
                            m.insert(v, c);
                            self.strings.release(a); // the attribute entry was there: one use is enough
                        }
                        None => {
                            let mut m = NumMap::default();
                            m.insert(v, c);
                            n.next.push((a, m));
                        }
                    }
                    self.edges += 1;
                    c
                }
            };
            let units = &mut self.nodes[child as usize].units;
            match self.dests.ids.get(&unit).copied().and_then(|k| units.get_mut(k).map(|n| (k, n))) {
                Some((_, n)) => *n += count,
                None => {
                    let k = self.dests.hold(unit);
                    self.nodes[child as usize].units.insert(k, count);
                }
            }
            node = child;
        }
        let value = chain[last].1;
        let v = match self.strings.get(value) {
            Some(v) if self.nodes[node as usize].dests.get(v).is_some() => v,
            _ => {
                let v = self.strings.hold(value);
                self.nodes[node as usize].dests.insert(v, NumMap::default());
                self.edges += 1;
                v
            }
        };
        let held = self.dests.ids.get(&unit).copied();
        let d = self.nodes[node as usize].dests.get_mut(v).expect("made above");
        let old = match held.and_then(|k| d.get_mut(k).map(|n| (k, n))) {
            Some((_, n)) => {
                let old = *n;
                *n += count;
                old
            }
            None => 0,
        };
        if old == 0 {
            let k = self.dests.hold(unit);
            self.nodes[node as usize].dests.get_mut(v).expect("made above").insert(k, count);
            if self.dests.refs[k as usize] == 0 {
                self.dests.live += 1;
            }
            self.dests.refs[k as usize] += 1;
        }
        self.profiles += count as u64;
        old == 0
    }

    /// Remove `count` (>= 1) predicates of `unit` for `chain`; edges and nodes whose counts reach
    /// zero go. True if the unit has no predicate left for the chain. `NotHeld` (and the graph
    /// unchanged) if the unit has fewer than `count` predicates for it.
    pub fn remove(&mut self, chain: &ChainRef<'_>, unit: D, count: u32) -> Result<bool, NotHeld> {
        if chain.is_empty() || count == 0 {
            return Err(NotHeld);
        }
        self.changes += 1;
        let root_attr = self.strings.get(chain[0].0).ok_or(NotHeld)?;
        let root = *self.roots.get(&root_attr).ok_or(NotHeld)?;
        let k = *self.dests.ids.get(&unit).ok_or(NotHeld)?;
        // (parent, next attribute, value, child)
        let mut path: Vec<(u32, Sym, Sym, u32)> = Vec::with_capacity(chain.len());
        let mut node = root;
        let last = chain.len() - 1;
        for i in 0..last {
            let a = self.strings.get(chain[i + 1].0).ok_or(NotHeld)?;
            let v = self.strings.get(chain[i].1).ok_or(NotHeld)?;
            let child = self.nodes[node as usize].children(a).and_then(|m| m.get(v).copied()).ok_or(NotHeld)?;
            if self.nodes[child as usize].units.get(k).copied().unwrap_or(0) < count {
                return Err(NotHeld);
            }
            path.push((node, a, v, child));
            node = child;
        }
        let v = self.strings.get(chain[last].1).ok_or(NotHeld)?;
        let held = self.nodes[node as usize].dests.get(v).and_then(|d| d.get(k).copied()).unwrap_or(0);
        if held < count {
            return Err(NotHeld);
        }
        // checked: change the graph
        let left = held - count;
        {
            let d = self.nodes[node as usize].dests.get_mut(v).expect("checked");
            if left > 0 {
                *d.get_mut(k).expect("checked") = left;
            } else {
                d.remove(k);
                let empty = d.is_empty();
                self.dests.refs[k as usize] -= 1;
                if self.dests.refs[k as usize] == 0 {
                    self.dests.live -= 1;
                }
                self.dests.release(k);
                if empty {
                    self.nodes[node as usize].dests.remove(v);
                    self.strings.release(v);
                    self.edges -= 1;
                }
            }
        }
        for &(_, _, _, child) in &path {
            let units = &mut self.nodes[child as usize].units;
            let n = units.get_mut(k).expect("checked");
            *n -= count;
            if *n == 0 {
                units.remove(k);
                self.dests.release(k);
            }
        }
        // remove edges left without units, deepest first
        for &(parent, a, v, child) in path.iter().rev() {
            if !self.nodes[child as usize].units.is_empty() {
                continue;
            }
            let p = &mut self.nodes[parent as usize];
            let i = p.next.iter().position(|(x, _)| *x == a).expect("on the path");
            p.next[i].1.remove(v);
            self.strings.release(v);
            if p.next[i].1.is_empty() {
                p.next.swap_remove(i);
                self.strings.release(a);
            }
            self.free_node(child);
            self.edges -= 1;
        }
        let r = &self.nodes[root as usize];
        if r.next.is_empty() && r.dests.is_empty() {
            self.roots.remove(&root_attr);
            self.strings.release(root_attr);
            self.free_node(root);
        }
        self.profiles -= count as u64;
        Ok(left == 0)
    }

    /// The destinations (interned: [`Self::dest`]) of an event with these attribute names and
    /// canonical values, in `out` (cleared first). The walk goes attribute by attribute over the
    /// frontier of nodes the event reached (each followed by its value and by `*`), and stops
    /// once every destination the graph holds is found.
    pub fn match_into<N: AsRef<str>, V: AsRef<str>>(&self, names: &[N], values: &[V], s: &mut Scratch, out: &mut Vec<Di>) {
        let n: Vec<Option<Sym>> = names.iter().map(|x| self.resolve(x.as_ref())).collect();
        let v: Vec<Option<Sym>> = values.iter().map(|x| self.resolve(x.as_ref())).collect();
        self.match_syms(&n, &v, s, out);
    }

    /// [`Self::match_into`] with the names and values resolved ([`Self::resolve`], valid for this
    /// [`Self::generation`]).
    pub fn match_syms(&self, names: &[Option<Sym>], values: &[Option<Sym>], s: &mut Scratch, out: &mut Vec<Di>) {
        self.match_with(names, values.len(), |i| values[i], s, out);
    }

    /// [`Self::match_into`] with the names resolved and each value looked up only when the walk gets
    /// to it (an event's later attributes often go unread: profiles constrain its first ones).
    pub fn match_lazy<V: AsRef<str>>(&self, names: &[Option<Sym>], values: &[V], s: &mut Scratch, out: &mut Vec<Di>) {
        self.match_with(names, values.len(), |i| self.resolve(values[i].as_ref()), s, out);
    }

    /// [`Self::match_lazy`] with the `i`-th of `nvalues` values given by `value(i)` (an event's values
    /// read in place, without gathering them first). Returns how many values the walk read (the
    /// first ones): any event whose first that many values are these gets the same destinations
    /// from the graph as long as its [`Self::changes`] stay (with the same names and `nvalues`).
    pub fn match_lazy_by<'v>(
        &self,
        names: &[Option<Sym>],
        nvalues: usize,
        value: impl Fn(usize) -> &'v str,
        s: &mut Scratch,
        out: &mut Vec<Di>,
    ) -> usize {
        self.match_with(names, nvalues, |i| self.resolve(value(i)), s, out)
    }

    /// The walk; returns how many values it read (see [`Self::match_lazy_by`]).
    fn match_with(&self, names: &[Option<Sym>], nvalues: usize, value: impl Fn(usize) -> Option<Sym>, s: &mut Scratch, out: &mut Vec<Di>) -> usize {
        out.clear();
        let Some(&Some(first)) = names.first() else { return 0 };
        let Some(&root) = self.roots.get(&first) else { return 0 };
        if s.seen.len() < self.dests.value.len() {
            s.seen.resize(self.dests.value.len(), 0);
        }
        s.stamp = s.stamp.wrapping_add(1);
        if s.stamp == 0 {
            s.seen.iter_mut().for_each(|x| *x = 0);
            s.stamp = 1;
        }
        let stamp = s.stamp;
        let everyone = self.dests.live;
        let n = names.len().min(nvalues);
        let mut frontier = std::mem::take(&mut s.frontier);
        let mut reached = std::mem::take(&mut s.reached);
        frontier.clear();
        frontier.push(root);
        let mut i = 0;
        let mut read = 0;
        while i < n {
            // an unknown value matches only `*` edges (`None`); an unknown next attribute has no edge
            let v = value(i);
            read = i + 1;
            let nxt = if i + 1 < n { Some(names[i + 1]) } else { None };
            reached.clear();
            for &k in &frontier {
                let node = &self.nodes[k as usize];
                if !node.dests.is_empty() {
                    for sym in [v, Some(WILDCARD)].into_iter().flatten() {
                        if let Some(hit) = node.dests.get(sym) {
                            hit.for_each(|d, _| {
                                let slot = &mut s.seen[d as usize];
                                if *slot != stamp {
                                    *slot = stamp;
                                    out.push(d);
                                }
                            });
                        }
                        if v == Some(WILDCARD) {
                            break; // (the value was "*" itself: one lookup)
                        }
                    }
                }
                if let Some(Some(a)) = nxt {
                    if let Some(by_value) = node.children(a) {
                        if let Some(c) = v.and_then(|v| by_value.get(v)) {
                            reached.push(*c);
                        }
                        if v != Some(WILDCARD) {
                            if let Some(c) = by_value.get(WILDCARD) {
                                reached.push(*c);
                            }
                        }
                    }
                }
            }
            if reached.is_empty() || out.len() >= everyone {
                break;
            }
            std::mem::swap(&mut frontier, &mut reached);
            i += 1;
        }
        s.frontier = frontier;
        s.reached = reached;
        read
    }

    /// Every `(chain, destination, count)` held, chains as `(attribute, value)` texts.
    pub fn chains(&self) -> Vec<(Vec<(String, String)>, D, u32)> {
        let mut out = Vec::new();
        let mut prefix: Vec<(String, String)> = Vec::new();
        for (&a, &root) in &self.roots {
            self.walk(root, a, &mut prefix, &mut out);
        }
        out
    }

    fn walk(&self, node: u32, attr: Sym, prefix: &mut Vec<(String, String)>, out: &mut Vec<(Vec<(String, String)>, D, u32)>) {
        let n = &self.nodes[node as usize];
        let name = self.strings.text(attr).to_owned();
        n.dests.for_each(|v, units| {
            units.for_each(|k, c| {
                let mut chain = prefix.clone();
                chain.push((name.clone(), self.strings.text(v).to_owned()));
                out.push((chain, self.dest(k), *c));
            });
        });
        for (nxt, by_value) in &n.next {
            by_value.for_each(|v, child| {
                prefix.push((name.clone(), self.strings.text(v).to_owned()));
                self.walk(*child, *nxt, prefix, out);
                prefix.pop();
            });
        }
    }

    /// Forget every profile.
    pub fn clear(&mut self) {
        let g = self.strings.generation;
        *self = Self::new();
        self.strings.generation = g + 1;
    }

    /// Raised whenever an attribute name or value gets or loses its symbol: symbols resolved with
    /// [`Self::resolve`] stay valid for [`Self::match_syms`] while this is unchanged.
    pub fn generation(&self) -> u64 {
        self.strings.generation
    }

    /// The symbol of an attribute name or value (None: no edge names it).
    #[inline]
    pub fn resolve(&self, s: &str) -> Option<Sym> {
        self.strings.get(s)
    }

    /// Heap bytes the graph holds (a capacity-based estimate of its vectors and tables).
    pub fn heap_bytes(&self) -> usize {
        let nodes: usize = self.nodes.iter().map(Node::heap_bytes).sum();
        nodes
            + self.nodes.capacity() * std::mem::size_of::<Node>()
            + self.roots.capacity() * 8 / 7 * 9
            + self.free_nodes.capacity() * 4
            + self.strings.heap_bytes()
            + self.dests.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c<'a>(pairs: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        pairs.to_vec()
    }

    fn matched(g: &ProfileGraph<i64>, names: &[&str], values: &[&str]) -> Vec<i64> {
        let mut s = Scratch::default();
        let mut out = Vec::new();
        g.match_into(names, values, &mut s, &mut out);
        let mut v: Vec<i64> = out.iter().map(|&k| g.dest(k)).collect();
        v.sort();
        v
    }

    #[test]
    fn profiles_match_by_value_and_wildcard_and_go_when_removed() {
        let mut g = ProfileGraph::<i64>::new();
        assert!(g.add(&c(&[("a", "i1"), ("b", "*")]), 7, 1));
        assert!(!g.add(&c(&[("a", "i1"), ("b", "*")]), 7, 1));
        assert!(g.add(&c(&[("a", "*")]), 8, 1));
        assert!(g.add(&c(&[("a", "i2"), ("b", "sx"), ("c", "i3")]), 9, 2));
        assert_eq!((g.profiles(), g.edges()), (5, 6));
        assert_eq!(matched(&g, &["a", "b"], &["i1", "sy"]), vec![7, 8]);
        assert_eq!(matched(&g, &["a", "b", "c"], &["i2", "sx", "i3"]), vec![8, 9]);
        assert_eq!(matched(&g, &["a", "x", "c"], &["i2", "sx", "i3"]), vec![8]);
        assert_eq!(matched(&g, &["z"], &["i2"]), Vec::<i64>::new());
        assert_eq!(g.remove(&c(&[("a", "i2"), ("b", "sx"), ("c", "i3")]), 9, 3), Err(NotHeld));
        assert_eq!(g.remove(&c(&[("a", "i2"), ("b", "sx"), ("c", "i3")]), 9, 1), Ok(false));
        assert_eq!(g.remove(&c(&[("a", "i2"), ("b", "sx"), ("c", "i3")]), 9, 1), Ok(true));
        assert_eq!((g.profiles(), g.edges()), (3, 3));
        assert_eq!(g.remove(&c(&[("a", "i1"), ("b", "*")]), 7, 2), Ok(true));
        assert_eq!(g.remove(&c(&[("a", "*")]), 8, 1), Ok(true));
        assert_eq!((g.profiles(), g.edges(), g.destinations()), (0, 0, 0));
        assert!(g.roots.is_empty());
        assert_eq!(g.strings.ids.len(), 1); // only "*" is left
    }

    #[test]
    fn large_maps_behave_as_small_ones() {
        let mut g = ProfileGraph::<i64>::new();
        let vals: Vec<String> = (0..100).map(|k| format!("i{k}")).collect();
        for (k, v) in vals.iter().enumerate() {
            g.add(&c(&[("a", v), ("b", "*")]), k as i64, 1);
        }
        for (k, v) in vals.iter().enumerate() {
            assert_eq!(matched(&g, &["a", "b"], &[v, "i0"]), vec![k as i64]);
        }
        for (k, v) in vals.iter().enumerate() {
            assert_eq!(g.remove(&c(&[("a", v), ("b", "*")]), k as i64, 1), Ok(true));
        }
        assert_eq!(g.edges(), 0);
    }
}
