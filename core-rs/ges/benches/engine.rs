//! The native engine's cost per event in one process: a broker that gets batches of event copies
//! from a neighbour, delivers each to its five subscribed clients and sends it on to another
//! neighbour (the testbed's transit broker with clients, at 100 % matching), decoding, routing and
//! encoding; no channel, no kernel. `cargo bench -p multihop-ges --bench engine`.
//!
//! Two streams: one whose events differ only in attributes no profile constrains (the testbed's:
//! each graph's remembered last match answers), one whose events alternate in the first,
//! constrained, attribute (every match walks its graph: the worst case for that memory).

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use multihop_ges::codec::{self, CopyFields, EventFields, BATCH_TEXT, DOWN};
use multihop_ges::engine::{Engine, Kind};
use multihop_ges::erp::Erp;
use multihop_ges::io::{Closed, FrameChannel, Sent};
use multihop_ges::profile_graph::ProfileGraph;
use multihop_ges::routing::{NodeInfo, Snapshot};

/// The system allocator, counting its allocations (the bench prints them per event: each is a
/// malloc and, later, a free on the broker's every event).
struct Counting;

/// Allocations so far (Relaxed: one thread; read around the measured loop only).
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to `System`, which upholds GlobalAlloc's contract.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires, handed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` (every allocation here does) with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with `layout`; `new_size` is the caller's, checked by it.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(Default)]
struct Mem {
    inbox: Mutex<VecDeque<Vec<u8>>>,
    sent: Mutex<usize>,
}

impl FrameChannel for Mem {
    fn recv_frames(&self, max: usize, _buf: &mut dyn FnMut(usize) -> Vec<u8>, out: &mut Vec<Vec<u8>>) -> Result<(), Closed> {
        let mut q = self.inbox.lock().unwrap();
        while out.len() < max {
            match q.pop_front() {
                Some(f) => out.push(f),
                None => break,
            }
        }
        Ok(())
    }
    fn try_send(&self, frame: &[u8]) -> Sent {
        *self.sent.lock().unwrap() += frame.len();
        Sent::Sent
    }
    fn readable(&self) -> bool {
        !self.inbox.lock().unwrap().is_empty()
    }
    fn writable(&self, _len: usize) -> bool {
        true
    }
}

/// This thread's CPU time so far (Linux: the first field of /proc/thread-self/schedstat, in ns): the
/// machine is shared, so the wall clock mostly measures the wait for a CPU.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat").ok().and_then(|s| s.split_whitespace().next()?.parse().ok()).unwrap_or(0)
}

/// How the stream's events differ from one another.
#[derive(Clone, Copy, PartialEq)]
enum Stream {
    /// in an attribute no profile constrains (the last one)
    Unconstrained,
    /// in the first attribute, which every profile constrains (two values, alternating)
    Constrained,
}

fn main() {
    // (`ENGINE_BENCH_STREAM=unconstrained|constrained` runs one: for callgrind)
    let only = std::env::var("ENGINE_BENCH_STREAM").unwrap_or_default();
    for (name, stream) in [("unconstrained", Stream::Unconstrained), ("constrained", Stream::Constrained)] {
        if only.is_empty() || only == name {
            run(stream);
        }
    }
}

fn run(stream: Stream) {
    let levels = 3;
    let (me, from, to) = (10u64, 11u64, 12u64);
    let mut erp = Erp::new(me, levels);
    let mut snap = Snapshot { version: 1, deciders: vec![Vec::new(); 5], ..Snapshot::default() };
    for p in [from, to] {
        snap.links.insert(p, 0);
        snap.nodes.insert(p, NodeInfo { level: 0, cost: 0.0, hop: Some(p), edges: vec![(me, 0.0)], vertex_hop: Some(p) });
    }
    snap.nodes.insert(me, NodeInfo { level: 0, cost: 0.0, hop: None, edges: vec![(from, 0.0), (to, 0.0)], vertex_hop: None });
    snap.deciders[1] = vec![me, from, to];
    snap.decided = 1 << 1;
    erp.routing.set(snap);
    let names = ["topic", "region", "source", "kind", "id", "extra"];
    let chains: Vec<Vec<(&str, &str)>> =
        ["i1", "i2"].iter().map(|first| names.iter().take(3).enumerate().map(|(k, n)| (*n, if k == 0 { *first } else { "i1" })).collect()).collect();
    let cluster = Arc::new(Mutex::new(ProfileGraph::new()));
    let local = Arc::new(Mutex::new(ProfileGraph::new()));
    for chain in &chains {
        cluster.lock().unwrap().add(chain, me as i128, 1);
        cluster.lock().unwrap().add(chain, to as i128, 1);
        for c in 1..=5 {
            local.lock().unwrap().add(chain, -(c as i128), 1);
        }
    }
    erp.set_graphs(vec![(1, cluster)]);
    erp.set_local(local);
    let mut eng = Engine::new(Arc::new(Mutex::new(erp)));
    let gw = Arc::new(Mem::default());
    let out = Arc::new(Mem::default());
    eng.add_link(from as i64, gw.clone(), Kind::Broker, None);
    eng.add_link(to as i64, out.clone(), Kind::Broker, None);
    let clients: Vec<Arc<Mem>> = (1..=5).map(|_| Arc::new(Mem::default())).collect();
    for (k, c) in clients.iter().enumerate() {
        eng.add_link(-(k as i64 + 1), c.clone(), Kind::Client, Some(("c".into(), 1)));
    }
    // batches of 64 copies, each for the cluster (unit of level 1 containing me): decided here
    let cluster_unit = multihop_ges::address::unit_id(me, 1, levels);
    let values = |seq: u64| match stream {
        Stream::Unconstrained => format!("i1\x1fi1\x1fi1\x1fi3\x1fi7\x1f{}", seq & 0xff),
        Stream::Constrained => format!("i{}\x1fi1\x1fi1\x1fi3\x1fi7\x1fi9", 1 + (seq & 1)),
    };
    let signature = names.iter().map(|n| format!("{n}:int")).collect::<Vec<_>>().join("\x1f");
    let payload = vec![7u8; 50];
    let (batches, per) = (4000u64, 64u64);
    let mut frames = Vec::new();
    for b in 0..batches {
        let texts: Vec<String> = (0..per).map(|k| values(b * per + k)).collect();
        let targets = [cluster_unit];
        let copy = |k: usize| {
            let ev = EventFields {
                timestamp: 1,
                sequence: b * per + k as u64,
                incarnation: 1,
                publisher: b"pub",
                signature: signature.as_bytes(),
                values: texts[k].as_bytes(),
                payload: &payload,
            };
            CopyFields { event: ev, origin: 99, mode: DOWN, level: 0, hops: 3, targets: &targets, reached: &[99], left: &[] }
        };
        frames.extend(codec::encode_events(b * per, BATCH_TEXT, per as usize, copy).unwrap());
    }
    let t0 = Instant::now();
    let c0 = cpu_ns();
    let a0 = ALLOCATIONS.load(Ordering::Relaxed);
    for f in frames {
        gw.inbox.lock().unwrap().push_back(f);
        eng.receive(&[from as i64]);
        assert!(eng.process().is_none());
        eng.flush();
        eng.erp.lock().unwrap().on_ack(to, i64::MAX, &[]); // (the next broker acknowledges, as a live one does)
    }
    let dt = t0.elapsed();
    let cpu = cpu_ns() - c0;
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - a0;
    let n = batches * per;
    let remembered = eng.erp.lock().unwrap().counters.remembered_matches;
    println!(
        "{} stream, {n} events ({remembered} matches remembered): {:.0} ns of CPU per event ({:.0} ns wall; {:.2} M events per CPU second; {:.2} allocations per event); {} bytes to the next broker, {} to each client",
        if stream == Stream::Unconstrained { "unconstrained-varying" } else { "constrained-varying" },
        cpu as f64 / n as f64,
        dt.as_nanos() as f64 / n as f64,
        n as f64 / (cpu as f64 / 1e9) / 1e6,
        allocations as f64 / n as f64,
        *out.sent.lock().unwrap(),
        *clients[0].sent.lock().unwrap()
    );
    let _ = codec::BATCH_TEXT;
}
