//! Credit-based flow control of one multi-hop channel end (TN-006 2.10).
//!
//! At most `window` messages are unacknowledged per direction.  Every
//! message carries the count of messages its sender consumed since its last
//! ack; a side that has consumed `window / 2` without sending anything sends
//! a dummy (ack-only) message, which takes no credit.  Monitors forward
//! without any flow control of their own, so what they queue per channel
//! direction is bounded by the window.

/// The window bookkeeping of one channel end. Not thread-safe by itself.
#[derive(Clone, Debug)]
pub struct Credits {
    window: u32,
    in_flight: u32,
    consumed_unacked: u32,
    pub acks_sent: u64,
    pub dummies_sent: u64,
}

impl Credits {
    pub fn new(window: u32) -> Credits {
        Credits { window: window.max(1), in_flight: 0, consumed_unacked: 0, acks_sent: 0, dummies_sent: 0 }
    }

    pub fn window(&self) -> u32 {
        self.window
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Whether a data message may be sent now.
    pub fn can_send(&self) -> bool {
        self.in_flight < self.window
    }

    /// Take one credit for a data message; returns the ack to piggy-back.
    pub fn on_send(&mut self) -> u32 {
        debug_assert!(self.can_send());
        self.in_flight += 1;
        self.take_ack()
    }

    /// Undo `on_send` when the message could not be written after all.
    pub fn undo_send(&mut self, ack: u32) {
        self.in_flight -= 1;
        self.consumed_unacked += ack;
        if ack > 0 {
            self.acks_sent -= 1;
        }
    }

    fn take_ack(&mut self) -> u32 {
        let a = self.consumed_unacked;
        self.consumed_unacked = 0;
        if a > 0 {
            self.acks_sent += 1;
        }
        a
    }

    /// The peer acknowledged `n` of our messages.
    pub fn on_ack(&mut self, n: u32) {
        self.in_flight = self.in_flight.saturating_sub(n);
    }

    /// We consumed one data message. Returns true when a dummy ack is due.
    pub fn on_consume(&mut self) -> bool {
        self.consumed_unacked += 1;
        self.ack_due()
    }

    /// Whether we have consumed `window / 2` messages without acknowledging
    /// them: a dummy ack is due.
    pub fn ack_due(&self) -> bool {
        self.consumed_unacked >= (self.window / 2).max(1)
    }

    /// Undo `on_dummy` when the dummy could not be written.
    pub fn undo_dummy(&mut self, ack: u32) {
        self.dummies_sent -= 1;
        self.consumed_unacked += ack;
        if ack > 0 {
            self.acks_sent -= 1;
        }
    }

    /// Take the ack for a dummy message.
    pub fn on_dummy(&mut self) -> u32 {
        self.dummies_sent += 1;
        self.take_ack()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_acks_and_dummies() {
        let (mut a, mut b) = (Credits::new(4), Credits::new(4));
        for _ in 0..4 {
            assert!(a.can_send());
            assert_eq!(a.on_send(), 0);
        }
        assert!(!a.can_send());
        assert!(!b.on_consume());
        assert!(b.on_consume()); // window/2 consumed: dummy due
        let ack = b.on_dummy();
        assert_eq!((ack, b.dummies_sent), (2, 1));
        a.on_ack(ack);
        assert_eq!(a.in_flight(), 2);
        b.on_consume();
        assert_eq!(b.on_send(), 1); // piggy-backed
        let ack = a.on_send();
        a.undo_send(ack);
        assert_eq!(a.in_flight(), 2);
    }
}
