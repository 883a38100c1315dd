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
//! Liveness is the runtime lock (`liveness.rs`): the monitor holds the
//! starter's exclusive lock for its whole life.  It ends on `Shutdown`, on
//! SIGTERM/SIGINT/SIGHUP, or when its owner process exits (a runtime started
//! from a program lives as long as that program).  On the way out it removes
//! its socket and lets go of the lock; the last monitor out removes the
//! runtime directory.
//!
//! One concern per file:
//! - `mod.rs`: configuration, state, the accept loop, shutdown;
//! - [`lifecycle`]: pinning, signals, the owner watch, the way out;
//! - [`serve`]: a new connection (credentials, hello) and one-shot requests;
//! - [`dispatchers`]: a dispatcher's long-lived connection and its end;
//! - [`registry`]: names, irefs and exports (the initial monitor's table);
//! - [`routing`]: this monitor's routing row and its boot;
//! - [`links`]: monitor-to-monitor and dispatcher links (the data plane's rings);
//! - [`binds`]: what every bind shares (resolve, ask the service, records);
//! - [`bind_ump`], [`bind_multihop`]: the two transports' binds;
//! - [`status`]: what `multihop status` shows;
//! - [`handles`]: handles passing through (TN-006 2.7);
//! - [`multicast`]: the group service's requests (fan-out entries, marks).

mod bind_multihop;
mod bind_ump;
mod binds;
mod dispatchers;
mod handles;
mod lifecycle;
mod links;
mod multicast;
mod registry;
mod routing;
mod serve;
mod status;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::forward::Forwarder;
use multihop_base::control::{monitor_socket, Msg};
use multihop_base::error::{Error, ErrorKind, Result};
use multihop_base::park::process_doorbell;
use multihop_base::park::Doorbell;
use multihop_base::peer::PeerWatch;
use multihop_base::sock::{SeqListener, SeqSocket};

/// How a monitor is started (from `python -m multihop.monitor`).
#[derive(Debug)]
pub struct MonitorConfig {
    pub dir: PathBuf,
    pub core: u32,
    /// Real CPU to pin to (`None`: leave affinity alone).
    pub cpu: Option<usize>,
    /// Core of the initial monitor (the registry holder).
    pub initial_core: u32,
    /// Exit when this process exits (`None`: live until shut down).
    pub owner_pid: Option<u32>,
    /// The runtime lock the starter took (an inherited descriptor of its
    /// open file description, see `liveness.rs`). `None`: the monitor claims
    /// the directory itself (a one-monitor runtime started by hand).
    pub lock_fd: Option<OwnedFd>,
}

struct ServiceEntry {
    name: String,
    dispatcher: u64,
}

struct DispatcherEntry {
    pid: u32,
    sock: Arc<SeqSocket>,
    /// Channel ids of this dispatcher's ends (keys of `Monitor::channels`).
    channels: HashSet<u64>,
}

/// One channel end of a dispatcher of this core, for status and cleanup.
struct ChannelEntry {
    service: String,
    transport: String,
    client_pid: u32,
    server_pid: u32,
    role: &'static str,
    /// A UMP channel's segment and doorbells, which this monitor passed on
    /// at its bind: known as the runtime's (`handles::owned`) while it lives.
    _marks: Vec<multihop_base::handles::owned::Mark>,
}

/// Marks (`handles::owned`) of the segments and doorbells a UMP bind passes through this monitor.
fn ump_marks(fds: &[std::os::fd::RawFd]) -> Vec<multihop_base::handles::owned::Mark> {
    fds.iter().map(|&fd| multihop_base::handles::owned::Mark::inode(fd, multihop_base::handles::owned::Kind::Segment)).collect()
}

#[derive(Default)]
struct Counters {
    binds_ok: AtomicU64,
    binds_failed: AtomicU64,
    bad_frames: AtomicU64,
    refused_peers: AtomicU64,
    idle_hangups: AtomicU64,
    /// Connections refused because this process's descriptor table was full
    /// (Relaxed, like the others: a status counter, it orders nothing).
    refused_full: AtomicU64,
}

type Table = BTreeMap<u32, BTreeMap<u32, u32>>;
/// A control message and the descriptors that came with it.
type Reply = (Msg, Vec<OwnedFd>);
/// A monitor's routing row, the neighbours it opens links to, and all its neighbours.
type RowAndLinks = (BTreeMap<u32, u32>, Vec<u32>, Vec<u32>);

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
    /// (dispatcher connection, channel id) -> that dispatcher's end. Keyed
    /// by both: the two ends of one channel may live on this core.
    channels: Mutex<HashMap<(u64, u64), ChannelEntry>>,
    /// conn id -> where the dispatcher's ConnectReply goes.
    pending: Mutex<HashMap<u64, mpsc::Sender<Reply>>>,
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
    table: Mutex<Option<Table>>,
    /// The runtime lock, held until the way out.
    lock: Mutex<Option<OwnedFd>>,
    /// Handles passing through: UMP routes, relay connections (`handles.rs`).
    caps: handles::MonitorCaps,
}

fn log(core: u32, msg: impl std::fmt::Display) {
    eprintln!("[monitor {core} pid {}] {msg}", std::process::id());
}

/// Start a thread or say which one could not start.
/// A descriptor held in reserve for the accept loop (`/dev/null`), if one can be opened.
fn open_spare() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(|_| ())
        .map_err(|e| Error::new(ErrorKind::Os, format!("cannot start the monitor's {name} thread: {e}")))
}

/// Longest a forwarded bind may wait for a service.
const MAX_BIND_TIMEOUT_MS: u64 = 600_000;
/// Longest a new connection may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a tool or monitor connection may sit idle between requests.
const REQUEST_IDLE: Duration = Duration::from_secs(30);

/// Run a monitor until it is told to stop. Returns the process exit code;
/// an error means it could not start (or lost a thread it cannot run
/// without) and has cleaned up after itself.
pub fn run(mut cfg: MonitorConfig) -> Result<i32> {
    let lock_fd = match cfg.lock_fd.take() {
        Some(fd) => {
            multihop_base::liveness::check_held(&fd, &cfg.dir)?;
            fd
        }
        None => multihop_base::liveness::claim(&cfg.dir)?,
    };
    multihop_base::error::set_process_label(format!("monitor {}", cfg.core));
    if let Some(cpu) = cfg.cpu {
        lifecycle::pin_to_cpu(cpu)?;
    }
    let signals = lifecycle::block_termination_signals();
    handles::raise_descriptor_limit();
    let path = monitor_socket(&cfg.dir, cfg.core);
    let _ = std::fs::remove_file(&path);
    let listener = SeqListener::bind(&path)?;
    let owner = match cfg.owner_pid {
        Some(pid) => Some(PeerWatch::new(pid)?),
        None => None,
    };
    let mon = Arc::new(Monitor {
        pid: std::process::id(),
        // SAFETY: getuid cannot fail.
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
        fwd: Forwarder::new(process_doorbell()?, true),
        bell: process_doorbell()?,
        row: Mutex::new(BTreeMap::new()),
        neighbours: Mutex::new(Vec::new()),
        table: Mutex::new(None),
        lock: Mutex::new(Some(lock_fd)),
        caps: handles::MonitorCaps::default(),
        cfg,
    });
    if let Err(e) = mon.start_threads(signals, owner) {
        // A monitor without its data plane (or without its ears) must not run.
        log(mon.cfg.core, format_args!("{e}; exiting"));
        mon.begin_shutdown();
        mon.cleanup();
        return Err(e);
    }
    log(mon.cfg.core, format_args!("listening on {}", path.display()));
    mon.accept_loop();
    mon.cleanup();
    Ok(0)
}

impl Monitor {
    /// The threads the monitor cannot run without: forwarding, signals, the
    /// owner watch, and a later monitor's boot.
    fn start_threads(self: &Arc<Self>, signals: libc::sigset_t, owner: Option<PeerWatch>) -> Result<()> {
        let f = self.fwd.clone();
        spawn("forward", move || f.run())?;
        let m = self.clone();
        spawn("signals", move || lifecycle::wait_signals(m, signals))?;
        if let Some(owner) = owner {
            let m = self.clone();
            spawn("owner", move || lifecycle::watch_owner(m, owner))?;
        }
        if !self.is_initial() {
            let m = self.clone();
            spawn("boot", move || m.boot())?;
        }
        Ok(())
    }

    fn accept_loop(self: &Arc<Self>) {
        // One descriptor kept in reserve: when the table is full (EMFILE), it is let go to take the
        // waiting connection and tell it why at once, instead of leaving it to time out.
        let mut spare = open_spare();
        let mut said_full: Option<std::time::Instant> = None;
        loop {
            match self.listener.accept() {
                Ok(sock) => {
                    if self.stopping.load(Ordering::Relaxed) {
                        break;
                    }
                    if spare.is_none() {
                        spare = open_spare(); // a connection taken in the reserve's place: is there room now?
                        if spare.is_none() {
                            self.refuse_full(sock);
                            continue;
                        }
                    }
                    let m = self.clone();
                    if let Err(e) = spawn("conn", move || m.serve(sock)) {
                        log(self.cfg.core, e); // the connection is dropped; the monitor goes on
                    }
                }
                Err(e) => {
                    if self.stopping.load(Ordering::Relaxed) {
                        break;
                    }
                    let full = e.raw_os_error() == Some(libc::EMFILE);
                    if !full || said_full.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                        log(self.cfg.core, format_args!("accept failed: {}", Error::os("accept", e)));
                        said_full = full.then(std::time::Instant::now);
                    }
                    if full && spare.is_some() {
                        drop(spare.take()); // the next accept takes its place (and is refused if the table is still full)
                        continue;
                    }
                    spare = spare.or_else(open_spare);
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }

    /// A connection that came while the descriptor table is full: read its
    /// hello (hanging up on unread data would reset it before it reads why),
    /// answer with the limit, hang up.
    fn refuse_full(&self, sock: SeqSocket) {
        let _ = sock.set_recv_timeout(Some(Duration::from_millis(50)));
        let _ = sock.set_send_timeout(Duration::from_millis(200));
        let _ = sock.recv_at_most(4096);
        let e = Error::new(ErrorKind::Os, format!("monitor {} cannot take a connection: {}", self.cfg.core, multihop_base::error::limit_note()));
        let _ = multihop_base::control::send(&sock, &Msg::fail(0, &e), &[]);
        self.counters.refused_full.fetch_add(1, Ordering::Relaxed);
    }

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

    /// Raw descriptors of a reply (borrowed for one send).
    fn raw(fds: &[OwnedFd]) -> Vec<std::os::fd::RawFd> {
        fds.iter().map(|f| f.as_raw_fd()).collect()
    }
}
