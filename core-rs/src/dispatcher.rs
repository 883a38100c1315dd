//! The dispatcher side of the control plane: a process attached to one
//! core's monitor, exporting services and binding channels.
//!
//! The connection to the monitor stays open for the dispatcher's life (so
//! each side sees the other's death as EOF).  A reader thread owns the
//! receiving half: replies go to the thread that made the request (matched
//! by request id), `Connect` requests go to their service's queue, where
//! `accept` picks them up.  Every blocking call here waits in slices and
//! calls the caller's `interrupt` hook between slices, which is how the
//! Python layer stays responsive to Ctrl-C.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::channel::{create_segment, ChannelInfo, Side, UmpChannel, DEFAULT_MAX_MESSAGE};
use crate::endpoint::Endpoint;
use crate::mhchannel::{DispatcherLink, PendingMh, LINK_MAX_MESSAGE, MAX_WINDOW};
use crate::wire::{DIR_TO_CLIENT, DIR_TO_SERVER};
use crate::control::{self, monitor_socket, random_u64, Msg, Role};
use crate::error::{Error, ErrorKind, Result};
use crate::park::Doorbell;
use crate::peer::PeerWatch;
use crate::shm::{dup_cloexec, Segment};
use crate::sock::SeqSocket;

/// How long one wait slice lasts before the interrupt hook runs.
const SLICE: Duration = Duration::from_millis(50);

type Reply = (Msg, Vec<OwnedFd>);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// This process's doorbell: every ring this process reads rings it.
/// Re-created after a fork (the child must not share its parent's).
pub fn process_doorbell() -> Result<Arc<Doorbell>> {
    static BELL: OnceLock<Mutex<Option<(u32, Arc<Doorbell>)>>> = OnceLock::new();
    let mut slot = lock(BELL.get_or_init(|| Mutex::new(None)));
    let pid = std::process::id();
    if let Some((p, d)) = slot.as_ref() {
        if *p == pid {
            return Ok(d.clone());
        }
    }
    let d = Arc::new(Doorbell::create()?);
    *slot = Some((pid, d.clone()));
    Ok(d)
}

/// A connect request waiting for `accept`.
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

struct ServiceQueue {
    queue: Mutex<VecDeque<PendingConnect>>,
    ready: Condvar,
}

struct Inner {
    sock: SeqSocket,
    dir: PathBuf,
    core: u32,
    monitor_pid: u32,
    next_req: AtomicU64,
    waiters: Mutex<HashMap<u64, mpsc::Sender<Reply>>>,
    services: Mutex<HashMap<u64, Arc<ServiceQueue>>>,
    /// Cleared by the reader thread when the monitor connection ends.
    alive: AtomicBool,
    detached: AtomicBool,
    /// The ring pair with the monitor that multi-hop channels share.
    link: OnceLock<Arc<DispatcherLink>>,
}

/// A process attached to a core's monitor.
#[derive(Clone)]
pub struct Dispatcher {
    inner: Arc<Inner>,
}

/// An exported service.
pub struct Service {
    disp: Dispatcher,
    pub name: String,
    pub iref: u64,
    queue: Arc<ServiceQueue>,
}

impl Dispatcher {
    /// Attach to the monitor of `core` in the runtime at `dir`.
    pub fn attach(dir: &Path, core: u32) -> Result<Dispatcher> {
        let path = monitor_socket(dir, core);
        match std::fs::metadata(&path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(Error::new(
                    ErrorKind::Monitor,
                    format!("permission denied: the runtime at {} belongs to another user", dir.display()),
                ));
            }
            Err(_) => {
                return Err(Error::new(
                    ErrorKind::RuntimeNotFound,
                    format!("no monitor for core {core} in {} (is the core part of the runtime?)", dir.display()),
                ));
            }
        }
        let (sock, monitor_pid) = control::connect(&path, Role::Dispatcher, core)?;
        sock.set_recv_timeout(None);
        let inner = Arc::new(Inner {
            sock,
            dir: dir.to_path_buf(),
            core,
            monitor_pid,
            next_req: AtomicU64::new(1),
            waiters: Mutex::new(HashMap::new()),
            services: Mutex::new(HashMap::new()),
            alive: AtomicBool::new(true),
            detached: AtomicBool::new(false),
            link: OnceLock::new(),
        });
        let reader = Arc::downgrade(&inner);
        let reader_sock = inner.sock.try_clone().map_err(|e| Error::os("dup control socket", e))?;
        std::thread::Builder::new()
            .name(format!("mh-dispatcher-{core}"))
            .spawn(move || read_loop(reader, reader_sock))
            .map_err(|e| Error::os("spawn dispatcher reader thread", e))?;
        let d = Dispatcher { inner };
        d.open_link()?;
        Ok(d)
    }

    /// Open the ring pair with the monitor (multi-hop channels ride on it).
    fn open_link(&self) -> Result<()> {
        let seg = create_segment(LINK_MAX_MESSAGE)?;
        let bell = process_doorbell()?;
        let fds = [dup_cloexec(seg.raw_fd())?, dup_cloexec(bell.segment().raw_fd())?];
        let deadline = Instant::now() + Duration::from_secs(10);
        let (reply, rfds) = self.request(|req| Msg::DispatcherLink { req }, &fds, deadline, &mut || Ok(()))?;
        let (Msg::Done { .. }, Some(peer_bell)) = (reply, rfds.into_iter().next()) else {
            return Err(Error::protocol("monitor answered the link request without its doorbell"));
        };
        let info = ChannelInfo {
            id: 0,
            service: format!("link to monitor {}", self.inner.core),
            transport: "link",
            side: Side::Client,
            peer_pid: self.inner.monitor_pid,
            peer_core: self.inner.core,
            max_message: LINK_MAX_MESSAGE,
            ring_slots: 0,
        };
        let ch = UmpChannel::open(seg, info, bell, Doorbell::from_fd(peer_bell)?, PeerWatch::new(self.inner.monitor_pid)?)?;
        let _ = self.inner.link.set(Arc::new(DispatcherLink::new(ch)));
        Ok(())
    }

    fn link(&self) -> Result<&Arc<DispatcherLink>> {
        self.inner.link.get().ok_or_else(|| Error::new(ErrorKind::Monitor, "this dispatcher has no link to its monitor"))
    }

    /// Messages that arrived on the link for no channel of ours.
    pub fn link_dropped(&self) -> u64 {
        self.inner.link.get().map_or(0, |l| l.dropped.load(Ordering::Relaxed))
    }

    /// Test hook: put a raw multi-hop frame on our link to the monitor, as a
    /// forger would (the monitor must drop unknown VCIs and survive).
    pub fn inject_raw(&self, frame: &[u8]) -> Result<()> {
        self.link()?.ring().send_blocking(&[frame], Some(Duration::from_secs(1)))
    }

    pub fn core(&self) -> u32 {
        self.inner.core
    }

    pub fn monitor_pid(&self) -> u32 {
        self.inner.monitor_pid
    }

    pub fn runtime_dir(&self) -> &Path {
        &self.inner.dir
    }

    fn check_alive(&self) -> Result<()> {
        if self.inner.detached.load(Ordering::Relaxed) {
            return Err(Error::new(ErrorKind::Monitor, "this dispatcher has been detached"));
        }
        if !self.inner.alive.load(Ordering::Relaxed) {
            return Err(Error::new(ErrorKind::Monitor, format!("the monitor of core {} is gone", self.inner.core)));
        }
        Ok(())
    }

    /// Send a request and wait for its reply.
    fn request(
        &self,
        make: impl FnOnce(u64) -> Msg,
        fds: &[OwnedFd],
        deadline: Instant,
        interrupt: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Reply> {
        self.check_alive()?;
        let req = self.inner.next_req.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        lock(&self.inner.waiters).insert(req, tx);
        let raw: Vec<_> = fds.iter().map(|f| f.as_raw_fd()).collect();
        if let Err(e) = control::send(&self.inner.sock, &make(req), &raw) {
            lock(&self.inner.waiters).remove(&req);
            return Err(e);
        }
        let result = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left.min(SLICE)) {
                Ok((msg, fds)) => break msg.into_result().map(|m| (m, fds)),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    break Err(Error::new(ErrorKind::Monitor, format!("the monitor of core {} went away", self.inner.core)))
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if left.is_zero() {
                        break Err(Error::timeout("the monitor did not answer in time"));
                    }
                    if let Err(e) = interrupt() {
                        break Err(e);
                    }
                }
            }
        };
        lock(&self.inner.waiters).remove(&req);
        result
    }

    /// Export `name`; the registry gives it an iref.
    pub fn export(&self, name: &str) -> Result<Service> {
        let deadline = Instant::now() + Duration::from_secs(10);
        // Register the queue before the name becomes visible, so no connect is lost.
        let queue = Arc::new(ServiceQueue { queue: Mutex::new(VecDeque::new()), ready: Condvar::new() });
        let (reply, _) = self.request(|req| Msg::Export { req, name: name.to_string() }, &[], deadline, &mut || Ok(()))?;
        match reply {
            Msg::Exported { iref, .. } => {
                lock(&self.inner.services).insert(iref, queue.clone());
                Ok(Service { disp: self.clone(), name: name.to_string(), iref, queue })
            }
            other => Err(Error::protocol(format!("monitor answered export with {other:?}"))),
        }
    }

    /// Bind to a service by name (or by iref when `name` is empty) over
    /// `transport` ("ump" or "multihop"; `window` applies to multi-hop).
    #[allow(clippy::too_many_arguments)]
    pub fn bind(
        &self,
        name: &str,
        iref: u64,
        transport: &str,
        max_message: Option<usize>,
        window: u32,
        timeout: Duration,
        interrupt: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Endpoint> {
        let ch = match transport {
            "ump" => Endpoint::Ump(self.bind_ump(name, iref, max_message, timeout, interrupt)?),
            "multihop" => Endpoint::Multihop(self.bind_multihop(name, iref, max_message, window, timeout, interrupt)?),
            other => {
                return Err(Error::invalid(format!("unknown transport {other:?}: expected \"ump\" or \"multihop\"")))
            }
        };
        self.track_close(&ch);
        Ok(ch)
    }

    fn bind_ump(
        &self,
        name: &str,
        iref: u64,
        max_message: Option<usize>,
        timeout: Duration,
        interrupt: &mut dyn FnMut() -> Result<()>,
    ) -> Result<UmpChannel> {
        let max_message = max_message.unwrap_or(DEFAULT_MAX_MESSAGE);
        let seg = create_segment(max_message)?;
        let bell = process_doorbell()?;
        let chan = random_u64();
        let fds = [dup_cloexec(seg.raw_fd())?, dup_cloexec(bell.segment().raw_fd())?];
        let timeout_ms = timeout.as_millis().max(1) as u64;
        let (reply, rfds) = self.request(
            |req| Msg::Bind {
                req,
                name: name.to_string(),
                iref,
                transport: "ump".into(),
                chan,
                timeout_ms,
                client_pid: std::process::id(),
                client_core: self.inner.core,
                window: 0,
                vci: 0,
            },
            &fds,
            Instant::now() + timeout + Duration::from_secs(3),
            interrupt,
        )?;
        let Msg::Bound { chan, service, server_pid, server_core, .. } = reply else {
            return Err(Error::protocol(format!("monitor answered bind with {reply:?}")));
        };
        let Some(peer_bell) = rfds.into_iter().next() else {
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
        UmpChannel::open(seg, info, bell, Doorbell::from_fd(peer_bell)?, PeerWatch::new(server_pid)?)
    }

    #[allow(clippy::too_many_arguments)]
    fn bind_multihop(
        &self,
        name: &str,
        iref: u64,
        max_message: Option<usize>,
        window: u32,
        timeout: Duration,
        interrupt: &mut dyn FnMut() -> Result<()>,
    ) -> Result<crate::mhchannel::MhChannel> {
        let link = self.link()?.clone();
        if let Some(m) = max_message {
            if m > link.max_payload() {
                return Err(Error::invalid(format!("multi-hop channels carry at most {} bytes per message, asked for {m}", link.max_payload())));
            }
        }
        if window == 0 || window > MAX_WINDOW {
            return Err(Error::invalid(format!("window must be in 1..={MAX_WINDOW}, got {window}")));
        }
        let pending = PendingMh::new(&link, window);
        let chan = random_u64();
        let timeout_ms = timeout.as_millis().max(1) as u64;
        let (reply, _) = self.request(
            |req| Msg::Bind {
                req,
                name: name.to_string(),
                iref,
                transport: "multihop".into(),
                chan,
                timeout_ms,
                client_pid: std::process::id(),
                client_core: self.inner.core,
                window,
                vci: pending.vci_in,
            },
            &[],
            Instant::now() + timeout + Duration::from_secs(3),
            interrupt,
        )?;
        let Msg::Bound { chan, service, server_pid, server_core, vci, hops, .. } = reply else {
            return Err(Error::protocol(format!("monitor answered bind with {reply:?}")));
        };
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
        Ok(pending.complete(info, vci, DIR_TO_SERVER, hops))
    }

    fn track_close(&self, ch: &Endpoint) {
        let weak = Arc::downgrade(&self.inner);
        ch.set_on_close(Box::new(move |chan, teardown| {
            if let Some(inner) = weak.upgrade() {
                let _ = control::send(&inner.sock, &Msg::Closed { chan, teardown: teardown.unwrap_or(0) }, &[]);
            }
        }));
    }

    /// Status of this dispatcher's monitor.
    pub fn monitor_status(&self) -> Result<serde_json::Value> {
        let (reply, _) = self.request(|req| Msg::Status { req }, &[], Instant::now() + Duration::from_secs(10), &mut || Ok(()))?;
        match reply {
            Msg::StatusReply { status, .. } => Ok(status),
            other => Err(Error::protocol(format!("monitor answered status with {other:?}"))),
        }
    }

    /// Detach from the monitor: services vanish, channels stay usable.
    pub fn detach(&self) {
        if !self.inner.detached.swap(true, Ordering::Relaxed) {
            self.inner.sock.shutdown();
        }
    }

    pub fn is_attached(&self) -> bool {
        !self.inner.detached.load(Ordering::Relaxed) && self.inner.alive.load(Ordering::Relaxed)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Ends the reader thread and tells the monitor we are gone.
        self.sock.shutdown();
    }
}


/// The reader thread: holds only a weak reference while blocked in `recv`,
/// so dropping the last `Dispatcher` (which shuts the socket down) ends it.
fn read_loop(inner: std::sync::Weak<Inner>, sock: SeqSocket) {
    loop {
        let got = control::recv(&sock);
        let Some(me) = inner.upgrade() else { return };
        match got {
            Ok(Some((msg, fds))) => dispatch(&me, msg, fds),
            Err(e) if e.kind == ErrorKind::Protocol => continue,
            Ok(None) | Err(_) => {
                end(&me);
                return;
            }
        }
    }
}

fn end(inner: &Inner) {
    inner.alive.store(false, Ordering::Relaxed);
    lock(&inner.waiters).clear(); // dropping the senders wakes every requester
    for q in lock(&inner.services).values() {
        q.ready.notify_all();
    }
}

fn dispatch(inner: &Inner, msg: Msg, fds: Vec<OwnedFd>) {
    let req = match &msg {
        Msg::Exported { req, .. }
        | Msg::Bound { req, .. }
        | Msg::Fail { req, .. }
        | Msg::StatusReply { req, .. }
        | Msg::Done { req } => Some(*req),
        _ => None,
    };
    if let Some(req) = req {
        if let Some(tx) = lock(&inner.waiters).remove(&req) {
            let _ = tx.send((msg, fds));
        }
        return;
    }
    if let Msg::Connect { conn, iref, service, chan, transport, client_pid, client_core, timeout_ms, vci, window, hops } = msg {
        let pending = PendingConnect {
            conn,
            iref,
            service,
            chan,
            transport,
            client_pid,
            client_core,
            vci,
            window,
            hops,
            expires: Instant::now() + Duration::from_millis(timeout_ms),
            fds,
        };
        let queue = lock(&inner.services).get(&iref).cloned();
        match queue {
            Some(q) => {
                lock(&q.queue).push_back(pending);
                q.ready.notify_one();
            }
            None => {
                let reply = Msg::ConnectReply { conn, accept: false, reason: "service no longer exported".into(), vci: 0 };
                let _ = control::send(&inner.sock, &reply, &[]);
            }
        }
    }
}

impl Service {
    /// Wait up to one slice for a connect request; `None` if none came.
    /// Expired requests (their client gave up) are refused and skipped.
    pub fn next_request(&self, slice: Duration) -> Result<Option<PendingConnect>> {
        self.disp.check_alive()?;
        let mut q = lock(&self.queue.queue);
        let deadline = Instant::now() + slice;
        loop {
            while let Some(p) = q.pop_front() {
                if Instant::now() < p.expires {
                    return Ok(Some(p));
                }
                self.reply(&p, false, "the client's bind timed out before accept", None);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            q = self.queue.ready.wait_timeout(q, left).unwrap_or_else(|p| p.into_inner()).0;
            self.disp.check_alive()?;
        }
    }

    fn reply(&self, p: &PendingConnect, accept: bool, reason: &str, bell: Option<&OwnedFd>) {
        self.reply_vci(p, accept, reason, bell, 0)
    }

    fn reply_vci(&self, p: &PendingConnect, accept: bool, reason: &str, bell: Option<&OwnedFd>, vci: u64) {
        let msg = Msg::ConnectReply { conn: p.conn, accept, reason: reason.to_string(), vci };
        let raw: Vec<_> = bell.iter().map(|f| f.as_raw_fd()).collect();
        let _ = control::send(&self.disp.inner.sock, &msg, &raw);
    }

    /// Refuse a request (the connect callback said no).
    pub fn refuse(&self, p: PendingConnect, reason: &str) {
        self.reply(&p, false, reason, None);
    }

    /// Accept a request: for UMP, map the client's segment and answer with
    /// our doorbell; for multi-hop, register a VCI on our link and answer
    /// with it.
    pub fn accept(&self, p: PendingConnect) -> Result<Endpoint> {
        let ch = if p.transport == "multihop" { self.accept_multihop(p)? } else { Endpoint::Ump(self.accept_ump(p)?) };
        self.disp.track_close(&ch);
        Ok(ch)
    }

    fn accept_multihop(&self, p: PendingConnect) -> Result<Endpoint> {
        let link = self.disp.link()?.clone();
        let pending = PendingMh::new(&link, p.window.clamp(1, MAX_WINDOW));
        self.reply_vci(&p, true, "", None, pending.vci_in);
        let info = ChannelInfo {
            id: p.chan,
            service: self.name.clone(),
            transport: "multihop",
            side: Side::Server,
            peer_pid: p.client_pid,
            peer_core: p.client_core,
            max_message: 0,
            ring_slots: 0,
        };
        Ok(Endpoint::Multihop(pending.complete(info, p.vci, DIR_TO_CLIENT, p.hops)))
    }

    fn accept_ump(&self, mut p: PendingConnect) -> Result<UmpChannel> {
        let result = (|| -> Result<UmpChannel> {
            if p.fds.len() != 2 {
                return Err(Error::protocol(format!("connect request carries {} descriptors, expected 2", p.fds.len())));
            }
            let peer_bell = Doorbell::from_fd(p.fds.pop().unwrap())?;
            let seg = Segment::from_fd(p.fds.pop().unwrap(), 0)?;
            let info = ChannelInfo {
                id: p.chan,
                service: self.name.clone(),
                transport: "ump",
                side: Side::Server,
                peer_pid: p.client_pid,
                peer_core: p.client_core,
                max_message: 0,
                ring_slots: 0,
            };
            UmpChannel::open(seg, info, process_doorbell()?, peer_bell, PeerWatch::new(p.client_pid)?)
        })();
        match result {
            Ok(ch) => {
                let bell = process_doorbell()?;
                let fd = dup_cloexec(bell.segment().raw_fd())?;
                self.reply(&p, true, "", Some(&fd));
                Ok(ch)
            }
            Err(e) => {
                self.reply(&p, false, &format!("server could not open the channel: {e}"), None);
                Err(Error::new(ErrorKind::Bind, format!("connect from pid {} refused: {e}", p.client_pid)))
            }
        }
    }

    pub fn dispatcher(&self) -> &Dispatcher {
        &self.disp
    }
}
