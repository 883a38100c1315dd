//! A channel end's part in carrying handles: its inbox (registered before
//! the channel can carry anything), its route for `Cap` frames, and the
//! sending protocol.
//!
//! Sending one message with handles (`Channel::send_with_handles`):
//!
//! 1. the handles are checked here first ([`check`](multihop_base::handles::check)), so a bad one is
//!    named before anything travels (the monitor checks again: it decides);
//! 2. one sender at a time per end (`sending`), and only once the ring or
//!    the credit window has room for the message;
//! 3. [`CapEnd::send_group`]: a `Cap` frame with the handles goes to the
//!    monitor and the caller waits for the verdict, which comes once the
//!    receiver holds them (or a refusal, from whoever refused);
//! 4. the message goes in band with its marker; if that cannot happen (a
//!    timeout, the channel closed), [`CapEnd::cancel`] tells the receiver to
//!    drop the group, and the caller still owns its handles;
//! 5. only then are given-away handles closed (by the caller, which owns
//!    them: the Python `Handle`, the C program's descriptor).

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use multihop_base::control::{CapStage, Msg};
use multihop_base::error::{Error, ErrorKind, Result};
use multihop_base::handles::{check, reason};
use multihop_base::ringpair::HandleGroups;
use multihop_base::sync::lock;

use super::inbox::{Inbox, InboxKey};
use crate::conn::MonitorConn;

/// How a channel end's `Cap` frames find the other end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// A UMP channel: its id and the other end's side.
    Ump { chan: u64, peer_side: u8 },
    /// A multi-hop channel: the VCI this end sends with.
    Multihop { vci_out: u64 },
}

/// One channel end's handles: inbox, route, sequence numbers.
pub struct CapEnd {
    conn: Arc<MonitorConn>,
    key: InboxKey,
    inbox: Arc<Inbox>,
    route: OnceLock<Route>,
    /// Numbers this end's handle groups (Relaxed: only `sending`'s holder
    /// draws from it).
    next_seq: AtomicU64,
    /// Held for a whole send with handles, so groups reach the ring in the
    /// order they were numbered and accepted.
    sending: Mutex<()>,
    /// Handles sent (statistics; Relaxed).
    pub sent: AtomicU64,
}

impl CapEnd {
    /// Register the inbox of an end of `conn`'s dispatcher under `key`, before the
    /// channel can carry anything (a bind not sent yet, a connect not
    /// answered yet).
    pub(crate) fn reserve(conn: &Arc<MonitorConn>, key: InboxKey) -> Arc<CapEnd> {
        let inbox = conn.inboxes.register(key);
        Arc::new(CapEnd {
            conn: conn.clone(),
            key,
            inbox,
            route: OnceLock::new(),
            next_seq: AtomicU64::new(1),
            sending: Mutex::new(()),
            sent: AtomicU64::new(0),
        })
    }

    /// The bind completed: this is how frames find the other end.
    pub fn set_route(&self, route: Route) {
        let _ = self.route.set(route);
        if let Route::Multihop { vci_out } = route {
            self.inbox.set_reply_vci(vci_out);
        }
    }

    pub fn inbox(&self) -> &Arc<Inbox> {
        &self.inbox
    }

    /// Hold this for a whole send with handles.
    pub fn one_sender(&self) -> MutexGuard<'_, ()> {
        lock(&self.sending)
    }

    /// The fields of a frame along this end's route.
    fn frame(&self, stage: CapStage, req: u64, seq: u64, count: u32) -> Result<Msg> {
        let (chan, to_side, vci) = match self.route.get() {
            Some(Route::Ump { chan, peer_side }) => (*chan, *peer_side, 0),
            Some(Route::Multihop { vci_out }) => (0, 0, *vci_out),
            None => return Err(Error::cap_refused(reason::UNSUPPORTED, None, "this channel end is not bound yet")),
        };
        Ok(Msg::Cap { stage, req, chan, to_side, vci, seq, count, refused: None })
    }

    /// Hand `fds` to the receiving end and wait until it holds them (or a
    /// refusal comes back); `check_here`: check them first (else the
    /// sending side's monitor alone does). Returns the group's number. `over()` says the
    /// channel ended (checked between waits); `interrupt` runs between waits
    /// too (signals). A wait that ends without a verdict cancels the group.
    pub fn send_group(
        &self,
        fds: &[RawFd],
        deadline: Option<Instant>,
        over: &dyn Fn() -> bool,
        interrupt: &mut dyn FnMut() -> Result<()>,
        check_here: bool,
    ) -> Result<u64> {
        if check_here {
            if let Err((why, i, text)) = check::check_all(fds) {
                return Err(Error::cap_refused(why, Some(i), text));
            }
        }
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let count = fds.len() as u32;
        let template = self.frame(CapStage::Send, 0, seq, count)?;
        let far = Instant::now() + Duration::from_secs(365 * 24 * 3600);
        let mut sent_it = false;
        let answer = self.conn.request_raw(
            |req| {
                sent_it = true;
                match template {
                    Msg::Cap { stage, chan, to_side, vci, seq, count, refused, .. } => {
                        Msg::Cap { stage, req, chan, to_side, vci, seq, count, refused }
                    }
                    other => other,
                }
            },
            fds,
            deadline.unwrap_or(far),
            &mut || {
                if over() {
                    return Err(Error::closed("the channel closed while its handles travelled"));
                }
                interrupt()
            },
        );
        match answer {
            Ok((Msg::Cap { stage: CapStage::Reply, refused: None, .. }, _)) => {
                self.sent.fetch_add(fds.len() as u64, Ordering::Relaxed);
                Ok(seq)
            }
            Ok((Msg::Cap { stage: CapStage::Reply, refused: Some(r), .. }, _)) => {
                Err(Error::cap_refused(&r.reason, r.index.map(|i| i as usize), r.message))
            }
            Ok((other, _)) => {
                self.cancel(seq);
                Err(Error::protocol(format!("the monitor answered handles with {}", other.op())))
            }
            Err(e) => {
                if sent_it {
                    self.cancel(seq);
                }
                Err(match e.kind {
                    ErrorKind::Timeout => Error::timeout("send timed out: the receiver did not take the message's handles in time"),
                    _ => e,
                })
            }
        }
    }

    /// This end closed: it takes no more groups, and the ones it holds are
    /// closed (their messages can no longer be read here).
    pub fn close(&self) {
        self.conn.inboxes.unregister(self.key);
        self.inbox.clear();
    }

    /// The sender gave up on group `seq` after sending it: the receiving end
    /// drops it (best effort: if the frame cannot go, the group stays there
    /// until that end closes, counted against its room).
    pub fn cancel(&self, seq: u64) {
        if let Ok(m) = self.frame(CapStage::Cancel, 0, seq, 0) {
            self.conn.tell(&m, &[]);
        }
    }
}

impl Drop for CapEnd {
    fn drop(&mut self) {
        self.conn.inboxes.unregister(self.key);
    }
}

/// A UMP end reads the groups of its marked messages from this end's inbox,
/// and closes it with the end (`multihop_base::ringpair`).
impl HandleGroups for CapEnd {
    fn has(&self, seq: u64) -> bool {
        self.inbox.has(seq)
    }

    fn take(&self, seq: u64) -> Option<Vec<std::os::fd::OwnedFd>> {
        self.inbox.take(seq)
    }

    fn discard(&self, seq: u64) {
        self.inbox.discard(seq);
    }

    fn close(&self) {
        CapEnd::close(self);
    }
}
