//! A receiving end's handles: groups that arrived (out of band) before their
//! message is read, and each dispatcher's table of its ends' inboxes.
//!
//! The inbox is made (and registered under its [`InboxKey`]) before the
//! channel can carry anything, so a group never arrives for an end that does
//! not exist yet.  It holds at most `room` handles; a group that would not
//! fit is refused (`no_room`), so a sender that outruns its receiver learns
//! it rather than filling the receiver's descriptor table.  Dropping the
//! inbox closes every handle still in it (the channel end went away).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use multihop_base::control::CapRefusal;
use multihop_base::handles::{reason, DEFAULT_ROOM};
use multihop_base::sync::lock;

/// Which channel end a `Cap` frame is for, as its dispatcher knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum InboxKey {
    /// A UMP end: the channel id and the end's side (0 client, 1 server).
    Ump { chan: u64, side: u8 },
    /// A multi-hop end: the VCI it receives on.
    Multihop { vci_in: u64 },
}

#[derive(Default)]
struct State {
    groups: HashMap<u64, Vec<OwnedFd>>,
    held: usize,
    room: usize,
    stored: u64,
    taken: u64,
    discarded: u64,
    /// Every group is refused with this (reason, message): an end that must not take handles (the fabric bridge's
    /// ends: handles cannot leave a machine).
    refuse_all: Option<(String, String)>,
}

/// One receiving end's groups of handles.
pub struct Inbox {
    state: Mutex<State>,
    /// For a multi-hop end: the VCI it sends with, which routes its replies
    /// back to the sender (0 until the bind completes).
    reply_vci: AtomicU64,
}

/// Counters of an inbox (for `stats()`).
#[derive(Clone, Copy, Debug, Default)]
pub struct InboxStats {
    /// Handles waiting for their message now.
    pub pending: usize,
    pub room: usize,
    /// Handles that arrived, were handed to the caller, were closed because
    /// their message was read without them (a plain `recv`).
    pub stored: u64,
    pub taken: u64,
    pub discarded: u64,
}

impl Inbox {
    pub fn new() -> Inbox {
        Inbox { state: Mutex::new(State { room: DEFAULT_ROOM, ..State::default() }), reply_vci: AtomicU64::new(0) }
    }

    /// The VCI that routes this end's replies (multi-hop), once known.
    pub fn set_reply_vci(&self, vci: u64) {
        // Read by the dispatcher's reader thread; Relaxed: a route set once
        // before the channel is handed out, its bind's own messages ordering it.
        self.reply_vci.store(vci, Ordering::Relaxed);
    }

    pub fn reply_vci(&self) -> u64 {
        self.reply_vci.load(Ordering::Relaxed)
    }

    /// Keep `fds` as group `seq`, or refuse them (they are closed).
    /// `truncated`: the kernel could not install all of them here.
    pub fn store(&self, seq: u64, count: u32, fds: Vec<OwnedFd>, truncated: bool) -> Result<(), CapRefusal> {
        if truncated {
            return Err(CapRefusal {
                reason: reason::NO_ROOM.into(),
                message: format!("the receiving process's descriptor table is full (RLIMIT_NOFILE): it could take {} of {count} handles", fds.len()),
                index: Some(fds.len() as u32),
            });
        }
        if fds.len() != count as usize {
            return Err(CapRefusal {
                reason: reason::CLOSED.into(),
                message: format!("a group announced {count} handles and carried {}", fds.len()),
                index: None,
            });
        }
        let mut st = lock(&self.state);
        if let Some((why, text)) = &st.refuse_all {
            return Err(CapRefusal { reason: why.clone(), message: text.clone(), index: None });
        }
        if st.held + fds.len() > st.room {
            return Err(CapRefusal {
                reason: reason::NO_ROOM.into(),
                message: format!(
                    "the receiver has no room: {} handles wait for their messages to be received (room for {}), {} more do not fit",
                    st.held,
                    st.room,
                    fds.len()
                ),
                index: None,
            });
        }
        st.held += fds.len();
        st.stored += fds.len() as u64;
        if let Some(old) = st.groups.insert(seq, fds) {
            st.held -= old.len(); // a group sent twice: the later copy stands
        }
        Ok(())
    }

    /// Refuse every group from now on with `reason` (a `multihop_base::handles::reason`) and `message`.
    pub fn refuse_all(&self, reason: &str, message: &str) {
        lock(&self.state).refuse_all = Some((reason.to_string(), message.to_string()));
    }

    /// Whether group `seq` is here.
    pub fn has(&self, seq: u64) -> bool {
        lock(&self.state).groups.contains_key(&seq)
    }

    /// Take group `seq` (its message is being read).
    pub fn take(&self, seq: u64) -> Option<Vec<OwnedFd>> {
        let mut st = lock(&self.state);
        let g = st.groups.remove(&seq)?;
        st.held -= g.len();
        st.taken += g.len() as u64;
        Some(g)
    }

    /// Close group `seq` (its message was read without its handles, or its
    /// sender gave up).
    pub fn discard(&self, seq: u64) {
        let mut st = lock(&self.state);
        if let Some(g) = st.groups.remove(&seq) {
            st.held -= g.len();
            st.discarded += g.len() as u64;
        }
    }

    /// Close every handle held (the end closed).
    pub fn clear(&self) {
        let mut st = lock(&self.state);
        let n = st.held as u64;
        st.groups.clear();
        st.held = 0;
        st.discarded += n;
    }

    /// Most handles this end keeps for messages not received yet.
    pub fn set_room(&self, room: usize) {
        lock(&self.state).room = room;
    }

    pub fn stats(&self) -> InboxStats {
        let st = lock(&self.state);
        InboxStats { pending: st.held, room: st.room, stored: st.stored, taken: st.taken, discarded: st.discarded }
    }
}

impl Default for Inbox {
    fn default() -> Self {
        Inbox::new()
    }
}

/// A dispatcher's inboxes, by key (weakly: an end that goes drops its inbox).
#[derive(Default)]
pub(crate) struct DispatcherInboxes {
    inboxes: Mutex<HashMap<InboxKey, Weak<Inbox>>>,
}

impl DispatcherInboxes {
    /// A new inbox registered under `key` (replacing a dead one).
    pub(crate) fn register(&self, key: InboxKey) -> Arc<Inbox> {
        let inbox = Arc::new(Inbox::new());
        let mut m = lock(&self.inboxes);
        m.retain(|_, w| w.strong_count() > 0);
        m.insert(key, Arc::downgrade(&inbox));
        inbox
    }

    pub(crate) fn unregister(&self, key: InboxKey) {
        lock(&self.inboxes).remove(&key);
    }

    pub(crate) fn find(&self, key: InboxKey) -> Option<Arc<Inbox>> {
        lock(&self.inboxes).get(&key).and_then(Weak::upgrade)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fds(n: usize) -> Vec<OwnedFd> {
        (0..n).map(|_| std::fs::File::open("/dev/null").unwrap().into()).collect()
    }

    #[test]
    fn room_is_kept_and_refusals_say_why() {
        let ib = Inbox::new();
        ib.set_room(3);
        ib.store(1, 2, fds(2), false).unwrap();
        let e = ib.store(2, 2, fds(2), false).unwrap_err();
        assert_eq!(e.reason, reason::NO_ROOM);
        assert!(e.message.contains("room for 3"), "{}", e.message);
        assert_eq!(ib.store(2, 1, fds(1), true).unwrap_err().reason, reason::NO_ROOM);
        assert_eq!(ib.store(2, 2, fds(1), false).unwrap_err().reason, reason::CLOSED);
        ib.store(3, 1, fds(1), false).unwrap();
        assert_eq!(ib.take(1).unwrap().len(), 2);
        assert!(ib.take(1).is_none() && ib.has(3));
        ib.discard(3);
        let s = ib.stats();
        assert_eq!((s.pending, s.stored, s.taken, s.discarded), (0, 3, 2, 1));
    }

    #[test]
    fn registry_forgets_dropped_inboxes() {
        let d = DispatcherInboxes::default();
        let k = InboxKey::Ump { chan: 9, side: 1 };
        let ib = d.register(k);
        assert!(d.find(k).is_some());
        drop(ib);
        assert!(d.find(k).is_none());
        let ib = d.register(InboxKey::Multihop { vci_in: 5 });
        d.unregister(InboxKey::Multihop { vci_in: 5 });
        assert!(d.find(InboxKey::Multihop { vci_in: 5 }).is_none());
        drop(ib);
    }
}
