//! A monitor's forwarding table: (incoming link, VCI) -> (outgoing link, VCI).
//!
//! Hard state made at bind and removed at teardown (TN-006 2.5).  Each entry
//! knows its partner (the entry of the same channel in the other direction),
//! so a teardown arriving from either side removes both.  VCIs are drawn
//! from the OS random source and redrawn on collision, with entries in use
//! and with VCIs drawn for binds still in flight (reserved until their entry
//! is installed or the bind fails).

use std::collections::{HashMap, HashSet};

use multihop_base::error::Result;
use multihop_base::random::random_u64;

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
    /// Drawn for a bind in flight, not installed yet.
    reserved: HashSet<(LinkId, u64)>,
}

impl ForwardTable {
    pub fn new() -> ForwardTable {
        ForwardTable::default()
    }

    /// A fresh VCI not in use or reserved on `link` (never 0), reserved
    /// until `insert` installs it or `release` gives it up.
    pub fn draw(&mut self, link: LinkId) -> Result<u64> {
        loop {
            let v = random_u64()?;
            if v != 0 && !self.map.contains_key(&(link, v)) && self.reserved.insert((link, v)) {
                return Ok(v);
            }
        }
    }

    /// Give up a VCI drawn for a bind that failed.
    pub fn release(&mut self, link: LinkId, vci: u64) {
        self.reserved.remove(&(link, vci));
    }

    /// Whether an entry is installed at (`link`, `vci`).
    pub fn contains(&self, link: LinkId, vci: u64) -> bool {
        self.map.contains_key(&(link, vci))
    }

    #[inline]
    pub fn lookup(&self, link: LinkId, vci: u64) -> Option<&Entry> {
        self.map.get(&(link, vci))
    }

    /// Install one direction of a channel (its partner may come later).
    pub fn insert(&mut self, link: LinkId, vci: u64, entry: Entry) {
        self.reserved.remove(&(link, vci));
        self.map.insert((link, vci), entry);
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

    /// Every entry whose outgoing link is `link`.
    pub fn entries_to(&self, link: LinkId) -> Vec<((LinkId, u64), Entry)> {
        self.map.iter().filter(|(_, e)| e.out_link == link).map(|(k, e)| (*k, *e)).collect()
    }

    /// Installed entries (reservations not counted).
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
        let (va, vb) = (t.draw(1).unwrap(), t.draw(2).unwrap());
        t.insert(1, va, Entry { out_link: 2, out_vci: 200, partner: (2, vb), chan: 9 });
        t.insert(2, vb, Entry { out_link: 1, out_vci: 100, partner: (1, va), chan: 9 });
        assert!(t.reserved.is_empty());
        assert_eq!(t.lookup(1, va).unwrap().out_vci, 200);
        assert_eq!(t.lookup(2, vb).unwrap().out_link, 1);
        assert_eq!(t.len(), 2);
        assert_eq!(t.entries_on(2).len(), 1);
        assert_eq!(t.entries_to(2), vec![((1, va), *t.lookup(1, va).unwrap())]);
        assert_eq!(t.remove_pair(2, vb).unwrap().chan, 9);
        assert!(t.is_empty());
        assert!(t.lookup(1, 12345).is_none());
    }

    #[test]
    fn drawn_vcis_are_reserved_until_installed_or_released() {
        let mut t = ForwardTable::new();
        let drawn: Vec<u64> = (0..1000).map(|_| t.draw(3).unwrap()).collect();
        let distinct: HashSet<u64> = drawn.iter().copied().collect();
        assert_eq!(distinct.len(), drawn.len());
        assert!(drawn.iter().all(|v| *v != 0 && t.reserved.contains(&(3, *v))));
        assert!(t.is_empty(), "reservations are not entries");
        for v in &drawn {
            t.release(3, *v);
        }
        assert!(t.reserved.is_empty());
    }
}
