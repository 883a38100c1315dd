//! A dispatcher's side of the group frames on its link to the monitor.
//!
//! Whoever pumps the dispatcher's link (`mhlink.rs`) hands group frames to
//! the link's [`GroupInbox`]: CREDIT frames add to the credits of the
//! dispatcher's own sends (the root edge of each tree it sends on, `window`
//! each), every other frame joins the inbox and its credit is owed back to
//! the monitor (returned every `window / 2` frames of a tree). A frame is
//! taken (and credited) when it reaches the inbox: from there it is this
//! process's own memory. A stopped process takes nothing, so its monitor
//! holds at most a window per tree for it.
//!
//! [`GroupPort`] sends with those credits (waiting, with the link pumped,
//! when a tree's window is spent) and receives from the inbox.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::frame::{credit_frame, GroupHeader, TreeKey, FLAG_UP, KIND_CREDIT, KIND_REPLY};
use crate::channel::UmpChannel;
use crate::dispatcher::Dispatcher;
use crate::error::{Error, ErrorKind, Result};
use crate::mhlink::{DispatcherLink, LINK_MAX_MESSAGE};
use crate::park::{relay_spin_budget, wait_until, Waited};
use crate::sync::lock;

/// The window of a group whose window this process was not told (the default).
pub const DEFAULT_WINDOW: u32 = 16;

#[derive(Default)]
struct InboxState {
    frames: VecDeque<Vec<u8>>,
    /// Credits left for our sends, per tree (absent: a full window).
    credits: HashMap<TreeKey, u32>,
    /// Credits owed to the monitor for frames taken, per tree.
    owed: HashMap<TreeKey, u32>,
    /// Window per group id (set by the group layer when it joins).
    windows: HashMap<u32, u32>,
    received: u64,
    credits_returned: u64,
    malformed: u64,
}

impl InboxState {
    fn window(&self, group_id: u32) -> u32 {
        self.windows.get(&group_id).copied().unwrap_or(DEFAULT_WINDOW).max(1)
    }

    /// Send what is owed that reached the threshold (or everything with `all`).
    fn return_credits(&mut self, link: &UmpChannel, all: bool) {
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
pub struct GroupInbox {
    state: Mutex<InboxState>,
}

impl GroupInbox {
    /// A group frame came off the link (`link`: where credits go back).
    pub(crate) fn take(&self, frame: Vec<u8>, link: &UmpChannel) {
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

    fn has_frames(&self) -> bool {
        !lock(&self.state).frames.is_empty()
    }
}

/// Counters of a group port.
#[derive(Clone, Debug, Default)]
pub struct PortStats {
    pub sent: u64,
    pub received: u64,
    pub credit_waits: u64,
    pub credits_returned: u64,
    pub malformed: u64,
    pub queued: usize,
}

/// Sends and receives group frames on a dispatcher's link.
pub struct GroupPort {
    link: Arc<DispatcherLink>,
    _keep: Dispatcher,
    /// Counters for `stats` only (Relaxed: they order nothing; the frames
    /// themselves are ordered by the link ring's release/acquire and the
    /// credits by the inbox mutex). `parks` counts this port's parks.
    parks: AtomicU64,
    sent: AtomicU64,
    credit_waits: AtomicU64,
}

impl GroupPort {
    pub fn new(d: &Dispatcher) -> Result<GroupPort> {
        Ok(GroupPort {
            link: d.link()?.clone(),
            _keep: d.clone(),
            parks: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            credit_waits: AtomicU64::new(0),
        })
    }

    /// The window of group `group_id` (credits per tree edge).
    pub fn set_window(&self, group_id: u32, window: u32) {
        lock(&self.link.group.state).windows.insert(group_id, window.max(1));
    }

    fn closed(&self) -> Error {
        Error::new(ErrorKind::ChannelClosed, "the monitor of this dispatcher is gone: no group frames go anywhere")
    }

    /// Try once to send `frame` (an encoded group frame) with a credit of its tree.
    /// Ok(false): no credit or no room now.
    pub fn try_send(&self, frame: &[u8]) -> Result<bool> {
        if frame.len() > LINK_MAX_MESSAGE {
            return Err(Error::new(
                ErrorKind::MessageTooLarge,
                format!("group frame of {} bytes exceeds the link maximum of {LINK_MAX_MESSAGE} bytes", frame.len()),
            ));
        }
        let h = GroupHeader::decode(frame)?;
        if self.link.is_dead() {
            return Err(self.closed());
        }
        let inbox = &self.link.group;
        let mut st = lock(&inbox.state);
        // A convergecast reply going up to the monitor takes no credit: one per request delivered here,
        // and the monitor keeps a bounded number of requests in flight per tree (`table.rs`).
        let up = h.kind == KIND_REPLY && h.flags & FLAG_UP != 0;
        let w = st.window(h.key.group_id);
        let c = st.credits.entry(h.key).or_insert(w);
        if *c == 0 && !up {
            return Ok(false);
        }
        match self.link.ring().try_send(&[frame]) {
            Ok(()) => {
                if !up {
                    *c -= 1;
                }
                self.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed); // a counter: orders nothing
                Ok(true)
            }
            Err(e) if e.kind == ErrorKind::TxBusy => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Send `frame`, waiting for a credit (and ring room) until `deadline`.
    /// The link is pumped meanwhile, so frames addressed here keep arriving.
    pub fn send(&self, frame: &[u8], deadline: Option<Instant>, interrupt: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        if self.try_send(frame)? {
            return Ok(());
        }
        self.credit_waits.fetch_add(1, std::sync::atomic::Ordering::Relaxed); // a counter: orders nothing
        loop {
            let mut err = None;
            let mut sent = false;
            let w = wait_until(
                self.link.ring().doorbell(),
                &self.parks,
                relay_spin_budget(),
                deadline,
                &mut || {
                    self.link.pump();
                    match self.try_send(frame) {
                        Ok(true) => {
                            sent = true;
                            true
                        }
                        Ok(false) => false,
                        Err(e) => {
                            err = Some(e);
                            true
                        }
                    }
                },
                &mut || self.link.is_dead(),
            );
            if let Some(e) = err {
                return Err(e);
            }
            if sent {
                return Ok(());
            }
            if self.link.is_dead() {
                return Err(self.closed());
            }
            if w == Waited::TimedOut {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    "no credit on the group tree within the timeout (a member downstream is slow or stopped)",
                ));
            }
            interrupt()?;
        }
    }

    /// Up to `max` frames from the inbox, waiting until `deadline` for the first.
    pub fn recv_many(&self, max: usize, deadline: Option<Instant>, interrupt: &mut dyn FnMut() -> Result<()>) -> Result<Vec<Vec<u8>>> {
        loop {
            self.link.pump();
            {
                let mut st = lock(&self.link.group.state);
                if !st.frames.is_empty() {
                    let n = st.frames.len().min(max.max(1));
                    return Ok(st.frames.drain(..n).collect());
                }
                st.return_credits(self.link.ring(), false);
            }
            if self.link.is_dead() {
                return Err(self.closed());
            }
            let w = wait_until(
                self.link.ring().doorbell(),
                &self.parks,
                relay_spin_budget(),
                deadline,
                &mut || {
                    self.link.pump();
                    self.link.group.has_frames()
                },
                &mut || self.link.is_dead(),
            );
            match w {
                Waited::Ready | Waited::Interrupted => {}
                Waited::Slice => interrupt()?,
                Waited::TimedOut => {
                    self.link.pump();
                    if !self.link.group.has_frames() {
                        return Ok(Vec::new());
                    }
                }
            }
        }
    }

    /// Return every credit owed now (an endpoint about to go idle).
    pub fn flush_credits(&self) {
        lock(&self.link.group.state).return_credits(self.link.ring(), true);
    }

    pub fn stats(&self) -> PortStats {
        let st = lock(&self.link.group.state);
        PortStats {
            sent: self.sent.load(std::sync::atomic::Ordering::Relaxed),
            received: st.received,
            credit_waits: self.credit_waits.load(std::sync::atomic::Ordering::Relaxed),
            credits_returned: st.credits_returned,
            malformed: st.malformed,
            queued: st.frames.len(),
        }
    }
}
