//! Handles on their way (TN-006 2.7): a monitor checks the handles its own
//! dispatchers send (`handles::check`: runtime-owned, not open, too many) and
//! passes every `Cap` frame one hop on, over the control sockets: to a
//! dispatcher of this core (its long-lived connection) or to a neighbour
//! monitor (a long-lived `Relay` connection per neighbour, opened on first
//! use).  A multi-hop channel's frames follow its forwarding entries, VCI by
//! VCI, the way its data does; a UMP channel's follow the routes noted at
//! its bind (`handles::routes`).  A frame that cannot go on is answered with a
//! refusal back towards the sender where a way back exists; either way the
//! monitor closes its copies of the handles as soon as the frame has been
//! passed on or refused: it never keeps any.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use super::{log, Monitor};
use crate::forward::LinkPeer;
use crate::handles::routes::{Hop, UmpRoutes};
use multihop_base::control::{self, monitor_socket, CapRefusal, CapStage, Msg, Role};
use multihop_base::error::{Error, ErrorKind, Result};
use multihop_base::handles::{check, reason};
use multihop_base::sock::SeqSocket;
use multihop_base::sync::lock;

/// A monitor's state for handles: UMP routes, relay connections, counters.
#[derive(Default)]
pub(super) struct MonitorCaps {
    pub(super) routes: UmpRoutes,
    /// core -> our one-way connection to that monitor.
    relays: Mutex<HashMap<u32, Arc<SeqSocket>>>,
    /// Frames passed on, refused here, and dropped (no way on or back).
    /// Relaxed counters, status only.
    passed: AtomicU64,
    refused: AtomicU64,
    dropped: AtomicU64,
}

fn raw(fds: &[OwnedFd]) -> Vec<RawFd> {
    fds.iter().map(|f| f.as_raw_fd()).collect()
}

/// Let this process hold as many descriptors as its hard limit allows: a
/// monitor holds a message's handles while it passes them on.
pub(super) fn raise_descriptor_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid out pointer; RLIMIT_NOFILE always exists.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 && lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: valid pointer; raising the soft limit up to the hard one is always allowed.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    }
}

impl Monitor {
    /// A `Cap` frame from dispatcher `conn` of this core.
    pub(super) fn cap_from_dispatcher(&self, conn: u64, msg: Msg, fds: Vec<OwnedFd>, truncated: bool) {
        self.route_cap(LinkPeer::Dispatcher(conn), msg, fds, truncated);
    }

    /// A neighbour's `Relay` connection: its frames, until it hangs up.
    pub(super) fn serve_relay(&self, sock: SeqSocket, from_core: u32) {
        loop {
            match control::recv_keeping_truncated(&sock, control::MAX_REQUEST) {
                Ok(Some((msg @ Msg::Cap { .. }, fds, truncated))) => self.route_cap(LinkPeer::Monitor(from_core), msg, fds, truncated),
                Ok(Some(_)) | Err(Error { kind: ErrorKind::Protocol, .. }) => {
                    self.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                }
                Ok(None) | Err(_) => return,
            }
        }
    }

    /// Where a frame that came from `from` with `vci` / (`chan`, `to_side`)
    /// goes next: (peer, VCI to write there).
    fn next_hop(&self, from: LinkPeer, chan: u64, to_side: u8, vci: u64) -> Option<(LinkPeer, u64)> {
        if vci != 0 {
            let f = self.fwd.lock();
            let e = *f.table.lookup(f.link_to(from)?, vci)?;
            return Some((f.peer_of(e.out_link)?, e.out_vci));
        }
        match self.caps.routes.find(chan, to_side)? {
            Hop::Local(c) => Some((LinkPeer::Dispatcher(c), 0)),
            Hop::Remote(core) => Some((LinkPeer::Monitor(core), 0)),
        }
    }

    /// The way back to the sender of a frame that came from `from`: (peer,
    /// VCI to write there), if there is one.
    fn way_back(&self, from: LinkPeer, vci: u64) -> Option<(LinkPeer, u64)> {
        if vci == 0 || matches!(from, LinkPeer::Dispatcher(_)) {
            return Some((from, 0)); // UMP: straight back; a dispatcher: its own request
        }
        let f = self.fwd.lock();
        let e = *f.table.lookup(f.link_to(from)?, vci)?;
        let back = *f.table.lookup(e.partner.0, e.partner.1)?;
        Some((f.peer_of(back.out_link)?, back.out_vci))
    }

    fn route_cap(&self, from: LinkPeer, msg: Msg, fds: Vec<OwnedFd>, truncated: bool) {
        let Msg::Cap { stage, req, chan, to_side, vci, seq, count, refused } = msg else { return };
        let refuse = |why: &str, index: Option<u32>, text: String| {
            self.caps.refused.fetch_add(1, Ordering::Relaxed);
            let Some((to, back_vci)) = self.way_back(from, vci) else {
                self.caps.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            };
            let r = CapRefusal { reason: why.to_string(), message: text, index };
            let reply = Msg::Cap { stage: CapStage::Reply, req, chan, to_side: 1 - to_side.min(1), vci: back_vci, seq, count: 0, refused: Some(r) };
            let _ = self.send_cap(to, &reply, &[]);
        };
        if stage == CapStage::Send {
            if truncated {
                return refuse(
                    reason::NO_ROOM,
                    None,
                    format!("monitor {}'s descriptor table is full: {}", self.cfg.core, multihop_base::error::limit_note()),
                );
            }
            if fds.len() != count as usize {
                return refuse(reason::CLOSED, None, format!("a group announced {count} handles and carried {}", fds.len()));
            }
            if matches!(from, LinkPeer::Dispatcher(_)) {
                // The sending side's monitor decides what may leave.
                if let Err((why, i, text)) = check::check_all(&raw(&fds)) {
                    return refuse(why, Some(i as u32), text);
                }
            }
        }
        match self.next_hop(from, chan, to_side, vci) {
            Some((to, out_vci)) => {
                let onward = Msg::Cap { stage, req, chan, to_side, vci: out_vci, seq, count, refused };
                if self.send_cap(to, &onward, &fds).is_ok() {
                    self.caps.passed.fetch_add(1, Ordering::Relaxed);
                } else if stage == CapStage::Send {
                    refuse(reason::CLOSED, None, format!("monitor {} could not pass the handles on to {to:?}", self.cfg.core));
                } else {
                    self.caps.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            None if stage == CapStage::Send => refuse(reason::CLOSED, None, "the receiving end of the channel is closed".into()),
            None => {
                self.caps.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        // `fds` (this monitor's copies) close here.
    }

    /// Send a `Cap` frame one hop on: to a dispatcher of this core, or over
    /// our relay connection to a neighbour (reopened once if it broke).
    fn send_cap(&self, to: LinkPeer, msg: &Msg, fds: &[OwnedFd]) -> Result<()> {
        let raw = raw(fds);
        match to {
            LinkPeer::Dispatcher(c) => {
                let sock = lock(&self.dispatchers).get(&c).map(|d| d.sock.clone());
                let sock = sock.ok_or_else(|| Error::closed(format!("dispatcher {c} is gone")))?;
                control::send(&sock, msg, &raw)
            }
            LinkPeer::Monitor(core) => {
                for attempt in 0..2 {
                    let sock = self.relay_to(core)?;
                    match control::send(&sock, msg, &raw) {
                        Ok(()) => return Ok(()),
                        Err(e) => {
                            lock(&self.caps.relays).remove(&core);
                            if attempt == 1 {
                                return Err(e);
                            }
                        }
                    }
                }
                unreachable!("two attempts")
            }
        }
    }

    /// Our relay connection to the monitor of `core`, opened on first use.
    fn relay_to(&self, core: u32) -> Result<Arc<SeqSocket>> {
        if let Some(s) = lock(&self.caps.relays).get(&core) {
            return Ok(s.clone());
        }
        let path = monitor_socket(&self.cfg.dir, core);
        let (sock, _) = control::connect_within(&path, Role::Relay, self.cfg.core, Duration::from_secs(5))?;
        sock.set_send_timeout(Duration::from_secs(5))?;
        let sock = Arc::new(sock);
        lock(&self.caps.relays).insert(core, sock.clone());
        log(self.cfg.core, format_args!("opened a relay connection for handles to monitor {core}"));
        Ok(sock)
    }

    /// What `multihop status` shows about handles.
    pub(super) fn caps_status(&self) -> serde_json::Value {
        json!({
            "passed": self.caps.passed.load(Ordering::Relaxed),
            "refused": self.caps.refused.load(Ordering::Relaxed),
            "dropped": self.caps.dropped.load(Ordering::Relaxed),
            "ump_routes": self.caps.routes.len(),
            "relays": lock(&self.caps.relays).keys().copied().collect::<Vec<_>>(),
        })
    }
}
