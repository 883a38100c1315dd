//! A monitor's routes for the `Cap` frames of UMP channels.
//!
//! A UMP channel's data never passes a monitor, but its handles do: from the
//! sender's monitor to the receiver's (the two that brokered its bind).  Each
//! of them notes, at bind time, where each end of the channel is: a
//! dispatcher of its own core (`Local`, by connection) or the other monitor
//! (`Remote`, by core).  Multi-hop channels need no such table: their frames
//! follow the forwarding table, VCI by VCI, like their data.
//!
//! Routes go when their end closes or its dispatcher goes; a `Remote` route
//! goes with the last `Local` one of its channel.

use std::collections::HashMap;
use std::sync::Mutex;

use multihop_base::sync::lock;

/// Where one end of a UMP channel is, seen from a monitor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hop {
    /// A dispatcher of this core (its connection id).
    Local(u64),
    /// The monitor of that core.
    Remote(u32),
}

/// (channel id, side) -> where that end is.
#[derive(Default)]
pub(crate) struct UmpRoutes {
    map: Mutex<HashMap<(u64, u8), Hop>>,
}

impl UmpRoutes {
    /// Dispatcher `conn` of this core holds side `side` of `chan`, whose
    /// other end is on `peer_core` (this monitor's core `me`: the other end
    /// notes itself as `Local`, which is never overwritten).
    pub(crate) fn add(&self, chan: u64, side: u8, conn: u64, peer_core: u32, me: u32) {
        let mut m = lock(&self.map);
        m.insert((chan, side), Hop::Local(conn));
        let other = (chan, 1 - side.min(1));
        if peer_core != me && !matches!(m.get(&other), Some(Hop::Local(_))) {
            m.insert(other, Hop::Remote(peer_core));
        }
    }

    /// Where side `side` of `chan` is.
    pub(crate) fn find(&self, chan: u64, side: u8) -> Option<Hop> {
        lock(&self.map).get(&(chan, side)).copied()
    }

    /// Dispatcher `conn` closed its end of `chan`.
    pub(crate) fn forget(&self, conn: u64, chan: u64) {
        let mut m = lock(&self.map);
        m.retain(|(c, _), h| !(*c == chan && *h == Hop::Local(conn)));
        Self::drop_orphans(&mut m, Some(chan));
    }

    /// Dispatcher `conn` went away with all its ends.
    pub(crate) fn forget_dispatcher(&self, conn: u64) {
        let mut m = lock(&self.map);
        m.retain(|_, h| *h != Hop::Local(conn));
        Self::drop_orphans(&mut m, None);
    }

    /// Remove `Remote` routes of channels (of `chan`, or all) with no `Local` end left.
    fn drop_orphans(m: &mut HashMap<(u64, u8), Hop>, chan: Option<u64>) {
        let orphans: Vec<(u64, u8)> = m
            .iter()
            .filter(|((c, s), h)| chan.is_none_or(|x| x == *c) && matches!(h, Hop::Remote(_)) && !matches!(m.get(&(*c, 1 - s)), Some(Hop::Local(_))))
            .map(|(k, _)| *k)
            .collect();
        for k in orphans {
            m.remove(&k);
        }
    }

    pub(crate) fn len(&self) -> usize {
        lock(&self.map).len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_ends_local_or_one_remote() {
        let r = UmpRoutes::default();
        // Same core: the server half notes itself first, the client half must not overwrite it.
        r.add(1, 1, 20, 0, 0);
        r.add(1, 0, 10, 0, 0);
        assert_eq!((r.find(1, 0), r.find(1, 1)), (Some(Hop::Local(10)), Some(Hop::Local(20))));
        // Another core.
        r.add(2, 0, 10, 5, 0);
        assert_eq!(r.find(2, 1), Some(Hop::Remote(5)));
        r.forget(10, 2);
        assert_eq!((r.find(2, 0), r.find(2, 1)), (None, None));
        r.forget_dispatcher(10);
        assert_eq!((r.find(1, 0), r.find(1, 1)), (None, Some(Hop::Local(20))));
        r.forget(20, 1);
        assert!(r.is_empty());
    }
}
