//! A dispatcher's connection to its monitor: the narrow type everything of
//! the dispatcher side stands on (channels, services, binds, handles, group
//! ports), and `Dispatcher` on top of them.
//!
//! The connection stays open for the dispatcher's life (so each side sees
//! the other's death as EOF).  A reader thread owns the receiving half:
//! replies go to the thread that made the request (matched by request id),
//! `Connect` requests to the [`Backlog`] of their service (registered by
//! `service.rs`), handles to their channel end's inbox (`handles/deliver.rs`).
//! Every blocking call here waits in slices and calls the caller's
//! `interrupt` hook between slices, which is how the Python layer stays
//! responsive to Ctrl-C.
//!
//! Lifetimes: every handle (`Dispatcher`, `Service`) shares one
//! `MonitorConn`; a multi-hop channel keeps it alive too (its data rides on
//! the connection's link), so dropping every other handle does not take the
//! monitor connection away from it.  A UMP channel needs no monitor.

use std::collections::HashMap;
use std::os::fd::{OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use multihop_base::control::{self, monitor_socket, Msg, Role};
use multihop_base::defaults::{DROP_HELD_WAIT, REQUEST_TIMEOUT, WAIT_SLICE};
use multihop_base::error::{Error, ErrorKind, Result};
use multihop_base::park::{process_doorbell, ring_event_loop, Doorbell};
use multihop_base::peer::PeerWatch;
use multihop_base::ringpair::{create_segment, ChannelInfo, CloseHook, RingPair, Side};
use multihop_base::shm::dup_cloexec;
use multihop_base::sock::SeqSocket;
use multihop_base::sync::lock;
use multihop_base::wire::LINK_MAX_MESSAGE;

use crate::backlog::{AcceptorWake, PendingConnect};
use crate::handles::inbox::DispatcherInboxes;
use crate::multihop::link::DispatcherLink;

/// A control message and the descriptors that came with it.
pub(crate) type Reply = (Msg, Vec<OwnedFd>);

/// A service's backlog as this connection's threads see it (`service.rs` implements it): the reader
/// thread offers it connect requests, the acceptor thread asks it to take them.
pub(crate) trait Backlog: Send + Sync {
    /// Queue a connect request; false if the service was withdrawn (the reader refuses it).
    fn offer(&self, p: PendingConnect) -> bool;
    /// Drop request `conn` if it is still waiting (its bind gave up).
    fn cancel(&self, conn: u64);
    /// Wake everyone waiting on this service (the monitor is gone).
    fn wake_all(&self);
    /// The acceptor's turn: take every request there is room for, refuse the expired ones; returns when
    /// the next waiting request runs out of time.
    fn serve(&self, conn: &Arc<MonitorConn>) -> Option<Instant>;
}

/// A process's connection to one core's monitor (see the module text).
pub struct MonitorConn {
    pub(crate) sock: SeqSocket,
    dir: PathBuf,
    core: u32,
    monitor_pid: u32,
    /// Numbers requests (Relaxed: only uniqueness matters; the reply is matched under `waiters`' lock).
    next_req: AtomicU64,
    waiters: Mutex<HashMap<u64, mpsc::Sender<Reply>>>,
    /// The backlogs of this dispatcher's services, by iref: where the reader hands connect requests.
    services: Mutex<HashMap<u64, Arc<dyn Backlog>>>,
    /// Cleared by the reader thread when the monitor connection ends
    /// (Relaxed: a latch; waiters are woken through their own channels).
    alive: AtomicBool,
    /// Set by `detach` (Relaxed: a latch).
    detached: AtomicBool,
    /// The ring pair with the monitor that multi-hop channels share.
    link: OnceLock<Arc<DispatcherLink>>,
    /// Wakes the thread that takes connect requests into the services'
    /// backlogs (started with the first export).
    acceptor: OnceLock<Arc<AcceptorWake>>,
    /// The inboxes of this dispatcher's channel ends (handles, `handles/`).
    pub(crate) inboxes: DispatcherInboxes,
}

impl MonitorConn {
    /// Attach to the monitor of `core` in the runtime at `dir`: the control
    /// connection, its reader thread, and the link multi-hop channels ride on.
    pub fn attach(dir: &Path, core: u32) -> Result<Arc<MonitorConn>> {
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
        let conn = Arc::new(MonitorConn {
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
            inboxes: DispatcherInboxes::default(),
        });
        let reader = Arc::downgrade(&conn);
        let reader_sock = conn.sock.try_clone().map_err(|e| Error::os("dup control socket", e))?;
        std::thread::Builder::new()
            .name(format!("mh-dispatcher-{core}"))
            .spawn(move || read_loop(reader, reader_sock))
            .map_err(|e| Error::os("spawn dispatcher reader thread", e))?;
        conn.open_link()?;
        Ok(conn)
    }

    /// Open the ring pair with the monitor (multi-hop channels ride on it).
    fn open_link(&self) -> Result<()> {
        let seg = create_segment(LINK_MAX_MESSAGE)?;
        let bell = process_doorbell()?;
        let fds = [dup_cloexec(seg.raw_fd())?, dup_cloexec(bell.segment().raw_fd())?];
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        let (reply, rfds) = self.request(|req| Msg::DispatcherLink { req }, &fds, deadline, &mut || Ok(()))?;
        let (Msg::Done { .. }, Some(peer_bell)) = (reply, rfds.into_iter().next()) else {
            return Err(Error::protocol("monitor answered the link request without its doorbell"));
        };
        let info = ChannelInfo {
            id: 0,
            service: format!("link to monitor {}", self.core),
            transport: "link",
            side: Side::Client,
            peer_pid: self.monitor_pid,
            peer_core: self.core,
            max_message: LINK_MAX_MESSAGE,
            ring_slots: 0,
        };
        let ch = RingPair::open(seg, info, bell, Doorbell::from_fd(peer_bell)?, PeerWatch::new(self.monitor_pid)?)?;
        let _ = self.link.set(Arc::new(DispatcherLink::new(ch)));
        Ok(())
    }

    /// The ring pair with the monitor that this dispatcher's multi-hop channels and group ports share.
    pub fn link(&self) -> Result<&Arc<DispatcherLink>> {
        self.link.get().ok_or_else(|| Error::new(ErrorKind::Monitor, "this dispatcher has no link to its monitor"))
    }

    /// Messages that arrived on the link for no channel of ours.
    pub fn link_dropped(&self) -> u64 {
        self.link.get().map_or(0, |l| l.dropped.load(Ordering::Relaxed))
    }

    pub fn core(&self) -> u32 {
        self.core
    }

    pub fn monitor_pid(&self) -> u32 {
        self.monitor_pid
    }

    pub fn runtime_dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn check_alive(&self) -> Result<()> {
        if self.detached.load(Ordering::Relaxed) {
            return Err(Error::new(ErrorKind::Monitor, "this dispatcher has been detached"));
        }
        if !self.alive.load(Ordering::Relaxed) {
            return Err(Error::new(ErrorKind::Monitor, format!("the monitor of core {} is gone", self.core)));
        }
        Ok(())
    }

    pub fn is_attached(&self) -> bool {
        !self.detached.load(Ordering::Relaxed) && self.alive.load(Ordering::Relaxed)
    }

    /// Send a request and wait for its reply.
    pub(crate) fn request(
        &self,
        make: impl FnOnce(u64) -> Msg,
        fds: &[OwnedFd],
        deadline: Instant,
        interrupt: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Reply> {
        let raw: Vec<_> = fds.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
        self.request_raw(make, &raw, deadline, interrupt)
    }

    /// Send a request; its reply comes on the returned receiver (the
    /// reader thread rings this process's doorbell as it hands it over).
    pub(crate) fn request_start(&self, make: impl FnOnce(u64) -> Msg, fds: &[OwnedFd]) -> Result<(u64, mpsc::Receiver<Reply>)> {
        let raw: Vec<_> = fds.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
        self.request_start_raw(make, &raw)
    }

    fn request_start_raw(&self, make: impl FnOnce(u64) -> Msg, raw: &[RawFd]) -> Result<(u64, mpsc::Receiver<Reply>)> {
        self.check_alive()?;
        let req = self.next_req.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        lock(&self.waiters).insert(req, tx);
        if let Err(e) = control::send(&self.sock, &make(req), raw) {
            lock(&self.waiters).remove(&req);
            return Err(e);
        }
        Ok((req, rx))
    }

    /// Stop waiting for the reply to `req`.
    pub(crate) fn request_forget(&self, req: u64) {
        lock(&self.waiters).remove(&req);
    }

    /// The error of a request whose monitor went away.
    pub(crate) fn gone(&self) -> Error {
        Error::new(ErrorKind::Monitor, format!("the monitor of core {} went away", self.core))
    }

    /// `request` with borrowed descriptors (a message's handles).
    pub(crate) fn request_raw(
        &self,
        make: impl FnOnce(u64) -> Msg,
        raw: &[RawFd],
        deadline: Instant,
        interrupt: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Reply> {
        let (req, rx) = self.request_start_raw(make, raw)?;
        let result = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left.min(WAIT_SLICE)) {
                Ok((msg, fds)) => break msg.into_result().map(|m| (m, fds)),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    break Err(Error::new(ErrorKind::Monitor, format!("the monitor of core {} went away", self.core)))
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
        lock(&self.waiters).remove(&req);
        result
    }

    /// Send a control message that expects no answer (best effort: a connection that is gone has nobody to tell).
    pub(crate) fn tell(&self, msg: &Msg, raw: &[RawFd]) {
        let _ = control::send(&self.sock, msg, raw);
    }

    /// The hook a channel end of this dispatcher runs when it closes (or
    /// learns it is over): tell the monitor.
    pub(crate) fn close_hook(self: &Arc<Self>) -> CloseHook {
        let weak = Arc::downgrade(self);
        Box::new(move |chan, teardown| {
            if let Some(conn) = weak.upgrade() {
                conn.tell(&Msg::Closed { chan, teardown: teardown.unwrap_or(0) }, &[]);
            }
        })
    }

    /// Route connect requests for `iref` to `backlog` (before the export's
    /// answer is handed out: connects may already be on their way).
    pub(crate) fn add_service(&self, iref: u64, backlog: Arc<dyn Backlog>) {
        lock(&self.services).insert(iref, backlog);
    }

    pub(crate) fn remove_service(&self, iref: u64) {
        lock(&self.services).remove(&iref);
    }

    /// The backlogs of this dispatcher's services now.
    fn backlogs(&self) -> Vec<Arc<dyn Backlog>> {
        lock(&self.services).values().cloned().collect()
    }

    /// The wake-up of this dispatcher's acceptor thread, started on first use: it takes connect requests into
    /// the services' backlogs ([`Backlog::serve`]).
    pub(crate) fn acceptor(self: &Arc<Self>) -> Result<Arc<AcceptorWake>> {
        if let Some(a) = self.acceptor.get() {
            return Ok(a.clone());
        }
        let a = Arc::new(AcceptorWake::default());
        if self.acceptor.set(a.clone()).is_err() {
            return Ok(self.acceptor.get().expect("set by another thread").clone());
        }
        let (me, weak) = (a.clone(), Arc::downgrade(self));
        std::thread::Builder::new()
            .name(format!("mh-acceptor-{}", self.core))
            .spawn(move || accept_loop(&me, &weak))
            .map_err(|e| Error::os("spawn the dispatcher's acceptor thread", e))?;
        Ok(a)
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

    /// Detach from the monitor: services vanish and multi-hop channels end
    /// (their data rides on this connection's link); UMP channels stay usable.
    ///
    /// Its names are withdrawn first, and the monitor answers only once the
    /// registry has forgotten them, so a name is free again when `detach`
    /// returns (a dispatcher that just goes away frees its names too, but
    /// only once its monitor has seen the connection close).
    pub fn detach(&self) {
        if self.detached.load(Ordering::Relaxed) {
            return;
        }
        let irefs: Vec<u64> = lock(&self.services).keys().copied().collect();
        for iref in irefs {
            self.withdraw(iref);
        }
        // Its multi-hop channels end with the link: what they hold for their next credit goes first.
        if let Some(link) = self.link.get() {
            let lost = link.send_held_before_end(DROP_HELD_WAIT);
            if lost > 0 {
                crate::multihop::held::warn_lost(&format!(
                    "detaching from monitor {}: {lost} message(s) held on its multi-hop channels did not leave (the monitor took \
                     nothing from the link for {} s): they are lost; close() the channels first to be told, with an error",
                    self.core,
                    DROP_HELD_WAIT.as_secs()
                ));
            }
        }
        if !self.detached.swap(true, Ordering::Relaxed) {
            self.sock.shutdown();
        }
    }
}

impl Drop for MonitorConn {
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
fn read_loop(conn: Weak<MonitorConn>, sock: SeqSocket) {
    loop {
        let got = control::recv_keeping_truncated(&sock, multihop_base::sock::MAX_FRAME);
        let Some(me) = conn.upgrade() else { return };
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

fn end(conn: &MonitorConn) {
    conn.alive.store(false, Ordering::Relaxed);
    lock(&conn.waiters).clear(); // dropping the senders wakes every requester

    // The monitor is gone (or this dispatcher detached): the multi-hop channels
    // riding on its link end now. Take what it wrote before it went, then end
    // them (rings the doorbell), so a waiter learns it from this EOF rather
    // than from its next look at the monitor's pidfd (an event loop has no
    // park slice to make that look).
    if let Some(link) = conn.link.get() {
        for _ in 0..4096 {
            if link.pump() == 0 {
                break;
            }
        }
        link.die();
    }
    ring_event_loop();
    for q in conn.backlogs() {
        q.wake_all();
    }
    if let Some(a) = conn.acceptor.get() {
        a.poke();
    }
}

/// A `Cap` frame: a reply goes to the request waiting for it, handles to
/// their channel end (`handles/deliver.rs`).
fn dispatch_cap(conn: &MonitorConn, msg: Msg, fds: Vec<OwnedFd>, truncated: bool) {
    if let Msg::Cap { stage: control::CapStage::Reply, req, .. } = msg {
        if let Some(tx) = lock(&conn.waiters).remove(&req) {
            let _ = tx.send((msg, fds));
        }
        return;
    }
    if let Some(reply) = crate::handles::deliver::on_frame(&conn.inboxes, msg, fds, truncated) {
        conn.tell(&reply, &[]);
    }
}

fn dispatch(conn: &MonitorConn, msg: Msg, fds: Vec<OwnedFd>) {
    let req = match &msg {
        Msg::Exported { req, .. } | Msg::Bound { req, .. } | Msg::Fail { req, .. } | Msg::StatusReply { req, .. } | Msg::Done { req } => Some(*req),
        _ => None,
    };
    if let Some(req) = req {
        let waiter = lock(&conn.waiters).remove(&req);
        let late = match waiter {
            Some(tx) => tx.send((msg, fds)).err().map(|e| e.0 .0),
            None => Some(msg),
        };
        if let Some(Msg::Bound { chan, vci, .. }) = late {
            // A bind its caller gave up on (timed out, cancelled) completed
            // after all: the monitor forgets the channel and tears a multi-hop
            // circuit down (`vci`); a UMP segment was marked abandoned already
            // (`vci` is 0: nothing to tear down).
            conn.tell(&Msg::Closed { chan, teardown: vci }, &[]);
        }
        // An event loop of this process may wait for this reply (`bind.rs`).
        ring_event_loop();
        return;
    }
    if let Msg::ConnectCancel { conn: id } = msg {
        for q in conn.backlogs() {
            q.cancel(id);
        }
        return;
    }
    if let Msg::Connect { conn: id, iref, service, chan, transport, client_pid, client_core, timeout_ms, vci, window, hops } = msg {
        let pending = PendingConnect::new(id, iref, service, chan, transport, client_pid, client_core, vci, window, hops, timeout_ms, fds);
        let queue = lock(&conn.services).get(&iref).cloned();
        match queue {
            Some(q) if q.offer(pending) => {
                if let Some(a) = conn.acceptor.get() {
                    a.poke();
                }
            }
            _ => {
                let reply = Msg::ConnectReply { conn: id, accept: false, reason: "service no longer exported".into(), vci: 0, expired: false };
                conn.tell(&reply, &[]);
            }
        }
    }
}

/// The acceptor thread: asks each service's backlog to take the requests
/// there is room for ([`Backlog::serve`]), then sleeps until poked or until
/// the next request runs out of time. Holds no strong reference while asleep.
fn accept_loop(wake: &AcceptorWake, conn: &Weak<MonitorConn>) {
    while !wake.stopped() {
        let Some(me) = conn.upgrade() else { return };
        let mut wake_at = Instant::now() + crate::backlog::ACCEPTOR_NAP;
        if me.check_alive().is_ok() {
            for q in me.backlogs() {
                if let Some(t) = q.serve(&me) {
                    wake_at = wake_at.min(t);
                }
            }
        }
        drop(me); // hold no strong reference while asleep
        wake.nap_until(wake_at);
    }
}
