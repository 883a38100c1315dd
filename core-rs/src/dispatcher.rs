//! The dispatcher side of the control plane: a process attached to one
//! core's monitor, exporting services and binding channels.
//!
//! The connection to the monitor stays open for the dispatcher's life (so
//! each side sees the other's death as EOF).  A reader thread owns the
//! receiving half: replies go to the thread that made the request (matched
//! by request id), `Connect` requests go to their service (`service.rs`),
//! whose acceptor takes them into its backlog.  Every blocking call here
//! waits in slices and calls the caller's `interrupt` hook between slices,
//! which is how the Python layer stays responsive to Ctrl-C.
//!
//! Lifetimes: every handle (`Dispatcher`, `Service`) shares one `Inner`;
//! a multi-hop channel keeps it alive too (its data rides on the
//! dispatcher's link), so dropping every other handle does not take the
//! monitor connection away from it.  A UMP channel needs no monitor.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::channel::{create_segment, ChannelInfo, Side, UmpChannel, LIMIT_MAX_MESSAGE};
use crate::control::{self, monitor_socket, Msg, Role};
use crate::endpoint::Endpoint;
use crate::error::{Error, ErrorKind, Result};
use crate::mhchannel::MAX_WINDOW;
use crate::mhlink::{DispatcherLink, LINK_MAX_MESSAGE};
use crate::park::Doorbell;
use crate::peer::PeerWatch;
use crate::pending_bind::PendingBind;
use crate::service::{Acceptor, PendingConnect, Service, ServiceQueue, MAX_BACKLOG};
use crate::shm::dup_cloexec;
use crate::sock::SeqSocket;

/// How long one wait slice lasts before the interrupt hook runs.
const SLICE: Duration = Duration::from_millis(50);

type Reply = (Msg, Vec<OwnedFd>);

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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

pub(crate) struct Inner {
    pub(crate) sock: SeqSocket,
    dir: PathBuf,
    core: u32,
    monitor_pid: u32,
    next_req: AtomicU64,
    waiters: Mutex<HashMap<u64, mpsc::Sender<Reply>>>,
    pub(crate) services: Mutex<HashMap<u64, Arc<ServiceQueue>>>,
    /// Cleared by the reader thread when the monitor connection ends
    /// (Relaxed: a latch; waiters are woken through their own channels).
    alive: AtomicBool,
    /// Set by `detach` (Relaxed: a latch).
    detached: AtomicBool,
    /// The ring pair with the monitor that multi-hop channels share.
    link: OnceLock<Arc<DispatcherLink>>,
    /// Takes connect requests into the services' backlogs (started with the
    /// first export).
    pub(crate) acceptor: OnceLock<Arc<Acceptor>>,
    /// The inboxes of this dispatcher's channel ends (handles, `caps/`).
    pub(crate) caps: crate::caps::DispatcherCaps,
}

/// A process attached to a core's monitor.
#[derive(Clone)]
pub struct Dispatcher {
    pub(crate) inner: Arc<Inner>,
}

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
            "multihop" => Ok(LINK_MAX_MESSAGE - crate::wire::HEADER_BYTES),
            "auto" => Ok(LIMIT_MAX_MESSAGE.min(LINK_MAX_MESSAGE - crate::wire::HEADER_BYTES)),
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

impl Dispatcher {
    /// Attach to the monitor of `core` in the runtime at `dir`.
    pub fn attach(dir: &Path, core: u32) -> Result<Dispatcher> {
        let path = monitor_socket(dir, core);
        match std::fs::metadata(&path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(Error::new(ErrorKind::Monitor, format!("permission denied: the runtime at {} belongs to another user", dir.display())));
            }
            Err(_) => {
                return Err(Error::new(
                    ErrorKind::RuntimeNotFound,
                    format!("no monitor for core {core} in {} (is the core part of the runtime?)", dir.display()),
                ));
            }
        }
        let (sock, monitor_pid) = control::connect(&path, Role::Dispatcher, core)?;
        sock.set_recv_timeout(None)?;
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
            acceptor: OnceLock::new(),
            caps: crate::caps::DispatcherCaps::default(),
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

    pub(crate) fn link(&self) -> Result<&Arc<DispatcherLink>> {
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

    pub(crate) fn check_alive(&self) -> Result<()> {
        if self.inner.detached.load(Ordering::Relaxed) {
            return Err(Error::new(ErrorKind::Monitor, "this dispatcher has been detached"));
        }
        if !self.inner.alive.load(Ordering::Relaxed) {
            return Err(Error::new(ErrorKind::Monitor, format!("the monitor of core {} is gone", self.inner.core)));
        }
        Ok(())
    }

    /// Send a request and wait for its reply.
    fn request(&self, make: impl FnOnce(u64) -> Msg, fds: &[OwnedFd], deadline: Instant, interrupt: &mut dyn FnMut() -> Result<()>) -> Result<Reply> {
        let raw: Vec<_> = fds.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
        self.request_raw(make, &raw, deadline, interrupt)
    }

    /// Send a request; its reply comes on the returned receiver (the
    /// reader thread rings this process's doorbell as it hands it over).
    pub(crate) fn request_start(&self, make: impl FnOnce(u64) -> Msg, fds: &[OwnedFd]) -> Result<(u64, mpsc::Receiver<Reply>)> {
        let raw: Vec<_> = fds.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
        self.request_start_raw(make, &raw)
    }

    fn request_start_raw(&self, make: impl FnOnce(u64) -> Msg, raw: &[std::os::fd::RawFd]) -> Result<(u64, mpsc::Receiver<Reply>)> {
        self.check_alive()?;
        let req = self.inner.next_req.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        lock(&self.inner.waiters).insert(req, tx);
        if let Err(e) = control::send(&self.inner.sock, &make(req), raw) {
            lock(&self.inner.waiters).remove(&req);
            return Err(e);
        }
        Ok((req, rx))
    }

    /// Stop waiting for the reply to `req`.
    pub(crate) fn request_forget(&self, req: u64) {
        lock(&self.inner.waiters).remove(&req);
    }

    /// The error of a request whose monitor went away.
    pub(crate) fn gone(&self) -> Error {
        Error::new(ErrorKind::Monitor, format!("the monitor of core {} went away", self.inner.core))
    }

    /// `request` with borrowed descriptors (a message's handles).
    pub(crate) fn request_raw(
        &self,
        make: impl FnOnce(u64) -> Msg,
        raw: &[std::os::fd::RawFd],
        deadline: Instant,
        interrupt: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Reply> {
        let (req, rx) = self.request_start_raw(make, raw)?;
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

    /// Export `name` with a backlog of `backlog` connections that bound
    /// but were not accepted yet; the registry gives it an iref.
    /// `on_connect` (if any) decides, on the service's acceptor thread,
    /// whether to take each connection.
    pub fn export(&self, name: &str, backlog: usize, on_connect: Option<crate::service::OnConnect>) -> Result<Service> {
        if backlog == 0 || backlog > MAX_BACKLOG {
            return Err(Error::invalid(format!("backlog must be from 1 to {MAX_BACKLOG} connections, got {backlog}")));
        }
        let acceptor = Acceptor::of(self)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let (reply, _) = self.request(|req| Msg::Export { req, name: name.to_string() }, &[], deadline, &mut || Ok(()))?;
        match reply {
            Msg::Exported { iref, .. } => {
                // Connects for this iref may already be on their way: the
                // reader refuses those it finds no queue for, so register
                // the queue first thing.
                let queue = Arc::new(ServiceQueue::new(name, iref, backlog, on_connect));
                lock(&self.inner.services).insert(iref, queue.clone());
                Ok(Service::new(self.clone(), name.to_string(), iref, queue, acceptor))
            }
            other => Err(Error::protocol(format!("monitor answered export with {}", other.op()))),
        }
    }

    /// Bind to a service by name (or by iref when `name` is empty); the
    /// bind completes once the service has the connection in its backlog.
    ///
    /// `opts.transport` "auto" is resolved first ([`crate::transport_choice`]).
    pub fn bind(&self, name: &str, iref: u64, opts: &BindOptions, interrupt: &mut dyn FnMut() -> Result<()>) -> Result<Endpoint> {
        let resolved;
        let opts = if opts.transport == "auto" {
            resolved = BindOptions { transport: crate::transport_choice::choose(self, name, iref)?.to_string(), ..opts.clone() };
            &resolved
        } else {
            opts
        };
        opts.check()?;
        let ch = self.bind_start(name, iref, opts)?.wait(interrupt)?;
        Ok(ch)
    }

    /// Send the bind request and return at once: the reply completes the
    /// bind later ([`PendingBind`]). `opts.transport` must be resolved
    /// ("ump" or "multihop") and `opts` checked.
    pub fn bind_start(&self, name: &str, iref: u64, opts: &BindOptions) -> Result<PendingBind> {
        PendingBind::start(self, name, iref, opts)
    }

    /// When `ch` closes (or learns it is over), tell the monitor.
    pub(crate) fn track_close(&self, ch: &Endpoint) {
        let weak = Arc::downgrade(&self.inner);
        ch.set_on_close(Box::new(move |chan, teardown| {
            if let Some(inner) = weak.upgrade() {
                let _ = control::send(&inner.sock, &Msg::Closed { chan, teardown: teardown.unwrap_or(0) }, &[]);
            }
        }));
    }

    /// Status of this dispatcher's monitor (lists cut at `limit` entries).
    pub fn monitor_status(&self, limit: Option<u64>) -> Result<serde_json::Value> {
        let (reply, _) = self.request(|req| Msg::Status { req, limit }, &[], Instant::now() + Duration::from_secs(10), &mut || Ok(()))?;
        match reply {
            Msg::StatusReply { status, .. } => Ok(status),
            other => Err(Error::protocol(format!("monitor answered status with {}", other.op()))),
        }
    }

    /// Detach from the monitor: services vanish and multi-hop channels end
    /// (their data rides on this connection's link); UMP channels stay usable.
    ///
    /// Its names are withdrawn first, and the monitor answers only once the
    /// registry has forgotten them, so a name is free again when `detach`
    /// returns (a dispatcher that just goes away frees its names too, but
    /// only once its monitor has seen the connection close).
    pub fn detach(&self) {
        if self.inner.detached.load(Ordering::Relaxed) {
            return;
        }
        let irefs: Vec<u64> = lock(&self.inner.services).keys().copied().collect();
        for iref in irefs {
            self.withdraw(iref);
        }
        // Its multi-hop channels end with the link: what they hold for their next credit goes first.
        if let Some(link) = self.inner.link.get() {
            let lost = link.send_held_before_end(crate::mhchannel::DROP_HELD_WAIT);
            if lost > 0 {
                crate::held::warn_lost(&format!(
                    "detaching from monitor {}: {lost} message(s) held on its multi-hop channels did not leave (the monitor took \
                     nothing from the link for {} s): they are lost; close() the channels first to be told, with an error",
                    self.inner.core,
                    crate::mhchannel::DROP_HELD_WAIT.as_secs()
                ));
            }
        }
        if !self.inner.detached.swap(true, Ordering::Relaxed) {
            self.inner.sock.shutdown();
        }
    }

    /// Withdraw the name of service `iref` and wait (at most a second) until
    /// the registry has forgotten it, so it is free when this returns. Best
    /// effort: a monitor that cannot answer frees it when the connection ends.
    pub(crate) fn withdraw(&self, iref: u64) {
        if self.check_alive().is_ok() {
            let deadline = Instant::now() + Duration::from_secs(1);
            let _ = self.request(|req| Msg::Unexport { req, iref }, &[], deadline, &mut || Ok(()));
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
        if let Some(a) = self.acceptor.get() {
            a.stop();
        }
    }
}

/// The reader thread: holds only a weak reference while blocked in `recv`,
/// so dropping the last handle (which shuts the socket down) ends it.
fn read_loop(inner: std::sync::Weak<Inner>, sock: SeqSocket) {
    loop {
        let got = control::recv_keeping_truncated(&sock, crate::sock::MAX_FRAME);
        let Some(me) = inner.upgrade() else { return };
        match got {
            // Only a message's handles may arrive short (the receiver refuses them).
            Ok(Some((msg @ Msg::Cap { .. }, fds, truncated))) => dispatch_cap(&me, msg, fds, truncated),
            // A reply whose descriptors our full table dropped: its request fails now, saying why.
            Ok(Some((msg, _, true))) => {
                let req = control::req_of(&msg);
                if let Some(tx) = lock(&me.waiters).remove(&req) {
                    let e = Error::descriptors_cut(format!("the monitor's answer {}", msg.op()));
                    let _ = tx.send((Msg::fail(req, &e), vec![]));
                }
            }
            Ok(Some((msg, fds, false))) => dispatch(&me, msg, fds),
            Err(e) if e.kind == ErrorKind::Protocol => continue,
            Ok(None) | Err(_) => {
                end(&me);
                return;
            }
        }
    }
}

/// Wake an event loop of this process that waits on the doorbell
/// (`async_bell.rs`) for a control-plane event; a fence and a load when none does.
fn ring_event_loop() {
    if let Ok(bell) = process_doorbell() {
        bell.ring();
    }
}

fn end(inner: &Inner) {
    inner.alive.store(false, Ordering::Relaxed);
    lock(&inner.waiters).clear(); // dropping the senders wakes every requester
                                  // The monitor is gone (or this dispatcher detached): the multi-hop channels
                                  // riding on its link end now. Take what it wrote before it went, then end
                                  // them (rings the doorbell), so a waiter learns it from this EOF rather
                                  // than from its next look at the monitor's pidfd (an event loop has no
                                  // park slice to make that look).
    if let Some(link) = inner.link.get() {
        for _ in 0..4096 {
            if link.pump() == 0 {
                break;
            }
        }
        link.die();
    }
    ring_event_loop();
    for q in lock(&inner.services).values() {
        q.wake_all();
    }
    if let Some(a) = inner.acceptor.get() {
        a.poke();
    }
}

/// A `Cap` frame: a reply goes to the request waiting for it, handles to
/// their channel end (`caps/deliver.rs`).
fn dispatch_cap(inner: &Arc<Inner>, msg: Msg, fds: Vec<OwnedFd>, truncated: bool) {
    if let Msg::Cap { stage: control::CapStage::Reply, req, .. } = msg {
        if let Some(tx) = lock(&inner.waiters).remove(&req) {
            let _ = tx.send((msg, fds));
        }
        return;
    }
    crate::caps::deliver::on_frame(inner, msg, fds, truncated);
}

fn dispatch(inner: &Arc<Inner>, msg: Msg, fds: Vec<OwnedFd>) {
    let req = match &msg {
        Msg::Exported { req, .. } | Msg::Bound { req, .. } | Msg::Fail { req, .. } | Msg::StatusReply { req, .. } | Msg::Done { req } => Some(*req),
        _ => None,
    };
    if let Some(req) = req {
        let waiter = lock(&inner.waiters).remove(&req);
        let late = match waiter {
            Some(tx) => tx.send((msg, fds)).err().map(|e| e.0 .0),
            None => Some(msg),
        };
        if let Some(Msg::Bound { chan, vci, .. }) = late {
            // A bind its caller gave up on (timed out, cancelled) completed
            // after all: the monitor forgets the channel and tears a multi-hop
            // circuit down (`vci`); a UMP segment was marked abandoned already
            // (`vci` is 0: nothing to tear down).
            let _ = control::send(&inner.sock, &Msg::Closed { chan, teardown: vci }, &[]);
        }
        // An event loop of this process may wait for this reply (`pending_bind.rs`).
        ring_event_loop();
        return;
    }
    if let Msg::ConnectCancel { conn } = msg {
        for q in lock(&inner.services).values() {
            q.cancel(conn);
        }
        return;
    }
    if let Msg::Connect { conn, iref, service, chan, transport, client_pid, client_core, timeout_ms, vci, window, hops } = msg {
        let pending = PendingConnect::new(conn, iref, service, chan, transport, client_pid, client_core, vci, window, hops, timeout_ms, fds);
        let queue = lock(&inner.services).get(&iref).cloned();
        match queue {
            Some(q) if q.offer(pending) => {
                if let Some(a) = inner.acceptor.get() {
                    a.poke();
                }
            }
            _ => {
                let reply = Msg::ConnectReply { conn, accept: false, reason: "service no longer exported".into(), vci: 0, expired: false };
                let _ = control::send(&inner.sock, &reply, &[]);
            }
        }
    }
}
