//! Rust-level ping-pong: our ring and our UMP channel against a bare
//! cache-line ping-pong, two threads pinned to two CPUs, in the same run.
//!
//! `cargo bench -p multihop-monitor --bench pingpong` prints the median round
//! trip of each and the ratio to the bare ping-pong (the floor: one cache
//! line each way). Also prints one-way streaming throughput of 64-byte
//! messages through the ring.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use multihop_base::ring::{ring_bytes, Consumer, Producer, RingGeometry};
use multihop_base::ringpair::RingPair;
use multihop_base::shm::Segment;

const ROUNDS: usize = 200_000;

fn pin(cpu: usize) {
    // SAFETY: plain query of the online CPU count.
    let n = (unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).max(1) as usize;
    // SAFETY: cpu_set_t is plain data; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    unsafe {
        libc::CPU_SET(cpu % n, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Spin hint that gives the CPU away now and then, so a descheduled peer
/// (a loaded machine) cannot turn a round into a whole time slice.
#[inline]
fn relax(i: &mut u32) {
    *i = i.wrapping_add(1);
    if i.is_multiple_of(4096) {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

fn median_ns(mut v: Vec<u64>) -> f64 {
    v.sort_unstable();
    v[v.len() / 2] as f64
}

#[repr(align(128))]
struct Line(AtomicU64);

fn bare() -> f64 {
    let ping = Arc::new(Line(AtomicU64::new(0)));
    let pong = Arc::new(Line(AtomicU64::new(0)));
    let (p2, q2) = (ping.clone(), pong.clone());
    let h = std::thread::spawn(move || {
        pin(1);
        let mut spin = 0u32;
        for i in 1..=ROUNDS as u64 {
            while p2.0.load(Ordering::Acquire) != i {
                relax(&mut spin);
            }
            q2.0.store(i, Ordering::Release);
        }
    });
    pin(0);
    let mut t = Vec::with_capacity(ROUNDS);
    let mut spin = 0u32;
    for i in 1..=ROUNDS as u64 {
        let t0 = Instant::now();
        ping.0.store(i, Ordering::Release);
        while pong.0.load(Ordering::Acquire) != i {
            relax(&mut spin);
        }
        t.push(t0.elapsed().as_nanos() as u64);
    }
    h.join().unwrap();
    median_ns(t)
}

fn rings(nslots: usize) -> (Arc<Segment>, RingGeometry) {
    let geo = RingGeometry::new(nslots, nslots).unwrap();
    (Arc::new(Segment::create("bench", 2 * ring_bytes(nslots)).unwrap()), geo)
}

fn ring_pingpong(len: usize) -> f64 {
    let (seg, geo) = rings(1024);
    let base = seg.as_ptr() as usize;
    let rb = ring_bytes(1024);
    let h = std::thread::spawn(move || {
        pin(1);
        // SAFETY: one producer and one consumer per ring, inside a segment that outlives them.
        let mut rx = unsafe { Consumer::new(base as *mut u8, geo, usize::MAX) };
        // SAFETY: one producer and one consumer per ring, inside a segment that outlives them.
        let mut tx = unsafe { Producer::new((base + rb) as *mut u8, geo) };
        let mut buf = vec![0u8; len];
        let mut spin = 0u32;
        for _ in 0..ROUNDS {
            let h = loop {
                if let Some(h) = rx.peek().unwrap() {
                    break h;
                }
                rx.publish();
                relax(&mut spin);
            };
            rx.copy_out(h, &mut buf);
            rx.advance(h);
            while !tx.try_send(1, &[&buf]) {
                relax(&mut spin);
            }
        }
    });
    pin(0);
    // SAFETY: one producer and one consumer per ring, inside a segment that outlives them.
    let mut tx = unsafe { Producer::new(base as *mut u8, geo) };
    // SAFETY: one producer and one consumer per ring, inside a segment that outlives them.
    let mut rx = unsafe { Consumer::new((base + rb) as *mut u8, geo, usize::MAX) };
    let msg = vec![7u8; len];
    let mut buf = vec![0u8; len];
    let mut t = Vec::with_capacity(ROUNDS);
    let mut spin = 0u32;
    for _ in 0..ROUNDS {
        let t0 = Instant::now();
        while !tx.try_send(1, &[&msg]) {
            relax(&mut spin);
        }
        let h = loop {
            if let Some(h) = rx.peek().unwrap() {
                break h;
            }
            rx.publish();
            relax(&mut spin);
        };
        rx.copy_out(h, &mut buf);
        rx.advance(h);
        t.push(t0.elapsed().as_nanos() as u64);
    }
    h.join().unwrap();
    median_ns(t)
}

fn channel_pair() -> (RingPair, RingPair) {
    RingPair::pair_in_process(1 << 20).unwrap()
}

fn channel_pingpong(len: usize) -> f64 {
    let (a, b) = channel_pair();
    let h = std::thread::spawn(move || {
        pin(1);
        for _ in 0..ROUNDS {
            let m = b.recv_blocking(Some(Duration::from_secs(10))).unwrap();
            b.send_blocking(&[&m], None).unwrap();
        }
    });
    pin(0);
    let msg = vec![7u8; len];
    let mut t = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let t0 = Instant::now();
        a.send_blocking(&[&msg], None).unwrap();
        a.recv_blocking(Some(Duration::from_secs(10))).unwrap();
        t.push(t0.elapsed().as_nanos() as u64);
    }
    h.join().unwrap();
    median_ns(t)
}

fn ring_stream(len: usize, n: usize) -> f64 {
    let (seg, geo) = rings(4096);
    let base = seg.as_ptr() as usize;
    let go = Arc::new(Barrier::new(2));
    let g2 = go.clone();
    let h = std::thread::spawn(move || {
        pin(1);
        // SAFETY: one producer and one consumer per ring, inside a segment that outlives them.
        let mut rx = unsafe { Consumer::new(base as *mut u8, geo, usize::MAX) };
        let mut buf = vec![0u8; len];
        g2.wait();
        let mut got = 0;
        let mut spin = 0u32;
        while got < n {
            match rx.peek().unwrap() {
                Some(h) => {
                    rx.copy_out(h, &mut buf);
                    rx.advance(h);
                    got += 1;
                }
                None => {
                    rx.publish();
                    relax(&mut spin);
                }
            }
        }
    });
    pin(0);
    // SAFETY: one producer and one consumer per ring, inside a segment that outlives them.
    let mut tx = unsafe { Producer::new(base as *mut u8, geo) };
    let msg = vec![1u8; len];
    go.wait();
    let t0 = Instant::now();
    let mut spin = 0u32;
    for _ in 0..n {
        while !tx.try_send(1, &[&msg]) {
            relax(&mut spin);
        }
    }
    h.join().unwrap();
    n as f64 / t0.elapsed().as_secs_f64()
}

fn channel_stream(len: usize, n: usize) -> f64 {
    let (a, b) = channel_pair();
    let go = Arc::new(Barrier::new(2));
    let g2 = go.clone();
    let h = std::thread::spawn(move || {
        pin(1);
        let mut rows = vec![0u8; 4096 * len];
        g2.wait();
        let mut got = 0usize;
        while got < n {
            let mut k = 0usize;
            let taken = b
                .try_recv_many(4096, &mut |l, copy| {
                    copy(&mut rows[k * l..(k + 1) * l]);
                    k += 1;
                    Ok(true)
                })
                .unwrap();
            if taken == 0 {
                b.wait(multihop_base::ringpair::Want::Readable, None);
            }
            got += taken;
        }
    });
    pin(0);
    let data = vec![1u8; 4096 * len];
    go.wait();
    let t0 = Instant::now();
    let mut sent = 0usize;
    while sent < n {
        let k = (n - sent).min(4096);
        let w = a.try_send_many(&mut data[..k * len].chunks_exact(len)).unwrap();
        if w == 0 {
            a.wait(multihop_base::ringpair::Want::Writable(len), None);
        }
        sent += w;
    }
    h.join().unwrap();
    n as f64 / t0.elapsed().as_secs_f64()
}

/// The monitor's per-message forwarding step, single-threaded: decode the
/// header, look the (link, VCI) up in a table of 10,000 channels, rewrite
/// the VCI, write the message to the outgoing ring. The ring is drained
/// between timed batches.
fn forward_step() -> f64 {
    use multihop_base::wire::{Header, Kind, DIR_TO_SERVER};
    use multihop_monitor::{Entry, ForwardTable};
    let mut table = ForwardTable::new();
    let mut vcis = Vec::new();
    for c in 0..10_000u64 {
        let v = table.draw(1).expect("random VCI");
        table.insert(1, v, Entry { out_link: 2, out_vci: c + 1, partner: (2, c + 1), chan: c });
        vcis.push(v);
    }
    let (seg, geo) = rings(1024);
    // SAFETY: one producer and one consumer per ring, inside a segment that outlives them.
    let mut tx = unsafe { Producer::new(seg.as_ptr(), geo) };
    // SAFETY: one producer and one consumer per ring, inside a segment that outlives them.
    let mut rx = unsafe { Consumer::new(seg.as_ptr(), geo, usize::MAX) };
    let msgs: Vec<Vec<u8>> = (0..512)
        .map(|i| {
            let mut m = Header { vci: vcis[(i * 7919) % vcis.len()], dir: DIR_TO_SERVER, kind: Kind::Data, flags: 0, ack: 0 }.encode().to_vec();
            m.extend_from_slice(&[0u8; 48]); // 64-byte message
            m
        })
        .collect();
    let mut times = Vec::new();
    let mut sink = [0u8; 64];
    let mut scratch = Vec::with_capacity(64);
    for _ in 0..400 {
        let t0 = Instant::now();
        for m in msgs.iter() {
            // As the monitor does: the message comes out of the inbound ring
            // into a scratch buffer, is rewritten there and written out.
            scratch.clear();
            scratch.extend_from_slice(m);
            let h = Header::decode(&scratch).unwrap();
            let e = *table.lookup(1, h.vci).unwrap();
            Header::rewrite_vci(&mut scratch, e.out_vci);
            assert!(tx.try_send(1, &[&scratch]));
        }
        times.push(t0.elapsed().as_nanos() as u64 / msgs.len() as u64);
        while let Some(h) = rx.peek().unwrap() {
            rx.copy_out(h, &mut sink[..h.len]);
            rx.advance(h);
        }
        rx.publish();
    }
    median_ns(times)
}

fn main() {
    // Three runs each; report the median of the medians.
    let med3 = |f: &dyn Fn() -> f64| {
        let mut v = [f(), f(), f()];
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[1]
    };
    let b = med3(&bare);
    let r56 = med3(&|| ring_pingpong(56));
    let r64 = med3(&|| ring_pingpong(64));
    let c64 = med3(&|| channel_pingpong(64));
    let fwd = med3(&forward_step);
    println!("monitor forwarding step (decode, lookup in 10k channels, rewrite, ring write), 64 B: {fwd:.1} ns/msg");
    println!("round trip, median of {ROUNDS} (median of 3 runs), threads pinned to CPUs 0 and 1");
    println!("  bare cache-line ping-pong      {b:8.0} ns");
    println!("  ring, 56 B (1 slot)            {r56:8.0} ns   {:.2}x bare", r56 / b);
    println!("  ring, 64 B (2 slots)           {r64:8.0} ns   {:.2}x bare", r64 / b);
    println!("  UMP channel, 64 B (blocking)   {c64:8.0} ns   {:.2}x bare", c64 / b);
    for len in [56usize, 64, 4096] {
        let n = if len > 1000 { 500_000 } else { 5_000_000 };
        let s = med3(&|| ring_stream(len, n));
        println!("one-way ring stream {len:5} B: {:8.2} M msg/s  ({:.2} GB/s)", s / 1e6, s * len as f64 / 1e9);
        let c = med3(&|| channel_stream(len, n));
        println!("one-way UMP batches {len:5} B: {:8.2} M msg/s  ({:.2}x the ring)", c / 1e6, c / s);
    }
}
