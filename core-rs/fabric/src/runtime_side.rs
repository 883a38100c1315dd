//! The runtime's side of the bridge: `multihop-bridge --runtime-dir DIR` attached to its runtime.
//!
//! The bridge attaches to the runtime's initial monitor as a dispatcher (the code every process attached to a
//! runtime uses), so the local hops of a bridged channel are ordinary multi-hop channels that the monitors forward
//! by VCI, with their own credit, and the bridge relays between them and the fabric:
//!
//! - **outgoing**: every service another runtime exports to the fabric (its liveliness token) is exported here as
//!   `service@runtime` by the bridge, so `d.bind("echo@hostb", transport="multihop")` is a plain local bind; the
//!   bridge's `on_connect` binds `echo` on `hostb` across the fabric first and takes the local connection only if
//!   that bind succeeded (else the client's bind fails with the fabric's reason). A runtime that leaves the fabric
//!   takes its `service@runtime` names with it: a bind to it fails as any bind to an unknown service does.
//! - **incoming**: a bind from another runtime for a service exported here with `export(name, fabric=True)` (the
//!   dispatcher tells the bridge over its control socket, `multihop_dispatcher::fabric_export`) makes the bridge
//!   bind that service locally (over UMP: a ring pair, no monitor on that hop), and accept or refuse the fabric's
//!   bind with the outcome.
//! - **frames**: the messages a local end sends are packed into fabric frames (up to [`FRAME_MESSAGES`] messages,
//!   [`FRAME_BYTES`] bytes) under a multi-hop header; each side of a bridged channel keeps an end-to-end credit of
//!   [`RELAY_WINDOW`] frames per direction (acks ride in the header's `ack` field of any frame going back, or in a
//!   DUMMY frame every half window), so the fabric's own window (`fabric_window`) is never overrun and every queue
//!   on the way is bounded: a slow reader on one machine stops the writer on the other.
//! - **ends**: a channel's end closing locally sends a TEARDOWN after everything it sent; the fabric closing a
//!   channel (the other end closed, the peer runtime died, a gap or a duplicate) closes the local end after every
//!   message delivered before it. The bridge's ends refuse handles (`CapSendError(reason="bridged")`): handles
//!   cannot leave a machine.
//!
//! Threads: the driver's loop owns this [`RuntimeLocal`] and calls it (never blocking); the loop parks on the
//! process's doorbell, which every writer to a local end rings, and looks at [`Local::ready`] before it sleeps; the
//! dispatcher's acceptor thread runs the proxies' `on_connect`, which waits for the fabric's bind; one thread serves
//! the control socket.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use multihop_base::error::ErrorKind;
use multihop_base::handles::reason::BRIDGED;
use multihop_base::ringpair::Want;
use multihop_base::wire::{Header, Kind, DIR_TO_CLIENT, DIR_TO_SERVER, HEADER_BYTES};
use multihop_dispatcher::fabric_export::fabric_socket;
use multihop_dispatcher::{BindOptions, Channel, Dispatcher, PendingBind, Service};

use crate::bridge::{ChanId, Status};
use crate::config::Priority;
use crate::driver::{status_json, DriverStats, Handle, Local, LocalEvent};
use crate::reason::{BindRefused, Teardown};

/// Frames of one bridged channel direction in flight across the fabric (sent by one bridge, not yet written to
/// its local end by the other): the end-to-end credit of the relay.
pub const RELAY_WINDOW: u32 = 64;
/// Bytes of frames of one bridged channel direction in flight across the fabric, at most (beyond one frame): with
/// [`RELAY_WINDOW`], what bounds the bridge's buffering, so a slow link holds the sender back within ~512 KiB
/// (four frames of [`FRAME_BYTES`]).
pub const RELAY_BYTES: u64 = 512 * 1024;
/// Most messages packed into one fabric frame.
pub const FRAME_MESSAGES: usize = 64;
/// Most bytes of messages packed into one fabric frame (a single larger message goes alone). 128 KiB (Zenoh
/// fragments a put beyond its 64 KiB batch): measured with `benches/bench_fabric.py --peers runtime`, 4 KiB one way,
/// same hour, 64 KiB frames with 256 KiB in flight 75,000-79,000 msg/s (21-23 us of CPU per message over both
/// machines), 128 KiB with 512 KiB 93,000-97,000 (18 us), 256 KiB with 1 MiB 89,000-102,000: fewer frames per
/// message mean fewer wake-ups along the path, which is where the time goes (perf: context switches, not copies).
pub const FRAME_BYTES: usize = 128 * 1024;
/// The window of the local multi-hop channels the bridge binds for incoming binds.
pub const LOCAL_WINDOW: u32 = 64;
/// How long a fabric bind may take when the local client gave no deadline the bridge can see.
const BIND_TIMEOUT: Duration = Duration::from_secs(5);

const WANT_READ: u8 = 1;
const WANT_WRITE: u8 = 2;

/// One local end the pump watches for the loop.
struct Watched {
    ch: Arc<Channel>,
    /// What the loop waits for on it (WANT_READ: it has credit to send; WANT_WRITE: a frame waits for room).
    /// Only the loop's thread touches it (atomics for `&self` access from `Local::ready`); Relaxed.
    want: AtomicU8,
    /// Size of the message waiting for room (for the WANT_WRITE look).
    need: AtomicU64,
}

impl Watched {
    fn ready(&self) -> bool {
        let w = self.want.load(Ordering::Relaxed);
        (w & WANT_READ != 0 && self.ch.readable())
            || (w & WANT_WRITE != 0 && self.ch.is_ready(Want::Writable(self.need.load(Ordering::Relaxed) as usize)))
    }
}

/// One bridged channel's local end and its relay state.
struct Relay {
    w: Arc<Watched>,
    /// The direction of the frames this side sends.
    dir: u8,
    /// DATA frames sent to the fabric, and how many of them the other side acked.
    sent: u64,
    acked: u64,
    /// Sizes of the frames sent and not acked yet, oldest first, and their sum.
    sizes: VecDeque<u64>,
    unacked_bytes: u64,
    /// Frames (and their bytes) written to the local end since the last ack went back.
    to_ack: u32,
    to_ack_bytes: u64,
    /// Messages of the frame being written to the local end already written (the rest waits for room).
    partial: usize,
    /// This side's TEARDOWN went out (the local end closed).
    eof: bool,
}

impl Relay {
    /// Whether another frame may go: fewer than [`RELAY_WINDOW`] frames and [`RELAY_BYTES`] bytes unacked.
    fn has_credit(&self) -> bool {
        self.sent - self.acked < u64::from(RELAY_WINDOW) && self.unacked_bytes < RELAY_BYTES
    }

    /// The other side wrote `n` more of this side's frames to its local end.
    fn on_ack(&mut self, n: u32) {
        for _ in 0..n {
            match self.sizes.pop_front() {
                Some(b) => {
                    self.unacked_bytes -= b;
                    self.acked += 1;
                }
                None => break, // more acks than frames: ignored (the fabric's own sequence numbers guard the frames)
            }
        }
    }

    /// The ack to carry on the next frame back (and start counting again).
    fn take_ack(&mut self) -> u32 {
        self.to_ack_bytes = 0;
        std::mem::take(&mut self.to_ack)
    }
}

/// A fabric bind the acceptor thread waits for.
type BindWaiters = Arc<Mutex<HashMap<u64, mpsc::SyncSender<Result<ChanId, String>>>>>;

/// The runtime's side of the bridge (the driver's [`Local`]).
pub struct RuntimeLocal {
    h: Handle,
    d: Arc<Dispatcher>,
    runtime: String,
    relays: BTreeMap<ChanId, Relay>,
    /// Proxies: `service@runtime` -> the local service standing for it.
    proxies: BTreeMap<String, Arc<Service>>,
    /// Fabric binds the proxies' `on_connect` waits for, by tag.
    waiters: BindWaiters,
    next_tag: Arc<AtomicU64>,
    /// Local channel id (the proxy's accepted connection) -> its fabric channel, until the loop accepts it.
    accepted: Arc<Mutex<HashMap<u64, (ChanId, Instant)>>>,
    /// Fabric channels whose proxy connection has not been accepted yet: their frames wait.
    unaccepted: BTreeMap<ChanId, Instant>,
    /// Incoming binds: the local bind under way.
    incoming: BTreeMap<ChanId, PendingBind>,
    /// Who asked for the status (the control socket's connections).
    status_waiters: Arc<Mutex<VecDeque<Sender<String>>>>,
    verbose: bool,
}

fn frame(dir: u8, kind: Kind, ack: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(HEADER_BYTES + payload.len());
    f.extend_from_slice(&Header { vci: 0, dir, kind, flags: 0, ack }.encode());
    f.extend_from_slice(payload);
    f
}

/// The messages packed in a frame's payload: `[u32 length][bytes]...`; `None` if it does not parse.
fn unpack(payload: &[u8]) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < payload.len() {
        let n = u32::from_le_bytes(payload.get(at..at + 4)?.try_into().ok()?) as usize;
        out.push(payload.get(at + 4..at + 4 + n)?);
        at += 4 + n;
    }
    Some(out)
}

impl RuntimeLocal {
    /// Attach to the initial monitor of the runtime in `dir` (core `core`) as runtime `runtime`'s bridge.
    pub fn attach(dir: &Path, core: u32, runtime: &str) -> Result<Arc<Dispatcher>, String> {
        Dispatcher::attach(dir, core).map(Arc::new).map_err(|e| format!("cannot attach to runtime {runtime} in {}: {e}", dir.display()))
    }

    /// The local side for the driver (from `Driver::open`'s `make_local`).
    pub fn new(h: Handle, d: Arc<Dispatcher>, runtime: &str) -> RuntimeLocal {
        let verbose = std::env::var_os("MULTIHOP_BRIDGE_DEBUG").is_some_and(|v| v == "1");
        RuntimeLocal {
            h,
            d,
            runtime: runtime.to_string(),
            relays: BTreeMap::new(),
            proxies: BTreeMap::new(),
            waiters: Arc::new(Mutex::new(HashMap::new())),
            next_tag: Arc::new(AtomicU64::new(1)),
            accepted: Arc::new(Mutex::new(HashMap::new())),
            unaccepted: BTreeMap::new(),
            incoming: BTreeMap::new(),
            status_waiters: Arc::new(Mutex::new(VecDeque::new())),
            verbose,
        }
    }

    /// Serve the control socket `<dir>/fabric.sock` (exports, status) on a thread of its own.
    pub fn serve_control(&self, dir: &Path) -> Result<PathBuf, String> {
        let path = fabric_socket(dir);
        let _ = std::fs::remove_file(&path);
        let l = UnixListener::bind(&path).map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
        let (h, waiters) = (self.h.clone(), self.status_waiters.clone());
        thread::Builder::new()
            .name("mh-bridge-ctl".into())
            .spawn(move || {
                for conn in l.incoming().flatten() {
                    let (h, waiters) = (h.clone(), waiters.clone());
                    let _ = thread::Builder::new().name("mh-bridge-ctl-conn".into()).spawn(move || control_conn(conn, h, waiters));
                }
            })
            .map_err(|e| format!("cannot start the control thread: {e}"))?;
        Ok(path)
    }

    fn note(&self, what: &str) {
        if self.verbose {
            eprintln!("multihop-bridge[{}]: {what}", self.runtime);
        }
    }

    fn add_relay(&mut self, chan: ChanId, ch: Channel, dir: u8) {
        ch.refuse_handles(BRIDGED, "handles cannot leave a machine: this channel crosses the fabric to another runtime");
        let w = Arc::new(Watched { ch: Arc::new(ch), want: AtomicU8::new(WANT_READ), need: AtomicU64::new(0) });
        self.relays.insert(
            chan,
            Relay { w, dir, sent: 0, acked: 0, sizes: VecDeque::new(), unacked_bytes: 0, to_ack: 0, to_ack_bytes: 0, partial: 0, eof: false },
        );
    }

    fn drop_relay(&mut self, chan: ChanId, reason: Option<&str>) {
        if let Some(r) = self.relays.remove(&chan) {
            match reason {
                Some(why) => r.w.ch.close_with_reason(why),
                None => r.w.ch.close(),
            }
        }
    }

    /// Read what the local end of `chan` has, within its credit, into frames for the fabric.
    fn pull(&mut self, chan: ChanId) {
        let h = self.h.clone();
        let Some(r) = self.relays.get_mut(&chan) else { return };
        let mut buf: Vec<u8> = Vec::new();
        while !r.eof && r.has_credit() {
            buf.clear();
            let mut count = 0;
            let mut over = false;
            while count < FRAME_MESSAGES && buf.len() < FRAME_BYTES {
                let got = r.w.ch.try_recv_with(|n, fill| {
                    let at = buf.len();
                    buf.extend_from_slice(&(n as u32).to_le_bytes());
                    buf.resize(at + 4 + n, 0);
                    fill(&mut buf[at + 4..]);
                    Ok(())
                });
                match got {
                    Ok(Some(())) => count += 1,
                    Ok(None) => break,
                    Err(e) => {
                        over = true;
                        if e.kind != ErrorKind::ChannelClosed {
                            eprintln!("multihop-bridge: reading channel {}: {e}", chan.0);
                        }
                        break;
                    }
                }
            }
            if count > 0 {
                let ack = r.take_ack();
                h.local(LocalEvent::Frame(chan, frame(r.dir, Kind::Data, ack, &buf)));
                r.sent += 1;
                r.sizes.push_back(buf.len() as u64);
                r.unacked_bytes += buf.len() as u64;
            }
            if over {
                // The local end closed: a TEARDOWN after everything it sent (the bridge closes the channel once the
                // other side has it all).
                let ack = r.take_ack();
                h.local(LocalEvent::Frame(chan, frame(r.dir, Kind::Teardown, ack, &[])));
                r.eof = true;
                break;
            }
            if count == 0 {
                break;
            }
        }
        let want = if !r.eof && r.has_credit() { WANT_READ } else { 0 };
        let keep = r.w.want.load(Ordering::Relaxed) & WANT_WRITE;
        r.w.want.store(want | keep, Ordering::Relaxed);
    }

    fn take_accepted(&mut self) {
        let mut got = Vec::new();
        for svc in self.proxies.values() {
            while let Ok(Some(ch)) = svc.try_accept() {
                got.push(ch);
            }
        }
        for ch in got {
            let entry = self.accepted.lock().unwrap_or_else(|e| e.into_inner()).remove(&ch.info().id);
            match entry {
                Some((chan, _)) => {
                    self.unaccepted.remove(&chan);
                    self.add_relay(chan, ch, DIR_TO_SERVER);
                    self.note(&format!("channel {} bound across the fabric", chan.0));
                }
                None => ch.close(), // its fabric bind was given up
            }
        }
        // Fabric channels whose local client gave up before the connection was accepted.
        let now = Instant::now();
        self.accepted.lock().unwrap_or_else(|e| e.into_inner()).retain(|_, (_, expires)| now <= *expires + Duration::from_secs(1));
        let late: Vec<ChanId> = self.unaccepted.iter().filter(|(_, &t)| now > t + Duration::from_secs(1)).map(|(&c, _)| c).collect();
        for chan in late {
            self.unaccepted.remove(&chan);
            self.h.local(LocalEvent::Close(chan, "the local client gave up its bind".into()));
        }
    }

    fn poll_incoming(&mut self) {
        let done: Vec<ChanId> = self.incoming.iter_mut().filter_map(|(&c, p)| p.poll().then_some(c)).collect();
        for chan in done {
            let mut p = self.incoming.remove(&chan).expect("listed");
            match p.finish() {
                Ok(ch) => {
                    self.h.local(LocalEvent::Accept(chan));
                    self.add_relay(chan, ch, DIR_TO_CLIENT);
                }
                Err(e) => {
                    self.h.local(LocalEvent::Refuse(chan, e.to_string()));
                }
            }
        }
    }
}

impl Local for RuntimeLocal {
    fn deliver(&mut self, chan: ChanId, f: &[u8]) -> bool {
        if self.unaccepted.contains_key(&chan) {
            return false; // the proxy's connection is not taken yet: keep it
        }
        let Some(r) = self.relays.get_mut(&chan) else { return true };
        let Ok(hd) = Header::decode(f) else {
            self.h.local(LocalEvent::Close(chan, "a frame from the fabric without a valid header".into()));
            return true;
        };
        // Credit back (counted once: a frame offered again after "not now" has `partial` > 0 or is re-offered
        // whole; acks are taken on the first offer only).
        if r.partial == 0 && r.w.want.load(Ordering::Relaxed) & WANT_WRITE == 0 {
            r.on_ack(hd.ack);
        }
        match hd.kind {
            Kind::Dummy => {}
            Kind::Teardown => {
                // Everything before it is written to the local end; its closing tells the end.
                self.drop_relay(chan, None);
                return true;
            }
            Kind::Data => {
                let Some(msgs) = unpack(&f[HEADER_BYTES..]) else {
                    self.h.local(LocalEvent::Close(chan, "a frame from the fabric whose messages do not parse".into()));
                    return true;
                };
                let rest = &msgs[r.partial..];
                match r.w.ch.try_send_many(&mut rest.iter().copied()) {
                    Ok(n) if n == rest.len() => {
                        r.partial = 0;
                        r.w.want.fetch_and(!WANT_WRITE, Ordering::Relaxed);
                        r.to_ack += 1;
                        r.to_ack_bytes += (f.len() - HEADER_BYTES) as u64;
                        if r.to_ack >= RELAY_WINDOW.div_ceil(2) || r.to_ack_bytes >= RELAY_BYTES / 4 {
                            let ack = r.take_ack();
                            self.h.local(LocalEvent::Frame(chan, frame(r.dir, Kind::Dummy, ack, &[])));
                        }
                    }
                    Ok(n) => {
                        r.partial += n;
                        r.w.need.store(msgs[r.partial].len() as u64, Ordering::Relaxed);
                        r.w.want.fetch_or(WANT_WRITE, Ordering::Relaxed);
                        return false;
                    }
                    Err(e) => {
                        let why = if e.kind == ErrorKind::ChannelClosed {
                            "its local end closed".to_string()
                        } else {
                            format!("writing to its local end failed: {e}")
                        };
                        self.h.local(LocalEvent::Close(chan, why));
                        self.drop_relay(chan, None);
                        return true;
                    }
                }
            }
        }
        // Acks may have opened the window: read on.
        self.pull(chan);
        true
    }

    fn bind_done(&mut self, tag: u64, chan: ChanId, result: Result<(), BindRefused>) {
        let w = self.waiters.lock().unwrap_or_else(|e| e.into_inner()).remove(&tag);
        let answer = result.map(|()| chan).map_err(|r| r.text);
        match w {
            Some(tx) if tx.try_send(answer.clone()).is_ok() => {
                if answer.is_ok() {
                    // Frames wait until the proxy's connection is accepted (or given up after its deadline).
                    self.unaccepted.insert(chan, Instant::now() + BIND_TIMEOUT);
                }
            }
            _ => {
                if answer.is_ok() {
                    self.h.local(LocalEvent::Close(chan, "the local client gave up its bind".into()));
                }
            }
        }
    }

    fn incoming_bind(&mut self, chan: ChanId, from: &str, service: &str, _window: u32, _priority: Priority) {
        self.note(&format!("runtime {from} binds {service}"));
        // UMP: the bridge and the service share a ring pair, no monitor on that hop (measured, bench_fabric's
        // runtime peer, same run: round trip 309-348 us with it, 390-418 us through the monitors, p99 1.4 ms vs
        // 3.9-9.2 ms). The service's code does not change: an accepted channel is a channel.
        let opts = BindOptions { transport: "ump".into(), max_message: None, window: LOCAL_WINDOW, timeout: BIND_TIMEOUT };
        match self.d.bind_start(service, 0, &opts) {
            Ok(p) => {
                self.incoming.insert(chan, p);
            }
            Err(e) => {
                self.h.local(LocalEvent::Refuse(chan, e.to_string()));
            }
        }
    }

    fn closed(&mut self, chan: ChanId, reason: &Teardown, tell_end: bool) {
        self.note(&format!("channel {} closed: {}", chan.0, reason.text));
        self.unaccepted.remove(&chan);
        self.incoming.remove(&chan);
        let why = format!("across the fabric: {reason}");
        self.drop_relay(chan, tell_end.then_some(why.as_str()));
    }

    fn peer(&mut self, runtime: &str, up: bool, detail: &str) {
        self.note(&format!("runtime {runtime} {}: {detail}", if up { "up" } else { "down" }));
    }

    fn status(&mut self, status: &Status, driver: &DriverStats) {
        let mut v = status_json(status, driver);
        v["proxies"] = serde_json::json!(self.proxies.keys().collect::<Vec<_>>());
        v["relays"] = serde_json::json!(self
            .relays
            .iter()
            .map(|(c, r)| serde_json::json!({"chan": c.0, "frames_sent": r.sent, "frames_acked": r.acked, "closing": r.eof}))
            .collect::<Vec<_>>());
        let line = v.to_string();
        let mut q = self.status_waiters.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = q.pop_front() {
            let _ = tx.send(line);
        }
    }

    fn remote_export(&mut self, runtime: &str, service: &str, up: bool) {
        let name = format!("{service}@{runtime}");
        if !up {
            if self.proxies.remove(&name).is_some() {
                self.note(&format!("{name} withdrawn"));
            }
            return;
        }
        if self.proxies.contains_key(&name) {
            return;
        }
        let (h, waiters, tags, accepted) = (self.h.clone(), self.waiters.clone(), self.next_tag.clone(), self.accepted.clone());
        let (svc_name, rt_name) = (service.to_string(), runtime.to_string());
        let on_connect: multihop_dispatcher::OnConnect = Box::new(move |pc| {
            if pc.transport != "multihop" {
                return Err(format!(
                    "{svc_name}@{rt_name} is on another machine: bind it with transport=\"multihop\" (a UMP ring cannot cross the fabric)"
                ));
            }
            let tag = tags.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = mpsc::sync_channel(1);
            waiters.lock().unwrap_or_else(|e| e.into_inner()).insert(tag, tx);
            let left = pc.expires().saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
            let asked = h.local(LocalEvent::Bind {
                tag,
                service: svc_name.clone(),
                runtime: rt_name.clone(),
                window: RELAY_WINDOW,
                timeout: left,
                priority: None,
            });
            let answer = if asked { rx.recv_timeout(left + Duration::from_millis(500)).ok() } else { None };
            waiters.lock().unwrap_or_else(|e| e.into_inner()).remove(&tag);
            match answer {
                Some(Ok(chan)) => {
                    accepted.lock().unwrap_or_else(|e| e.into_inner()).insert(pc.chan, (chan, pc.expires()));
                    Ok(true)
                }
                Some(Err(why)) => Err(why),
                None => Err(format!("no answer from runtime {rt_name} across the fabric in time")),
            }
        });
        match self.d.export(&name, 64, Some(on_connect)) {
            Ok(svc) => {
                self.proxies.insert(name.clone(), Arc::new(svc));
                self.note(&format!("{name} offered here"));
            }
            Err(e) => eprintln!("multihop-bridge: cannot offer {name} on runtime {}: {e}", self.runtime),
        }
    }

    fn ready(&self) -> bool {
        self.relays.values().any(|r| r.w.ready()) || self.proxies.values().any(|s| s.acceptable())
    }

    fn quiet(&self) -> bool {
        self.incoming.is_empty() && self.relays.values().all(|r| r.sent == r.acked && r.partial == 0 && (r.eof || !r.w.ch.readable()))
    }

    fn idle(&mut self) {
        self.take_accepted();
        self.poll_incoming();
        let chans: Vec<ChanId> = self.relays.keys().copied().collect();
        for chan in chans {
            self.pull(chan);
        }
        if !self.d.is_attached() {
            eprintln!("multihop-bridge: the runtime's monitor is gone: stopping");
            // Twice: nothing local is left to drain.
            self.h.local(LocalEvent::Stop);
            self.h.local(LocalEvent::Stop);
        }
    }
}

/// One connection to the control socket: `export NAME` (kept until the connection closes) or `status`.
fn control_conn(conn: UnixStream, h: Handle, status_waiters: Arc<Mutex<VecDeque<Sender<String>>>>) {
    let Ok(mut out) = conn.try_clone() else { return };
    let mut exported: Vec<String> = Vec::new();
    let reader = BufReader::new(conn);
    for line in reader.lines() {
        let Ok(line) = line else { break };
        let line = line.trim();
        if let Some(name) = line.strip_prefix("export ") {
            match crate::keys::check_service(name) {
                Ok(()) => {
                    h.local(LocalEvent::Export(name.to_string()));
                    exported.push(name.to_string());
                    let _ = out.write_all(b"ok\n");
                }
                Err(e) => {
                    let _ = out.write_all(format!("error {e}\n").as_bytes());
                }
            }
        } else if line == "status" {
            let (tx, rx) = mpsc::channel();
            status_waiters.lock().unwrap_or_else(|e| e.into_inner()).push_back(tx);
            h.local(LocalEvent::Status);
            let reply = rx.recv_timeout(Duration::from_secs(5)).unwrap_or_else(|_| "{\"error\": \"no status in time\"}".into());
            let _ = out.write_all(format!("{reply}\n").as_bytes());
        } else {
            let _ = out.write_all(format!("error unknown request {line:?}: export NAME or status\n").as_bytes());
        }
    }
    for name in exported {
        h.local(LocalEvent::Unexport(name));
    }
}
