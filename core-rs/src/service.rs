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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::channel::{ChannelInfo, Side, UmpChannel};
use crate::control::{self, Msg};
use crate::dispatcher::{process_doorbell, Dispatcher, Inner};
use crate::endpoint::Endpoint;
use crate::error::{Error, ErrorKind, Result};
use crate::mhchannel::{PendingMh, MAX_WINDOW};
use crate::park::Doorbell;
use crate::peer::PeerWatch;
use crate::shm::{dup_cloexec, Segment};
use crate::sync::lock;
use crate::wire::DIR_TO_CLIENT;

/// Connections a service holds for `accept` unless told otherwise.
pub const DEFAULT_BACKLOG: usize = 16;
/// Largest backlog a service may ask for.
pub const MAX_BACKLOG: usize = 65_536;
/// Longest the acceptor sleeps without being poked (it then looks for
/// requests whose time ran out).
const ACCEPTOR_NAP: Duration = Duration::from_secs(1);

/// Decides whether to take a connection: `Ok(true)` takes it, `Ok(false)`
/// refuses it, `Err(reason)` refuses it saying why. Runs on the acceptor
/// thread.
pub type OnConnect = Box<dyn Fn(&PendingConnect) -> std::result::Result<bool, String> + Send + Sync>;

/// A connect request waiting for its service.
pub struct PendingConnect {
    conn: u64,
    pub iref: u64,
    pub service: String,
    pub chan: u64,
    pub transport: String,
    pub client_pid: u32,
    pub client_core: u32,
    vci: u64,
    window: u32,
    hops: u32,
    expires: Instant,
    fds: Vec<OwnedFd>,
}

impl PendingConnect {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        conn: u64,
        iref: u64,
        service: String,
        chan: u64,
        transport: String,
        client_pid: u32,
        client_core: u32,
        vci: u64,
        window: u32,
        hops: u32,
        timeout_ms: u64,
        fds: Vec<OwnedFd>,
    ) -> PendingConnect {
        // The request arrives after the client's monitor started waiting, so
        // it expires here after the monitor gave up there: the client sees
        // Timeout, and the refusal sent on expiry only cleans up. A channel
        // taken just before expiry but after the monitor gave up is torn
        // down (the monitor answers a late acceptance with a TEARDOWN; a UMP
        // client marks its segment abandoned).
        let expires = Instant::now() + Duration::from_millis(timeout_ms.min(24 * 3600 * 1000));
        PendingConnect { conn, iref, service, chan, transport, client_pid, client_core, vci, window, hops, expires, fds }
    }
}

struct State {
    backlog: usize,
    /// Requests not taken yet (no room, or the acceptor has not got to them).
    pending: VecDeque<PendingConnect>,
    /// Set-up channels waiting for `accept`.
    ready: VecDeque<Endpoint>,
    /// Requests the acceptor is setting up now (they count against the backlog).
    taking: usize,
    withdrawn: bool,
}

/// One service's queues, shared by its handle, the reader and the acceptor.
pub struct ServiceQueue {
    name: String,
    state: Mutex<State>,
    /// Rung when a channel lands in `ready` (or the service ends).
    ready_cv: Condvar,
    on_connect: Option<OnConnect>,
}

impl ServiceQueue {
    pub(crate) fn new(name: &str, _iref: u64, backlog: usize, on_connect: Option<OnConnect>) -> ServiceQueue {
        ServiceQueue {
            name: name.to_string(),
            state: Mutex::new(State { backlog, pending: VecDeque::new(), ready: VecDeque::new(), taking: 0, withdrawn: false }),
            ready_cv: Condvar::new(),
            on_connect,
        }
    }

    /// Queue a connect request; false if the service was withdrawn.
    pub(crate) fn offer(&self, p: PendingConnect) -> bool {
        let mut st = lock(&self.state);
        if st.withdrawn {
            return false;
        }
        st.pending.push_back(p);
        true
    }

    /// Drop request `conn` if it is still waiting (its bind gave up).
    pub(crate) fn cancel(&self, conn: u64) {
        lock(&self.state).pending.retain(|p| p.conn != conn);
    }

    pub(crate) fn wake_all(&self) {
        self.ready_cv.notify_all();
        ring_event_loop();
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
    fn taken(&self, ch: Option<Endpoint>) {
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

/// Wake an event loop of this process that waits on the doorbell for an
/// `accept` (`async_bell.rs`): costs a fence and a load when none does.
fn ring_event_loop() {
    if let Ok(bell) = crate::dispatcher::process_doorbell() {
        bell.ring();
    }
}

/// The thread that takes connect requests into their services' backlogs.
pub(crate) struct Acceptor {
    poked: Mutex<bool>,
    cv: Condvar,
    /// Set when the dispatcher is gone (Relaxed: the thread also re-checks
    /// its weak reference after every wake-up).
    stop: AtomicBool,
}

impl Acceptor {
    /// The acceptor of `d`, started on first use.
    pub(crate) fn of(d: &Dispatcher) -> Result<Arc<Acceptor>> {
        if let Some(a) = d.inner.acceptor.get() {
            return Ok(a.clone());
        }
        let a = Arc::new(Acceptor { poked: Mutex::new(false), cv: Condvar::new(), stop: AtomicBool::new(false) });
        if d.inner.acceptor.set(a.clone()).is_err() {
            return Ok(d.inner.acceptor.get().expect("set by another thread").clone());
        }
        let (me, weak) = (a.clone(), Arc::downgrade(&d.inner));
        std::thread::Builder::new()
            .name(format!("mh-acceptor-{}", d.core()))
            .spawn(move || me.run(weak))
            .map_err(|e| Error::os("spawn the dispatcher's acceptor thread", e))?;
        Ok(a)
    }

    pub(crate) fn poke(&self) {
        *lock(&self.poked) = true;
        self.cv.notify_one();
    }

    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.poke();
    }

    fn run(self: Arc<Self>, inner: Weak<Inner>) {
        while !self.stop.load(Ordering::Relaxed) {
            let Some(inner) = inner.upgrade() else { return };
            let disp = Dispatcher { inner };
            let wake_at = self.round(&disp);
            drop(disp); // hold no strong reference while asleep
            let mut poked = lock(&self.poked);
            if !*poked {
                let nap = wake_at.saturating_duration_since(Instant::now()).min(ACCEPTOR_NAP);
                poked = self.cv.wait_timeout(poked, nap).unwrap_or_else(|p| p.into_inner()).0;
            }
            *poked = false;
        }
    }

    /// Take every request there is room for; refuse the expired ones.
    /// Returns when the next request runs out of time.
    fn round(&self, disp: &Dispatcher) -> Instant {
        let mut wake_at = Instant::now() + ACCEPTOR_NAP;
        if disp.check_alive().is_err() {
            return wake_at;
        }
        let queues: Vec<_> = lock(&disp.inner.services).values().cloned().collect();
        for q in queues {
            loop {
                let mut expired = Vec::new();
                let next = q.next_to_take(Instant::now(), &mut expired);
                for p in expired {
                    expire(disp, &p);
                }
                let Some(p) = next else { break };
                q.taken(take(disp, &q, p));
            }
            if let Some(t) = q.next_expiry() {
                wake_at = wake_at.min(t);
            }
        }
        wake_at
    }
}

fn reply(disp: &Dispatcher, p: &PendingConnect, accept: bool, reason: &str, bell: Option<&OwnedFd>, vci: u64) {
    let msg = Msg::ConnectReply { conn: p.conn, accept, reason: reason.to_string(), vci, expired: false };
    let raw: Vec<_> = bell.iter().map(|f| f.as_raw_fd()).collect();
    let _ = control::send(&disp.inner.sock, &msg, &raw);
}

/// Refuse a request whose bind ran out of time while the backlog stayed full.
fn expire(disp: &Dispatcher, p: &PendingConnect) {
    let reason = "the client's bind timed out before the service could take it (its backlog stayed full)".to_string();
    let _ = control::send(&disp.inner.sock, &Msg::ConnectReply { conn: p.conn, accept: false, reason, vci: 0, expired: true }, &[]);
}

/// Ask the callback, then set the channel up and answer the client.
fn take(disp: &Dispatcher, q: &ServiceQueue, p: PendingConnect) -> Option<Endpoint> {
    let verdict = match &q.on_connect {
        None => Ok(true),
        Some(f) => catch_unwind(AssertUnwindSafe(|| f(&p))).unwrap_or_else(|_| Err("the service's on_connect callback panicked".into())),
    };
    match verdict {
        Ok(true) => {}
        Ok(false) => {
            reply(disp, &p, false, "refused by the service's on_connect callback", None, 0);
            return None;
        }
        Err(reason) => {
            reply(disp, &p, false, &reason, None, 0);
            return None;
        }
    }
    let ch = if p.transport == "multihop" { set_up_multihop(disp, &q.name, p) } else { set_up_ump(disp, &q.name, p).map(Endpoint::Ump) };
    let ch = ch.ok()?;
    disp.track_close(&ch);
    Some(ch)
}

fn set_up_multihop(disp: &Dispatcher, name: &str, p: PendingConnect) -> Result<Endpoint> {
    let link = match disp.link() {
        Ok(l) => l.clone(),
        Err(e) => {
            reply(disp, &p, false, &format!("the service cannot take multi-hop channels: {e}"), None, 0);
            return Err(e);
        }
    };
    let pending = match PendingMh::new(&link, p.window.clamp(1, MAX_WINDOW)) {
        Ok(m) => m,
        Err(e) => {
            reply(disp, &p, false, &format!("the service could not set the channel up: {e}"), None, 0);
            return Err(e);
        }
    };
    // The client may send handles as soon as it has our answer: the inbox first.
    let caps = crate::caps::CapEnd::reserve(disp, crate::caps::InboxKey::Multihop { vci_in: pending.vci_in });
    caps.set_route(crate::caps::end::Route::Multihop { vci_out: p.vci });
    reply(disp, &p, true, "", None, pending.vci_in);
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
    let ch = pending.complete(info, p.vci, DIR_TO_CLIENT, p.hops, Some(disp.inner.clone()));
    ch.set_caps(caps);
    Ok(Endpoint::Multihop(ch))
}

fn set_up_ump(disp: &Dispatcher, name: &str, mut p: PendingConnect) -> Result<UmpChannel> {
    let opened = (|| -> Result<(UmpChannel, OwnedFd)> {
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
        Ok((UmpChannel::open(seg, info, bell, peer_bell, PeerWatch::new(p.client_pid)?)?, fd))
    })();
    match opened {
        Ok((ch, fd)) => {
            // The client may send handles as soon as it has our answer: the inbox first.
            let caps = crate::caps::CapEnd::reserve(disp, crate::caps::InboxKey::Ump { chan: p.chan, side: Side::Server as u8 });
            caps.set_route(crate::caps::end::Route::Ump { chan: p.chan, peer_side: Side::Client as u8 });
            ch.set_caps(caps);
            reply(disp, &p, true, "", Some(&fd), 0);
            Ok(ch)
        }
        Err(e) => {
            reply(disp, &p, false, &format!("server could not open the channel: {e}"), None, 0);
            Err(Error::new(ErrorKind::Bind, format!("connect from pid {} refused: {e}", p.client_pid)))
        }
    }
}

/// An exported service: `accept` takes channels from its backlog.
pub struct Service {
    disp: Dispatcher,
    pub name: String,
    pub iref: u64,
    queue: Arc<ServiceQueue>,
    acceptor: Arc<Acceptor>,
}

impl Service {
    pub(crate) fn new(disp: Dispatcher, name: String, iref: u64, queue: Arc<ServiceQueue>, acceptor: Arc<Acceptor>) -> Service {
        acceptor.poke(); // requests may have come in before the queue was registered
        Service { disp, name, iref, queue, acceptor }
    }

    /// Wait up to `slice` for a channel in the backlog; `None` if none came
    /// in time, or if the wait was woken with nothing to take: a connection
    /// refused by the service's `on_connect` (whose error the caller may have
    /// to raise), or rarely a spurious wake-up. Callers loop.
    pub fn accept_next(&self, slice: Duration) -> Result<Option<Endpoint>> {
        let deadline = Instant::now() + slice;
        let mut st = lock(&self.queue.state);
        let mut woken = false;
        loop {
            if let Some(ch) = st.ready.pop_front() {
                drop(st);
                self.acceptor.poke(); // room in the backlog again
                return Ok(Some(ch));
            }
            self.disp.check_alive()?;
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
    pub fn try_accept(&self) -> Result<Option<Endpoint>> {
        let got = lock(&self.queue.state).ready.pop_front();
        match got {
            Some(ch) => {
                self.acceptor.poke(); // room in the backlog again
                Ok(Some(ch))
            }
            None => self.disp.check_alive().map(|()| None),
        }
    }

    /// Whether `try_accept` would return something now (a channel, or the
    /// error of a dispatcher whose monitor is gone).
    pub fn acceptable(&self) -> bool {
        !lock(&self.queue.state).ready.is_empty() || self.disp.check_alive().is_err()
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

    pub fn dispatcher(&self) -> &Dispatcher {
        &self.disp
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let (pending, ready) = {
            let mut st = lock(&self.queue.state);
            st.withdrawn = true;
            (std::mem::take(&mut st.pending), std::mem::take(&mut st.ready))
        };
        lock(&self.disp.inner.services).remove(&self.iref);
        for p in &pending {
            reply(&self.disp, p, false, "the service was withdrawn", None, 0);
        }
        drop(ready); // closes them: their clients get ChannelClosed
        self.disp.withdraw(self.iref);
        self.queue.wake_all();
    }
}
