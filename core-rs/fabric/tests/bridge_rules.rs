//! Every rule of the bridge, each on a small fabric of the in-memory simulator (tests/common).

mod common;

use std::time::Duration;

use common::{Faults, Sim, LEASE, MS, S};
use multihop_base::wire::{Header, Kind, DIR_TO_SERVER};
use multihop_fabric::wire::{decode_put, Dir, Envelope, PutKind, Record};
use multihop_fabric::{Action, Bridge, ChanId, FabricConfig, InputError, Priority, Refusal, TeardownCode};

fn two() -> Sim {
    Sim::new(&["a", "b"], 1)
}

/// `a` binds `svc` on `b`, traffic runs a second.
fn bound(sim: &mut Sim) -> usize {
    let p = sim.bind("a", "b", "svc");
    sim.run_for(S);
    assert_eq!(sim.pairs[p].result, Some(Ok(())));
    assert!(sim.pairs[p].server.is_some());
    p
}

fn puts(sim: &Sim, n: usize, kind: &str) -> Vec<u64> {
    sim.nodes[n].log.iter().filter(|(_, a)| matches!(a, Action::Put { key, .. } if key.contains(kind))).map(|(t, _)| *t).collect()
}

#[test]
fn a_bind_opens_a_channel_and_frames_cross_in_order_both_ways() {
    let mut sim = two();
    let p = bound(&mut sim);
    sim.run_for(2 * S);
    let (c, s) = (sim.pairs[p].client, sim.pairs[p].server.unwrap());
    assert!(sim.end(c).got.len() > 1000 && sim.end(s).got.len() > 1000);
    assert!(sim.check().is_empty());
    assert!(sim.nodes[0].b.is_open(c.1));
    // The client's bridge holds the channel's liveliness token.
    assert!(sim.nodes[0].log.iter().any(|(_, a)| matches!(a, Action::DeclareToken { key } if key == "mh/lab/ch/a/1")));
}

#[test]
fn heartbeats_go_every_quarter_lease() {
    let mut sim = two();
    sim.run_for(3 * S);
    let hb = puts(&sim, 0, "/hb/b");
    // One at the first tick (b's token is known), one as soon as b is heard from (b learns a's session), then
    // one every lease / 4.
    assert_eq!(hb[..2], [MS, 2 * MS]);
    for w in hb[1..].windows(2) {
        assert!((750 * MS..=751 * MS).contains(&(w[1] - w[0])), "{hb:?}");
    }
}

fn data_puts(sim: &Sim, n: usize) -> Vec<(usize, usize)> {
    sim.nodes[n]
        .log
        .iter()
        .filter_map(|(_, a)| match a {
            Action::Put { key, payload, .. } if key.contains("/data/") => Some((payload.len(), decode_put(payload).unwrap().1.len())),
            _ => None,
        })
        .collect()
}

#[test]
fn several_frames_for_one_peer_go_in_one_put_up_to_the_cap() {
    let mut sim = two();
    sim.burst = 16;
    bound(&mut sim);
    assert!(data_puts(&sim, 0).iter().any(|&(_, n)| n >= 16), "a burst of 16 frames goes in one put");
    assert!(sim.check().is_empty());
    // A cap of 4 KiB and bursts of 200 frames of 46 bytes each: full puts, none above the cap.
    let mut cfg = FabricConfig::new("lab").unwrap();
    cfg.batch_bytes = 4096;
    let mut sim = Sim::with_config(&["a", "b"], 2, cfg);
    sim.burst = 200;
    sim.window = 200;
    bound(&mut sim);
    let sizes = data_puts(&sim, 0);
    assert!(sizes.iter().all(|&(b, _)| b <= 4096), "{sizes:?}");
    assert!(sizes.iter().filter(|&&(b, _)| b > 4096 - 46).count() > 10, "puts are filled up to the cap: {sizes:?}");
    assert!(sim.check().is_empty());
}

#[test]
fn a_sender_never_has_more_than_the_fabric_window_unacked() {
    let mut sim = two();
    let p = bound(&mut sim);
    let s = sim.pairs[p].server.unwrap();
    // b's monitor link takes one frame a tick: the credit holds a's bridge back.
    sim.nodes[1].ring_rate = Some(1);
    let mut max_in_flight = 0;
    for _ in 0..2000 {
        sim.step();
        let st = sim.nodes[0].b.status(sim.now);
        let ch = &st.channels[0];
        assert!(ch.in_flight <= multihop_fabric::fabric_window(16), "{ch:?}");
        max_in_flight = max_in_flight.max(ch.in_flight);
    }
    assert_eq!(max_in_flight, multihop_fabric::fabric_window(16), "the window is used, not exceeded");
    let st = sim.nodes[1].b.status(sim.now);
    let ch = &st.channels[0];
    assert!(ch.state == "open" && !ch.opened_here && ch.peer == "a" && ch.frames_in > 1000 && ch.bytes_in == 24 * ch.frames_in, "{ch:?}");
    assert!(ch.undelivered > 0 && ch.seq_in == ch.frames_in, "{ch:?}");
    assert_eq!(st.exports, vec!["svc".to_string()]);
    assert!(st.peers[0].alive && st.peers[0].runtime == "a" && st.peers[0].silent_for < 10 * MS, "{:?}", st.peers);
    assert!(sim.end(s).got.len() > 1000);
    sim.nodes[1].ring_rate = None;
    assert!(sim.check().is_empty(), "back-pressure loses nothing");
}

#[test]
fn a_local_sender_overrunning_its_window_closes_the_channel() {
    let mut sim = two();
    let p = bound(&mut sim);
    sim.pairs[p].active = false;
    sim.nodes[1].ring_rate = Some(0);
    let c = sim.pairs[p].client;
    let mut err = None;
    for i in 0..200 {
        let mut f = Header { vci: 0, dir: DIR_TO_SERVER, kind: Kind::Data, flags: 0, ack: 0 }.encode().to_vec();
        f.extend_from_slice(&(i as u64).to_le_bytes());
        if let Err(e) = sim.nodes[0].b.send(sim.now, c.1, f) {
            err = Some(e);
            break;
        }
        sim.drain(0);
        sim.run_for(MS);
    }
    assert!(err.is_some());
    let (_, r, tell) = sim.end(c).closed.clone().unwrap();
    assert!(tell && r.code == TeardownCode::Window && r.text.contains("overran the credit window"), "{r:?}");
}

#[test]
fn a_gap_closes_the_channel_at_both_ends_naming_expected_and_got() {
    let mut sim = two();
    let p = bound(&mut sim);
    sim.faults = Faults { drop_ppm: 1_000_000, only_from: Some(0), ..Faults::default() };
    sim.run_for(2 * MS);
    sim.faults = Faults::default();
    sim.run_for(2 * S);
    let lost = sim.check();
    assert!(!lost.is_empty());
    // One bridge found the gap (before a later frame, or by a probe); the other end heard it from that bridge.
    let ends = [sim.end(sim.pairs[p].client).closed.clone().unwrap(), sim.end(sim.pairs[p].server.unwrap()).closed.clone().unwrap()];
    let found = ends.iter().find(|(_, r, _)| !r.text.contains("closed by runtime")).expect("one bridge found it");
    assert_eq!(found.1.code, TeardownCode::Gap, "{:?}", found.1);
    assert!(found.1.text.contains("expected sequence number") && found.1.text.contains("frames lost"), "{}", found.1.text);
    let told = ends.iter().find(|(_, r, _)| r.text.contains("closed by runtime")).expect("the other was told");
    assert!(told.1.text.contains("expected sequence number") && told.2, "{:?}", told.1);
}

#[test]
fn a_duplicate_closes_the_channel() {
    let mut sim = two();
    let p = bound(&mut sim);
    sim.faults = Faults { dup_ppm: 1_000_000, ..Faults::default() };
    sim.run_for(2 * MS);
    sim.faults = Faults::default();
    sim.run_for(S);
    sim.check();
    let ends = [sim.end(sim.pairs[p].client).closed.clone().unwrap(), sim.end(sim.pairs[p].server.unwrap()).closed.clone().unwrap()];
    assert!(ends.iter().all(|(_, r, tell)| *tell && r.code == TeardownCode::Duplicate && r.text.contains("duplicate or out of order")), "{ends:?}");
}

#[test]
fn a_lost_tail_is_found_by_a_probe_within_two_heartbeats() {
    let mut sim = two();
    let p = bound(&mut sim);
    sim.pairs[p].active = false;
    sim.run_for(100 * MS);
    // The last frame of a burst is lost, and nothing follows it.
    sim.faults = Faults { drop_ppm: 1_000_000, ..Faults::default() };
    let c = sim.pairs[p].client;
    let mut f = Header { vci: 0, dir: DIR_TO_SERVER, kind: Kind::Data, flags: 0, ack: 0 }.encode().to_vec();
    f.extend_from_slice(&sim.end(c).sent.to_le_bytes());
    sim.nodes[0].b.send(sim.now, c.1, f).unwrap();
    sim.nodes[0].ends.get_mut(&c.1).unwrap().sent += 1;
    sim.drain(0);
    sim.faults = Faults::default();
    let t0 = sim.now;
    sim.run_for(2 * S);
    sim.check();
    let s = sim.pairs[p].server.unwrap();
    let (t, r, _) = sim.end(s).closed.clone().unwrap();
    assert!(r.text.contains("probe: expected sequence number"), "{}", r.text);
    assert!(t - t0 <= 2 * LEASE / 4 + 5 * MS, "found after {} ms", (t - t0) / MS);
}

#[test]
fn an_end_closing_in_band_closes_both_sides_after_everything_it_sent() {
    let mut sim = two();
    let p = bound(&mut sim);
    sim.pairs[p].active = false;
    sim.run_for(10 * MS);
    let (c, s) = (sim.pairs[p].client, sim.pairs[p].server.unwrap());
    sim.close_end(c.0, c.1);
    sim.run_for(100 * MS);
    assert!(sim.end(s).saw_teardown);
    for e in [c, s] {
        let (_, r, tell) = sim.end(e).closed.clone().unwrap();
        assert!(!tell && r.code == TeardownCode::Closed, "{r:?}");
    }
    assert_eq!(sim.nodes[0].b.channel_count() + sim.nodes[1].b.channel_count(), 0);
    assert!(sim.check().is_empty());
    assert!(sim.nodes[0].log.iter().any(|(_, a)| matches!(a, Action::UndeclareToken { key } if key == "mh/lab/ch/a/1")));
    // A late frame of the closed channel is refused (the driver drops it).
    assert!(sim.nodes[0].b.send(sim.now, c.1, Header { vci: 0, dir: 1, kind: Kind::Data, flags: 0, ack: 0 }.encode().to_vec()).is_err());
}

#[test]
fn a_local_close_tells_the_other_side_and_repeats_until_acked() {
    let mut sim = two();
    let p = bound(&mut sim);
    let (c, s) = (sim.pairs[p].client, sim.pairs[p].server.unwrap());
    // The first TEARDOWN is lost; the next heartbeat repeats it.
    sim.faults = Faults { drop_ppm: 1_000_000, ..Faults::default() };
    sim.nodes[0].b.close(sim.now, c.1, "the monitor link of runtime a died").unwrap();
    sim.drain(0);
    sim.faults = Faults::default();
    sim.run_for(S);
    let (_, r, tell) = sim.end(s).closed.clone().unwrap();
    assert!(tell && r.text.contains("the monitor link of runtime a died"), "{r:?}");
    // The channel's token is withdrawn only once the TEARDOWN was acked (so b hears the reason first).
    let (closed_at, heard_at) = (sim.end(c).closed.as_ref().unwrap().0, sim.end(s).closed.as_ref().unwrap().0);
    let undeclared = sim.nodes[0].log.iter().find_map(|(t, a)| matches!(a, Action::UndeclareToken { key } if key == "mh/lab/ch/a/1").then_some(*t));
    assert!(undeclared.unwrap() > heard_at && heard_at > closed_at, "{undeclared:?}, closed at {closed_at}, heard at {heard_at}");
    assert!(sim.check().len() <= 2);
    // Acked: no more repeats.
    let n = sim.nodes[0].log.len();
    sim.run_for(2 * S);
    let again = sim.nodes[0].log[n..].iter().any(|(_, a)| match a {
        Action::Put { payload, key, .. } if key.contains("/data/") => {
            decode_put(payload).unwrap().1.iter().any(|r| matches!(r, Record::Teardown { .. }))
        }
        _ => false,
    });
    assert!(!again);
}

#[test]
fn a_silent_peer_is_dead_after_a_lease_and_its_channels_close_with_the_reason() {
    let mut sim = two();
    let p = bound(&mut sim);
    let t0 = sim.now;
    sim.cut.insert((0, 1));
    sim.run_for(LEASE + 2 * S);
    sim.check();
    for e in [sim.pairs[p].client, sim.pairs[p].server.unwrap()] {
        let (t, r, tell) = sim.end(e).closed.clone().unwrap();
        assert!(tell && r.code == TeardownCode::PeerLost, "{r:?}");
        assert!(r.text.contains("no sign of life") && r.text.contains("lease 3.000 s"), "{}", r.text);
        assert!(t - t0 <= LEASE + S, "noticed after {} ms", (t - t0) / MS);
    }
    assert!(sim.nodes[0].log.iter().any(|(_, a)| matches!(a, Action::PeerDown { runtime, .. } if runtime == "b")));
    // A bind to the dead runtime is refused at once, naming why.
    let chan = sim.nodes[0].b.bind(sim.now, "svc", "b", 16, Duration::from_secs(5), None);
    sim.drain(0);
    let refused = sim.nodes[0].log.iter().find_map(|(_, a)| match a {
        Action::BindDone { chan: c, result: Err(r) } if *c == chan => Some(r.clone()),
        _ => None,
    });
    let r = refused.unwrap();
    assert_eq!(r.code, Refusal::NotInFabric);
    assert!(r.text.contains("runtime b is not in fabric lab"), "{}", r.text);
}

#[test]
fn a_peer_that_comes_back_is_a_new_session_and_can_be_bound_again() {
    let mut sim = two();
    let p = bound(&mut sim);
    // b freezes past a lease (SIGSTOP), then resumes.
    sim.nodes[1].frozen_until = Some(sim.now + LEASE + 2 * S);
    sim.run_for(LEASE + 4 * S);
    sim.check();
    let (c, s) = (sim.pairs[p].client, sim.pairs[p].server.unwrap());
    assert_eq!(sim.end(c).closed.as_ref().unwrap().1.code, TeardownCode::PeerLost);
    // b's side learned it too: its channel is not resumed.
    let (_, r, tell) = sim.end(s).closed.clone().unwrap();
    assert!(tell && r.code == TeardownCode::PeerLost, "{r:?}");
    assert_eq!(sim.nodes[0].b.channel_count() + sim.nodes[1].b.channel_count(), 0);
    assert_eq!(sim.nodes[0].b.live_peers(), vec!["b"]);
    // A new bind works.
    let q = sim.bind("a", "b", "svc2");
    sim.run_for(S);
    assert_eq!(sim.pairs[q].result, Some(Ok(())));
    assert!(sim.end(sim.pairs[q].server.unwrap()).got.len() > 100);
    assert!(sim.check().iter().all(|t| t.contains("no sign of life") || t.contains("reset")));
}

#[test]
fn a_restarted_peer_closes_the_channels_of_its_old_incarnation() {
    let mut sim = two();
    let p = bound(&mut sim);
    sim.pairs[p].active = false;
    // b restarts: a new bridge, a new incarnation.
    let mut nb = Bridge::new(FabricConfig::new("lab").unwrap(), "b", 0xbeef, sim.now).unwrap();
    nb.handle_liveliness(sim.now, "mh/lab/rt/a", true).unwrap();
    sim.nodes[1].b = nb;
    sim.nodes[1].ends.clear();
    sim.run_for(S);
    let (_, r, _) = sim.end(sim.pairs[p].client).closed.clone().unwrap();
    assert_eq!(r.code, TeardownCode::PeerLost);
    assert!(r.text.contains("restarted"), "{}", r.text);
}

#[test]
fn a_withdrawn_token_is_a_dead_peer_or_a_closed_channel_at_once() {
    let mut sim = two();
    let p = bound(&mut sim);
    let q = sim.bind("a", "b", "svc2");
    sim.run_for(10 * MS);
    let now = sim.now;
    // b's bridge hears that the channel a opened is gone.
    sim.nodes[1].b.handle_liveliness(now, "mh/lab/ch/a/2", false).unwrap();
    sim.drain(1);
    let (_, r, _) = sim.end(sim.pairs[q].server.unwrap()).closed.clone().unwrap();
    assert!(r.text.contains("withdrew the channel's liveliness token"), "{}", r.text);
    sim.nodes[0].b.handle_liveliness(now, "mh/lab/rt/b", false).unwrap();
    sim.drain(0);
    let (t, r, _) = sim.end(sim.pairs[p].client).closed.clone().unwrap();
    assert_eq!(t, now);
    assert!(r.text.contains("its liveliness token was withdrawn"), "{}", r.text);
}

fn refusal(sim: &Sim, n: usize, chan: ChanId) -> Option<multihop_fabric::BindRefused> {
    sim.nodes[n].log.iter().find_map(|(_, a)| match a {
        Action::BindDone { chan: c, result: Err(r) } if *c == chan => Some(r.clone()),
        _ => None,
    })
}

#[test]
fn binds_are_refused_naming_why() {
    let mut sim = two();
    sim.run_for(10 * MS);
    let now = sim.now;
    let b = &mut sim.nodes[0].b;
    let cases = [
        (b.bind(now, "nope", "b", 16, Duration::from_secs(5), None), Refusal::NotExported, "exports no service \"nope\" to fabric lab"),
        (b.bind(now, "x", "a", 16, Duration::from_secs(5), None), Refusal::Invalid, "is this runtime"),
        (b.bind(now, "x*y", "b", 16, Duration::from_secs(5), None), Refusal::Invalid, "invalid service name"),
        (b.bind(now, "x", "b c", 16, Duration::from_secs(5), None), Refusal::Invalid, "invalid runtime name"),
        (b.bind(now, "x", "b", 0, Duration::from_secs(5), None), Refusal::Invalid, "window 0"),
    ];
    sim.run_for(10 * MS);
    for (chan, code, text) in cases {
        let r = refusal(&sim, 0, chan).unwrap();
        assert_eq!(r.code, code, "{r:?}");
        assert!(r.text.contains(text), "{}", r.text);
    }
    // Refused by the service (its connect callback).
    sim.nodes[1].refuse_with = Some("connect callback said no".into());
    let p = sim.bind("a", "b", "svc");
    sim.run_for(10 * MS);
    let r = sim.pairs[p].result.clone().unwrap().unwrap_err();
    assert_eq!(r.code, Refusal::Refused);
    assert!(r.text.contains("bind svc@b refused: connect callback said no"), "{}", r.text);
    assert_eq!(sim.nodes[1].b.channel_count(), 0);
}

#[test]
fn a_bind_nobody_answers_times_out_and_a_late_accept_is_closed() {
    let mut sim = two();
    sim.nodes[1].silent = true;
    let p = sim.bind("a", "b", "svc");
    sim.run_for(5 * S + 50 * MS);
    let r = sim.pairs[p].result.clone().unwrap().unwrap_err();
    assert_eq!(r.code, Refusal::Timeout);
    assert!(r.text.contains("no answer within 5000 ms"), "{}", r.text);
    // The server's side gave up at the same deadline and told its driver.
    let closed = sim.nodes[1].ends.values().next().and_then(|e| e.closed.clone()).unwrap();
    assert_eq!(closed.1.code, TeardownCode::BindAbandoned);
    // A bind to a runtime never heard from, once the first lease is over: refused at once.
    let chan = sim.nodes[0].b.bind(sim.now, "svc", "zed", 16, Duration::from_secs(5), None);
    sim.drain(0);
    assert!(refusal(&sim, 0, chan).unwrap().text.contains("runtime zed is not in fabric lab"));
}

#[test]
fn a_late_accept_after_the_client_gave_up_closes_the_server_side() {
    let mut sim = two();
    sim.run_for(10 * MS);
    sim.nodes[1].silent = true;
    let p = sim.bind_within("a", "b", "svc", Duration::from_millis(100));
    sim.run_for(200 * MS);
    assert_eq!(sim.pairs[p].result.clone().unwrap().unwrap_err().code, Refusal::Timeout);
    // The server's driver accepts only now (its own deadline is the client's timeout after the request came).
    let chan = sim.nodes[1].log.iter().find_map(|(_, a)| match a {
        Action::IncomingBind { chan, .. } => Some(*chan),
        _ => None,
    });
    let chan = chan.unwrap();
    let closed = sim.nodes[1].ends.get(&chan).and_then(|e| e.closed.clone());
    assert_eq!(closed.map(|c| c.1.code), Some(TeardownCode::BindAbandoned), "the server's side gave up too");
    // Had it accepted in between: the accept reaches a client that gave up, which closes the server's side.
    let mut sim = two();
    sim.run_for(10 * MS);
    sim.nodes[1].silent = true;
    let p = sim.bind_within("a", "b", "svc", Duration::from_millis(100));
    sim.run_for(100 * MS);
    assert_eq!(sim.pairs[p].result.clone().unwrap().unwrap_err().code, Refusal::Timeout);
    let chan = sim.nodes[1].log.iter().find_map(|(_, a)| match a {
        Action::IncomingBind { chan, .. } => Some(*chan),
        _ => None,
    });
    let chan = chan.unwrap();
    sim.nodes[1].b.accept(sim.now, chan).unwrap();
    sim.nodes[1].ends.insert(chan, Default::default());
    sim.drain(1);
    sim.run_for(10 * MS);
    let (_, r, tell) = sim.nodes[1].ends[&chan].closed.clone().unwrap();
    assert!(tell && r.code == TeardownCode::BindAbandoned, "{r:?}");
    assert!(r.text.contains("gave up the bind"), "{}", r.text);
}

#[test]
fn a_bind_made_right_after_start_waits_for_the_runtime_to_be_heard() {
    let mut a = Bridge::new(FabricConfig::new("lab").unwrap(), "a", 1, 0).unwrap();
    let chan = a.bind(0, "svc", "b", 16, Duration::from_secs(5), None);
    while a.poll_action().is_some() {}
    // b's first heartbeat arrives: the request goes out.
    let mut hb = Vec::new();
    Envelope { kind: PutKind::Heartbeat, src: "b".into(), src_inc: 9, dst_inc: 0, src_epoch: 1, dst_epoch: 0 }.encode(&mut hb);
    a.handle_put(500 * MS, "mh/lab/hb/a", &hb).unwrap();
    let mut sent = false;
    while let Some(x) = a.poll_action() {
        if let Action::Put { key, payload, priority } = x {
            if key == "mh/lab/bind/b" {
                let (_, recs) = decode_put(&payload).unwrap();
                assert!(matches!(recs[0], Record::BindRequest { chan: c, service: "svc", window: 16, .. } if c == chan.0));
                assert_eq!(priority, Priority::Data);
                sent = true;
            }
        }
    }
    assert!(sent);
}

#[test]
fn puts_that_are_not_for_this_bridge_are_refused_and_stale_ones_ignored() {
    let mut a = Bridge::new(FabricConfig::new("lab").unwrap(), "a", 1, 0).unwrap();
    let mut hb = Vec::new();
    Envelope { kind: PutKind::Heartbeat, src: "b".into(), src_inc: 9, dst_inc: 0, src_epoch: 1, dst_epoch: 0 }.encode(&mut hb);
    assert!(matches!(a.handle_put(0, "mh/other/hb/a", &hb), Err(InputError::Key(_))));
    assert!(matches!(a.handle_put(0, "mh/lab/hb/c", &hb), Err(InputError::Key(_))));
    assert!(matches!(a.handle_put(0, "mh/lab/rt/a", &hb), Err(InputError::Key(_))));
    assert!(matches!(a.handle_put(0, "mh/lab/data/a", &hb), Err(InputError::Mismatch(_))));
    assert!(matches!(a.handle_put(0, "mh/lab/hb/a", &hb[..10]), Err(InputError::Decode(e)) if e.field == "src_inc"));
    let mut own = Vec::new();
    Envelope { kind: PutKind::Heartbeat, src: "a".into(), src_inc: 9, dst_inc: 0, src_epoch: 1, dst_epoch: 0 }.encode(&mut own);
    assert!(matches!(a.handle_put(0, "mh/lab/hb/a", &own), Err(InputError::Mismatch(_))));
    // Records for another incarnation of this bridge: skipped and counted; the sender is alive all the same.
    let f = Header { vci: 0, dir: 2, kind: Kind::Data, flags: 0, ack: 0 }.encode();
    let mut old = Vec::new();
    Envelope { kind: PutKind::Data, src: "b".into(), src_inc: 9, dst_inc: 77, src_epoch: 1, dst_epoch: 1 }.encode(&mut old);
    Record::Frame { chan: 4, dir: Dir::ToClient, seq: 0, frame: &f }.encode(&mut old);
    a.handle_put(0, "mh/lab/data/a", &old).unwrap();
    assert_eq!((a.stats.stale_puts, a.stats.unknown_frames), (1, 0));
    assert_eq!(a.live_peers(), vec!["b"]);
    // A put of an incarnation of b that is over: ignored altogether.
    let mut newer = Vec::new();
    Envelope { kind: PutKind::Heartbeat, src: "b".into(), src_inc: 10, dst_inc: 0, src_epoch: 1, dst_epoch: 0 }.encode(&mut newer);
    a.handle_put(0, "mh/lab/hb/a", &newer).unwrap();
    a.handle_put(0, "mh/lab/hb/a", &hb).unwrap();
    assert_eq!(a.stats.stale_puts, 2, "incarnation 9 of b is buried");
    // A frame for a channel nobody opened is answered with a TEARDOWN.
    let mut data = Vec::new();
    Envelope { kind: PutKind::Data, src: "b".into(), src_inc: 10, dst_inc: 1, src_epoch: 1, dst_epoch: 1 }.encode(&mut data);
    Record::Frame { chan: 4, dir: Dir::ToClient, seq: 0, frame: &f }.encode(&mut data);
    a.handle_put(MS, "mh/lab/data/a", &data).unwrap();
    assert_eq!(a.stats.unknown_frames, 1);
    let mut answered = false;
    while let Some(x) = a.poll_action() {
        if let Action::Put { key, payload, .. } = x {
            if key == "mh/lab/data/b" {
                let (_, recs) = decode_put(&payload).unwrap();
                answered |= matches!(recs[0], Record::Teardown { chan: 4, dir: Dir::ToServer, code: TeardownCode::UnknownChannel, .. });
            }
        }
    }
    assert!(answered);
}

#[test]
fn exports_declare_and_withdraw_service_tokens() {
    let mut a = Bridge::new(FabricConfig::new("lab").unwrap(), "a", 1, 0).unwrap();
    assert_eq!(a.poll_action(), Some(Action::DeclareToken { key: "mh/lab/rt/a".into() }));
    a.export("echo").unwrap();
    a.export("echo").unwrap();
    assert!(a.export("e*cho").is_err());
    a.unexport("echo");
    assert_eq!(a.poll_action(), Some(Action::DeclareToken { key: "mh/lab/svc/a/echo".into() }));
    assert_eq!(a.poll_action(), Some(Action::UndeclareToken { key: "mh/lab/svc/a/echo".into() }));
    assert_eq!(a.poll_action(), None);
    assert_eq!(a.subscriptions(), ["mh/lab/data/a".to_string(), "mh/lab/hb/a".into(), "mh/lab/bind/a".into()]);
    assert!(Bridge::new(FabricConfig::new("lab").unwrap(), "a", 0, 0).is_err());
    assert!(Bridge::new(FabricConfig::new("lab").unwrap(), "-a", 1, 0).is_err());
}

#[test]
fn other_runtimes_exports_are_learned_from_their_tokens_and_forgotten_when_they_die() {
    let mut sim = two();
    sim.run_for(S); // a and b hear each other
    let now = sim.now;
    let b = &mut sim.nodes[0].b;
    b.handle_liveliness(now, "mh/lab/svc/b/echo", true).unwrap();
    b.handle_liveliness(now, "mh/lab/svc/b/echo", true).unwrap(); // told twice: one action
    b.handle_liveliness(now, "mh/lab/svc/b/kv", true).unwrap();
    b.handle_liveliness(now, "mh/lab/svc/b/kv", false).unwrap();
    let mut seen = Vec::new();
    while let Some(a) = b.poll_action() {
        if let Action::RemoteExport { runtime, service, up } = a {
            seen.push((runtime, service, up));
        }
    }
    assert_eq!(seen, vec![("b".to_string(), "echo".to_string(), true), ("b".into(), "kv".into(), true), ("b".into(), "kv".into(), false)]);
    let st = b.status(now);
    assert_eq!(st.peers.iter().find(|p| p.runtime == "b").unwrap().services, vec!["echo".to_string()]);
    // b goes silent past its lease: its services go with it, before the PeerDown.
    sim.cut.insert((0, 1));
    sim.run_for(LEASE + 2 * S);
    let log = &sim.nodes[0].log;
    let gone = log.iter().position(|(_, a)| matches!(a, Action::RemoteExport { service, up: false, .. } if service == "echo"));
    let down = log.iter().position(|(_, a)| matches!(a, Action::PeerDown { .. }));
    assert!(gone.is_some() && down.is_some() && gone < down, "{gone:?} {down:?}");
    assert!(sim.nodes[0].b.status(sim.now).peers.iter().all(|p| p.services.is_empty()));
}

#[test]
fn a_peer_heard_from_again_gets_back_the_services_whose_tokens_stood() {
    // A bridge frozen for about the lease may keep its Zenoh link, and with it its services' liveliness tokens:
    // declared dead here, its services leave the runtime; heard from again, they are exported again, as the
    // tokens stand then (one withdrawn while it was dead stays gone, one declared meanwhile comes).
    let mut sim = two();
    sim.run_for(S);
    let now = sim.now;
    let b = &mut sim.nodes[0].b;
    b.handle_liveliness(now, "mh/lab/svc/b/echo", true).unwrap();
    b.handle_liveliness(now, "mh/lab/svc/b/kv", true).unwrap();
    sim.cut.insert((0, 1));
    sim.run_for(LEASE + 2 * S);
    let now = sim.now;
    let b = &mut sim.nodes[0].b;
    assert!(b.status(now).peers.iter().all(|p| p.services.is_empty() && !p.alive));
    b.handle_liveliness(now, "mh/lab/svc/b/kv", false).unwrap();
    b.handle_liveliness(now, "mh/lab/svc/b/log", true).unwrap();
    let before = sim.nodes[0].log.len();
    sim.cut.remove(&(0, 1));
    sim.run_for(2 * S);
    let told: Vec<(String, bool)> = sim.nodes[0].log[before..]
        .iter()
        .filter_map(|(_, a)| match a {
            Action::RemoteExport { service, up, .. } => Some((service.clone(), *up)),
            _ => None,
        })
        .collect();
    assert_eq!(told, vec![("echo".to_string(), true), ("log".to_string(), true)]);
    let st = sim.nodes[0].b.status(sim.now);
    let peer = st.peers.iter().find(|p| p.runtime == "b").unwrap();
    assert!(peer.alive);
    assert_eq!(peer.services, vec!["echo".to_string(), "log".to_string()]);
}
