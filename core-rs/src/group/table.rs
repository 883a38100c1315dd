//! A monitor's group table: fan-out entries with a credit window per tree
//! edge (docs/groups.md §5-6). Sans-IO: frames and link ids in, `(link,
//! frame)` sends out; the forwarder (`forward.rs`) does the writing.
//!
//! One entry per tree (`TreeKey`) this monitor is on: the links frames may
//! come from (the parent monitor's, or at the root the links of the view's
//! members on this core), and its edges: child monitors and this core's
//! members, each with `window` credits and a FIFO of frames waiting for one.
//! A frame is sent on an edge only with a credit, and its credit goes back
//! to the link it came from once it has left on every edge (in CREDIT
//! frames, every `window / 2`). So an edge's queue never holds more than the
//! window per incoming link: a stopped member fills its own edge, then its
//! monitor's incoming edge, and so on up to the sender, which blocks.
//!
//! Marks: for each frame a dispatcher of this core writes, the last `seq`
//! (or stamp) of its stream is kept per link; when the dispatcher dies the
//! marks stay under its pid until the group service asks for them.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::frame::{credit_frame, GroupHeader, TreeKey, FLAG_STAMPED, KIND_CREDIT, KIND_DATA};
use crate::vci::LinkId;

/// One outgoing edge of an entry.
struct Edge {
    link: LinkId,
    credits: u32,
    /// Frames waiting for a credit; `None` marks a frame this edge skips
    /// (its origin), kept in line so completion stays in order.
    queue: VecDeque<Option<Vec<u8>>>,
    /// Frames of the entry resolved on this edge (sent or skipped).
    done: u64,
}

struct Entry {
    window: u32,
    from: Vec<LinkId>,
    edges: Vec<Edge>,
    /// Frames accepted so far.
    accepted: u64,
    /// Frames resolved on every edge so far.
    completed: u64,
    /// Incoming link of each accepted frame not yet complete, oldest first.
    pending: VecDeque<LinkId>,
    /// Credits due to each incoming link, not yet sent back.
    owed: BTreeMap<LinkId, u32>,
}

impl Entry {
    fn threshold(&self) -> u32 {
        (self.window / 2).max(1)
    }

    /// Send what waits on edge `i` while it has credits.
    fn pump(&mut self, i: usize, out: &mut Vec<(LinkId, Vec<u8>)>) -> u64 {
        let e = &mut self.edges[i];
        let mut sent = 0;
        loop {
            match e.queue.front() {
                Some(None) => {
                    e.queue.pop_front();
                    e.done += 1;
                }
                Some(Some(_)) if e.credits > 0 => {
                    let m = e.queue.pop_front().flatten().expect("a frame");
                    e.credits -= 1;
                    e.done += 1;
                    sent += 1;
                    out.push((e.link, m));
                }
                _ => break,
            }
        }
        sent
    }

    /// Return the credits of frames that have left on every edge.
    fn complete(&mut self, key: TreeKey, out: &mut Vec<(LinkId, Vec<u8>)>) {
        let upto = self.edges.iter().map(|e| e.done).min().unwrap_or(self.accepted).min(self.accepted);
        while self.completed < upto {
            self.completed += 1;
            if let Some(l) = self.pending.pop_front() {
                *self.owed.entry(l).or_default() += 1;
            }
        }
        let t = self.threshold();
        for (l, n) in self.owed.iter_mut() {
            if *n >= t {
                out.push((*l, credit_frame(key, *n).to_vec()));
                *n = 0;
            }
        }
    }

    fn queued(&self) -> usize {
        self.edges.iter().map(|e| e.queue.iter().filter(|m| m.is_some()).count()).sum()
    }
}

/// Where one stream written by a dispatcher of this core got to.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Mark {
    pub group_id: u32,
    pub view: u32,
    pub dest: u32,
    /// Unstamped frames: the sender's node id and its last seq.
    pub sender: u32,
    pub seq: u32,
    /// Stamped frames (this dispatcher was the sequencer): the last stamp,
    /// and per original sender the last submission it stamped.
    pub stamp: u32,
    pub submitted: BTreeMap<u32, u32>,
}

/// What the group service installs for one tree on one monitor (links resolved).
pub struct EntrySpec {
    pub key: TreeKey,
    pub window: u32,
    pub from: Vec<LinkId>,
    pub children: Vec<LinkId>,
    pub local: Vec<LinkId>,
}

/// The fan-out entries of one monitor, and its group counters.
#[derive(Default)]
pub struct GroupTable {
    entries: HashMap<TreeKey, Entry>,
    /// Dispatcher links and the pid behind each (marks).
    dispatchers: HashMap<LinkId, u32>,
    marks: HashMap<LinkId, HashMap<(u32, u32, u32), Mark>>,
    dead_marks: HashMap<u32, Vec<Mark>>,
    pub forwarded: u64,
    pub dropped: u64,
    pub malformed: u64,
    pub late_credits: u64,
    /// Largest number of frames one edge queue ever held.
    pub queue_peak: usize,
}

impl GroupTable {
    pub fn new() -> GroupTable {
        GroupTable::default()
    }

    /// Remember that `link` is the dispatcher link of process `pid` (marks).
    pub fn note_dispatcher(&mut self, link: LinkId, pid: u32) {
        self.dispatchers.insert(link, pid);
    }

    /// Install (or replace) one tree's entry.
    pub fn install(&mut self, spec: EntrySpec) {
        let window = spec.window.max(1);
        let edge = |link| Edge { link, credits: window, queue: VecDeque::new(), done: 0 };
        let mut edges: Vec<Edge> = spec.children.into_iter().map(edge).collect();
        edges.extend(spec.local.into_iter().map(edge));
        let entry = Entry { window, from: spec.from, edges, accepted: 0, completed: 0, pending: VecDeque::new(), owed: BTreeMap::new() };
        self.entries.insert(spec.key, entry);
    }

    /// Drop every entry of `group_id` in `view` (or in every view with `None`).
    pub fn remove(&mut self, group_id: u32, view: Option<u32>) -> usize {
        let before = self.entries.len();
        self.entries.retain(|k, _| !(k.group_id == group_id && view.is_none_or(|v| v == k.view)));
        before - self.entries.len()
    }

    /// One group frame arrived on `link`; what to send goes to `out`.
    pub fn on_frame(&mut self, link: LinkId, msg: &[u8], out: &mut Vec<(LinkId, Vec<u8>)>) {
        let h = match GroupHeader::decode(msg) {
            Ok(h) => h,
            Err(_) => {
                self.malformed += 1;
                return;
            }
        };
        let Some(entry) = self.entries.get_mut(&h.key) else {
            if h.kind == KIND_CREDIT {
                self.late_credits += 1;
            } else {
                self.dropped += 1;
            }
            return;
        };
        if h.kind == KIND_CREDIT {
            let Some(i) = entry.edges.iter().position(|e| e.link == link) else {
                self.late_credits += 1;
                return;
            };
            entry.edges[i].credits = entry.edges[i].credits.saturating_add(h.credit).min(entry.window);
            self.forwarded += entry.pump(i, out);
            entry.complete(h.key, out);
            return;
        }
        if !entry.from.contains(&link) {
            self.dropped += 1;
            return;
        }
        if h.kind == KIND_DATA && self.dispatchers.contains_key(&link) {
            let m = self.marks.entry(link).or_default().entry((h.key.group_id, h.key.view, h.key.dest)).or_insert_with(|| Mark {
                group_id: h.key.group_id,
                view: h.key.view,
                dest: h.key.dest,
                ..Mark::default()
            });
            if h.flags & FLAG_STAMPED != 0 {
                m.stamp = m.stamp.max(h.stamp);
                let s = m.submitted.entry(h.sender).or_default();
                *s = (*s).max(h.seq);
            } else {
                m.sender = h.sender;
                m.seq = m.seq.max(h.seq);
            }
        }
        entry.accepted += 1;
        entry.pending.push_back(link);
        for i in 0..entry.edges.len() {
            let e = &mut entry.edges[i];
            if e.link == link {
                if e.queue.is_empty() {
                    e.done += 1;
                } else {
                    e.queue.push_back(None);
                }
                continue;
            }
            e.queue.push_back(Some(msg.to_vec()));
            self.forwarded += entry.pump(i, out);
            let q = entry.edges[i].queue.len();
            self.queue_peak = self.queue_peak.max(q);
        }
        entry.complete(h.key, out);
    }

    /// `link` is gone: its edges are dropped (their queues freed, their
    /// credits no longer awaited), it is no longer a source, and a
    /// dispatcher's marks are kept under its pid.
    pub fn remove_link(&mut self, link: LinkId, out: &mut Vec<(LinkId, Vec<u8>)>) {
        for (key, entry) in self.entries.iter_mut() {
            entry.from.retain(|&l| l != link);
            entry.owed.remove(&link);
            entry.edges.retain(|e| e.link != link);
            entry.complete(*key, out);
            entry.owed.remove(&link);
        }
        out.retain(|(l, _)| *l != link);
        if let Some(pid) = self.dispatchers.remove(&link) {
            let marks: Vec<Mark> = self.marks.remove(&link).map(|m| m.into_values().collect()).unwrap_or_default();
            self.dead_marks.entry(pid).or_default().extend(marks);
        }
    }

    /// Whether a live dispatcher link of `pid` is known here.
    pub fn has_dispatcher(&self, pid: u32) -> bool {
        self.dispatchers.values().any(|&p| p == pid)
    }

    /// The marks a dead dispatcher left (taken: asked once).
    pub fn take_marks(&mut self, pid: u32) -> Vec<Mark> {
        self.dead_marks.remove(&pid).unwrap_or_default()
    }

    pub fn queued(&self) -> usize {
        self.entries.values().map(Entry::queued).sum()
    }

    pub fn status(&self) -> serde_json::Value {
        json!({
            "group_entries": self.entries.len(),
            "group_forwarded": self.forwarded,
            "group_dropped": self.dropped,
            "group_malformed": self.malformed,
            "group_late_credits": self.late_credits,
            "group_queued": self.queued(),
            "group_queue_peak": self.queue_peak,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::frame::{GroupHeader, KIND_CREDIT};

    fn key() -> TreeKey {
        TreeKey { group_id: 1, view: 1, dest: 1 << 31, root_core: 0 }
    }

    fn data(seq: u32) -> Vec<u8> {
        GroupHeader { kind: KIND_DATA, flags: 0, credit: 0, key: key(), sender: 1, seq, stamp: 0, vc_len: 0, request: 0 }.encode().to_vec()
    }

    #[test]
    fn fans_out_and_bounds_a_stalled_edge_by_its_window() {
        // link 0: the sender's dispatcher; 1, 2: child monitors; 3: a local member.
        let mut t = GroupTable::new();
        t.note_dispatcher(0, 100);
        t.install(EntrySpec { key: key(), window: 4, from: vec![0], children: vec![1, 2], local: vec![3] });
        let mut out = Vec::new();
        for s in 1..=4 {
            t.on_frame(0, &data(s), &mut out);
        }
        let to = |l: LinkId, out: &[(LinkId, Vec<u8>)]| out.iter().filter(|(x, m)| *x == l && m[9] == KIND_DATA).count();
        assert_eq!((to(1, &out), to(2, &out), to(3, &out)), (4, 4, 4));
        // Nothing left every edge's credit window... each edge spent its 4 credits.
        let credits_back: u32 = out.iter().filter(|(l, m)| *l == 0 && m[9] == KIND_CREDIT).map(|(_, m)| GroupHeader::decode(m).unwrap().credit).sum();
        assert_eq!(credits_back, 4, "every frame left on all edges: its credit went back");
        out.clear();
        // Edges 1 and 3 return credit, edge 2 (a stopped member's monitor) does not.
        for l in [1, 3] {
            t.on_frame(l, &credit_frame(key(), 4), &mut out);
        }
        for s in 5..=12 {
            t.on_frame(0, &data(s), &mut out);
        }
        assert_eq!(to(1, &out), 4, "edge 1 sent its window and waits");
        assert_eq!(to(2, &out), 0);
        assert!(t.queue_peak <= 8);
        assert_eq!(t.queued(), 4 + 8 + 4, "the frames wait per edge, nothing is lost");
        out.clear();
        // Edge 2's monitor dies: its queue is freed, and the others go on.
        t.remove_link(2, &mut out);
        assert_eq!(t.queued(), 8);
        assert_eq!(t.status()["group_forwarded"], 20);
    }

    #[test]
    fn unknown_tree_and_wrong_link_are_dropped_and_counted() {
        let mut t = GroupTable::new();
        t.install(EntrySpec { key: key(), window: 4, from: vec![5], children: vec![1], local: vec![] });
        let mut out = Vec::new();
        t.on_frame(6, &data(1), &mut out);
        let mut other = data(1);
        other[16] = 9;
        t.on_frame(5, &other, &mut out);
        t.on_frame(5, &data(1)[..30], &mut out);
        assert!(out.is_empty());
        assert_eq!((t.dropped, t.malformed), (2, 1));
    }

    #[test]
    fn marks_of_a_dead_dispatcher_stay_under_its_pid() {
        let mut t = GroupTable::new();
        t.note_dispatcher(0, 77);
        t.install(EntrySpec { key: key(), window: 8, from: vec![0], children: vec![1], local: vec![] });
        let mut out = Vec::new();
        for s in 1..=3 {
            t.on_frame(0, &data(s), &mut out);
        }
        assert!(t.has_dispatcher(77));
        t.remove_link(0, &mut out);
        assert!(!t.has_dispatcher(77));
        let m = t.take_marks(77);
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].sender, m[0].seq, m[0].dest), (1, 3, 1 << 31));
        assert!(t.take_marks(77).is_empty());
    }
}
