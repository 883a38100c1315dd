//! A bind: what it asks for ([`BindOptions`], checked before anything starts),
//! in two halves: the request goes out now, the channel is made when the
//! reply comes.
//!
//! A bind's only long wait is for the `Bound` reply (the service's monitor
//! answers once the connection is in the service's backlog). The blocking
//! `Dispatcher::bind` waits for it here with [`PendingBind::wait`]; an event
//! loop instead looks with [`PendingBind::poll`] whenever this process's
//! doorbell rings (the dispatcher's reader thread rings it after handing a
//! reply over, `conn.rs`), so a bind never blocks the loop.
//!
//! Giving up (dropping an unfinished `PendingBind`: a timeout, a cancelled
//! task) does what a timed-out blocking bind does: the UMP segment is marked
//! abandoned (the service's end, if it was set up, reads it as closed) and
//! the multi-hop receive VCI is released; a `Bound` reply that arrives after
//! that makes the reader thread tear the circuit down (`conn.rs`).

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use multihop_base::control::Msg;
use multihop_base::defaults::{LIMIT_MAX_MESSAGE, MAX_MESSAGE, MAX_WINDOW};
use multihop_base::error::{Error, ErrorKind, Result};
use multihop_base::park::{process_doorbell, Doorbell, PARK_SLICE};
use multihop_base::peer::PeerWatch;
use multihop_base::random::random_u64;
use multihop_base::ringpair::{abandon_segment, create_segment, ChannelInfo, RingPair, Side};
use multihop_base::shm::{dup_cloexec, Segment};
use multihop_base::wire::{DIR_TO_SERVER, HEADER_BYTES, LINK_MAX_MESSAGE};

use crate::channel::Channel;
use crate::conn::{MonitorConn, Reply};
use crate::handles::end::{CapEnd, Route};
use crate::handles::inbox::InboxKey;
use crate::multihop::channel::PendingMh;
use crate::ump::UmpChannel;

/// What a bind asks for, checked before anything starts.
#[derive(Clone, Debug)]
pub struct BindOptions {
    pub transport: String,
    pub max_message: Option<usize>,
    pub window: u32,
    pub timeout: Duration,
}

impl BindOptions {
    /// The largest message a channel of `transport` may carry ("auto": what both carry).
    pub fn max_message_limit(transport: &str) -> Result<usize> {
        match transport {
            "ump" => Ok(LIMIT_MAX_MESSAGE),
            "multihop" => Ok(LINK_MAX_MESSAGE - HEADER_BYTES),
            "auto" => Ok(LIMIT_MAX_MESSAGE.min(LINK_MAX_MESSAGE - HEADER_BYTES)),
            other => Err(Error::invalid(format!("transport must be \"ump\", \"multihop\" or \"auto\", got {other:?}"))),
        }
    }

    /// Check every argument, with the same ranges on both transports where
    /// they mean the same thing.
    pub fn check(&self) -> Result<()> {
        let limit = Self::max_message_limit(&self.transport)?;
        if let Some(m) = self.max_message {
            if m == 0 || m > limit {
                return Err(Error::invalid(format!("max_message must be from 1 to {limit} bytes on a {} channel, got {m}", self.transport)));
            }
        }
        if self.window == 0 || self.window > MAX_WINDOW {
            return Err(Error::invalid(format!(
                "window must be from 1 to {MAX_WINDOW} (the most messages in flight on the channel, each way), got {}",
                self.window
            )));
        }
        Ok(())
    }
}

/// What the client side holds while its bind request is out.
enum Half {
    Ump { seg: Segment, bell: Arc<Doorbell>, caps: Arc<CapEnd>, max_message: usize },
    Multihop { pending: PendingMh, caps: Arc<CapEnd> },
}

/// A bind whose request is out (see the module text).
pub struct PendingBind {
    conn: Arc<MonitorConn>,
    req: u64,
    rx: mpsc::Receiver<Reply>,
    /// The reply (or the reason there will be none), once seen.
    got: Option<Result<Reply>>,
    half: Option<Half>,
    deadline: Instant,
}

/// How much longer than the bind's own timeout the client waits for the
/// monitor's answer (the monitor answers a timed-out bind itself).
const ANSWER_GRACE: Duration = Duration::from_secs(3);

impl PendingBind {
    /// Send the bind request for `name` (or `iref`) with `opts` (checked,
    /// transport "ump" or "multihop", not "auto").
    pub(crate) fn start(conn: &Arc<MonitorConn>, name: &str, iref: u64, opts: &BindOptions) -> Result<PendingBind> {
        let timeout_ms = opts.timeout.as_millis().clamp(1, u64::MAX as u128) as u64;
        let deadline = Instant::now() + opts.timeout + ANSWER_GRACE;
        let chan = random_u64()?;
        let bind = |req, transport: &str, window, vci| Msg::Bind {
            req,
            name: name.to_string(),
            iref,
            transport: transport.into(),
            chan,
            timeout_ms,
            client_pid: std::process::id(),
            client_core: conn.core(),
            window,
            vci,
        };
        let (half, started) = match opts.transport.as_str() {
            "ump" => {
                let max_message = opts.max_message.unwrap_or(MAX_MESSAGE);
                let seg = create_segment(max_message)?;
                let bell = process_doorbell()?;
                // Handles may come as soon as the service accepts: the inbox first.
                let caps = CapEnd::reserve(conn, InboxKey::Ump { chan, side: Side::Client as u8 });
                let fds = [dup_cloexec(seg.raw_fd())?, dup_cloexec(bell.segment().raw_fd())?];
                let started = conn.request_start(|req| bind(req, "ump", 0, 0), &fds);
                if started.is_err() {
                    abandon_segment(&seg);
                }
                (Half::Ump { seg, bell, caps, max_message }, started?)
            }
            "multihop" => {
                let link = conn.link()?.clone();
                let pending = PendingMh::new(&link, opts.window)?;
                let caps = CapEnd::reserve(conn, InboxKey::Multihop { vci_in: pending.vci_in });
                let started = conn.request_start(|req| bind(req, "multihop", opts.window, pending.vci_in), &[])?;
                (Half::Multihop { pending, caps }, started)
            }
            other => return Err(Error::invalid(format!("transport must be \"ump\" or \"multihop\" here, got {other:?}"))),
        };
        let (req, rx) = started;
        Ok(PendingBind { conn: conn.clone(), req, rx, got: None, half: Some(half), deadline })
    }

    /// Whether the bind is decided (reply, failure or time out), without
    /// waiting: then [`PendingBind::finish`] returns at once.
    pub fn poll(&mut self) -> bool {
        if self.got.is_some() {
            return true;
        }
        match self.rx.try_recv() {
            Ok((msg, fds)) => self.got = Some(msg.into_result().map(|m| (m, fds))),
            Err(mpsc::TryRecvError::Disconnected) => self.got = Some(Err(self.conn.gone())),
            Err(mpsc::TryRecvError::Empty) => {
                if Instant::now() >= self.deadline {
                    self.got = Some(Err(Error::timeout("the monitor did not answer in time")));
                }
            }
        }
        self.got.is_some()
    }

    /// When the client stops waiting for the monitor's answer.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Wait for the reply (in slices, `interrupt` between them) and make the channel.
    pub fn wait(mut self, interrupt: &mut dyn FnMut() -> Result<()>) -> Result<Channel> {
        while self.got.is_none() {
            let left = self.deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left.min(PARK_SLICE)) {
                Ok((msg, fds)) => self.got = Some(msg.into_result().map(|m| (m, fds))),
                Err(mpsc::RecvTimeoutError::Disconnected) => self.got = Some(Err(self.conn.gone())),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if left.is_zero() {
                        self.got = Some(Err(Error::timeout("the monitor did not answer in time")));
                    } else {
                        interrupt()?; // an error drops self: the bind is given up
                    }
                }
            }
        }
        self.finish()
    }

    /// The channel, once [`PendingBind::poll`] said the bind is decided; an
    /// error if it failed. Before that: an error saying so (nothing given up).
    pub fn finish(&mut self) -> Result<Channel> {
        let reply = match self.got.take() {
            Some(r) => r,
            None => return Err(Error::new(ErrorKind::Interrupted, "the bind is not decided yet")),
        };
        let Some(half) = self.half.take() else {
            return Err(Error::invalid("this bind was finished already"));
        };
        let (reply, rfds) = match reply {
            Ok(r) => r,
            Err(e) => {
                if let Half::Ump { seg, .. } = &half {
                    abandon_segment(seg);
                }
                return Err(e);
            }
        };
        let Msg::Bound { chan, service, server_pid, server_core, vci, hops, .. } = reply else {
            if let Half::Ump { seg, .. } = &half {
                abandon_segment(seg);
            }
            return Err(Error::protocol(format!("monitor answered bind with {}", reply.op())));
        };
        let ch = match half {
            Half::Ump { seg, bell, caps, max_message } => {
                let Some(peer_bell) = rfds.into_iter().next() else {
                    abandon_segment(&seg);
                    return Err(Error::protocol("bind reply carries no doorbell"));
                };
                let info = ChannelInfo {
                    id: chan,
                    service,
                    transport: "ump",
                    side: Side::Client,
                    peer_pid: server_pid,
                    peer_core: server_core,
                    max_message,
                    ring_slots: 0,
                };
                let ch = UmpChannel::new(RingPair::open(seg, info, bell, Doorbell::from_fd(peer_bell)?, PeerWatch::new(server_pid)?)?);
                caps.set_route(Route::Ump { chan, peer_side: Side::Server as u8 });
                ch.set_caps(caps);
                Channel::Ump(ch)
            }
            Half::Multihop { pending, caps } => {
                let info = ChannelInfo {
                    id: chan,
                    service,
                    transport: "multihop",
                    side: Side::Client,
                    peer_pid: server_pid,
                    peer_core: server_core,
                    max_message: 0,
                    ring_slots: 0,
                };
                let ch = pending.complete(info, vci, DIR_TO_SERVER, hops, Some(self.conn.clone()));
                caps.set_route(Route::Multihop { vci_out: vci });
                ch.set_caps(caps);
                Channel::Multihop(ch)
            }
        };
        ch.set_on_close(self.conn.close_hook());
        Ok(ch)
    }
}

impl Drop for PendingBind {
    fn drop(&mut self) {
        if self.half.is_none() {
            return; // finished
        }
        // Given up: a reply from now on finds no waiter (the reader thread
        // tears a late multi-hop circuit down).
        self.conn.request_forget(self.req);
        self.poll();
        if matches!(&self.got, Some(Ok((Msg::Bound { .. }, _)))) {
            drop(self.finish()); // made and closed at once: the service's end learns it
        } else if let Some(Half::Ump { seg, .. }) = &self.half {
            abandon_segment(seg);
        }
    }
}
