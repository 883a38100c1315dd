//! A monitor's forwarding table: (incoming link, VCI) -> (outgoing link, VCI).
//!
//! Hard state made at bind and removed at teardown (TN-006 2.5).  Each entry
//! knows its partner (the entry of the same channel in the other direction),
//! so a teardown arriving from either side removes both.  VCIs are drawn
//! from the OS random source and redrawn on collision.

use std::collections::HashMap;

use crate::control::random_u64;

/// Index of a link in its monitor.
pub type LinkId = u32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub out_link: LinkId,
    pub out_vci: u64,
    /// The key of the same channel's entry for the other direction.
    pub partner: (LinkId, u64),
    pub chan: u64,
}

#[derive(Default)]
pub struct ForwardTable {
    map: HashMap<(LinkId, u64), Entry>,
}

impl ForwardTable {
    pub fn new() -> ForwardTable {
        ForwardTable::default()
    }

    /// A fresh VCI not in use on `link` (never 0).
    pub fn draw(&self, link: LinkId) -> u64 {
        loop {
            let v = random_u64();
            if v != 0 && !self.map.contains_key(&(link, v)) {
                return v;
            }
        }
    }

    #[inline]
    pub fn lookup(&self, link: LinkId, vci: u64) -> Option<&Entry> {
        self.map.get(&(link, vci))
    }

    /// Install one direction of a channel (its partner may come later).
    pub fn insert(&mut self, link: LinkId, vci: u64, entry: Entry) {
        self.map.insert((link, vci), entry);
    }

    /// Install both directions of a channel at this node: messages arriving on
    /// (`a`, `a_vci`) go to (`b`, `b_out`), and those arriving on (`b`,
    /// `b_vci`) go to (`a`, `a_out`).
    pub fn insert_pair(&mut self, chan: u64, a: LinkId, a_vci: u64, a_out: u64, b: LinkId, b_vci: u64, b_out: u64) {
        self.map.insert((a, a_vci), Entry { out_link: b, out_vci: b_out, partner: (b, b_vci), chan });
        self.map.insert((b, b_vci), Entry { out_link: a, out_vci: a_out, partner: (a, a_vci), chan });
    }

    /// Remove the entry at `key` and its partner; returns the removed entry.
    pub fn remove_pair(&mut self, link: LinkId, vci: u64) -> Option<Entry> {
        let e = self.map.remove(&(link, vci))?;
        self.map.remove(&e.partner);
        Some(e)
    }

    /// Every entry whose incoming link is `link` (for tearing down a dead link).
    pub fn entries_on(&self, link: LinkId) -> Vec<((LinkId, u64), Entry)> {
        self.map.iter().filter(|((l, _), _)| *l == link).map(|(k, e)| (*k, *e)).collect()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_installed_and_removed_together() {
        let mut t = ForwardTable::new();
        let (va, vb) = (t.draw(1), t.draw(2));
        t.insert_pair(9, 1, va, 100, 2, vb, 200);
        assert_eq!(t.lookup(1, va).unwrap().out_vci, 200);
        assert_eq!(t.lookup(2, vb).unwrap().out_link, 1);
        assert_eq!(t.len(), 2);
        assert_eq!(t.entries_on(2).len(), 1);
        assert_eq!(t.remove_pair(2, vb).unwrap().chan, 9);
        assert!(t.is_empty());
        assert!(t.lookup(1, 12345).is_none());
    }
}
