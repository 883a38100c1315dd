//! The group frames that arrived on a dispatcher's link, and the credits of
//! its own sends.
//!
//! Whoever pumps the dispatcher's link (`multihop/link.rs`) hands group
//! frames to the link's [`GroupInbox`]: CREDIT frames add to the credits of
//! the dispatcher's own sends (the root edge of each tree it sends on,
//! `window` each), every other frame joins the inbox and its credit is owed
//! back to the monitor (returned every `window / 2` frames of a tree). A
//! frame is taken (and credited) when it reaches the inbox: from there it is
//! this process's own memory. A stopped process takes nothing, so its
//! monitor holds at most a window per tree for it. A [`GroupPort`](super::port::GroupPort)
//! sends with those credits and receives from the inbox.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use multihop_base::ringpair::RingPair;
use multihop_base::sync::lock;
use multihop_base::wire::multicast::{credit_frame, GroupHeader, TreeKey, KIND_CREDIT};

/// The window of a group whose window this process was not told (the default).
pub(crate) const DEFAULT_WINDOW: u32 = multihop_base::defaults::WINDOW;

#[derive(Default)]
pub(super) struct InboxState {
    pub(super) frames: VecDeque<Vec<u8>>,
    /// Credits left for our sends, per tree (absent: a full window).
    pub(super) credits: HashMap<TreeKey, u32>,
    /// Credits owed to the monitor for frames taken, per tree.
    owed: HashMap<TreeKey, u32>,
    /// Window per group id (set by the group layer when it joins).
    pub(super) windows: HashMap<u32, u32>,
    pub(super) received: u64,
    pub(super) credits_returned: u64,
    pub(super) malformed: u64,
}

impl InboxState {
    pub(super) fn window(&self, group_id: u32) -> u32 {
        self.windows.get(&group_id).copied().unwrap_or(DEFAULT_WINDOW).max(1)
    }

    /// Send what is owed that reached the threshold (or everything with `all`).
    pub(super) fn return_credits(&mut self, link: &RingPair, all: bool) {
        let windows = self.windows.clone();
        let mut returned = 0;
        for (key, n) in self.owed.iter_mut() {
            let t = (windows.get(&key.group_id).copied().unwrap_or(DEFAULT_WINDOW) / 2).max(1);
            if *n > 0 && (all || *n >= t) && link.try_send_quiet(&[&credit_frame(*key, *n)]).is_ok() {
                returned += 1;
                *n = 0;
            }
        }
        if returned > 0 {
            self.credits_returned += returned;
            link.ring_peer();
        }
    }
}

/// The group frames that arrived on one dispatcher link.
#[derive(Default)]
pub(crate) struct GroupInbox {
    pub(super) state: Mutex<InboxState>,
}

impl GroupInbox {
    /// A group frame came off the link (`link`: where credits go back).
    pub(crate) fn take(&self, frame: Vec<u8>, link: &RingPair) {
        let mut st = lock(&self.state);
        let h = match GroupHeader::decode(&frame) {
            Ok(h) => h,
            Err(_) => {
                st.malformed += 1;
                return;
            }
        };
        if h.kind == KIND_CREDIT {
            let w = st.window(h.key.group_id);
            let c = st.credits.entry(h.key).or_insert(w);
            *c = c.saturating_add(h.credit).min(w);
            return;
        }
        st.frames.push_back(frame);
        st.received += 1;
        *st.owed.entry(h.key).or_default() += 1;
        st.return_credits(link, false);
    }

    pub(super) fn has_frames(&self) -> bool {
        !lock(&self.state).frames.is_empty()
    }
}
