//! The monitor: one process per core, pinned to it.
//!
//! It listens on `mon-<core>.sock` in the runtime directory, admits only
//! processes of its own uid (SO_PEERCRED), and serves three kinds of peers:
//! dispatchers attached to its core (one long-lived connection each),
//! other monitors and tools (one request per connection).  The monitor of
//! the runtime's first core is the *initial* monitor and keeps the name
//! registry (name -> iref).
//!
//! Binds are brokered here, never data: the client's monitor resolves the
//! name at the initial monitor, forwards the bind (with the client's segment
//! and doorbell descriptors) to the service's monitor, which asks the
//! service's dispatcher and relays the answer back.  Every connection has its
//! own thread; a bind that waits for a service gets a thread of its own, so
//! a slow service never holds up anyone else.
//!
//! The monitor ends on `Shutdown`, on SIGTERM/SIGINT, or when its owner
//! process exits (a runtime started from a program lives as long as that
//! program).  On the way out it removes its socket, and the last monitor out
//! removes the runtime directory.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::json;

use std::collections::BTreeMap;

use crate::channel::{create_segment, ChannelInfo, Side, UmpChannel};
use crate::control::{self, monitor_socket, Msg, Role};
use crate::dispatcher::process_doorbell;
use crate::error::{Error, ErrorKind, Result};
use crate::forward::{Forwarder, LinkPeer};
use crate::mhchannel::LINK_MAX_MESSAGE;
use crate::park::Doorbell;
use crate::peer::PeerWatch;
use crate::shm::{dup_cloexec, Segment};
use crate::sock::{SeqListener, SeqSocket};
use crate::vci::{Entry, LinkId};

/// How a monitor is started (from `python -m multihop.monitor`).
#[derive(Clone, Debug)]
pub struct MonitorConfig {
    pub dir: PathBuf,
    pub core: u32,
    /// Real CPU to pin to (`None`: leave affinity alone).
    pub cpu: Option<usize>,
    /// Core of the initial monitor (the registry holder).
    pub initial_core: u32,
    /// Exit when this process exits (`None`: live until shut down).
    pub owner_pid: Option<u32>,
}

struct ServiceEntry {
    name: String,
    dispatcher: u64,
}

struct DispatcherEntry {
    pid: u32,
    sock: Arc<SeqSocket>,
    channels: HashSet<u64>,
}

struct ChannelEntry {
    service: String,
    transport: String,
    client_pid: u32,
    server_pid: u32,
    role: &'static str,
}

#[derive(Default)]
struct Counters {
    binds_ok: AtomicU64,
    binds_failed: AtomicU64,
    bad_frames: AtomicU64,
    refused_peers: AtomicU64,
}

struct Monitor {
    cfg: MonitorConfig,
    pid: u32,
    uid: u32,
    started: Instant,
    next_id: AtomicU64,
    /// name -> (iref, core); only the initial monitor fills it.
    registry: Mutex<HashMap<String, (u64, u32)>>,
    /// iref -> service exported by a dispatcher of this core.
    services: Mutex<HashMap<u64, ServiceEntry>>,
    dispatchers: Mutex<HashMap<u64, DispatcherEntry>>,
    channels: Mutex<HashMap<u64, ChannelEntry>>,
    /// conn id -> where the dispatcher's ConnectReply goes.
    pending: Mutex<HashMap<u64, mpsc::Sender<(Msg, Vec<OwnedFd>)>>>,
    counters: Counters,
    stopping: AtomicBool,
    listener: SeqListener,
    /// The data plane: links, forwarding table, forwarding thread.
    fwd: Arc<Forwarder>,
    bell: Arc<Doorbell>,
    /// This monitor's routing row (destination core -> next hop).
    row: Mutex<BTreeMap<u32, u32>>,
    /// Neighbours the routing tables give this monitor a link to.
    neighbours: Mutex<Vec<u32>>,
    /// The whole table (initial monitor only), from the RTS.
    table: Mutex<Option<BTreeMap<u32, BTreeMap<u32, u32>>>>,
}

type Table = BTreeMap<u32, BTreeMap<u32, u32>>;

/// Row, links to open, and all neighbours of `core` in `table`. Each
/// undirected link is opened by its lower core.
fn row_of(table: &Table, core: u32) -> Result<(BTreeMap<u32, u32>, Vec<u32>, Vec<u32>)> {
    let row = table.get(&core).cloned().ok_or_else(|| Error::invalid(format!("the routing table has no row for core {core}")))?;
    let mut neighbours = std::collections::BTreeSet::new();
    for (src, r) in table {
        for &hop in r.values() {
            if *src == core && hop != core {
                neighbours.insert(hop);
            }
            if hop == core && *src != core {
                neighbours.insert(*src);
            }
        }
    }
    let initiate = neighbours.iter().copied().filter(|&n| core < n).collect();
    Ok((row, initiate, neighbours.into_iter().collect()))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn log(core: u32, msg: impl std::fmt::Display) {
    eprintln!("[monitor {core} pid {}] {msg}", std::process::id());
}

/// Longest a forwarded bind may wait for a service.
const MAX_BIND_TIMEOUT_MS: u64 = 600_000;

/// Run a monitor until it is told to stop. Returns the process exit code.
pub fn run(cfg: MonitorConfig) -> Result<i32> {
    if let Some(cpu) = cfg.cpu {
        pin_to_cpu(cpu)?;
    }
    let signals = block_termination_signals();
    let path = monitor_socket(&cfg.dir, cfg.core);
    let _ = std::fs::remove_file(&path);
    let listener = SeqListener::bind(&path)?;
    let owner = match cfg.owner_pid {
        Some(pid) => Some(PeerWatch::new(pid)?),
        None => None,
    };
    let mon = Arc::new(Monitor {
        pid: std::process::id(),
        uid: unsafe { libc::getuid() },
        started: Instant::now(),
        next_id: AtomicU64::new(1),
        registry: Mutex::new(HashMap::new()),
        services: Mutex::new(HashMap::new()),
        dispatchers: Mutex::new(HashMap::new()),
        channels: Mutex::new(HashMap::new()),
        pending: Mutex::new(HashMap::new()),
        counters: Counters::default(),
        stopping: AtomicBool::new(false),
        listener,
        fwd: Forwarder::new(process_doorbell()?),
        bell: process_doorbell()?,
        row: Mutex::new(BTreeMap::new()),
        neighbours: Mutex::new(Vec::new()),
        table: Mutex::new(None),
        cfg,
    });
    {
        let f = mon.fwd.clone();
        std::thread::Builder::new().name("forward".into()).spawn(move || f.run()).ok();
    }
    if !mon.is_initial() {
        let m = mon.clone();
        std::thread::Builder::new().name("boot".into()).spawn(move || m.boot()).ok();
    }
    {
        let m = mon.clone();
        std::thread::Builder::new().name("signals".into()).spawn(move || wait_signals(m, signals)).ok();
    }
    if let Some(owner) = owner {
        let m = mon.clone();
        std::thread::Builder::new().name("owner".into()).spawn(move || watch_owner(m, owner)).ok();
    }
    log(mon.cfg.core, format_args!("listening on {}", path.display()));
    loop {
        match mon.listener.accept() {
            Ok(sock) => {
                if mon.stopping.load(Ordering::Relaxed) {
                    break;
                }
                let m = mon.clone();
                let spawned = std::thread::Builder::new().name("conn".into()).spawn(move || m.serve(sock));
                if let Err(e) = spawned {
                    log(mon.cfg.core, format_args!("cannot start a connection thread: {e}"));
                }
            }
            Err(e) => {
                if mon.stopping.load(Ordering::Relaxed) {
                    break;
                }
                log(mon.cfg.core, format_args!("accept failed: {e}"));
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    mon.cleanup();
    Ok(0)
}

fn pin_to_cpu(cpu: usize) -> Result<()> {
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(Error::os(format_args!("sched_setaffinity(cpu {cpu})"), std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Block SIGTERM/SIGINT/SIGHUP in every thread (set before any is spawned)
/// so one thread can take them with `sigwait` and shut down cleanly.
fn block_termination_signals() -> libc::sigset_t {
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_signals(mon: Arc<Monitor>, set: libc::sigset_t) {
    let mut sig: libc::c_int = 0;
    if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
        log(mon.cfg.core, format_args!("signal {sig}: shutting down"));
        mon.begin_shutdown();
    }
}

fn watch_owner(mon: Arc<Monitor>, owner: PeerWatch) {
    while !mon.stopping.load(Ordering::Relaxed) {
        if owner.is_dead() {
            log(mon.cfg.core, format_args!("owner process {} exited: shutting down", owner.pid()));
            mon.begin_shutdown();
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Monitor {
    fn is_initial(&self) -> bool {
        self.cfg.core == self.cfg.initial_core
    }

    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn begin_shutdown(&self) {
        if !self.stopping.swap(true, Ordering::SeqCst) {
            self.fwd.stop();
            self.listener.shutdown();
        }
    }

    /// A later monitor's boot: get our row from the initial monitor, then
    /// open the links it names (TN-006 2.9).
    fn boot(self: Arc<Self>) {
        let path = monitor_socket(&self.cfg.dir, self.cfg.initial_core);
        let deadline = Instant::now() + Duration::from_secs(30);
        let row = loop {
            if self.stopping.load(Ordering::Relaxed) {
                return;
            }
            let msg = Msg::GetRow { req: 1, core: self.cfg.core };
            match control::call(&path, Role::Monitor, &msg, &[], Duration::from_secs(5)) {
                Ok((Msg::Row { row, initiate, neighbours, .. }, _)) => break (row.into_iter().collect(), initiate, neighbours),
                Ok((other, _)) => log(self.cfg.core, format_args!("initial monitor answered GetRow with {other:?}")),
                Err(_) if Instant::now() < deadline => {}
                Err(e) => return log(self.cfg.core, format_args!("no routing row from the initial monitor: {e}")),
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        self.install_row(row.0, row.1, row.2);
    }

    fn install_row(self: &Arc<Self>, row: BTreeMap<u32, u32>, initiate: Vec<u32>, neighbours: Vec<u32>) {
        *lock(&self.row) = row;
        *lock(&self.neighbours) = neighbours;
        for peer in initiate {
            let m = self.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(30);
                while !m.stopping.load(Ordering::Relaxed) {
                    match m.open_monitor_link(peer) {
                        Ok(()) => return,
                        Err(e) if Instant::now() > deadline => {
                            return log(m.cfg.core, format_args!("could not open the link to monitor {peer}: {e}"));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            });
        }
    }

    fn link_info(&self, peer_core: u32, peer_pid: u32, side: Side) -> ChannelInfo {
        ChannelInfo {
            id: 0,
            service: format!("link {} - {}", self.cfg.core, peer_core),
            transport: "link",
            side,
            peer_pid,
            peer_core,
            max_message: LINK_MAX_MESSAGE,
            ring_slots: 0,
        }
    }

    /// Create a link's segment and hand it to monitor `peer`.
    fn open_monitor_link(&self, peer: u32) -> Result<()> {
        let path = monitor_socket(&self.cfg.dir, peer);
        let (sock, peer_pid) = control::connect(&path, Role::Monitor, self.cfg.core)?;
        let seg = create_segment(LINK_MAX_MESSAGE)?;
        control::send(&sock, &Msg::LinkOpen { req: 1, from_core: self.cfg.core }, &[seg.raw_fd(), self.bell.segment().raw_fd()])?;
        let (reply, mut fds) = control::recv(&sock)?.ok_or_else(|| Error::new(ErrorKind::Monitor, "peer hung up"))?;
        reply.into_result()?;
        let bell = fds.pop().ok_or_else(|| Error::protocol("link answer without a doorbell"))?;
        let ch = UmpChannel::open(seg, self.link_info(peer, peer_pid, Side::Client), self.bell.clone(), Doorbell::from_fd(bell)?, PeerWatch::new(peer_pid)?)?;
        self.fwd.lock().add_link(ch, LinkPeer::Monitor(peer));
        self.fwd.poke();
        Ok(())
    }

    /// The other end of `open_monitor_link` or of a dispatcher's link.
    fn accept_link(&self, peer: LinkPeer, peer_pid: u32, mut fds: Vec<OwnedFd>) -> Result<OwnedFd> {
        if fds.len() != 2 {
            return Err(Error::protocol(format!("link request carries {} descriptors, expected 2", fds.len())));
        }
        let bell = Doorbell::from_fd(fds.pop().unwrap())?;
        let seg = Segment::from_fd(fds.pop().unwrap(), 0)?;
        let peer_core = match peer {
            LinkPeer::Monitor(c) => {
                // Links exist only where the routing table names a next hop
                // (before our row arrives we have no neighbours: the opener
                // retries).
                let neighbours = lock(&self.neighbours);
                if !neighbours.contains(&c) {
                    return Err(Error::new(
                        ErrorKind::Monitor,
                        format!("monitor {c} is not a neighbour of monitor {} in the routing table (neighbours: {:?})", self.cfg.core, *neighbours),
                    ));
                }
                c
            }
            LinkPeer::Dispatcher(_) => self.cfg.core,
        };
        let ch = UmpChannel::open(seg, self.link_info(peer_core, peer_pid, Side::Server), self.bell.clone(), bell, PeerWatch::new(peer_pid)?)?;
        let mut f = self.fwd.lock();
        if let LinkPeer::Monitor(_) = peer {
            if let Some(old) = f.link_to(peer) {
                f.remove_link(old); // a restarted peer replaces its old link
            }
        }
        f.add_link(ch, peer);
        drop(f);
        self.fwd.poke();
        dup_cloexec(self.bell.segment().raw_fd())
    }

    /// One node's part of a multi-hop bind (TN-006 2.5). `left` is the link
    /// towards the client and `left_out` the VCI to use on it; the bind goes
    /// on to the next hop (or the service's dispatcher) and the answer comes
    /// back. Returns (VCI the left side sends to us with, hops, server pid,
    /// server core).
    #[allow(clippy::too_many_arguments)]
    fn route_bind(
        &self,
        left: LinkId,
        left_out: u64,
        iref: u64,
        service: &str,
        target_core: u32,
        chan: u64,
        window: u32,
        hops_before: u32,
        client_pid: u32,
        client_core: u32,
        timeout_ms: u64,
    ) -> Result<(u64, u32, u32, u32)> {
        let hops = hops_before + 1;
        let disp = if target_core == self.cfg.core {
            let services = lock(&self.services);
            let s = services.get(&iref).ok_or_else(|| Error::new(ErrorKind::Bind, format!("service {service:?} is gone")))?;
            Some(s.dispatcher)
        } else {
            None
        };
        let next = match disp {
            Some(conn) => LinkPeer::Dispatcher(conn),
            None => {
                let hop = lock(&self.row).get(&target_core).copied().ok_or_else(|| {
                    Error::new(ErrorKind::Bind, format!("monitor {} has no route to core {target_core}", self.cfg.core))
                })?;
                LinkPeer::Monitor(hop)
            }
        };
        // The server-to-client entry goes in first: the server may send as
        // soon as it has accepted, before our answer reaches the client.
        let (right, v_left, v_right) = {
            let mut f = self.fwd.lock();
            let right = f.link_to(next).ok_or_else(|| {
                Error::new(ErrorKind::Bind, format!("monitor {} has no link to {next:?} (yet)", self.cfg.core))
            })?;
            let (v_left, v_right) = (f.table.draw(left), f.table.draw(right));
            f.table.insert(right, v_right, Entry { out_link: left, out_vci: left_out, partner: (left, v_left), chan });
            (right, v_left, v_right)
        };
        let answer = match next {
            LinkPeer::Dispatcher(conn) => self.ask_service(conn, iref, service, chan, window, v_right, hops, client_pid, client_core, timeout_ms),
            LinkPeer::Monitor(hop) => {
                let msg = Msg::BindHop {
                    req: 1,
                    iref,
                    service: service.to_string(),
                    target_core,
                    from_core: self.cfg.core,
                    chan,
                    window,
                    vci: v_right,
                    hops,
                    client_pid,
                    client_core,
                    timeout_ms,
                };
                let path = monitor_socket(&self.cfg.dir, hop);
                match control::call(&path, Role::Monitor, &msg, &[], Duration::from_millis(timeout_ms + 2000)) {
                    Ok((Msg::HopOk { vci, hops, server_pid, server_core, .. }, _)) => Ok((vci, hops, server_pid, server_core)),
                    Ok((other, _)) => Err(Error::protocol(format!("monitor {hop} answered a bind hop with {other:?}"))),
                    Err(e) => Err(e),
                }
            }
        };
        let mut f = self.fwd.lock();
        match answer {
            Ok((right_out, total, server_pid, server_core)) if f.table.contains(right, v_right) => {
                f.table.insert(left, v_left, Entry { out_link: right, out_vci: right_out, partner: (right, v_right), chan });
                Ok((v_left, total, server_pid, server_core))
            }
            // Torn down on this side while the answer travelled: the server
            // closed at once (its TEARDOWN went on to the client), or the
            // client's side died. Install nothing; make sure the server's
            // side hears of it (a duplicate TEARDOWN is dropped harmlessly).
            Ok((right_out, total, server_pid, server_core)) => {
                f.table.release(left, v_left);
                f.send_teardown(right, right_out);
                Ok((v_left, total, server_pid, server_core))
            }
            Err(e) => {
                f.table.remove_pair(right, v_right);
                f.table.release(left, v_left);
                Err(e)
            }
        }
    }

    /// Ask the exporting dispatcher of this core to accept a multi-hop
    /// channel. Returns (VCI it receives on, hops, its pid, this core).
    #[allow(clippy::too_many_arguments)]
    fn ask_service(
        &self,
        disp: u64,
        iref: u64,
        service: &str,
        chan: u64,
        window: u32,
        vci: u64,
        hops: u32,
        client_pid: u32,
        client_core: u32,
        timeout_ms: u64,
    ) -> Result<(u64, u32, u32, u32)> {
        let make = |conn| Msg::Connect {
            conn,
            iref,
            service: service.to_string(),
            chan,
            transport: "multihop".into(),
            client_pid,
            client_core,
            timeout_ms,
            vci,
            window,
            hops,
        };
        let (vci, _, server_pid) = self.ask_dispatcher(disp, service, chan, "multihop", client_pid, make, &[], timeout_ms)?;
        Ok((vci, hops, server_pid, self.cfg.core))
    }

    /// Send a `Connect` (made by `make` from its id) to dispatcher `disp`
    /// and wait for its answer. On acceptance the channel is recorded and
    /// the reply's VCI, descriptors and the dispatcher's pid are returned.
    #[allow(clippy::too_many_arguments)]
    fn ask_dispatcher(
        &self,
        disp: u64,
        service: &str,
        chan: u64,
        transport: &str,
        client_pid: u32,
        make: impl FnOnce(u64) -> Msg,
        fds: &[std::os::fd::RawFd],
        timeout_ms: u64,
    ) -> Result<(u64, Vec<OwnedFd>, u32)> {
        let (sock, server_pid) = match lock(&self.dispatchers).get(&disp) {
            Some(d) => (d.sock.clone(), d.pid),
            None => return Err(Error::new(ErrorKind::Bind, format!("the dispatcher exporting {service:?} is gone"))),
        };
        let conn = self.next_id();
        let (tx, rx) = mpsc::channel();
        lock(&self.pending).insert(conn, tx);
        if let Err(e) = control::send(&sock, &make(conn), fds) {
            lock(&self.pending).remove(&conn);
            return Err(Error::new(ErrorKind::Bind, format!("could not reach the service {service:?}: {e}")));
        }
        let answer = rx.recv_timeout(Duration::from_millis(timeout_ms));
        lock(&self.pending).remove(&conn);
        match answer {
            Ok((Msg::ConnectReply { accept: true, vci, .. }, rfds)) => {
                let entry = ChannelEntry { service: service.to_string(), transport: transport.to_string(), client_pid, server_pid, role: "server" };
                self.record_channel(chan, disp, entry);
                Ok((vci, rfds, server_pid))
            }
            Ok((Msg::ConnectReply { reason, .. }, _)) => {
                Err(Error::new(ErrorKind::Bind, format!("service {service:?} refused the connection: {reason}")))
            }
            Ok((other, _)) => Err(Error::protocol(format!("service answered {other:?}"))),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(Error::new(
                ErrorKind::Timeout,
                format!("service {service:?} did not accept within {timeout_ms} ms (is it calling accept()?)"),
            )),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err(Error::new(ErrorKind::Bind, format!("the dispatcher exporting {service:?} went away")))
            }
        }
    }

    fn cleanup(&self) {
        let _ = std::fs::remove_file(monitor_socket(&self.cfg.dir, self.cfg.core));
        remove_runtime_dir_if_last(&self.cfg.dir);
        log(self.cfg.core, "stopped");
    }

    fn serve(self: Arc<Self>, sock: SeqSocket) {
        let cred = match sock.peer_cred() {
            Ok(c) => c,
            Err(e) => return log(self.cfg.core, e),
        };
        if cred.uid != self.uid {
            self.counters.refused_peers.fetch_add(1, Ordering::Relaxed);
            log(self.cfg.core, format_args!("refused a connection from uid {} (pid {})", cred.uid, cred.pid));
            // Read its hello first: closing with unread data would reset the
            // connection and the peer would never see why it was refused.
            sock.set_recv_timeout(Some(Duration::from_millis(500)));
            let _ = sock.recv();
            let _ = control::send(
                &sock,
                &Msg::Fail { req: 0, kind: ErrorKind::Monitor, message: format!("uid {} may not attach to a runtime of uid {}", cred.uid, self.uid) },
                &[],
            );
            return;
        }
        sock.set_send_timeout(Duration::from_secs(5));
        let role = match control::recv(&sock) {
            Ok(Some((Msg::Hello { role, .. }, _))) => role,
            Ok(Some((other, _))) => {
                self.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                let _ = control::send(&sock, &Msg::fail(0, &Error::protocol(format!("expected hello, got {other:?}"))), &[]);
                return;
            }
            Ok(None) => return,
            Err(e) => {
                self.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                let _ = control::send(&sock, &Msg::fail(0, &e), &[]);
                return;
            }
        };
        let conn = self.next_id();
        if control::send(&sock, &Msg::Welcome { monitor_pid: self.pid, core: self.cfg.core, conn }, &[]).is_err() {
            return;
        }
        match role {
            Role::Dispatcher => self.serve_dispatcher(conn, cred.pid, Arc::new(sock)),
            Role::Monitor | Role::Tool => self.serve_requests(sock, cred.pid),
        }
    }

    /// Requests from other monitors and tools, answered in order.
    fn serve_requests(self: &Arc<Self>, sock: SeqSocket, peer_pid: u32) {
        loop {
            let (msg, fds) = match control::recv(&sock) {
                Ok(Some(m)) => m,
                Ok(None) => return,
                Err(e) => {
                    self.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                    let _ = control::send(&sock, &Msg::fail(0, &e), &[]);
                    continue;
                }
            };
            let (reply, reply_fds) = self.answer(msg, fds, peer_pid);
            let raw: Vec<_> = reply_fds.iter().map(|f| f.as_raw_fd()).collect();
            if control::send(&sock, &reply, &raw).is_err() {
                return;
            }
            if matches!(reply, Msg::Done { .. }) && self.stopping.load(Ordering::Relaxed) {
                return;
            }
        }
    }

    fn answer(self: &Arc<Self>, msg: Msg, fds: Vec<OwnedFd>, peer_pid: u32) -> (Msg, Vec<OwnedFd>) {
        match msg {
            Msg::SetTable { req, table } => {
                let table: Table = table.into_iter().map(|(s, r)| (s, r.into_iter().collect())).collect();
                if !self.is_initial() {
                    return (Msg::fail(req, &Error::protocol("routing table sent to a monitor that is not the initial one")), vec![]);
                }
                match row_of(&table, self.cfg.core) {
                    Ok((row, initiate, neighbours)) => {
                        *lock(&self.table) = Some(table);
                        self.install_row(row, initiate, neighbours);
                        (Msg::Done { req }, vec![])
                    }
                    Err(e) => (Msg::fail(req, &e), vec![]),
                }
            }
            Msg::GetRow { req, core } => {
                let table = lock(&self.table);
                match table.as_ref().map(|t| row_of(t, core)) {
                    Some(Ok((row, initiate, neighbours))) => (Msg::Row { req, row: row.into_iter().collect(), initiate, neighbours }, vec![]),
                    Some(Err(e)) => (Msg::fail(req, &e), vec![]),
                    None => (Msg::fail(req, &Error::new(ErrorKind::Monitor, "the routing table is not set yet")), vec![]),
                }
            }
            Msg::LinkOpen { req, from_core } => match self.accept_link(LinkPeer::Monitor(from_core), peer_pid, fds) {
                Ok(bell) => (Msg::Done { req }, vec![bell]),
                Err(e) => (Msg::fail(req, &e), vec![]),
            },
            Msg::BindHop { req, iref, service, target_core, from_core, chan, window, vci, hops, client_pid, client_core, timeout_ms } => {
                let left = self.fwd.lock().link_to(LinkPeer::Monitor(from_core));
                let result = match left {
                    Some(left) => self.route_bind(left, vci, iref, &service, target_core, chan, window, hops, client_pid, client_core, timeout_ms),
                    None => Err(Error::new(ErrorKind::Bind, format!("monitor {} has no link from monitor {from_core}", self.cfg.core))),
                };
                match result {
                    Ok((vci, hops, server_pid, server_core)) => (Msg::HopOk { req, vci, hops, server_pid, server_core }, vec![]),
                    Err(e) => (Msg::fail(req, &e), vec![]),
                }
            }
            Msg::Register { req, name, core, pid: _ } => (self.register(req, name, core), vec![]),
            Msg::Lookup { req, name, iref } => (self.lookup(req, &name, iref), vec![]),
            Msg::Unregister { iref } => {
                lock(&self.registry).retain(|_, (i, _)| *i != iref);
                (Msg::Done { req: 0 }, vec![])
            }
            Msg::Bind { req, iref, transport, chan, timeout_ms, client_pid, client_core, .. } => {
                self.bind_at_server(req, iref, transport, chan, timeout_ms, client_pid, client_core, fds)
            }
            Msg::Status { req } => (Msg::StatusReply { req, status: self.status() }, vec![]),
            Msg::Shutdown { req } => {
                self.begin_shutdown();
                (Msg::Done { req }, vec![])
            }
            other => {
                self.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                (Msg::fail(0, &Error::protocol(format!("unexpected request {other:?}"))), vec![])
            }
        }
    }

    fn register(&self, req: u64, name: String, core: u32) -> Msg {
        if !self.is_initial() {
            return Msg::fail(req, &Error::protocol("register sent to a monitor that is not the initial one"));
        }
        let mut reg = lock(&self.registry);
        if let Some((iref, c)) = reg.get(&name) {
            return Msg::fail(
                req,
                &Error::new(ErrorKind::Export, format!("service name {name:?} is already exported (iref {iref:#x} on core {c})")),
            );
        }
        let iref = (core as u64) << 40 | self.next_id();
        reg.insert(name, (iref, core));
        Msg::Exported { req, iref }
    }

    fn lookup(&self, req: u64, name: &str, iref: u64) -> Msg {
        let reg = lock(&self.registry);
        let found = if name.is_empty() {
            reg.iter().find(|(_, (i, _))| *i == iref).map(|(n, (i, c))| (n.clone(), *i, *c))
        } else {
            reg.get(name).map(|(i, c)| (name.to_string(), *i, *c))
        };
        match found {
            Some((name, iref, core)) => Msg::Found { req, name, iref, core },
            None => {
                let what = if name.is_empty() { format!("iref {iref:#x}") } else { format!("{name:?}") };
                Msg::fail(req, &Error::new(ErrorKind::Bind, format!("no service {what} is exported in this runtime")))
            }
        }
    }

    fn initial_call(&self, msg: &Msg) -> Result<Msg> {
        if self.is_initial() {
            let reply = match msg {
                Msg::Register { req, name, core, .. } => self.register(*req, name.clone(), *core),
                Msg::Lookup { req, name, iref } => self.lookup(*req, name, *iref),
                Msg::Unregister { iref } => {
                    lock(&self.registry).retain(|_, (i, _)| i != iref);
                    Msg::Done { req: 0 }
                }
                _ => unreachable!("only registry calls go to the initial monitor"),
            };
            return reply.into_result();
        }
        let path = monitor_socket(&self.cfg.dir, self.cfg.initial_core);
        control::call(&path, Role::Monitor, msg, &[], Duration::from_secs(10)).map(|(m, _)| m)
    }

    /// A dispatcher's long-lived connection.
    fn serve_dispatcher(self: &Arc<Self>, conn: u64, pid: u32, sock: Arc<SeqSocket>) {
        lock(&self.dispatchers).insert(conn, DispatcherEntry { pid, sock: sock.clone(), channels: HashSet::new() });
        loop {
            let (msg, fds) = match control::recv(&sock) {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(e) if e.kind == ErrorKind::Protocol => {
                    self.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                    let _ = control::send(&sock, &Msg::fail(0, &e), &[]);
                    continue;
                }
                Err(_) => break,
            };
            match msg {
                Msg::Export { req, name } => {
                    let reply = self.export(conn, pid, req, name);
                    let _ = control::send(&sock, &reply, &[]);
                }
                Msg::DispatcherLink { req } => {
                    let (reply, rfds) = match self.accept_link(LinkPeer::Dispatcher(conn), pid, fds) {
                        Ok(bell) => (Msg::Done { req }, vec![bell]),
                        Err(e) => (Msg::fail(req, &e), vec![]),
                    };
                    let raw: Vec<_> = rfds.iter().map(|f| f.as_raw_fd()).collect();
                    let _ = control::send(&sock, &reply, &raw);
                }
                Msg::Bind { req, name, iref, transport, chan, timeout_ms, client_core, window, vci, .. } => {
                    let m = self.clone();
                    let s = sock.clone();
                    std::thread::spawn(move || {
                        let (reply, rfds) = if transport == "multihop" {
                            (m.bind_multihop(conn, pid, req, name, iref, chan, timeout_ms, client_core, window, vci), vec![])
                        } else {
                            m.bind_from_client(conn, pid, req, name, iref, transport, chan, timeout_ms, client_core, fds)
                        };
                        let raw: Vec<_> = rfds.iter().map(|f| f.as_raw_fd()).collect();
                        let _ = control::send(&s, &reply, &raw);
                    });
                }
                Msg::ConnectReply { conn: c, .. } => {
                    if let Some(tx) = lock(&self.pending).remove(&c) {
                        let _ = tx.send((msg, fds));
                    }
                }
                Msg::Closed { chan, teardown } => {
                    if teardown != 0 {
                        let mut f = self.fwd.lock();
                        if let Some(l) = f.link_to(LinkPeer::Dispatcher(conn)) {
                            f.teardown_after_drain(l, teardown);
                        }
                        drop(f);
                        self.fwd.poke();
                    }
                    lock(&self.channels).remove(&chan);
                    if let Some(d) = lock(&self.dispatchers).get_mut(&conn) {
                        d.channels.remove(&chan);
                    }
                }
                Msg::Status { req } => {
                    let _ = control::send(&sock, &Msg::StatusReply { req, status: self.status() }, &[]);
                }
                other => {
                    self.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                    let _ = control::send(&sock, &Msg::fail(0, &Error::protocol(format!("unexpected message {other:?}"))), &[]);
                }
            }
        }
        self.dispatcher_gone(conn);
    }

    fn export(&self, conn: u64, pid: u32, req: u64, name: String) -> Msg {
        if name.is_empty() || name.len() > 256 || name.chars().any(|c| c.is_control()) {
            return Msg::fail(req, &Error::new(ErrorKind::Export, format!("invalid service name {name:?}: 1..256 printable characters")));
        }
        match self.initial_call(&Msg::Register { req, name: name.clone(), core: self.cfg.core, pid }) {
            Ok(Msg::Exported { iref, .. }) => {
                lock(&self.services).insert(iref, ServiceEntry { name, dispatcher: conn });
                Msg::Exported { req, iref }
            }
            Ok(other) => Msg::fail(req, &Error::protocol(format!("registry answered {other:?}"))),
            Err(e) => Msg::fail(req, &e),
        }
    }

    /// Resolve a bind target (name, or iref when the name is empty) at the
    /// registry: (name, iref, core of the exporting dispatcher).
    fn resolve(&self, req: u64, name: String, iref: u64) -> Result<(String, u64, u32)> {
        match self.initial_call(&Msg::Lookup { req, name, iref })? {
            Msg::Found { name, iref, core, .. } => Ok((name, iref, core)),
            other => Err(Error::protocol(format!("registry answered {other:?}"))),
        }
    }

    /// Remember a bound channel of dispatcher `disp` (for status and cleanup).
    fn record_channel(&self, chan: u64, disp: u64, entry: ChannelEntry) {
        lock(&self.channels).insert(chan, entry);
        if let Some(d) = lock(&self.dispatchers).get_mut(&disp) {
            d.channels.insert(chan);
        }
    }

    /// Count a client bind's outcome and turn a failure into its reply.
    fn bind_outcome(&self, req: u64, result: Result<(Msg, Vec<OwnedFd>)>) -> (Msg, Vec<OwnedFd>) {
        match result {
            Ok(ok) => {
                self.counters.binds_ok.fetch_add(1, Ordering::Relaxed);
                ok
            }
            Err(e) => {
                self.counters.binds_failed.fetch_add(1, Ordering::Relaxed);
                (Msg::fail(req, &e), vec![])
            }
        }
    }

    /// The client's side of a bind: resolve, forward, relay.
    #[allow(clippy::too_many_arguments)]
    fn bind_from_client(
        &self,
        conn: u64,
        client_pid: u32,
        req: u64,
        name: String,
        iref: u64,
        transport: String,
        chan: u64,
        timeout_ms: u64,
        client_core: u32,
        fds: Vec<OwnedFd>,
    ) -> (Msg, Vec<OwnedFd>) {
        let result = (|| -> Result<(Msg, Vec<OwnedFd>)> {
            if fds.len() != 2 {
                return Err(Error::protocol(format!("bind carries {} descriptors, expected 2", fds.len())));
            }
            if transport != "ump" {
                return Err(Error::new(ErrorKind::Bind, format!("transport {transport:?} is not available (this runtime offers \"ump\")")));
            }
            let (name, iref, core) = self.resolve(req, name, iref)?;
            let timeout_ms = timeout_ms.min(MAX_BIND_TIMEOUT_MS);
            let fwd = Msg::Bind { req, name: name.clone(), iref, transport: transport.clone(), chan, timeout_ms, client_pid, client_core, window: 0, vci: 0 };
            let raw: Vec<_> = fds.iter().map(|f| f.as_raw_fd()).collect();
            let path = monitor_socket(&self.cfg.dir, core);
            let (reply, rfds) = control::call(&path, Role::Monitor, &fwd, &raw, Duration::from_millis(timeout_ms + 2000))?;
            match reply {
                Msg::Bound { chan, iref, service, server_pid, server_core, .. } => {
                    let entry = ChannelEntry { service: service.clone(), transport, client_pid, server_pid, role: "client" };
                    self.record_channel(chan, conn, entry);
                    Ok((Msg::Bound { req, chan, iref, service, server_pid, server_core, vci: 0, hops: 0 }, rfds))
                }
                other => Err(Error::protocol(format!("service monitor answered {other:?}"))),
            }
        })();
        self.bind_outcome(req, result)
    }

    /// The client's side of a multi-hop bind: resolve, then route hop by hop.
    #[allow(clippy::too_many_arguments)]
    fn bind_multihop(
        &self,
        conn: u64,
        client_pid: u32,
        req: u64,
        name: String,
        iref: u64,
        chan: u64,
        timeout_ms: u64,
        client_core: u32,
        window: u32,
        vci: u64,
    ) -> Msg {
        let result = (|| -> Result<(Msg, Vec<OwnedFd>)> {
            let (name, iref, core) = self.resolve(req, name, iref)?;
            let left = self.fwd.lock().link_to(LinkPeer::Dispatcher(conn)).ok_or_else(|| Error::protocol("bind from a dispatcher without a link"))?;
            let timeout_ms = timeout_ms.min(MAX_BIND_TIMEOUT_MS);
            let (v_left, hops, server_pid, server_core) =
                self.route_bind(left, vci, iref, &name, core, chan, window, 0, client_pid, client_core, timeout_ms)?;
            let entry = ChannelEntry { service: name.clone(), transport: "multihop".into(), client_pid, server_pid, role: "client" };
            self.record_channel(chan, conn, entry);
            Ok((Msg::Bound { req, chan, iref, service: name, server_pid, server_core, vci: v_left, hops }, vec![]))
        })();
        self.bind_outcome(req, result).0
    }

    /// The service's side of a bind: ask the exporting dispatcher.
    #[allow(clippy::too_many_arguments)]
    fn bind_at_server(
        &self,
        req: u64,
        iref: u64,
        transport: String,
        chan: u64,
        timeout_ms: u64,
        client_pid: u32,
        client_core: u32,
        fds: Vec<OwnedFd>,
    ) -> (Msg, Vec<OwnedFd>) {
        let fail = |e: Error| (Msg::fail(req, &e), vec![]);
        if fds.len() != 2 {
            return fail(Error::protocol(format!("forwarded bind carries {} descriptors, expected 2", fds.len())));
        }
        let (service, disp) = {
            let services = lock(&self.services);
            match services.get(&iref) {
                Some(s) => (s.name.clone(), s.dispatcher),
                None => return fail(Error::new(ErrorKind::Bind, format!("service iref {iref:#x} is gone"))),
            }
        };
        let make = |conn| Msg::Connect {
            conn,
            iref,
            service: service.clone(),
            chan,
            transport: transport.clone(),
            client_pid,
            client_core,
            timeout_ms,
            vci: 0,
            window: 0,
            hops: 0,
        };
        let raw: Vec<_> = fds.iter().map(|f| f.as_raw_fd()).collect();
        match self.ask_dispatcher(disp, &service, chan, &transport, client_pid, make, &raw, timeout_ms) {
            Ok((_, rfds, server_pid)) if rfds.len() == 1 => {
                (Msg::Bound { req, chan, iref, service, server_pid, server_core: self.cfg.core, vci: 0, hops: 0 }, rfds)
            }
            Ok(_) => fail(Error::protocol(format!("service {service:?} accepted without its doorbell"))),
            Err(e) => fail(e),
        }
    }

    fn dispatcher_gone(&self, conn: u64) {
        {
            let mut f = self.fwd.lock();
            if let Some(l) = f.link_to(LinkPeer::Dispatcher(conn)) {
                f.drain_and_remove(l); // forwards what it sent, then tears its channels down
            }
        }
        self.fwd.poke();
        let entry = lock(&self.dispatchers).remove(&conn);
        let gone: Vec<u64> = {
            let mut services = lock(&self.services);
            let irefs: Vec<u64> = services.iter().filter(|(_, s)| s.dispatcher == conn).map(|(i, _)| *i).collect();
            for i in &irefs {
                services.remove(i);
            }
            irefs
        };
        for iref in gone {
            if let Err(e) = self.initial_call(&Msg::Unregister { iref }) {
                log(self.cfg.core, format_args!("could not unregister iref {iref:#x}: {e}"));
            }
        }
        if let Some(d) = entry {
            let mut chans = lock(&self.channels);
            for c in d.channels {
                chans.remove(&c);
            }
        }
    }

    fn status(&self) -> serde_json::Value {
        let dispatchers: Vec<_> = lock(&self.dispatchers)
            .iter()
            .map(|(id, d)| json!({"id": id, "pid": d.pid, "channels": d.channels.len()}))
            .collect();
        let services: Vec<_> = lock(&self.services)
            .iter()
            .map(|(iref, s)| json!({"name": s.name, "iref": iref, "dispatcher": s.dispatcher}))
            .collect();
        let channels: Vec<_> = lock(&self.channels)
            .iter()
            .map(|(id, c)| json!({"id": id, "service": c.service, "transport": c.transport, "client_pid": c.client_pid, "server_pid": c.server_pid, "side": c.role}))
            .collect();
        let registry: Option<Vec<_>> = self.is_initial().then(|| {
            lock(&self.registry).iter().map(|(n, (i, c))| json!({"name": n, "iref": i, "core": c})).collect()
        });
        let data = self.fwd.status();
        let links_up = self.fwd.lock().monitor_links();
        let row: BTreeMap<String, u32> = lock(&self.row).iter().map(|(d, n)| (d.to_string(), *n)).collect();
        json!({
            "core": self.cfg.core,
            "pid": self.pid,
            "routing_row": row,
            "neighbours": *lock(&self.neighbours),
            "monitor_links_up": links_up,
            "data": data,
            "cpu": self.cfg.cpu,
            "initial": self.is_initial(),
            "uptime_s": self.started.elapsed().as_secs_f64(),
            "dispatchers": dispatchers,
            "services": services,
            "channels": channels,
            "registry": registry,
            "binds_ok": self.counters.binds_ok.load(Ordering::Relaxed),
            "binds_failed": self.counters.binds_failed.load(Ordering::Relaxed),
            "bad_frames": self.counters.bad_frames.load(Ordering::Relaxed),
            "refused_peers": self.counters.refused_peers.load(Ordering::Relaxed),
        })
    }
}

/// Remove the runtime directory if no monitor socket is left in it.
fn remove_runtime_dir_if_last(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let names: Vec<String> = entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    if names.iter().any(|n| n.starts_with("mon-") && n.ends_with(".sock")) {
        return;
    }
    for n in &names {
        let _ = std::fs::remove_file(dir.join(n));
    }
    let _ = std::fs::remove_dir(dir);
}
