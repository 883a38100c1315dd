//! The messages waiting for one outgoing link of a monitor, served fairly
//! over channels: deficit round robin by bytes (Shreedhar and Varghese).
//!
//! TN-006 notes that one aggressive pair of clients can fill the link
//! between two monitors and starve another pair sharing it. A single FIFO
//! per link did exactly that: a message of a ping-pong channel waited behind
//! every message a flooding channel had queued (up to its whole credit
//! window). Here each channel direction on the link (its outgoing VCI) has
//! its own FIFO, and the active ones take turns: a turn adds [`QUANTUM`]
//! bytes to the channel's deficit and sends its messages while they fit in
//! it. So a message that arrives at a link where other channels wait goes
//! out after at most one quantum (plus one message) of each of them, however
//! much they have queued. Order within a channel is kept (one FIFO each).
//!
//! The forwarder writes into a monitor link's ring only while the ring holds
//! less than `LINK_FAIR_SLOTS` (see `forward.rs`), so what is already in the
//! ring, which is served in order, stays short too.
//!
//! Sans-IO: messages in, messages out, no ring and no clock here. The
//! queue also counts, for status and tests, how many messages of other
//! channels went out ahead of a message that found its own channel with
//! nothing waiting ([`LinkQueue::max_overtaken`]): what a ping-pong or a
//! request waits for. (A flooding channel's messages wait behind its own
//! backlog; that is its window's business, not the link's.)

use std::collections::{HashMap, VecDeque};

/// Bytes a channel may send per turn (a 64-byte message with its 16-byte
/// header is 80 bytes: 12 of them per turn).
pub(crate) const QUANTUM: usize = 1024;

struct Waiting {
    msg: Vec<u8>,
    /// Messages the link had sent from this queue when this one joined it,
    /// if its channel had nothing waiting then.
    fresh_at: Option<u64>,
}

#[derive(Default)]
struct Flow {
    msgs: VecDeque<Waiting>,
    deficit: usize,
}

/// One link's waiting messages. `front` is always the message deficit round
/// robin sends next; `pop` removes it.
pub(crate) struct LinkQueue {
    flows: HashMap<u64, Flow>,
    /// Channels with messages waiting, the one whose turn it is first.
    active: VecDeque<u64>,
    /// Whether the first active channel's turn has begun (its quantum added).
    in_turn: bool,
    quantum: usize,
    len: usize,
    sent: u64,
    max_len: usize,
    max_overtaken: u64,
}

impl Default for LinkQueue {
    fn default() -> Self {
        LinkQueue::new(QUANTUM)
    }
}

impl LinkQueue {
    /// An empty queue giving each channel `quantum` bytes per turn (at least 1).
    pub(crate) fn new(quantum: usize) -> LinkQueue {
        LinkQueue {
            flows: HashMap::new(),
            active: VecDeque::new(),
            in_turn: false,
            quantum: quantum.max(1),
            len: 0,
            sent: 0,
            max_len: 0,
            max_overtaken: 0,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Messages waiting.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Most messages that ever waited at once.
    pub(crate) fn max_len(&self) -> usize {
        self.max_len
    }

    /// Channels with messages waiting.
    pub(crate) fn channels(&self) -> usize {
        self.active.len()
    }

    /// Bytes per turn.
    pub(crate) fn quantum(&self) -> usize {
        self.quantum
    }

    /// Most messages of other channels that went out ahead of a message
    /// that found its channel with nothing waiting (deficit round robin
    /// bounds it by one turn of each other waiting channel, about
    /// `quantum / size + 1` messages each; a FIFO by everything queued
    /// before it).
    pub(crate) fn max_overtaken(&self) -> u64 {
        self.max_overtaken
    }

    /// Queue `msg` of the channel whose VCI on this link is `vci`.
    pub(crate) fn push(&mut self, vci: u64, msg: &[u8]) {
        let flow = self.flows.entry(vci).or_default();
        let fresh = flow.msgs.is_empty();
        if fresh {
            self.active.push_back(vci);
        }
        flow.msgs.push_back(Waiting { msg: msg.to_vec(), fresh_at: fresh.then_some(self.sent) });
        self.len += 1;
        self.max_len = self.max_len.max(self.len);
        if self.active.len() == 1 {
            self.settle();
        }
    }

    /// The message to send next, if any.
    pub(crate) fn front(&self) -> Option<&[u8]> {
        let vci = self.active.front()?;
        self.flows.get(vci)?.msgs.front().map(|w| w.msg.as_slice())
    }

    /// Remove the message `front` gave (it went out).
    pub(crate) fn pop(&mut self) {
        let Some(&vci) = self.active.front() else { return };
        let Some(flow) = self.flows.get_mut(&vci) else { return };
        let Some(w) = flow.msgs.pop_front() else { return };
        if let Some(at) = w.fresh_at {
            // It was its channel's head all along: all that went first was others'.
            self.max_overtaken = self.max_overtaken.max(self.sent - at);
        }
        self.sent += 1;
        flow.deficit = flow.deficit.saturating_sub(w.msg.len());
        self.len -= 1;
        if flow.msgs.is_empty() {
            // An idle channel keeps no credit (classic DRR).
            self.flows.remove(&vci);
            self.active.pop_front();
            self.in_turn = false;
        }
        self.settle();
    }

    /// Move the turn on until the first active channel's next message fits
    /// its deficit. Ends: every full round adds a quantum to each channel,
    /// so a message of `len` bytes fits after at most `len / quantum + 1`.
    fn settle(&mut self) {
        while let Some(&vci) = self.active.front() {
            let flow = self.flows.get_mut(&vci).expect("an active channel has a flow");
            let need = flow.msgs.front().map_or(0, |w| w.msg.len());
            if !self.in_turn {
                flow.deficit += self.quantum;
                self.in_turn = true;
            }
            if need <= flow.deficit {
                return;
            }
            self.active.rotate_left(1);
            self.in_turn = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded generator (splitmix64): the same cases every run.
    struct Seeded(u64);

    impl Seeded {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn gen_range(&mut self, r: std::ops::Range<usize>) -> usize {
            r.start + (self.next() % (r.end - r.start) as u64) as usize
        }
        fn gen_bool(&mut self, p: f64) -> bool {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
        }
    }

    fn msg(vci: u64, seq: u32, len: usize) -> Vec<u8> {
        let mut m = vec![0u8; len.max(12)];
        m[..8].copy_from_slice(&vci.to_le_bytes());
        m[8..12].copy_from_slice(&seq.to_le_bytes());
        m
    }

    fn who(m: &[u8]) -> (u64, u32) {
        (u64::from_le_bytes(m[..8].try_into().unwrap()), u32::from_le_bytes(m[8..12].try_into().unwrap()))
    }

    fn drain(q: &mut LinkQueue) -> Vec<(u64, u32)> {
        let mut out = Vec::new();
        while let Some(m) = q.front() {
            out.push(who(m));
            q.pop();
        }
        out
    }

    #[test]
    fn a_late_message_waits_for_one_quantum_of_a_flood_not_for_the_flood() {
        let mut q = LinkQueue::new(1024);
        for i in 0..4000 {
            q.push(1, &msg(1, i, 80));
        }
        q.push(2, &msg(2, 0, 80));
        let order = drain(&mut q);
        let at = order.iter().position(|&m| m == (2, 0)).unwrap();
        assert!(at <= 1024 / 80 + 1, "the victim went out after {at} flood messages");
        assert!(q.max_overtaken() <= (1024 / 80 + 1) as u64);
        // A FIFO would have let the whole flood overtake it: the counter sees that.
        assert_eq!(order.len(), 4001);
    }

    #[test]
    fn shares_are_equal_by_bytes_not_by_messages() {
        let mut q = LinkQueue::new(1000);
        for i in 0..1000 {
            q.push(1, &msg(1, i, 100)); // small messages
            q.push(2, &msg(2, i, 1000)); // ten times larger
        }
        // While both wait, each channel's bytes out differ by at most one
        // quantum plus one message.
        let (mut b1, mut b2) = (0i64, 0i64);
        for _ in 0..1000 {
            let m = q.front().unwrap();
            let (vci, _) = who(m);
            if vci == 1 {
                b1 += m.len() as i64
            } else {
                b2 += m.len() as i64
            }
            q.pop();
            assert!((b1 - b2).abs() <= 2000, "bytes out {b1} vs {b2}");
        }
    }

    #[test]
    fn order_within_each_channel_is_kept_and_nothing_is_lost() {
        let mut rng = Seeded(17);
        for _ in 0..50 {
            let mut q = LinkQueue::new(rng.gen_range(1..3000));
            let mut next = [0u32; 5];
            let mut seen = [0u32; 5];
            let mut pushed = 0;
            for _ in 0..2000 {
                if rng.gen_bool(0.6) {
                    let c = rng.gen_range(0..5);
                    q.push(c as u64, &msg(c as u64, next[c], rng.gen_range(12..5000)));
                    next[c] += 1;
                    pushed += 1;
                } else if let Some(m) = q.front() {
                    let (c, s) = who(m);
                    assert_eq!(s, seen[c as usize], "channel {c} out of order");
                    seen[c as usize] += 1;
                    q.pop();
                }
            }
            for (c, s) in drain(&mut q) {
                assert_eq!(s, seen[c as usize]);
                seen[c as usize] += 1;
            }
            assert_eq!(seen, next);
            assert!(q.is_empty() && q.channels() == 0 && pushed == next.iter().sum::<u32>());
        }
    }

    #[test]
    fn each_waiting_message_is_overtaken_by_a_bounded_number_of_others() {
        // Three floods and a sparse channel, random interleaving: whoever
        // waits sees at most about one quantum (plus one message) of each
        // other channel go first per turn it waits.
        let mut rng = Seeded(5);
        let mut q = LinkQueue::new(512);
        for round in 0..300u32 {
            for c in 0..3u64 {
                for _ in 0..rng.gen_range(0..20) {
                    q.push(c, &msg(c, round, 64));
                }
            }
            if round % 10 == 0 {
                q.push(9, &msg(9, round, 64));
            }
            for _ in 0..rng.gen_range(0..40) {
                if q.front().is_none() {
                    break;
                }
                q.pop();
            }
        }
        drain(&mut q);
        // Each flood's turn: at most a quantum plus the rest of its last
        // turn (under one message) of 64-byte messages.
        assert!(q.max_overtaken() > 0);
        assert!(q.max_overtaken() <= 3 * (512 / 64 + 1), "{}", q.max_overtaken());
    }
}
