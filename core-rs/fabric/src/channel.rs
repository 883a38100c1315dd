//! One bridged channel direction across the fabric: sequence numbers and the credit window.
//!
//! The sending half ([`TxDir`]) numbers every frame of its direction from 0 and never has more than `window`
//! frames unacknowledged (sent, not yet delivered to the receiving runtime's monitor link); frames beyond wait
//! in a queue bounded by the window too (a local sender that overruns it breaks the channel's own credit, so the
//! channel is torn down rather than the queue grown). The receiving half ([`RxDir`]) takes exactly the next
//! sequence number: a gap (frames lost) or a duplicate (or a frame out of order) is an error naming expected vs
//! got, which closes the channel; it acks, cumulatively, what its runtime's monitor link took, every half window,
//! and answers probes: a sender with frames unacked and no ack for a heartbeat interval sends a PROBE with its
//! next sequence number, so a lost tail (the last frames, an ack) is found too, not only a gap before a later frame.

use std::collections::VecDeque;

use crate::reason::{Teardown, TeardownCode};

/// The fabric window of a channel whose ends use `window`: its DATA frames (at most `window` in flight), the
/// ack-only DUMMY frames of its reverse traffic (each acks at least one frame, so at most `window` in flight) and
/// the closing end's last frame: a channel whose ends keep their own credit never waits on the fabric's.
pub fn fabric_window(window: u32) -> u64 {
    2 * u64::from(window.max(1)) + 1
}

/// The sending half of one channel direction.
#[derive(Debug)]
pub(crate) struct TxDir {
    window: u64,
    next_seq: u64,
    acked: u64,
    waiting: VecDeque<Vec<u8>>,
    /// `next_seq` when the last probe check ran: a frame below it still unacked has waited a whole interval.
    mark: u64,
    pub(crate) frames: u64,
    pub(crate) bytes: u64,
}

impl TxDir {
    pub(crate) fn new(window: u64) -> TxDir {
        TxDir { window: window.max(1), next_seq: 0, acked: 0, waiting: VecDeque::new(), mark: 0, frames: 0, bytes: 0 }
    }

    /// Frames sent and not yet acked.
    pub(crate) fn in_flight(&self) -> u64 {
        self.next_seq - self.acked
    }

    /// Frames waiting for credit.
    pub(crate) fn queued(&self) -> usize {
        self.waiting.len()
    }

    /// The sequence number the next frame gets.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Whether every frame sent was acked and none waits.
    pub(crate) fn idle(&self) -> bool {
        self.in_flight() == 0 && self.waiting.is_empty()
    }

    fn take(&mut self, frame: Vec<u8>) -> (u64, Vec<u8>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.frames += 1;
        self.bytes += frame.len() as u64;
        (seq, frame)
    }

    /// A frame from the local side: `Some((seq, frame))` to send now, `None` when it waits for credit. More than
    /// a window waiting is the local sender ignoring its credit: an error.
    pub(crate) fn push(&mut self, frame: Vec<u8>) -> Result<Option<(u64, Vec<u8>)>, Teardown> {
        if self.in_flight() < self.window && self.waiting.is_empty() {
            return Ok(Some(self.take(frame)));
        }
        if self.waiting.len() as u64 >= self.window {
            return Err(Teardown {
                code: TeardownCode::Window,
                text: format!("the local sender overran the credit window: {} frames in flight and {} waiting", self.in_flight(), self.waiting.len()),
            });
        }
        self.waiting.push_back(frame);
        Ok(None)
    }

    /// An ack: the receiver delivered `upto` frames. Returns the waiting frames the credit released. An ack for
    /// frames never sent is an error; an older ack than one already taken (reordered) changes nothing.
    pub(crate) fn on_ack(&mut self, upto: u64) -> Result<Vec<(u64, Vec<u8>)>, Teardown> {
        if upto > self.next_seq {
            return Err(Teardown { code: TeardownCode::Protocol, text: format!("ack for {upto} frames, only {} sent", self.next_seq) });
        }
        self.acked = self.acked.max(upto);
        let mut out = Vec::new();
        while self.in_flight() < self.window {
            let Some(f) = self.waiting.pop_front() else { break };
            out.push(self.take(f));
        }
        Ok(out)
    }

    /// Called once a heartbeat interval: the next sequence number to probe with when a frame sent before the
    /// last call is still unacked (so a lost tail is probed within two intervals of its sending).
    pub(crate) fn probe_due(&mut self) -> Option<u64> {
        let stuck = self.acked < self.mark;
        self.mark = self.next_seq;
        stuck.then_some(self.next_seq)
    }
}

/// The receiving half of one channel direction.
#[derive(Debug)]
pub(crate) struct RxDir {
    window: u64,
    expected: u64,
    delivered: u64,
    acked: u64,
    pub(crate) frames: u64,
    pub(crate) bytes: u64,
}

impl RxDir {
    pub(crate) fn new(window: u64) -> RxDir {
        RxDir { window: window.max(1), expected: 0, delivered: 0, acked: 0, frames: 0, bytes: 0 }
    }

    /// Frames received so far (the next sequence number expected).
    pub(crate) fn expected(&self) -> u64 {
        self.expected
    }

    /// Received, not yet delivered.
    pub(crate) fn undelivered(&self) -> u64 {
        self.expected - self.delivered
    }

    fn seq_error(&self, got: u64, what: &str) -> Teardown {
        if got > self.expected {
            Teardown {
                code: TeardownCode::Gap,
                text: format!("{what}: expected sequence number {}, got {got} ({} frames lost)", self.expected, got - self.expected),
            }
        } else {
            Teardown {
                code: TeardownCode::Duplicate,
                text: format!("{what}: expected sequence number {}, got {got} (duplicate or out of order)", self.expected),
            }
        }
    }

    /// A frame with `seq` came: exactly the next one, and within the window.
    pub(crate) fn on_frame(&mut self, seq: u64, len: usize) -> Result<(), Teardown> {
        if seq != self.expected {
            return Err(self.seq_error(seq, "frame"));
        }
        if self.undelivered() >= self.window {
            return Err(Teardown {
                code: TeardownCode::Window,
                text: format!("the sender overran the credit window: {} frames undelivered, window {}", self.undelivered(), self.window),
            });
        }
        self.expected += 1;
        self.frames += 1;
        self.bytes += len as u64;
        Ok(())
    }

    /// The local monitor link took `n` more frames. Returns the ack to send when half a window (rounded up) has
    /// been delivered since the last one.
    pub(crate) fn on_delivered(&mut self, n: u64) -> Result<Option<u64>, Teardown> {
        if self.delivered + n > self.expected {
            return Err(Teardown {
                code: TeardownCode::Local,
                text: format!("{} frames reported delivered, {} received", self.delivered + n, self.expected),
            });
        }
        self.delivered += n;
        Ok((self.delivered - self.acked >= self.window.div_ceil(2)).then(|| self.take_ack()))
    }

    /// The ack to send now (whatever was delivered), marking it sent.
    pub(crate) fn take_ack(&mut self) -> u64 {
        self.acked = self.delivered;
        self.delivered
    }

    /// Whether some delivery has not been acked yet.
    pub(crate) fn ack_pending(&self) -> bool {
        self.delivered > self.acked
    }

    /// A probe says the sender's next frame is `next`: anything else than what is expected means frames were lost
    /// (`next` ahead) or came out of order. Returns the ack to answer with.
    pub(crate) fn on_probe(&mut self, next: u64) -> Result<u64, Teardown> {
        if next != self.expected {
            return Err(self.seq_error(next, "probe"));
        }
        Ok(self.take_ack())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_counts_dummies_and_the_closing_frame() {
        assert_eq!(fabric_window(16), 33);
        assert_eq!(fabric_window(0), 3);
    }

    #[test]
    fn a_sender_never_has_more_than_the_window_in_flight() {
        let mut tx = TxDir::new(3);
        for i in 0..3u8 {
            assert_eq!(tx.push(vec![i]).unwrap(), Some((u64::from(i), vec![i])));
        }
        assert_eq!(tx.in_flight(), 3);
        for i in 3..6u8 {
            assert_eq!(tx.push(vec![i]).unwrap(), None);
        }
        assert_eq!(tx.queued(), 3);
        let e = tx.push(vec![6]).unwrap_err();
        assert_eq!(e.code, TeardownCode::Window);
        assert!(e.text.contains("3 frames in flight and 3 waiting"), "{}", e.text);
        // Two acked: two released, in order, numbered on.
        assert_eq!(tx.on_ack(2).unwrap(), vec![(3, vec![3]), (4, vec![4])]);
        assert_eq!(tx.in_flight(), 3);
        // A stale ack changes nothing; an ack beyond what was sent is an error.
        assert!(tx.on_ack(1).unwrap().is_empty());
        assert_eq!(tx.on_ack(6).unwrap_err().code, TeardownCode::Protocol);
        assert_eq!(tx.on_ack(5).unwrap(), vec![(5, vec![5])]);
        assert_eq!(tx.on_ack(6).unwrap(), vec![]);
        assert!(tx.idle());
        assert_eq!((tx.frames, tx.bytes), (6, 6));
    }

    #[test]
    fn a_queued_frame_keeps_its_place_behind_earlier_ones() {
        let mut tx = TxDir::new(1);
        assert!(tx.push(vec![0]).unwrap().is_some());
        assert!(tx.push(vec![1]).unwrap().is_none());
        // Credit back, but frame 1 still goes before a new one.
        assert_eq!(tx.on_ack(1).unwrap(), vec![(1, vec![1])]);
        assert!(tx.push(vec![2]).unwrap().is_none());
    }

    #[test]
    fn probes_only_when_stuck() {
        let mut tx = TxDir::new(4);
        assert_eq!(tx.probe_due(), None, "nothing in flight");
        tx.push(vec![0]).unwrap();
        tx.push(vec![1]).unwrap();
        assert_eq!(tx.probe_due(), None, "sent since the last check");
        tx.on_ack(1).unwrap();
        assert_eq!(tx.probe_due(), Some(2), "frame 1 waited a whole interval");
        tx.on_ack(2).unwrap();
        tx.push(vec![2]).unwrap();
        assert_eq!(tx.probe_due(), None, "everything before the last check was acked");
        assert_eq!(tx.probe_due(), Some(3));
    }

    #[test]
    fn a_receiver_takes_exactly_the_next_frame() {
        let mut rx = RxDir::new(8);
        rx.on_frame(0, 10).unwrap();
        rx.on_frame(1, 10).unwrap();
        let gap = rx.on_frame(5, 10).unwrap_err();
        assert_eq!(gap.code, TeardownCode::Gap);
        assert!(gap.text.contains("expected sequence number 2, got 5 (3 frames lost)"), "{}", gap.text);
        let dup = rx.on_frame(1, 10).unwrap_err();
        assert_eq!(dup.code, TeardownCode::Duplicate);
        assert!(dup.text.contains("expected sequence number 2, got 1"), "{}", dup.text);
        assert_eq!(rx.expected(), 2);
        assert_eq!((rx.frames, rx.bytes), (2, 20));
    }

    #[test]
    fn a_receiver_acks_every_half_window_and_refuses_an_overrun() {
        let mut rx = RxDir::new(5);
        for s in 0..5 {
            rx.on_frame(s, 1).unwrap();
        }
        assert_eq!(rx.on_frame(5, 1).unwrap_err().code, TeardownCode::Window);
        assert_eq!(rx.on_delivered(2).unwrap(), None);
        assert!(rx.ack_pending());
        assert_eq!(rx.on_delivered(1).unwrap(), Some(3), "3 = ceil(5 / 2)");
        assert!(!rx.ack_pending());
        assert_eq!(rx.on_delivered(3).unwrap_err().code, TeardownCode::Local);
        assert_eq!(rx.on_delivered(2).unwrap(), None);
        assert_eq!(rx.take_ack(), 5);
    }

    #[test]
    fn probes_find_a_lost_tail() {
        let mut rx = RxDir::new(4);
        rx.on_frame(0, 1).unwrap();
        rx.on_delivered(1).unwrap();
        assert_eq!(rx.on_probe(1).unwrap(), 1);
        let e = rx.on_probe(3).unwrap_err();
        assert_eq!(e.code, TeardownCode::Gap);
        assert!(e.text.starts_with("probe: expected sequence number 1, got 3"), "{}", e.text);
        assert_eq!(rx.on_probe(0).unwrap_err().code, TeardownCode::Duplicate);
    }
}
