//! The deterministic simulator: three bridges exchanging their actions through an in-memory network that drops,
//! duplicates and reorders data puts (what Zenoh may do on a failover), delays, cuts links and freezes bridges,
//! on an injected clock. Every seeded run keeps FIFO and no duplicate at every end, loses nothing silently (a
//! direction that lost frames was closed at both ends with a reason), notices failure within lease + 1 s, and
//! leaves a fabric where new binds work.

mod common;

use common::{Faults, Rng, Sim, LEASE, MS, S};
use multihop_fabric::TeardownCode;

const NAMES: [&str; 3] = ["a", "b", "c"];

/// Binds one channel each way between every two runtimes; returns their indexes.
fn mesh(sim: &mut Sim, tag: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for (i, x) in NAMES.iter().enumerate() {
        for (j, y) in NAMES.iter().enumerate() {
            if i != j {
                out.push(sim.bind(x, y, &format!("{tag}-{x}-{y}")));
            }
        }
    }
    out
}

fn across(sim: &Sim, p: usize, x: usize, y: usize) -> bool {
    let pair = &sim.pairs[p];
    let (c, s) = (pair.client.0, pair.server.map_or(usize::MAX, |s| s.0));
    (c == x && s == y) || (c == y && s == x)
}

/// After whatever happened, fresh binds between every two runtimes carry traffic without loss.
fn fabric_recovers(sim: &mut Sim, seed: u64) {
    sim.faults = Faults::default();
    sim.cut.clear();
    for n in &mut sim.nodes {
        n.frozen_until = None;
    }
    sim.run_for(LEASE + S);
    let fresh = mesh(sim, &format!("fresh{seed}"));
    sim.run_for(300 * MS);
    for &p in &fresh {
        let pair = &sim.pairs[p];
        assert_eq!(pair.result, Some(Ok(())), "seed {seed}: {} not bound again", pair.service);
        let s = pair.server.unwrap();
        assert!(sim.end(s).got.len() > 50, "seed {seed}: {} carries nothing", pair.service);
    }
    let before: usize = fresh.len();
    let lost = sim.check();
    let fresh_lost = fresh.iter().filter(|&&p| sim.end(sim.pairs[p].client).closed.is_some()).count();
    assert_eq!(fresh_lost, 0, "seed {seed}: {before} fresh channels, some closed: {lost:?}");
}

#[test]
fn seeded_runs_keep_fifo_no_duplicate_and_lose_nothing_silently() {
    // More seeds: FABRIC_SIM_SEEDS=500 cargo test -p multihop-fabric --release --test sim
    let seeds = std::env::var("FABRIC_SIM_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(12u64);
    let (mut closed_dirs, mut faults_done) = (0, (0, 0, 0));
    for seed in 0..seeds {
        let mut sim = Sim::new(&NAMES, seed);
        sim.burst = 2;
        let mut rng = Rng(seed ^ 0x5eed);
        mesh(&mut sim, "m");
        sim.run_for(300 * MS);
        // A faulty spell: each kind of fault on or off by the seed, at up to 1 in 200 data puts.
        let pick = |rng: &mut Rng| if rng.chance(500_000) { rng.below(5000) as u32 } else { 0 };
        // Odd seeds spare no key: heartbeats and bind requests suffer too.
        let all_keys = seed % 2 == 1;
        sim.faults = Faults { drop_ppm: pick(&mut rng), dup_ppm: pick(&mut rng), reorder_ppm: pick(&mut rng), all_keys, only_from: None };
        sim.run_for(S);
        sim.faults = Faults::default();
        // Then maybe a cut, maybe a frozen bridge, maybe an end closing in band.
        let (x, y) = (rng.below(3) as usize, 1 + rng.below(2) as usize);
        let y = (x + y) % 3;
        match rng.below(3) {
            0 => {
                let t0 = sim.now;
                let d = 500 * MS + rng.below(5) * S;
                sim.cut.insert((x.min(y), x.max(y)));
                sim.run_for(d);
                sim.cut.clear();
                if d >= LEASE + S {
                    for p in 0..sim.pairs.len() {
                        if across(&sim, p, x, y) && sim.pairs[p].result == Some(Ok(())) {
                            let (c, s) = (sim.pairs[p].client, sim.pairs[p].server.unwrap());
                            for e in [c, s] {
                                let (t, r, _) = sim.end(e).closed.clone().expect("a channel across a long cut is closed");
                                assert!(t <= t0 + LEASE + S, "seed {seed}: {} noticed {} ms after the cut", r.text, (t - t0) / MS);
                            }
                        }
                    }
                }
            }
            1 => {
                sim.nodes[x].frozen_until = Some(sim.now + rng.below(6) * S);
                sim.run_for(6 * S);
            }
            _ => {
                let p = rng.below(sim.pairs.len() as u64) as usize;
                if sim.pairs[p].result == Some(Ok(())) && sim.end(sim.pairs[p].client).closed.is_none() {
                    let c = sim.pairs[p].client;
                    sim.close_end(c.0, c.1);
                }
                sim.run_for(S);
            }
        }
        let lost = sim.check();
        for t in &lost {
            assert!(!t.is_empty());
        }
        closed_dirs += lost.len();
        faults_done = (faults_done.0 + sim.done.0, faults_done.1 + sim.done.1, faults_done.2 + sim.done.2);
        fabric_recovers(&mut sim, seed);
    }
    // The runs did meet trouble: puts were dropped, doubled, reordered, and channels closed over it.
    assert!(faults_done.0 > 0 && faults_done.1 > 0 && faults_done.2 > 0, "{faults_done:?}");
    assert!(closed_dirs > 0);
    println!("{seeds} seeds: {closed_dirs} directions closed with a reason; puts dropped, doubled, reordered: {faults_done:?}");
}

#[test]
fn the_middle_runtime_dying_closes_its_channels_only_and_within_the_bound() {
    let mut sim = Sim::new(&NAMES, 7);
    sim.burst = 2;
    let pairs = mesh(&mut sim, "m");
    sim.run_for(500 * MS);
    // b is killed (it never answers again).
    let t0 = sim.now;
    sim.nodes[1].frozen_until = Some(u64::MAX);
    sim.run_for(LEASE + 2 * S);
    for &p in &pairs {
        let (c, s) = (sim.pairs[p].client, sim.pairs[p].server.unwrap());
        if c.0 == 1 || s.0 == 1 {
            let alive_end = if c.0 == 1 { s } else { c };
            let (t, r, tell) = sim.end(alive_end).closed.clone().unwrap();
            assert!(tell && r.code == TeardownCode::PeerLost && r.text.contains("runtime b: no sign of life"), "{r:?}");
            assert!(t - t0 <= LEASE + S, "{} ms", (t - t0) / MS);
        } else {
            assert!(sim.end(c).closed.is_none() && sim.end(s).closed.is_none(), "a and c are not touched");
            assert!(sim.end(s).got.len() > 5000);
        }
    }
    assert_eq!(sim.nodes[0].b.live_peers(), vec!["c"]);
}

#[test]
fn reordered_data_is_never_delivered_out_of_order() {
    let mut sim = Sim::new(&NAMES[..2], 3);
    sim.burst = 4;
    sim.latency = 2 * MS;
    let p = sim.bind("a", "b", "svc");
    sim.run_for(100 * MS);
    sim.faults = Faults { reorder_ppm: 1_000_000, only_from: Some(0), ..Faults::default() };
    sim.run_for(5 * MS);
    sim.faults = Faults::default();
    let lost = sim.check();
    assert!(sim.done.2 > 0);
    assert!(!lost.is_empty(), "a reorder closes the channel");
    let (_, r, _) = sim.end(sim.pairs[p].server.unwrap()).closed.clone().unwrap();
    assert!(matches!(r.code, TeardownCode::Gap | TeardownCode::Duplicate), "{r:?}");
}
