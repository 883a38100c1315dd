//! A dispatcher's sends and receives of multicast group frames on its link
//! to the monitor.
//!
//! [`GroupPort`] sends with the credits of its link's group inbox
//! (`inbox.rs`), waiting, with the link pumped, when a tree's window is
//! spent, and receives from the inbox.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use multihop_base::error::{Error, ErrorKind, Result};
use multihop_base::park::{relay_spin_budget, wait_until, Waited};
use multihop_base::sync::lock;
use multihop_base::wire::multicast::{GroupHeader, FLAG_UP, KIND_REPLY};
use multihop_base::wire::LINK_MAX_MESSAGE;

use crate::conn::MonitorConn;
use crate::multihop::link::DispatcherLink;

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
    _keep: Arc<MonitorConn>,
    /// Counters for `stats` only (Relaxed: they order nothing; the frames
    /// themselves are ordered by the link ring's release/acquire and the
    /// credits by the inbox mutex). `parks` counts this port's parks.
    parks: AtomicU64,
    sent: AtomicU64,
    credit_waits: AtomicU64,
}

impl GroupPort {
    /// A port on the link of `conn`'s dispatcher (which it keeps attached).
    pub fn new(conn: &Arc<MonitorConn>) -> Result<GroupPort> {
        Ok(GroupPort {
            link: conn.link()?.clone(),
            _keep: conn.clone(),
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
