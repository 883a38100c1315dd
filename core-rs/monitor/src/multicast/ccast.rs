//! Convergecast aggregated up a tree in the monitors (docs/groups.md §8):
//! the Rust port of `python/multihop/groups/convergecast.py`'s rules.
//!
//! One [`Convergecast`] per (tree, requester, request) on each monitor of
//! the request's tree: it waits for the replies of this core's destination
//! members and for one report ([`Partial`]) from each child monitor, then
//! yields one merged report to send up (the root: the result for the
//! requester). Failures end the wait instead of hanging it: a local
//! member's death ([`Convergecast::member_gone`]), a child monitor's death
//! ([`Convergecast::child_gone`], every member below it is missing), or
//! the request's time running out ([`Convergecast::give_up`], everything
//! still awaited is missing). Sans-IO: no clock, no links; the group table
//! (`table.rs`) feeds it and sends what it yields.
//!
//! A `Partial` on the wire (the payload of a merged REPLY frame):
//! `u32 replies, each (u32 node, u32 len, len bytes), then u32 missing, u32 node each`.

use std::collections::{BTreeMap, BTreeSet};

use multihop_base::error::{Error, Result};

/// Replies by node id, and the node ids that will not reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Partial {
    pub replies: BTreeMap<u32, Vec<u8>>,
    pub missing: BTreeSet<u32>,
}

impl Partial {
    /// This report and `other` together (they cover different members).
    pub(crate) fn merge(&mut self, other: Partial) {
        self.replies.extend(other.replies);
        self.missing.extend(other.missing);
    }

    /// Bytes this partial takes on the wire.
    pub(crate) fn encoded_len(&self) -> usize {
        8 + self.replies.values().map(|r| 8 + r.len()).sum::<usize>() + 4 * self.missing.len()
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.encoded_len());
        b.extend_from_slice(&(self.replies.len() as u32).to_le_bytes());
        for (node, r) in &self.replies {
            b.extend_from_slice(&node.to_le_bytes());
            b.extend_from_slice(&(r.len() as u32).to_le_bytes());
            b.extend_from_slice(r);
        }
        b.extend_from_slice(&(self.missing.len() as u32).to_le_bytes());
        for node in &self.missing {
            b.extend_from_slice(&node.to_le_bytes());
        }
        b
    }

    /// Read a partial; a protocol error names what is cut short or left over.
    pub(crate) fn decode(b: &[u8]) -> Result<Partial> {
        let total = b.len();
        let mut rest = b;
        fn take<'a>(rest: &mut &'a [u8], n: usize, total: usize, what: &str) -> Result<&'a [u8]> {
            if rest.len() < n {
                return Err(Error::protocol(format!("convergecast partial of {total} bytes is cut short in {what}")));
            }
            let (head, tail) = rest.split_at(n);
            *rest = tail;
            Ok(head)
        }
        let word = |rest: &mut &[u8], what: &str| -> Result<u32> { Ok(u32::from_le_bytes(take(rest, 4, total, what)?.try_into().expect("4 bytes"))) };
        let mut p = Partial::default();
        for _ in 0..word(&mut rest, "its reply count")? {
            let node = word(&mut rest, "a reply's node id")?;
            let len = word(&mut rest, "a reply's length")? as usize;
            if rest.len() < len {
                return Err(Error::protocol(format!("reply of node {node} ({len} bytes) runs past the partial's {total} bytes")));
            }
            p.replies.insert(node, take(&mut rest, len, total, "a reply")?.to_vec());
        }
        for _ in 0..word(&mut rest, "its missing count")? {
            p.missing.insert(word(&mut rest, "a missing node id")?);
        }
        if !rest.is_empty() {
            return Err(Error::protocol(format!("convergecast partial has {} bytes left over", rest.len())));
        }
        Ok(p)
    }
}

/// One monitor's part of one convergecast: its local members' replies and
/// its child monitors' reports (children named by `C`: a link id here).
#[derive(Debug)]
pub(crate) struct Convergecast<C: Ord + Copy> {
    waiting_members: BTreeSet<u32>,
    waiting_children: BTreeSet<C>,
    acc: Partial,
    /// Set once a wait was given up (the time ran out, or the entry was
    /// full): the result says so.
    pub gave_up: bool,
    done: bool,
    out: Option<Partial>,
}

impl<C: Ord + Copy + std::fmt::Debug> Convergecast<C> {
    /// Waits for `members` (this core's) and a report from each of `children`.
    pub(crate) fn new(members: impl IntoIterator<Item = u32>, children: impl IntoIterator<Item = C>) -> Convergecast<C> {
        let mut c = Convergecast {
            waiting_members: members.into_iter().collect(),
            waiting_children: children.into_iter().collect(),
            acc: Partial::default(),
            gave_up: false,
            done: false,
            out: None,
        };
        c.check();
        c
    }

    fn check(&mut self) {
        if !self.done && self.waiting_members.is_empty() && self.waiting_children.is_empty() {
            self.done = true;
            self.out = Some(std::mem::take(&mut self.acc));
        }
    }

    /// A local member's reply; an error if it is not awaited (a stranger, or a second reply).
    pub(crate) fn reply(&mut self, member: u32, value: Vec<u8>) -> Result<()> {
        if !self.waiting_members.remove(&member) {
            return Err(Error::protocol(format!("reply from node {member}, which this convergecast does not wait for")));
        }
        self.acc.replies.insert(member, value);
        self.check();
        Ok(())
    }

    /// A child monitor's report; an error if that child is not awaited.
    pub(crate) fn report(&mut self, child: C, partial: Partial) -> Result<()> {
        if !self.waiting_children.remove(&child) {
            return Err(Error::protocol(format!("report from {child:?}, which this convergecast does not wait for")));
        }
        self.acc.merge(partial);
        self.check();
        Ok(())
    }

    /// A local member died before replying: it is missing (no-op if it replied or is not awaited).
    pub(crate) fn member_gone(&mut self, member: u32) {
        if self.waiting_members.remove(&member) {
            self.acc.missing.insert(member);
            self.check();
        }
    }

    /// A child monitor died before reporting: every member below it is missing.
    pub(crate) fn child_gone(&mut self, child: C, members_below: impl IntoIterator<Item = u32>) {
        if self.waiting_children.remove(&child) {
            self.acc.missing.extend(members_below);
            self.check();
        }
    }

    /// Stop waiting: every awaited member, and every member below an awaited
    /// child (`below`), is missing; the report is produced now.
    pub(crate) fn give_up(&mut self, below: impl Fn(C) -> Vec<u32>) {
        if self.done {
            return;
        }
        self.gave_up = true;
        let members = std::mem::take(&mut self.waiting_members);
        self.acc.missing.extend(members);
        for c in std::mem::take(&mut self.waiting_children) {
            self.acc.missing.extend(below(c));
        }
        self.check();
    }

    /// Whether `child` is awaited here.
    pub(crate) fn awaits_child(&self, child: C) -> bool {
        self.waiting_children.contains(&child)
    }

    /// The report to send up (or, at the root, the result), once.
    pub(crate) fn poll(&mut self) -> Option<Partial> {
        self.out.take()
    }

    /// Whether the report has been produced.
    pub(crate) fn done(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partial(replies: &[(u32, &[u8])], missing: &[u32]) -> Partial {
        Partial { replies: replies.iter().map(|(n, r)| (*n, r.to_vec())).collect(), missing: missing.iter().copied().collect() }
    }

    #[test]
    fn partial_round_trips_and_rejects_bad_bytes() {
        let p = partial(&[(1, b"a"), (7, &[9u8; 1024]), (3, b"")], &[4, 5]);
        let b = p.encode();
        assert_eq!(b.len(), p.encoded_len());
        assert_eq!(Partial::decode(&b).unwrap(), p);
        assert_eq!(Partial::decode(&Partial::default().encode()).unwrap(), Partial::default());
        assert!(Partial::decode(&b[..b.len() - 1]).is_err(), "cut short");
        let mut long = b.clone();
        long.push(0);
        assert!(Partial::decode(&long).unwrap_err().to_string().contains("left over"));
        let mut lying = b.clone();
        lying[8..12].copy_from_slice(&u32::MAX.to_le_bytes()); // node 1's length
        assert!(Partial::decode(&lying).unwrap_err().to_string().contains("runs past"));
    }

    #[test]
    fn completes_once_with_replies_and_reports_in_any_order() {
        let mut c: Convergecast<u32> = Convergecast::new([1, 2], [10, 11]);
        c.reply(2, b"b".to_vec()).unwrap();
        c.report(11, partial(&[(5, b"e")], &[6])).unwrap();
        assert!(c.poll().is_none() && !c.done());
        c.reply(1, b"a".to_vec()).unwrap();
        c.report(10, partial(&[(3, b"c")], &[])).unwrap();
        assert_eq!(c.poll(), Some(partial(&[(1, b"a"), (2, b"b"), (3, b"c"), (5, b"e")], &[6])));
        assert!(c.poll().is_none(), "the report comes once");
        assert!(c.done() && !c.gave_up);
    }

    #[test]
    fn strangers_and_second_replies_are_refused() {
        let mut c: Convergecast<u32> = Convergecast::new([1], [10]);
        c.reply(1, vec![]).unwrap();
        assert!(c.reply(1, vec![]).unwrap_err().to_string().contains("does not wait for"));
        assert!(c.reply(9, vec![]).is_err());
        assert!(c.report(12, Partial::default()).is_err());
        assert!(!c.done());
    }

    #[test]
    fn deaths_and_giving_up_name_the_missing() {
        let mut c: Convergecast<u32> = Convergecast::new([1, 2], [10, 11]);
        c.reply(1, b"a".to_vec()).unwrap();
        c.member_gone(1); // replied already: stays a reply
        c.member_gone(2);
        c.child_gone(10, [20, 21]);
        c.child_gone(10, [99]); // gone twice: once counts
        assert!(!c.done());
        c.child_gone(11, [30]);
        assert_eq!(c.poll(), Some(partial(&[(1, b"a")], &[2, 20, 21, 30])));

        let mut g: Convergecast<u32> = Convergecast::new([1, 2], [10]);
        g.reply(2, b"b".to_vec()).unwrap();
        g.give_up(|child| if child == 10 { vec![40, 41] } else { vec![] });
        assert!(g.gave_up);
        assert_eq!(g.poll(), Some(partial(&[(2, b"b")], &[1, 40, 41])));
        g.give_up(|_| vec![1000]); // done: nothing changes
        assert!(g.poll().is_none());

        let mut empty: Convergecast<u32> = Convergecast::new([], []);
        assert_eq!(empty.poll(), Some(Partial::default()), "nothing to wait for: done at once");
    }
}
