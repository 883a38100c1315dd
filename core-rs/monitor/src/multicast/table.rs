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
//! Convergecast (docs/groups.md §8): a DATA frame flagged as a convergecast
//! request starts a [`Convergecast`] on every monitor of its tree, keyed by
//! (requester, request) in the entry; the replies of this core's members
//! and the reports of the child monitors come up as REPLY frames flagged
//! `UP`; when complete, one merged report goes to the parent monitor (the
//! root: the result goes down the requester's node-id tree). A request's
//! state is freed when it completes, when its entry is removed, when its
//! time runs out ([`GroupTable::expire`], a clock value passed in), or when
//! the entry already holds [`CCAST_IN_FLIGHT`] requests (the oldest gives
//! up); giving up reports everything still awaited as missing.
//!
//! Marks: for each frame a dispatcher of this core writes, the last `seq`
//! (or stamp) of its stream is kept per link; when the dispatcher dies the
//! marks stay under its pid until the group service asks for them.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::ccast::{Convergecast, Partial};
use crate::vci::LinkId;
use multihop_base::wire::multicast::{
    credit_frame, GroupHeader, TreeKey, FLAG_CONVERGECAST, FLAG_GAVE_UP, FLAG_MERGED, FLAG_STAMPED, FLAG_UP, GROUP_HEADER_BYTES, KIND_CREDIT,
    KIND_DATA, KIND_REPLY,
};
use multihop_base::wire::LINK_MAX_MESSAGE;

/// Convergecast requests one entry keeps in flight at most; a newer one
/// makes the oldest give up (its report goes up with the awaited missing).
pub(crate) const CCAST_IN_FLIGHT: usize = 64;

/// One convergecast request under way at this monitor.
struct CcState {
    cc: Convergecast<LinkId>,
    /// When to give up (the clock passed to `on_frame`, ms), if the
    /// requester gave a timeout.
    deadline: Option<u64>,
    /// Arrival order, for the in-flight cap.
    born: u64,
}

/// When a monitor at `depth` on a request's tree gives up on a request of
/// `timeout_ms`: deeper monitors first, so each parent still gets its
/// children's reports before its own time runs out (and the requester,
/// waiting `timeout_ms`, gets the result naming the missing).
pub(crate) fn give_up_after(timeout_ms: u64, depth: u32) -> u64 {
    let slice = (timeout_ms / 16).min(1000);
    timeout_ms.saturating_sub(slice * (depth as u64 + 1)).max(timeout_ms / 2)
}

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
    /// The parent monitor's link (None at the root core).
    parent: Option<LinkId>,
    /// Child monitors' links, and the destination members below each.
    children: Vec<(LinkId, Vec<u32>)>,
    /// This core's destination members and their dispatcher links.
    local_nodes: Vec<(u32, LinkId)>,
    /// This core's destination members that are gone (no link).
    absent: Vec<u32>,
    /// Hops from the root core.
    depth: u32,
    /// Convergecasts under way, by (requester node, request).
    ccasts: BTreeMap<(u32, u16), CcState>,
    /// Frames accepted so far.
    accepted: u64,
    /// Frames resolved on every edge so far.
    completed: u64,
    /// Incoming link of each accepted frame not yet complete, oldest first
    /// (None: made here, a convergecast result, owes no credit).
    pending: VecDeque<Option<LinkId>>,
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
            if let Some(Some(l)) = self.pending.pop_front() {
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

    /// Put `msg` on every edge but its origin's (`from`), sending what has
    /// credit. Returns (frames sent, longest edge queue).
    fn fan_out(&mut self, from: Option<LinkId>, msg: &[u8], out: &mut Vec<(LinkId, Vec<u8>)>) -> (u64, usize) {
        self.accepted += 1;
        self.pending.push_back(from);
        let (mut sent, mut peak) = (0, 0);
        for i in 0..self.edges.len() {
            let e = &mut self.edges[i];
            if Some(e.link) == from {
                if e.queue.is_empty() {
                    e.done += 1;
                } else {
                    e.queue.push_back(None);
                }
                continue;
            }
            e.queue.push_back(Some(msg.to_vec()));
            sent += self.pump(i, out);
            peak = peak.max(self.edges[i].queue.len());
        }
        (sent, peak)
    }

    /// Members below child `link` (for `child_gone` and giving up).
    fn below(&self, link: LinkId) -> Vec<u32> {
        self.children.iter().find(|(l, _)| *l == link).map(|(_, b)| b.clone()).unwrap_or_default()
    }

    /// Give up convergecast `id` now (its report is produced).
    fn give_up(&mut self, id: (u32, u16)) {
        let children = self.children.clone();
        if let Some(st) = self.ccasts.get_mut(&id) {
            st.cc.give_up(|c| children.iter().find(|(l, _)| *l == c).map(|(_, b)| b.clone()).unwrap_or_default());
        }
    }

    /// Take the reports of convergecasts that completed.
    fn finished(&mut self) -> Vec<((u32, u16), Partial, bool)> {
        let done: Vec<(u32, u16)> = self.ccasts.iter().filter(|(_, s)| s.cc.done()).map(|(k, _)| *k).collect();
        done.into_iter()
            .filter_map(|k| {
                let mut st = self.ccasts.remove(&k)?;
                let gave_up = st.cc.gave_up;
                st.cc.poll().map(|p| (k, p, gave_up))
            })
            .collect()
    }
}

/// A REPLY frame carrying `partial` (trimmed to fit a link message: the
/// largest replies become missing), and how many replies were trimmed.
fn merged_frame(key: TreeKey, flags: u16, requester: u32, request: u16, mut partial: Partial) -> (Vec<u8>, usize) {
    let mut trimmed = 0;
    while GROUP_HEADER_BYTES + partial.encoded_len() > LINK_MAX_MESSAGE {
        let Some((&node, _)) = partial.replies.iter().max_by_key(|(_, r)| r.len()) else { break };
        partial.replies.remove(&node);
        partial.missing.insert(node);
        trimmed += 1;
    }
    let h = GroupHeader { kind: KIND_REPLY, flags, credit: 0, key, sender: 0, seq: requester, stamp: 0, vc_len: 0, request };
    let mut b = h.encode().to_vec();
    b.extend_from_slice(&partial.encode());
    (b, trimmed)
}

/// Where one stream written by a dispatcher of this core got to.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Mark {
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
pub(crate) struct EntrySpec {
    pub key: TreeKey,
    pub window: u32,
    pub from: Vec<LinkId>,
    /// The parent monitor's link (None at the root core).
    pub parent: Option<LinkId>,
    /// Child monitors' links, and the destination members below each.
    pub children: Vec<(LinkId, Vec<u32>)>,
    /// This core's destination members and their links.
    pub local: Vec<(u32, LinkId)>,
    /// This core's destination members already gone (no link).
    pub absent: Vec<u32>,
    /// Hops from the root core.
    pub depth: u32,
}

/// Convergecast counters of one monitor (status).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CcastStats {
    /// Requests this monitor started waiting for.
    pub started: u64,
    /// Replies of this core's members taken.
    pub replies_in: u64,
    /// Merged reports taken from child monitors.
    pub reports_in: u64,
    /// Merged reports sent to the parent monitor.
    pub reports_up: u64,
    /// Results sent toward their requester (root only).
    pub results: u64,
    /// Requests given up because their time ran out.
    pub expired: u64,
    /// Requests given up because the entry had `CCAST_IN_FLIGHT` others.
    pub evicted: u64,
    /// Up frames for no request under way here (late, or a stranger's).
    pub late: u64,
    /// Replies refused (not awaited: a second reply, a stranger, a bad partial).
    pub refused: u64,
    /// Replies dropped to fit a merged report into a link message.
    pub trimmed: u64,
}

/// The fan-out entries of one monitor, and its group counters.
#[derive(Default)]
pub(crate) struct GroupTable {
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
    pub ccast: CcastStats,
    /// The earliest convergecast deadline (ms), u64::MAX when none.
    next_expiry: u64,
    /// Convergecasts started so far (their arrival order).
    ccast_born: u64,
}

impl GroupTable {
    pub(crate) fn new() -> GroupTable {
        GroupTable::default()
    }

    /// Remember that `link` is the dispatcher link of process `pid` (marks).
    pub(crate) fn note_dispatcher(&mut self, link: LinkId, pid: u32) {
        self.dispatchers.insert(link, pid);
    }

    /// Install (or replace) one tree's entry.
    pub(crate) fn install(&mut self, spec: EntrySpec) {
        let window = spec.window.max(1);
        let edge = |link| Edge { link, credits: window, queue: VecDeque::new(), done: 0 };
        let mut edges: Vec<Edge> = spec.children.iter().map(|(l, _)| edge(*l)).collect();
        edges.extend(spec.local.iter().map(|(_, l)| edge(*l)));
        let entry = Entry {
            window,
            from: spec.from,
            edges,
            parent: spec.parent,
            children: spec.children,
            local_nodes: spec.local,
            absent: spec.absent,
            depth: spec.depth,
            ccasts: BTreeMap::new(),
            accepted: 0,
            completed: 0,
            pending: VecDeque::new(),
            owed: BTreeMap::new(),
        };
        self.entries.insert(spec.key, entry);
    }

    /// Drop every entry of `group_id` in `view` (or in every view with `None`).
    /// Its convergecasts go with it, and the dispatchers that send on it get
    /// a full window of credit back: a sender waiting for credit of a tree
    /// that is gone (its group closed when a monitor died) goes on, its
    /// frames are dropped here, and its next call learns why.
    pub(crate) fn remove(&mut self, group_id: u32, view: Option<u32>, out: &mut Vec<(LinkId, Vec<u8>)>) -> usize {
        let gone: Vec<TreeKey> = self.entries.keys().filter(|k| k.group_id == group_id && view.is_none_or(|v| v == k.view)).copied().collect();
        for key in &gone {
            let entry = self.entries.remove(key).expect("listed");
            if entry.parent.is_none() {
                for l in entry.from.iter().filter(|l| self.dispatchers.contains_key(l)) {
                    out.push((*l, credit_frame(*key, entry.window).to_vec()));
                }
            }
        }
        gone.len()
    }

    /// One group frame arrived on `link` at time `now_ms` (any monotonic
    /// clock in ms: convergecast deadlines); what to send goes to `out`.
    pub(crate) fn on_frame(&mut self, link: LinkId, msg: &[u8], now_ms: u64, out: &mut Vec<(LinkId, Vec<u8>)>) {
        self.expire(now_ms, out);
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
        if h.kind == KIND_REPLY && h.flags & FLAG_UP != 0 {
            self.on_up(link, &h, msg, out);
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
        let request = h.kind == KIND_DATA && h.flags & FLAG_CONVERGECAST != 0 && h.request != 0;
        if request {
            let id = (h.sender, h.request);
            if entry.ccasts.contains_key(&id) {
                entry.give_up(id); // the same number again: the old one is over
            }
            if entry.ccasts.len() >= CCAST_IN_FLIGHT {
                if let Some((&oldest, _)) = entry.ccasts.iter().min_by_key(|(_, s)| s.born) {
                    entry.give_up(oldest);
                    self.ccast.evicted += 1;
                }
            }
            let members = entry.local_nodes.iter().map(|(n, _)| *n).chain(entry.absent.iter().copied());
            let mut cc = Convergecast::new(members, entry.children.iter().map(|(l, _)| *l));
            for &n in &entry.absent {
                cc.member_gone(n);
            }
            let deadline = (h.credit > 0).then(|| now_ms + give_up_after(h.credit as u64, entry.depth));
            if let Some(d) = deadline {
                self.next_expiry = self.next_expiry.min(d);
            }
            self.ccast_born += 1;
            entry.ccasts.insert(id, CcState { cc, deadline, born: self.ccast_born });
            self.ccast.started += 1;
        }
        let (sent, peak) = entry.fan_out(Some(link), msg, out);
        self.forwarded += sent;
        self.queue_peak = self.queue_peak.max(peak);
        entry.complete(h.key, out);
        if request {
            self.finish(&[h.key], out);
        }
    }

    /// A REPLY going up: a local member's reply or a child monitor's report.
    fn on_up(&mut self, link: LinkId, h: &GroupHeader, msg: &[u8], out: &mut Vec<(LinkId, Vec<u8>)>) {
        let entry = self.entries.get_mut(&h.key).expect("looked up by the caller");
        let id = (h.seq, h.request);
        let Some(st) = entry.ccasts.get_mut(&id) else {
            self.ccast.late += 1;
            return;
        };
        let payload = &msg[GROUP_HEADER_BYTES + 4 * h.vc_len as usize..];
        let taken = if h.flags & FLAG_MERGED != 0 {
            if !st.cc.awaits_child(link) {
                Err(())
            } else {
                match Partial::decode(payload) {
                    Ok(p) => {
                        self.ccast.reports_in += 1;
                        st.cc.gave_up |= h.flags & FLAG_GAVE_UP != 0;
                        st.cc.report(link, p).map_err(|_| ())
                    }
                    Err(_) => {
                        // A report that cannot be read: everything below that child is missing.
                        self.malformed += 1;
                        let below = entry.below(link);
                        entry.ccasts.get_mut(&id).expect("present").cc.child_gone(link, below);
                        Ok(())
                    }
                }
            }
        } else if entry.local_nodes.contains(&(h.sender, link)) {
            self.ccast.replies_in += 1;
            st.cc.reply(h.sender, payload.to_vec()).map_err(|_| ())
        } else {
            Err(())
        };
        if taken.is_err() {
            self.ccast.refused += 1;
            return;
        }
        self.finish(&[h.key], out);
    }

    /// Send the reports of the convergecasts of `keys` that completed: to
    /// the parent monitor, or (at the root) the result down the
    /// requester's node-id tree rooted here.
    fn finish(&mut self, keys: &[TreeKey], out: &mut Vec<(LinkId, Vec<u8>)>) {
        let mut results = Vec::new();
        for key in keys {
            let Some(entry) = self.entries.get_mut(key) else { continue };
            for ((requester, request), partial, gave_up) in entry.finished() {
                let flags = FLAG_MERGED | if gave_up { FLAG_GAVE_UP } else { 0 };
                match entry.parent {
                    Some(p) => {
                        let (frame, trimmed) = merged_frame(*key, flags | FLAG_UP, requester, request, partial);
                        self.ccast.trimmed += trimmed as u64;
                        self.ccast.reports_up += 1;
                        out.push((p, frame));
                    }
                    None => {
                        let to = TreeKey { dest: requester, ..*key };
                        let (frame, trimmed) = merged_frame(to, flags, requester, request, partial);
                        self.ccast.trimmed += trimmed as u64;
                        results.push((to, frame));
                    }
                }
            }
        }
        for (to, frame) in results {
            let Some(entry) = self.entries.get_mut(&to) else {
                self.dropped += 1; // the requester's tree is gone (its view removed)
                continue;
            };
            self.ccast.results += 1;
            let (sent, peak) = entry.fan_out(None, &frame, out);
            self.forwarded += sent;
            self.queue_peak = self.queue_peak.max(peak);
            entry.complete(to, out);
        }
    }

    /// Give up every convergecast whose deadline is `now_ms` or earlier.
    pub(crate) fn expire(&mut self, now_ms: u64, out: &mut Vec<(LinkId, Vec<u8>)>) {
        if now_ms < self.next_expiry {
            return;
        }
        let mut next = u64::MAX;
        let mut keys = Vec::new();
        for (key, entry) in self.entries.iter_mut() {
            let due: Vec<(u32, u16)> = entry.ccasts.iter().filter(|(_, s)| s.deadline.is_some_and(|d| d <= now_ms)).map(|(k, _)| *k).collect();
            for id in &due {
                entry.give_up(*id);
                self.ccast.expired += 1;
            }
            if !due.is_empty() {
                keys.push(*key);
            }
            next = entry.ccasts.values().filter(|s| !s.cc.done()).filter_map(|s| s.deadline).fold(next, u64::min);
        }
        self.next_expiry = next;
        self.finish(&keys, out);
    }

    /// Convergecasts under way on this monitor.
    pub(crate) fn ccast_pending(&self) -> usize {
        self.entries.values().map(|e| e.ccasts.len()).sum()
    }

    /// `link` is gone: its edges are dropped (their queues freed, their
    /// credits no longer awaited), it is no longer a source, and a
    /// dispatcher's marks are kept under its pid.
    pub(crate) fn remove_link(&mut self, link: LinkId, out: &mut Vec<(LinkId, Vec<u8>)>) {
        let mut keys = Vec::new();
        for (key, entry) in self.entries.iter_mut() {
            // Convergecasts first: a dead member is missing, a dead child's members too.
            let gone: Vec<u32> = entry.local_nodes.iter().filter(|(_, l)| *l == link).map(|(n, _)| *n).collect();
            let below = entry.below(link);
            let is_child = entry.children.iter().any(|(l, _)| *l == link);
            if entry.parent == Some(link) {
                entry.ccasts.clear(); // nobody to report to: the group is closed by the service
            }
            for st in entry.ccasts.values_mut() {
                for &n in &gone {
                    st.cc.member_gone(n);
                }
                if is_child {
                    st.cc.child_gone(link, below.iter().copied());
                }
            }
            entry.local_nodes.retain(|(_, l)| *l != link);
            entry.absent.extend(gone);
            if is_child {
                entry.children.retain(|(l, _)| *l != link);
                entry.absent.extend(below);
            }
            keys.push(*key);
            entry.from.retain(|&l| l != link);
            entry.owed.remove(&link);
            entry.edges.retain(|e| e.link != link);
            entry.complete(*key, out);
            entry.owed.remove(&link);
        }
        self.finish(&keys, out);
        out.retain(|(l, _)| *l != link);
        if let Some(pid) = self.dispatchers.remove(&link) {
            let marks: Vec<Mark> = self.marks.remove(&link).map(|m| m.into_values().collect()).unwrap_or_default();
            self.dead_marks.entry(pid).or_default().extend(marks);
        }
    }

    /// Whether a live dispatcher link of `pid` is known here.
    pub(crate) fn has_dispatcher(&self, pid: u32) -> bool {
        self.dispatchers.values().any(|&p| p == pid)
    }

    /// The marks a dead dispatcher left (taken: asked once).
    pub(crate) fn take_marks(&mut self, pid: u32) -> Vec<Mark> {
        self.dead_marks.remove(&pid).unwrap_or_default()
    }

    pub(crate) fn queued(&self) -> usize {
        self.entries.values().map(Entry::queued).sum()
    }

    pub(crate) fn status(&self) -> serde_json::Value {
        json!({
            "group_entries": self.entries.len(),
            "group_forwarded": self.forwarded,
            "group_dropped": self.dropped,
            "group_malformed": self.malformed,
            "group_late_credits": self.late_credits,
            "group_queued": self.queued(),
            "group_queue_peak": self.queue_peak,
            "group_ccast_pending": self.ccast_pending(),
            "group_ccast_started": self.ccast.started,
            "group_ccast_replies_in": self.ccast.replies_in,
            "group_ccast_reports_in": self.ccast.reports_in,
            "group_ccast_reports_up": self.ccast.reports_up,
            "group_ccast_results": self.ccast.results,
            "group_ccast_expired": self.ccast.expired,
            "group_ccast_evicted": self.ccast.evicted,
            "group_ccast_late": self.ccast.late,
            "group_ccast_refused": self.ccast.refused,
            "group_ccast_trimmed": self.ccast.trimmed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use multihop_base::wire::multicast::{GroupHeader, KIND_CREDIT};

    fn key() -> TreeKey {
        TreeKey { group_id: 1, view: 1, dest: 1 << 31, root_core: 0 }
    }

    fn spec(
        key: TreeKey,
        window: u32,
        from: Vec<LinkId>,
        parent: Option<LinkId>,
        children: Vec<(LinkId, Vec<u32>)>,
        local: Vec<(u32, LinkId)>,
    ) -> EntrySpec {
        EntrySpec { key, window, from, parent, children, local, absent: vec![], depth: 0 }
    }

    fn data(seq: u32) -> Vec<u8> {
        GroupHeader { kind: KIND_DATA, flags: 0, credit: 0, key: key(), sender: 1, seq, stamp: 0, vc_len: 0, request: 0 }.encode().to_vec()
    }

    #[test]
    fn fans_out_and_bounds_a_stalled_edge_by_its_window() {
        // link 0: the sender's dispatcher; 1, 2: child monitors; 3: a local member.
        let mut t = GroupTable::new();
        t.note_dispatcher(0, 100);
        t.install(spec(key(), 4, vec![0], None, vec![(1, vec![]), (2, vec![])], vec![(9, 3)]));
        let mut out = Vec::new();
        for s in 1..=4 {
            t.on_frame(0, &data(s), 0, &mut out);
        }
        let to = |l: LinkId, out: &[(LinkId, Vec<u8>)]| out.iter().filter(|(x, m)| *x == l && m[9] == KIND_DATA).count();
        assert_eq!((to(1, &out), to(2, &out), to(3, &out)), (4, 4, 4));
        // Nothing left every edge's credit window... each edge spent its 4 credits.
        let credits_back: u32 = out.iter().filter(|(l, m)| *l == 0 && m[9] == KIND_CREDIT).map(|(_, m)| GroupHeader::decode(m).unwrap().credit).sum();
        assert_eq!(credits_back, 4, "every frame left on all edges: its credit went back");
        out.clear();
        // Edges 1 and 3 return credit, edge 2 (a stopped member's monitor) does not.
        for l in [1, 3] {
            t.on_frame(l, &credit_frame(key(), 4), 0, &mut out);
        }
        for s in 5..=12 {
            t.on_frame(0, &data(s), 0, &mut out);
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
    fn removing_an_entry_gives_its_senders_their_window_back() {
        let mut t = GroupTable::new();
        t.note_dispatcher(0, 100);
        t.install(spec(key(), 4, vec![0], None, vec![(1, vec![])], vec![]));
        let mut out = Vec::new();
        for s in 1..=4 {
            t.on_frame(0, &data(s), 0, &mut out); // the child never returns credit: the sender's window is spent
        }
        out.clear();
        assert_eq!(t.remove(1, Some(1), &mut out), 1);
        let back: Vec<(LinkId, u32)> = out.iter().map(|(l, m)| (*l, GroupHeader::decode(m).unwrap().credit)).collect();
        assert_eq!(back, vec![(0, 4)], "a full window to the dispatcher, nothing to the child monitor");
        t.on_frame(0, &data(5), 0, &mut out);
        assert_eq!(t.dropped, 1, "its next frame finds no tree");
    }

    #[test]
    fn unknown_tree_and_wrong_link_are_dropped_and_counted() {
        let mut t = GroupTable::new();
        t.install(spec(key(), 4, vec![5], None, vec![(1, vec![])], vec![]));
        let mut out = Vec::new();
        t.on_frame(6, &data(1), 0, &mut out);
        let mut other = data(1);
        other[16] = 9;
        t.on_frame(5, &other, 0, &mut out);
        t.on_frame(5, &data(1)[..30], 0, &mut out);
        assert!(out.is_empty());
        assert_eq!((t.dropped, t.malformed), (2, 1));
    }

    #[test]
    fn marks_of_a_dead_dispatcher_stay_under_its_pid() {
        let mut t = GroupTable::new();
        t.note_dispatcher(0, 77);
        t.install(spec(key(), 8, vec![0], None, vec![(1, vec![])], vec![]));
        let mut out = Vec::new();
        for s in 1..=3 {
            t.on_frame(0, &data(s), 0, &mut out);
        }
        assert!(t.has_dispatcher(77));
        t.remove_link(0, &mut out);
        assert!(!t.has_dispatcher(77));
        let m = t.take_marks(77);
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].sender, m[0].seq, m[0].dest), (1, 3, 1 << 31));
        assert!(t.take_marks(77).is_empty());
    }

    // ---- convergecast aggregated over three monitors ----------------------
    //
    // core 0 (root): link 0 node 1 (the requester), link 1 node 2, link 10 to core 1;
    // core 1: link 20 to core 0, link 21 node 3, link 22 to core 2;
    // core 2: link 30 to core 1, link 31 node 4, link 32 node 5.

    const BCAST: u32 = 1 << 31;

    fn bkey() -> TreeKey {
        TreeKey { group_id: 1, view: 1, dest: BCAST, root_core: 0 }
    }

    struct Net {
        t: [GroupTable; 3],
        /// What reached each member's link: (core, link, frame).
        inbox: Vec<(usize, LinkId, Vec<u8>)>,
        now: u64,
    }

    impl Net {
        fn new() -> Net {
            Net::with_window(16)
        }

        fn with_window(window: u32) -> Net {
            let mut t = [GroupTable::new(), GroupTable::new(), GroupTable::new()];
            let s = |from, parent, children, local, depth| EntrySpec { key: bkey(), window, from, parent, children, local, absent: vec![], depth };
            t[0].install(s(vec![0, 1], None, vec![(10, vec![3, 4, 5])], vec![(1, 0), (2, 1)], 0));
            t[1].install(s(vec![20], Some(20), vec![(22, vec![4, 5])], vec![(3, 21)], 1));
            t[2].install(s(vec![30], Some(30), vec![], vec![(4, 31), (5, 32)], 2));
            // The requester's node-id tree rooted at core 0 (where results go).
            t[0].install(EntrySpec {
                key: TreeKey { dest: 1, ..bkey() },
                window: 16,
                from: vec![0, 1],
                parent: None,
                children: vec![],
                local: vec![(1, 0)],
                absent: vec![],
                depth: 0,
            });
            Net { t, inbox: Vec::new(), now: 0 }
        }

        /// Feed `frame` into core `c` on `link` and route everything that follows.
        fn feed(&mut self, c: usize, link: LinkId, frame: Vec<u8>) {
            let mut work = vec![(c, link, frame)];
            for _ in 0..10_000 {
                let Some((c, link, frame)) = work.pop() else { return };
                let mut out = Vec::new();
                self.t[c].on_frame(link, &frame, self.now, &mut out);
                self.route(c, out, &mut work);
            }
            panic!("frames kept flowing");
        }

        fn route(&mut self, c: usize, out: Vec<(LinkId, Vec<u8>)>, work: &mut Vec<(usize, LinkId, Vec<u8>)>) {
            for (l, m) in out {
                match (c, l) {
                    (0, 10) => work.push((1, 20, m)),
                    (1, 20) => work.push((0, 10, m)),
                    (1, 22) => work.push((2, 30, m)),
                    (2, 30) => work.push((1, 22, m)),
                    _ => self.inbox.push((c, l, m)),
                }
            }
        }

        fn kill_link(&mut self, c: usize, link: LinkId) {
            let mut out = Vec::new();
            self.t[c].remove_link(link, &mut out);
            let mut work = Vec::new();
            self.route(c, out, &mut work);
            for (c, l, m) in work {
                self.feed(c, l, m);
            }
        }

        fn tick(&mut self, now: u64) {
            self.now = now;
            for c in 0..3 {
                let mut out = Vec::new();
                self.t[c].expire(now, &mut out);
                let mut work = Vec::new();
                self.route(c, out, &mut work);
                for (c, l, m) in work {
                    self.feed(c, l, m);
                }
            }
        }

        /// The results that reached the requester (flags, partial).
        fn results(&self) -> Vec<(u16, Partial)> {
            self.inbox
                .iter()
                .filter(|(c, l, m)| (*c, *l) == (0, 0) && m[9] == KIND_REPLY)
                .map(|(_, _, m)| (GroupHeader::decode(m).unwrap().flags, Partial::decode(&m[GROUP_HEADER_BYTES..]).unwrap()))
                .collect()
        }
    }

    fn request(request: u16, timeout_ms: u32) -> Vec<u8> {
        GroupHeader { kind: KIND_DATA, flags: FLAG_CONVERGECAST, credit: timeout_ms, key: bkey(), sender: 1, seq: 1, stamp: 0, vc_len: 0, request }
            .encode()
            .to_vec()
    }

    fn reply(node: u32, request: u16, payload: &[u8]) -> Vec<u8> {
        let h = GroupHeader { kind: KIND_REPLY, flags: FLAG_UP, credit: 0, key: bkey(), sender: node, seq: 1, stamp: 0, vc_len: 0, request };
        let mut b = h.encode().to_vec();
        b.extend_from_slice(payload);
        b
    }

    /// Where each member sits: (core, link).
    const MEMBERS: [(u32, usize, LinkId); 5] = [(1, 0, 0), (2, 0, 1), (3, 1, 21), (4, 2, 31), (5, 2, 32)];

    fn answer(net: &mut Net, request_no: u16, who: &[u32]) {
        for &(n, c, l) in MEMBERS.iter().filter(|(n, _, _)| who.contains(n)) {
            net.feed(c, l, reply(n, request_no, &vec![n as u8; 1024]));
        }
    }

    #[test]
    fn replies_merge_per_monitor_and_the_root_gets_one_report_per_child() {
        let mut net = Net::new();
        net.feed(0, 0, request(7, 0));
        let got: Vec<(usize, LinkId)> = net.inbox.iter().filter(|(_, _, m)| m[9] == KIND_DATA).map(|(c, l, _)| (*c, *l)).collect();
        assert_eq!(got, vec![(0, 1), (1, 21), (2, 31), (2, 32)], "the request reached every member but its sender");
        assert_eq!([0, 1, 2].map(|c| net.t[c].ccast_pending()), [1, 1, 1]);
        answer(&mut net, 7, &[5, 3, 1, 4]);
        assert!(net.results().is_empty(), "node 2 has not answered");
        answer(&mut net, 7, &[2]);
        let r = net.results();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].0 & (FLAG_UP | FLAG_GAVE_UP), 0);
        assert_eq!(r[0].1.replies.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
        assert!(r[0].1.replies.iter().all(|(n, v)| v == &vec![*n as u8; 1024]) && r[0].1.missing.is_empty());
        let root = net.t[0].ccast;
        assert_eq!((root.replies_in, root.reports_in, root.results), (2, 1, 1), "one report from the child monitor, not three replies");
        assert_eq!((net.t[1].ccast.reports_in, net.t[1].ccast.reports_up, net.t[2].ccast.reports_up), (1, 1, 1));
        assert_eq!([0, 1, 2].map(|c| net.t[c].ccast_pending()), [0, 0, 0], "state freed on completion");
        // A late or second reply finds nothing and is counted, not taken.
        answer(&mut net, 7, &[4]);
        assert_eq!(net.t[2].ccast.late, 1);
    }

    #[test]
    fn a_dead_member_and_a_dead_child_monitor_are_named_missing() {
        let mut net = Net::new();
        net.feed(0, 0, request(1, 0));
        answer(&mut net, 1, &[1, 2, 3, 4]);
        net.kill_link(2, 32); // node 5's dispatcher dies
        let r = net.results();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].1.replies.len(), r[0].1.missing.iter().copied().collect::<Vec<_>>()), (4, vec![5]));
        // The next request does not wait for node 5 at all.
        net.inbox.clear();
        net.feed(0, 0, request(2, 0));
        answer(&mut net, 2, &[1, 2, 3, 4]);
        assert_eq!(net.results()[0].1.missing.iter().copied().collect::<Vec<_>>(), vec![5]);
        // Core 1 loses its child monitor (core 2) mid-request: nodes 4 and 5 are missing.
        net.inbox.clear();
        net.feed(0, 0, request(3, 0));
        answer(&mut net, 3, &[1, 2, 3]);
        net.kill_link(1, 22);
        let r = net.results();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].1.missing.iter().copied().collect::<Vec<_>>(), vec![4, 5]);
        assert_eq!(r[0].1.replies.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(net.t[0].ccast_pending() + net.t[1].ccast_pending(), 0);
    }

    #[test]
    fn time_running_out_gives_up_deepest_first_and_frees_the_state() {
        let mut net = Net::new();
        net.now = 1_000;
        net.feed(0, 0, request(9, 1_000));
        answer(&mut net, 9, &[1, 2, 3]); // nodes 4 and 5 (core 2) never answer
        assert_eq!(give_up_after(1_000, 2), 1_000 - 62 * 3);
        assert_eq!(give_up_after(30_000, 0), 29_000);
        assert_eq!(give_up_after(30_000, 40), 15_000, "never before half the timeout");
        net.tick(1_000 + give_up_after(1_000, 2) - 1);
        assert!(net.results().is_empty(), "not yet");
        net.tick(1_000 + give_up_after(1_000, 2));
        let r = net.results();
        assert_eq!(r.len(), 1, "core 2 gave up first, so its parents completed on its report");
        assert_ne!(r[0].0 & FLAG_GAVE_UP, 0, "the result says some wait was given up");
        assert_eq!(r[0].1.missing.iter().copied().collect::<Vec<_>>(), vec![4, 5]);
        assert_eq!(net.t[2].ccast.expired, 1);
        assert_eq!([0, 1, 2].map(|c| net.t[c].ccast_pending()), [0, 0, 0]);
    }

    #[test]
    fn requests_in_flight_per_entry_are_capped() {
        let mut net = Net::with_window(256); // the members here return no credits
        for r in 1..=(CCAST_IN_FLIGHT as u16 + 3) {
            net.feed(0, 0, request(r, 0));
        }
        assert_eq!(net.t[2].ccast_pending(), CCAST_IN_FLIGHT);
        assert_eq!(net.t[2].ccast.evicted, 3);
        // The evicted ones completed with everything awaited missing (flagged), nothing waits for them.
        let gave_up = net.results().iter().filter(|(f, _)| f & FLAG_GAVE_UP != 0).count();
        assert_eq!(gave_up, 3);
        assert_eq!(net.t[0].status()["group_ccast_pending"], CCAST_IN_FLIGHT);
    }

    #[test]
    fn a_merged_report_too_big_for_a_link_message_is_trimmed_not_lost() {
        let mut p = Partial::default();
        for n in 0..3u32 {
            p.replies.insert(n, vec![0; LINK_MAX_MESSAGE / 2]);
        }
        let (frame, trimmed) = merged_frame(bkey(), FLAG_MERGED, 1, 1, p);
        assert!(frame.len() <= LINK_MAX_MESSAGE);
        assert_eq!(trimmed, 2);
        let back = Partial::decode(&frame[GROUP_HEADER_BYTES..]).unwrap();
        assert_eq!((back.replies.len(), back.missing.len()), (1, 2));
    }
}
