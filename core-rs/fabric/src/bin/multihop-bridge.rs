//! multihop-bridge: the bridge of one runtime in a fabric (docs/fabric.md), over Zenoh.
//!
//! With `--runtime-dir DIR` it is a runtime's bridge (started by `Runtime.start(..., fabric=...)`): it attaches to
//! the runtime's initial monitor (`--core`), offers the services other runtimes export as `service@runtime`,
//! serves `<DIR>/fabric.sock` (exports, status) and relays bridged channels (`multihop_fabric::runtime_side`); it
//! stops on SIGTERM or SIGINT (withdrawing its tokens) or when the runtime's monitor goes.
//!
//! Without, it runs with an in-process local side for the fabric's own tests: `--echo SVC` exports SVC and echoes every DATA frame a client sends
//! on it; `--client SVC@RT` binds SVC on runtime RT and sends `--count` numbered messages of `--size` bytes
//! with at most `--window` unanswered, checking each echo's number (FIFO, no loss, no duplicate). Everything it
//! sees goes to stdout as JSON lines, each with `t` (CLOCK_MONOTONIC nanoseconds, shared by every process of the
//! machine, network namespaces included).
//!
//! ```text
//! multihop-bridge --fabric lab --runtime b --listen tcp/10.213.0.2:7447 --echo echo
//! multihop-bridge --fabric lab --runtime a --connect tcp/10.213.0.2:7447 --client echo@b --count 10000
//! ```

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use multihop_base::wire::{Header, Kind, DIR_TO_CLIENT, DIR_TO_SERVER, HEADER_BYTES};
use multihop_fabric::driver::{monotonic_ns, status_json, Driver, DriverStats, Handle, Local, LocalEvent};
use multihop_fabric::runtime_side::RuntimeLocal;
use multihop_fabric::{BindRefused, ChanId, FabricConfig, Priority, Status, Teardown, Tls};
use serde_json::{json, Value};

const USAGE: &str = "usage: multihop-bridge --fabric NAME --runtime NAME [--listen ENDPOINT]... [--connect ENDPOINT]...
       [--runtime-dir DIR [--core N]]          be the bridge of the runtime in DIR (attached to core N's monitor)
       [--lease-ms N] [--wait-before-close-ms N] [--multicast-scouting]
       [--tls-ca PEM --tls-cert PEM --tls-key PEM]  certificates for tls/ endpoints (mutual TLS)
       [--echo SERVICE]...                     serve SERVICE in-process: echo every DATA frame (test mode)
       [--sink SERVICE]...                     serve SERVICE in-process: take DATA frames, check their numbers,
                                               give credit back (DUMMY acks), report at the client's TEARDOWN
       [--client SERVICE@RUNTIME [--count N] [--size BYTES] [--window N] [--pace-ms N] [--bind-timeout-ms N]
                 [--oneway] [--report-rtts] [--hold] [--stay] [--channels K]]
                                               bind and send N numbered messages, check the echoes (or, with
                                               --oneway, send them to a sink within its credit, then close);
                                               --hold: keep the channel open once done, until it closes;
                                               stop when a channel closes (or, one way, when all have closed),
                                               unless --stay; --channels: K channels at once, N messages each
       [--max-seconds N]                       stop after N seconds whatever happens (default 600; 0: never,
                                               the default with --runtime-dir)";

fn emit(v: Value) {
    let mut v = v;
    v["t"] = json!(monotonic_ns());
    println!("{v}");
}

fn code_name<T: std::fmt::Debug>(c: T) -> String {
    format!("{c:?}")
}

struct Args {
    cfg: FabricConfig,
    runtime: String,
    echo: Vec<String>,
    sink: Vec<String>,
    client: Option<ClientArgs>,
    max_seconds: u64,
    runtime_dir: Option<String>,
    core: u32,
}

#[derive(Clone)]
struct ClientArgs {
    service: String,
    runtime: String,
    count: u64,
    size: usize,
    window: u32,
    pace_ms: u64,
    bind_timeout_ms: u64,
    hold: bool,
    stay: bool,
    oneway: bool,
    report_rtts: bool,
    /// Channels bound to the service at once, each carrying `count` messages.
    channels: u32,
}

fn parse(argv: &[String]) -> Result<Args, String> {
    let mut it = argv.iter();
    let (mut fabric, mut runtime) = (None, None);
    let (mut listen, mut connect, mut echo, mut sink) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut lease, mut wbc, mut scouting) = (None, None, false);
    let (mut tls_ca, mut tls_cert, mut tls_key) = (None, None, None);
    let mut client: Option<String> = None;
    let mut c = ClientArgs {
        service: String::new(),
        runtime: String::new(),
        count: 1000,
        size: 64,
        window: 16,
        pace_ms: 0,
        bind_timeout_ms: 5000,
        hold: false,
        stay: false,
        oneway: false,
        report_rtts: false,
        channels: 1,
    };
    let mut max_seconds = 600;
    let mut max_seconds_given = false;
    let (mut runtime_dir, mut core): (Option<String>, u32) = (None, 0);
    let num = |v: Option<&String>, what: &str| -> Result<u64, String> {
        v.ok_or(format!("{what} needs a value"))?.parse::<u64>().map_err(|e| format!("{what}: {e}"))
    };
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--fabric" => fabric = Some(val()?),
            "--runtime" => runtime = Some(val()?),
            "--listen" => listen.push(val()?),
            "--connect" => connect.push(val()?),
            "--echo" => echo.push(val()?),
            "--sink" => sink.push(val()?),
            "--oneway" => c.oneway = true,
            "--report-rtts" => c.report_rtts = true,
            "--client" => client = Some(val()?),
            "--multicast-scouting" => scouting = true,
            "--tls-ca" => tls_ca = Some(val()?),
            "--tls-cert" => tls_cert = Some(val()?),
            "--tls-key" => tls_key = Some(val()?),
            "--hold" => c.hold = true,
            "--stay" => c.stay = true,
            "--lease-ms" => lease = Some(num(it.next(), a)?),
            "--wait-before-close-ms" => wbc = Some(num(it.next(), a)?),
            "--count" => c.count = num(it.next(), a)?,
            "--channels" => c.channels = num(it.next(), a)? as u32,
            "--size" => c.size = num(it.next(), a)? as usize,
            "--window" => c.window = num(it.next(), a)? as u32,
            "--pace-ms" => c.pace_ms = num(it.next(), a)?,
            "--bind-timeout-ms" => c.bind_timeout_ms = num(it.next(), a)?,
            "--max-seconds" => {
                max_seconds = num(it.next(), a)?;
                max_seconds_given = true;
            }
            "--runtime-dir" => runtime_dir = Some(val()?),
            "--core" => core = num(it.next(), a)? as u32,
            "-h" | "--help" => return Err(String::new()),
            _ => return Err(format!("unknown argument {a:?}")),
        }
    }
    let fabric = fabric.ok_or("--fabric is required")?;
    let runtime = runtime.ok_or("--runtime is required")?;
    let mut cfg = FabricConfig::new(&fabric).map_err(|e| e.to_string())?;
    cfg.listen = listen;
    cfg.connect = connect;
    cfg.multicast_scouting = scouting;
    cfg.tls = match (tls_ca, tls_cert, tls_key) {
        (None, None, None) => None,
        (Some(ca), Some(cert), Some(key)) => Some(Tls { ca, cert, key }),
        _ => return Err("--tls-ca, --tls-cert and --tls-key go together".into()),
    };
    if let Some(ms) = lease {
        cfg.lease = Duration::from_millis(ms);
        // wait_before_close follows the lease, as by default, unless one is given.
        cfg.wait_before_close = FabricConfig::wait_before_close_for(cfg.lease);
    }
    if let Some(ms) = wbc {
        cfg.wait_before_close = Duration::from_millis(ms);
    }
    cfg.check().map_err(|e| e.to_string())?;
    let client = match client {
        None => None,
        Some(t) => {
            let (svc, rt) = match multihop_fabric::keys::split_target(&t) {
                Some(Ok(p)) => p,
                Some(Err(e)) => return Err(format!("--client {t}: {e}")),
                None => return Err(format!("--client {t}: name SERVICE@RUNTIME")),
            };
            c.service = svc.to_string();
            c.runtime = rt.to_string();
            if c.size < 8 {
                return Err("--size: at least 8 bytes (the message's number)".into());
            }
            if c.window == 0 {
                return Err("--window: at least 1".into());
            }
            if !(1..=4096).contains(&c.channels) {
                return Err("--channels: 1..=4096".into());
            }
            Some(c)
        }
    };
    if runtime_dir.is_some() && (client.is_some() || !echo.is_empty() || !sink.is_empty()) {
        return Err("--runtime-dir (a runtime's bridge) goes without --echo, --sink and --client (the test mode)".into());
    }
    // A runtime's bridge lives as long as its runtime, unless told otherwise.
    let max_seconds = if runtime_dir.is_some() && !max_seconds_given { 0 } else { max_seconds };
    Ok(Args { cfg, runtime, echo, sink, client, max_seconds, runtime_dir, core })
}

// ---- the in-process local side ----

fn frame(dir: u8, kind: Kind, payload: &[u8]) -> Vec<u8> {
    let mut f = Header { vci: 0, dir, kind, flags: 0, ack: 0 }.encode().to_vec();
    f.extend_from_slice(payload);
    f
}

/// One channel of the client.
#[derive(Default)]
struct Flow {
    sent: u64,
    received: u64,
    /// Send times of the messages in flight, oldest first.
    in_flight: VecDeque<u64>,
    /// Frames the sink acked (one-way mode: its DUMMY frames' ack fields).
    acked: u64,
    done: bool,
    closed: bool,
}

/// The client's state, shared by the loop (deliveries) and the pacer thread (sends at a pace).
struct Client {
    a: ClientArgs,
    flows: BTreeMap<ChanId, Flow>,
    rtts: Vec<u64>,
    started: u64,
    done: bool,
    failed: bool,
    filler: Vec<u8>,
}

impl Client {
    /// Send on `chan` what the window allows (fast mode) or one message (paced).
    fn send_more(&mut self, h: &Handle, chan: ChanId, max: u64) {
        let (a, filler) = (&self.a, &self.filler);
        let Some(fl) = self.flows.get_mut(&chan) else { return };
        let mut n = 0;
        let used = |fl: &Flow| if a.oneway { fl.sent - fl.acked } else { fl.in_flight.len() as u64 };
        while !fl.closed && fl.sent < a.count && used(fl) < u64::from(a.window) && n < max {
            let mut payload = fl.sent.to_le_bytes().to_vec();
            payload.extend_from_slice(&filler[..a.size - 8]);
            if !a.oneway {
                fl.in_flight.push_back(monotonic_ns());
            }
            fl.sent += 1;
            n += 1;
            h.local(LocalEvent::Frame(chan, frame(DIR_TO_SERVER, Kind::Data, &payload)));
        }
        if a.oneway && fl.sent == a.count && !fl.done {
            // Everything is sent: close in band (the sink reports at this TEARDOWN; the bridge forgets the
            // channel once every frame is acked, and the client stops once every channel has).
            h.local(LocalEvent::Frame(chan, frame(DIR_TO_SERVER, Kind::Teardown, &[])));
            fl.received = fl.sent;
            fl.done = true;
        }
        self.maybe_finish(h);
    }

    fn maybe_finish(&mut self, h: &Handle) {
        if !self.done && self.flows.len() == self.a.channels as usize && self.flows.values().all(|fl| fl.done) {
            self.finish(h);
        }
    }

    fn finish(&mut self, h: &Handle) {
        self.done = true;
        let received: u64 = self.flows.values().map(|fl| fl.received).sum();
        let secs = (monotonic_ns() - self.started) as f64 / 1e9;
        let mut r = self.rtts.clone();
        r.sort_unstable();
        let pct = |p: f64| r.get(((r.len() as f64 * p) as usize).min(r.len().saturating_sub(1))).map_or(0.0, |&v| v as f64 / 1e3);
        let mut v = json!({
            "event": "done", "count": received, "channels": self.flows.len(), "size": self.a.size, "window": self.a.window,
            "seconds": secs, "msgs_per_s": received as f64 / secs, "t_start": self.started, "oneway": self.a.oneway,
            "rtt_us": {"p10": pct(0.10), "p50": pct(0.50), "p90": pct(0.90), "p99": pct(0.99), "max": pct(1.0)},
        });
        if self.a.report_rtts {
            v["rtts_ns"] = json!(self.rtts);
        }
        emit(v);
        if !self.a.hold && !self.a.oneway {
            h.local(LocalEvent::Status);
            h.local(LocalEvent::Stop);
        }
    }
}

struct TestLocal {
    h: Handle,
    echo: BTreeSet<String>,
    sink: BTreeSet<String>,
    sinks: BTreeMap<ChanId, Sink>,
    client: Option<Arc<Mutex<Client>>>,
}

/// One channel into a sink service: it checks the numbers and gives the credit back.
struct Sink {
    window: u32,
    received: u64,
    unacked: u32,
    first_t: u64,
    last_t: u64,
    errors: String,
}

impl Sink {
    fn take(&mut self, h: &Handle, chan: ChanId, hd: &Header, f: &[u8]) {
        match hd.kind {
            Kind::Data => {
                let now = monotonic_ns();
                if self.received == 0 {
                    self.first_t = now;
                }
                self.last_t = now;
                let got = f.get(HEADER_BYTES..HEADER_BYTES + 8).map_or(u64::MAX, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
                if got != self.received && self.errors.is_empty() {
                    self.errors = format!("message {got} where {} was due", self.received);
                }
                self.received += 1;
                self.unacked += 1;
                // Credit back every half window, as a multi-hop end does (a DUMMY frame: ack only).
                if self.unacked >= self.window.div_ceil(2) {
                    let d = Header { vci: 0, dir: DIR_TO_CLIENT, kind: Kind::Dummy, flags: 0, ack: self.unacked }.encode().to_vec();
                    h.local(LocalEvent::Frame(chan, d));
                    self.unacked = 0;
                }
            }
            Kind::Teardown => emit(json!({
                "event": "sink_done", "chan": chan.0, "received": self.received, "first_t": self.first_t,
                "last_t": self.last_t, "errors": self.errors,
            })),
            Kind::Dummy => {}
        }
    }
}

impl TestLocal {
    fn client_of(&self, chan: ChanId) -> Option<std::sync::MutexGuard<'_, Client>> {
        let c = self.client.as_ref()?.lock().unwrap_or_else(|e| e.into_inner());
        c.flows.contains_key(&chan).then_some(c)
    }
}

impl Local for TestLocal {
    fn deliver(&mut self, chan: ChanId, f: &[u8]) -> bool {
        let Ok(hd) = Header::decode(f) else { return true };
        let h = self.h.clone();
        if let Some(mut guard) = self.client_of(chan) {
            let c = &mut *guard;
            let (oneway, size, count, paced) = (c.a.oneway, c.a.size, c.a.count, c.a.pace_ms > 0);
            let fl = c.flows.get_mut(&chan).expect("client_of");
            if oneway && hd.kind == Kind::Dummy {
                fl.acked += u64::from(hd.ack);
                c.send_more(&h, chan, u64::MAX);
                return true;
            }
            if hd.kind != Kind::Data {
                return true;
            }
            let got = f.get(HEADER_BYTES..HEADER_BYTES + 8).map_or(u64::MAX, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
            if got != fl.received || f.len() != HEADER_BYTES + size {
                let what = format!("channel {chan}: echo {got} of {} bytes where {} of {size} was due", f.len() - HEADER_BYTES, fl.received);
                if !c.failed {
                    c.failed = true;
                    emit(json!({"event": "error", "what": what}));
                }
                return true;
            }
            fl.received += 1;
            if let Some(t) = fl.in_flight.pop_front() {
                let now = monotonic_ns();
                c.rtts.push(now - t);
            }
            if fl.received == count {
                fl.done = true;
                c.maybe_finish(&h);
            } else if !paced {
                c.send_more(&h, chan, u64::MAX);
            }
            return true;
        }
        if let Some(s) = self.sinks.get_mut(&chan) {
            s.take(&h, chan, &hd, f);
            return true;
        }
        // A server end: echo DATA frames back; a TEARDOWN is the client closing.
        if hd.kind == Kind::Data {
            let mut reply = f.to_vec();
            reply[8] = DIR_TO_CLIENT;
            h.local(LocalEvent::Frame(chan, reply));
        }
        true
    }

    fn bind_done(&mut self, _tag: u64, chan: ChanId, result: Result<(), BindRefused>) {
        let Some(c) = &self.client else { return };
        let mut c = c.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Ok(()) => {
                emit(json!({"event": "bound", "chan": chan.0, "service": c.a.service, "runtime": c.a.runtime}));
                c.flows.insert(chan, Flow::default());
                if c.started == 0 {
                    c.started = monotonic_ns();
                }
                if c.a.count == 0 {
                    c.flows.get_mut(&chan).expect("inserted").done = true;
                    c.maybe_finish(&self.h);
                } else if c.a.pace_ms == 0 {
                    c.send_more(&self.h, chan, u64::MAX);
                }
            }
            Err(e) => {
                emit(json!({"event": "bind_failed", "code": code_name(e.code), "reason": e.text}));
                c.failed = true;
                self.h.local(LocalEvent::Stop);
            }
        }
    }

    fn incoming_bind(&mut self, chan: ChanId, from: &str, service: &str, window: u32, priority: Priority) {
        let sink = self.sink.contains(service);
        if sink {
            self.sinks.insert(chan, Sink { window, received: 0, unacked: 0, first_t: 0, last_t: 0, errors: String::new() });
        }
        let ok = sink || self.echo.contains(service);
        emit(
            json!({"event": "incoming", "chan": chan.0, "from": from, "service": service, "window": window, "priority": priority as u8, "accepted": ok}),
        );
        self.h.local(if ok { LocalEvent::Accept(chan) } else { LocalEvent::Refuse(chan, format!("no in-process service {service:?}")) });
    }

    fn closed(&mut self, chan: ChanId, reason: &Teardown, tell_end: bool) {
        let mut v = json!({"event": "closed", "chan": chan.0, "code": code_name(reason.code), "reason": reason.text, "tell_end": tell_end});
        let h = self.h.clone();
        self.sinks.remove(&chan);
        if let Some(mut guard) = self.client_of(chan) {
            let c = &mut *guard;
            let fl = c.flows.get_mut(&chan).expect("client_of");
            fl.closed = true;
            v["client"] = json!(true);
            v["received"] = json!(fl.received);
            v["sent"] = json!(fl.sent);
            let normal = fl.done && c.a.oneway;
            emit(v);
            // A client's channel gone before its end (or, one way, the last one closed): the test is over; stop,
            // unless the bridge serves others too.
            if !normal || c.flows.values().all(|fl| fl.closed) {
                h.local(LocalEvent::Status);
                if !c.a.stay {
                    h.local(LocalEvent::Stop);
                }
            }
            return;
        }
        emit(v);
    }

    fn peer(&mut self, runtime: &str, up: bool, detail: &str) {
        emit(json!({"event": "peer", "runtime": runtime, "up": up, "detail": detail}));
    }

    fn status(&mut self, s: &Status, d: &DriverStats) {
        let mut v = status_json(s, d);
        v["event"] = json!("status");
        emit(v);
    }
}

/// SIGTERM and SIGINT, blocked in every thread (call before any thread starts) and taken by one that waits for them.
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it; pthread_sigmask only changes this thread's
    // mask (inherited by every thread started after).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// The bridge of the runtime in `dir`: until SIGTERM/SIGINT, the monitor's going, or `--max-seconds`.
fn run_runtime_bridge(args: &Args, dir: &std::path::Path) -> ExitCode {
    let set = block_stop_signals();
    let d = match RuntimeLocal::attach(dir, args.core, &args.runtime) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("multihop-bridge: {e}");
            return ExitCode::from(1);
        }
    };
    let rt = args.runtime.clone();
    let mut driver = match Driver::open(args.cfg.clone(), &args.runtime, move |h| RuntimeLocal::new(h, d, &rt)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("multihop-bridge: {e}");
            return ExitCode::from(1);
        }
    };
    let sock = match driver.local().serve_control(dir) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("multihop-bridge: {e}");
            return ExitCode::from(1);
        }
    };
    let h = driver.handle();
    {
        let h = h.clone();
        // The first signal drains (what the channels sent is delivered, at most DRAIN_TIMEOUT), a second stops at once.
        thread::spawn(move || loop {
            let mut sig: libc::c_int = 0;
            // SAFETY: `set` was initialised by block_stop_signals; sigwait writes the signal number into `sig`.
            unsafe { libc::sigwait(&set, &mut sig) };
            if !h.local(LocalEvent::Stop) {
                return;
            }
        });
    }
    if args.max_seconds > 0 {
        let (h, secs) = (h.clone(), args.max_seconds);
        thread::spawn(move || {
            thread::sleep(Duration::from_secs(secs));
            h.local(LocalEvent::Stop);
        });
    }
    emit(json!({"event": "ready", "runtime": args.runtime, "fabric": args.cfg.name, "incarnation": format!("{:#x}", driver.bridge().incarnation()),
                "lease_ms": args.cfg.lease.as_millis() as u64, "pid": std::process::id(), "control": sock.display().to_string()}));
    let r = driver.run();
    let _ = std::fs::remove_file(&sock);
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("multihop-bridge: {e}");
            ExitCode::from(1)
        }
    }
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse(&argv) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("multihop-bridge: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    // Zenoh's own log (RUST_LOG, default: errors only) to stderr: a transport closed under a blocked put says so.
    zenoh::init_log_from_env_or("error");
    if let Some(dir) = args.runtime_dir.clone() {
        return run_runtime_bridge(&args, std::path::Path::new(&dir));
    }
    let client = args.client.clone().map(|a| {
        let filler = (0..a.size).map(|i| i as u8).collect();
        Arc::new(Mutex::new(Client { a, flows: BTreeMap::new(), rtts: Vec::new(), started: 0, done: false, failed: false, filler }))
    });
    let echo: BTreeSet<String> = args.echo.iter().cloned().collect();
    let sink: BTreeSet<String> = args.sink.iter().cloned().collect();
    let c2 = client.clone();
    let mut driver = match Driver::open(args.cfg.clone(), &args.runtime, move |h| TestLocal { h, echo, sink, sinks: BTreeMap::new(), client: c2 }) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("multihop-bridge: {e}");
            return ExitCode::from(1);
        }
    };
    let h = driver.handle();
    for s in args.echo.iter().chain(&args.sink) {
        h.local(LocalEvent::Export(s.clone()));
    }
    emit(json!({"event": "ready", "runtime": args.runtime, "fabric": args.cfg.name, "incarnation": format!("{:#x}", driver.bridge().incarnation()),
                "lease_ms": args.cfg.lease.as_millis() as u64, "pid": std::process::id()}));
    // Everything is bounded in time: the whole run stops after --max-seconds.
    {
        let h = h.clone();
        let secs = args.max_seconds;
        thread::spawn(move || {
            thread::sleep(Duration::from_secs(secs));
            emit(json!({"event": "timeout", "seconds": secs}));
            h.local(LocalEvent::Status);
            h.local(LocalEvent::Stop);
            h.local(LocalEvent::Stop);
        });
    }
    // The client binds at once: within its first lease the bridge waits for a runtime it has not heard from yet
    // (docs/fabric.md §3, Binds), up to the bind's timeout.
    if let Some(c) = &client {
        let g = c.lock().unwrap_or_else(|e| e.into_inner());
        for tag in 0..u64::from(g.a.channels) {
            h.local(LocalEvent::Bind {
                tag,
                service: g.a.service.clone(),
                runtime: g.a.runtime.clone(),
                window: g.a.window,
                timeout: Duration::from_millis(g.a.bind_timeout_ms),
                priority: None,
            });
        }
    }
    if let Some(c) = client.clone() {
        let pace = c.lock().unwrap_or_else(|e| e.into_inner()).a.pace_ms;
        if pace > 0 {
            let h = h.clone();
            thread::spawn(move || loop {
                thread::sleep(Duration::from_millis(pace));
                let mut g = c.lock().unwrap_or_else(|e| e.into_inner());
                if g.failed || g.flows.values().any(|fl| fl.closed) || g.done {
                    return;
                }
                let chans: Vec<ChanId> = g.flows.keys().copied().collect();
                for chan in chans {
                    g.send_more(&h, chan, 1);
                }
            });
        }
    }
    if let Err(e) = driver.run() {
        eprintln!("multihop-bridge: {e}");
        return ExitCode::from(1);
    }
    let failed = client.is_some_and(|c| {
        let g = c.lock().unwrap_or_else(|e| e.into_inner());
        g.failed || !g.done
    });
    emit(json!({"event": "exit", "ok": !failed}));
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
