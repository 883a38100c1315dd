//! A service: an exported name, its backlog, and the acceptor that fills it.
//!
//! A bind completes once the connection is in the service's backlog, as a
//! TCP connect completes once the connection is queued for `accept`: the
//! caller can bind and then accept in one thread.  Each dispatcher has one
//! acceptor thread.  When a connect request arrives (the reader thread
//! queues it on its service), the acceptor asks the service's `on_connect`
//! callback, if it has one, and on a yes sets the channel up (maps the UMP
//! segment, or registers the multi-hop VCI) and answers the client's monitor
//! at once; the channel waits in the backlog until `accept` takes it.  At
//! most `backlog` channels wait; further requests wait for room until their
//! bind's timeout, then are refused (the client gets Timeout).  Messages the
//! client sends meanwhile wait in the channel, nothing is lost.
//!
//! Dropping the service handle withdraws the name: waiting requests are
//! refused, channels still in the backlog are closed (their clients get
//! ChannelClosed), and the monitor frees the name.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use multihop_base::control::Msg;
use multihop_base::defaults::MAX_WINDOW;
use multihop_base::error::{Error, ErrorKind, Result};
use multihop_base::park::{process_doorbell, ring_event_loop, Doorbell};
use multihop_base::peer::PeerWatch;
use multihop_base::ringpair::{ChannelInfo, RingPair, Side};
use multihop_base::shm::{dup_cloexec, Segment};
use multihop_base::sync::lock;
use multihop_base::wire::DIR_TO_CLIENT;

use crate::backlog::AcceptorWake;
pub use crate::backlog::PendingConnect;
use crate::channel::Channel;
use crate::conn::{Backlog, MonitorConn};
use crate::handles::end::{CapEnd, Route};
use crate::handles::inbox::InboxKey;
use crate::multihop::channel::PendingMh;
use crate::ump::UmpChannel;

/// Decides whether to take a connection: `Ok(true)` takes it, `Ok(false)`
/// refuses it, `Err(reason)` refuses it saying why. Runs on the acceptor
/// thread.
pub type OnConnect = Box<dyn Fn(&PendingConnect) -> std::result::Result<bool, String> + Send + Sync>;

struct State {
    backlog: usize,
    /// Requests not taken yet (no room, or the acceptor has not got to them).
    pending: VecDeque<PendingConnect>,
    /// Set-up channels waiting for `accept`.
    ready: VecDeque<Channel>,
    /// Requests the acceptor is setting up now (they count against the backlog).
    taking: usize,
    withdrawn: bool,
}

/// One service's queues, shared by its handle, the reader and the acceptor.
pub(crate) struct ServiceQueue {
    name: String,
    state: Mutex<State>,
    /// Rung when a channel lands in `ready` (or the service ends).
    ready_cv: Condvar,
    on_connect: Option<OnConnect>,
}

impl ServiceQueue {
    pub(crate) fn new(name: &str, backlog: usize, on_connect: Option<OnConnect>) -> ServiceQueue {
        ServiceQueue {
            name: name.to_string(),
            state: Mutex::new(State { backlog, pending: VecDeque::new(), ready: VecDeque::new(), taking: 0, withdrawn: false }),
            ready_cv: Condvar::new(),
            on_connect,
        }
    }

    /// The next request the acceptor may take now (there is room in the
    /// backlog); requests whose bind has timed out go to `expired`.
    fn next_to_take(&self, now: Instant, expired: &mut Vec<PendingConnect>) -> Option<PendingConnect> {
        let mut st = lock(&self.state);
        let (keep, gone): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut st.pending).into_iter().partition(|p| p.expires > now);
        st.pending = keep;
        expired.extend(gone);
        if st.withdrawn || st.ready.len() + st.taking >= st.backlog {
            return None;
        }
        let p = st.pending.pop_front()?;
        st.taking += 1;
        Some(p)
    }

    /// When the earliest waiting request runs out of time.
    fn next_expiry(&self) -> Option<Instant> {
        lock(&self.state).pending.iter().map(|p| p.expires).min()
    }

    /// A request taken by the acceptor is done with (`ch`: the channel set up).
    fn taken(&self, ch: Option<Channel>) {
        let mut st = lock(&self.state);
        st.taking -= 1;
        if let Some(ch) = ch {
            if st.withdrawn {
                drop(st);
                drop(ch); // closes it: the client learns the service is gone
                return;
            }
            st.ready.push_back(ch);
        }
        drop(st);
        self.ready_cv.notify_one();
        ring_event_loop();
    }
}

impl Backlog for ServiceQueue {
    fn offer(&self, p: PendingConnect) -> bool {
        let mut st = lock(&self.state);
        if st.withdrawn {
            return false;
        }
        st.pending.push_back(p);
        true
    }

    fn cancel(&self, conn: u64) {
        lock(&self.state).pending.retain(|p| p.conn != conn);
    }

    fn wake_all(&self) {
        self.ready_cv.notify_all();
        ring_event_loop();
    }

    fn serve(&self, conn: &Arc<MonitorConn>) -> Option<Instant> {
        loop {
            let mut expired = Vec::new();
            let next = self.next_to_take(Instant::now(), &mut expired);
            for p in expired {
                expire(conn, &p);
            }
            let Some(p) = next else { break };
            self.taken(take(conn, self, p));
        }
        self.next_expiry()
    }
}

fn reply(conn: &MonitorConn, p: &PendingConnect, accept: bool, reason: &str, bell: Option<&OwnedFd>, vci: u64) {
    let msg = Msg::ConnectReply { conn: p.conn, accept, reason: reason.to_string(), vci, expired: false };
    let raw: Vec<_> = bell.iter().map(|f| f.as_raw_fd()).collect();
    conn.tell(&msg, &raw);
}

/// Refuse a request whose bind ran out of time while the backlog stayed full.
fn expire(conn: &MonitorConn, p: &PendingConnect) {
    let reason = "the client's bind timed out before the service could take it (its backlog stayed full)".to_string();
    conn.tell(&Msg::ConnectReply { conn: p.conn, accept: false, reason, vci: 0, expired: true }, &[]);
}

/// Ask the callback, then set the channel up and answer the client.
fn take(conn: &Arc<MonitorConn>, q: &ServiceQueue, p: PendingConnect) -> Option<Channel> {
    let verdict = match &q.on_connect {
        None => Ok(true),
        Some(f) => catch_unwind(AssertUnwindSafe(|| f(&p))).unwrap_or_else(|_| Err("the service's on_connect callback panicked".into())),
    };
    match verdict {
        Ok(true) => {}
        Ok(false) => {
            reply(conn, &p, false, "refused by the service's on_connect callback", None, 0);
            return None;
        }
        Err(reason) => {
            reply(conn, &p, false, &reason, None, 0);
            return None;
        }
    }
    let ch = if p.transport == "multihop" { set_up_multihop(conn, &q.name, p) } else { set_up_ump(conn, &q.name, p).map(Channel::Ump) };
    let ch = ch.ok()?;
    ch.set_on_close(conn.close_hook());
    Some(ch)
}

fn set_up_multihop(conn: &Arc<MonitorConn>, name: &str, p: PendingConnect) -> Result<Channel> {
    let link = match conn.link() {
        Ok(l) => l.clone(),
        Err(e) => {
            reply(conn, &p, false, &format!("the service cannot take multi-hop channels: {e}"), None, 0);
            return Err(e);
        }
    };
    let pending = match PendingMh::new(&link, p.window.clamp(1, MAX_WINDOW)) {
        Ok(m) => m,
        Err(e) => {
            reply(conn, &p, false, &format!("the service could not set the channel up: {e}"), None, 0);
            return Err(e);
        }
    };
    // The client may send handles as soon as it has our answer: the inbox first.
    let caps = CapEnd::reserve(conn, InboxKey::Multihop { vci_in: pending.vci_in });
    caps.set_route(Route::Multihop { vci_out: p.vci });
    reply(conn, &p, true, "", None, pending.vci_in);
    let info = ChannelInfo {
        id: p.chan,
        service: name.to_string(),
        transport: "multihop",
        side: Side::Server,
        peer_pid: p.client_pid,
        peer_core: p.client_core,
        max_message: 0,
        ring_slots: 0,
    };
    let ch = pending.complete(info, p.vci, DIR_TO_CLIENT, p.hops, Some(conn.clone()));
    ch.set_caps(caps);
    Ok(Channel::Multihop(ch))
}

fn set_up_ump(conn: &Arc<MonitorConn>, name: &str, mut p: PendingConnect) -> Result<UmpChannel> {
    let opened = (|| -> Result<(RingPair, OwnedFd)> {
        if p.fds.len() != 2 {
            return Err(Error::protocol(format!("connect request carries {} descriptors, expected 2", p.fds.len())));
        }
        let peer_bell = Doorbell::from_fd(p.fds.pop().expect("two descriptors"))?;
        let seg = Segment::from_fd(p.fds.pop().expect("two descriptors"), 0)?;
        let info = ChannelInfo {
            id: p.chan,
            service: name.to_string(),
            transport: "ump",
            side: Side::Server,
            peer_pid: p.client_pid,
            peer_core: p.client_core,
            max_message: 0,
            ring_slots: 0,
        };
        let bell = process_doorbell()?;
        let fd = dup_cloexec(bell.segment().raw_fd())?;
        Ok((RingPair::open(seg, info, bell, peer_bell, PeerWatch::new(p.client_pid)?)?, fd))
    })();
    match opened {
        Ok((end, fd)) => {
            let ch = UmpChannel::new(end);
            // The client may send handles as soon as it has our answer: the inbox first.
            let caps = CapEnd::reserve(conn, InboxKey::Ump { chan: p.chan, side: Side::Server as u8 });
            caps.set_route(Route::Ump { chan: p.chan, peer_side: Side::Client as u8 });
            ch.set_caps(caps);
            reply(conn, &p, true, "", Some(&fd), 0);
            Ok(ch)
        }
        Err(e) => {
            reply(conn, &p, false, &format!("server could not open the channel: {e}"), None, 0);
            Err(Error::new(ErrorKind::Bind, format!("connect from pid {} refused: {e}", p.client_pid)))
        }
    }
}

/// An exported service: `accept` takes channels from its backlog.
pub struct Service {
    conn: Arc<MonitorConn>,
    pub name: String,
    pub iref: u64,
    queue: Arc<ServiceQueue>,
    acceptor: Arc<AcceptorWake>,
    /// Its export to the runtime's fabric, if any: dropped (the export withdrawn) with the service.
    fabric: Mutex<Option<crate::fabric_export::FabricExport>>,
}

impl Service {
    pub(crate) fn new(conn: Arc<MonitorConn>, name: String, iref: u64, queue: Arc<ServiceQueue>, acceptor: Arc<AcceptorWake>) -> Service {
        acceptor.poke(); // requests may have come in before the queue was registered
        Service { conn, name, iref, queue, acceptor, fabric: Mutex::new(None) }
    }

    /// Export this service to the runtime's fabric as well (`export(name, fabric=True)`): the runtime's bridge
    /// then answers binds of `name@RUNTIME` from other runtimes of the fabric. Withdrawn with the service.
    pub fn export_to_fabric(&self, timeout: Duration) -> Result<()> {
        let mut slot = lock(&self.fabric);
        if slot.is_none() {
            *slot = Some(crate::fabric_export::export_to_fabric(self.conn.runtime_dir(), &self.name, timeout)?);
        }
        Ok(())
    }

    /// Whether this service is exported to the runtime's fabric.
    pub fn on_fabric(&self) -> bool {
        lock(&self.fabric).is_some()
    }

    /// Wait up to `slice` for a channel in the backlog; `None` if none came
    /// in time, or if the wait was woken with nothing to take: a connection
    /// refused by the service's `on_connect` (whose error the caller may have
    /// to raise), or rarely a spurious wake-up. Callers loop.
    pub fn accept_next(&self, slice: Duration) -> Result<Option<Channel>> {
        let deadline = Instant::now() + slice;
        let mut st = lock(&self.queue.state);
        let mut woken = false;
        loop {
            if let Some(ch) = st.ready.pop_front() {
                drop(st);
                self.acceptor.poke(); // room in the backlog again
                return Ok(Some(ch));
            }
            self.conn.check_alive()?;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || woken {
                return Ok(None);
            }
            let (guard, waited) = self.queue.ready_cv.wait_timeout(st, left).unwrap_or_else(|p| p.into_inner());
            st = guard;
            woken = !waited.timed_out();
        }
    }

    /// Take a channel from the backlog if one is there, without waiting.
    /// Errors when the dispatcher's monitor is gone.
    pub fn try_accept(&self) -> Result<Option<Channel>> {
        let got = lock(&self.queue.state).ready.pop_front();
        match got {
            Some(ch) => {
                self.acceptor.poke(); // room in the backlog again
                Ok(Some(ch))
            }
            None => self.conn.check_alive().map(|()| None),
        }
    }

    /// Whether `try_accept` would return something now (a channel, or the
    /// error of a dispatcher whose monitor is gone).
    pub fn acceptable(&self) -> bool {
        !lock(&self.queue.state).ready.is_empty() || self.conn.check_alive().is_err()
    }

    /// The most channels that wait for `accept`.
    pub fn backlog(&self) -> usize {
        lock(&self.queue.state).backlog
    }

    /// Channels set up and waiting for `accept` now.
    pub fn queued(&self) -> usize {
        lock(&self.queue.state).ready.len()
    }

    /// Connect requests waiting for room in the backlog now.
    pub fn waiting(&self) -> usize {
        let st = lock(&self.queue.state);
        st.pending.len() + st.taking
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let (pending, ready) = {
            let mut st = lock(&self.queue.state);
            st.withdrawn = true;
            (std::mem::take(&mut st.pending), std::mem::take(&mut st.ready))
        };
        self.conn.remove_service(self.iref);
        for p in &pending {
            reply(&self.conn, p, false, "the service was withdrawn", None, 0);
        }
        drop(ready); // closes them: their clients get ChannelClosed
        self.conn.withdraw(self.iref);
        self.queue.wake_all();
    }
}
