//! Credit-based flow control of one multi-hop channel end (TN-006 2.10).
//!
//! At most `window` messages are unacknowledged per direction.  Every
//! message carries the count of messages its sender consumed since its last
//! ack; a side that has consumed `window / 2` without sending anything sends
//! a dummy (ack-only) message, which takes no credit.  Monitors forward
//! without any flow control of their own, so what they queue per channel
//! direction is bounded by the window.
//!
//! A sender that flushes asks for an ack now (a message flagged ACK_NOW):
//! the receiver marks how many messages had arrived by then ([`Credits::request_ack`])
//! and acks as soon as it has consumed that many, whatever the window says,
//! so the sender learns without waiting for `window / 2` more.

/// The window bookkeeping of one channel end. Not thread-safe by itself.
#[derive(Clone, Debug)]
pub struct Credits {
    window: u32,
    in_flight: u32,
    consumed_unacked: u32,
    /// Data messages consumed so far.
    consumed: u64,
    /// The peer asked for an ack once `consumed` reaches this.
    ack_mark: Option<u64>,
    /// The mark the last ack taken cleared (restored if that ack is undone).
    cleared_mark: Option<u64>,
    pub acks_sent: u64,
    pub dummies_sent: u64,
}

impl Credits {
    pub fn new(window: u32) -> Credits {
        Credits {
            window: window.max(1),
            in_flight: 0,
            consumed_unacked: 0,
            consumed: 0,
            ack_mark: None,
            cleared_mark: None,
            acks_sent: 0,
            dummies_sent: 0,
        }
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

    /// Take a credit beyond the window: a closing end's last frame (what
    /// it held for the next credit goes right before its TEARDOWN, so a
    /// closing channel holds at most `window + 1` frames in the monitors).
    pub fn on_send_closing(&mut self) -> u32 {
        self.in_flight += 1;
        self.take_ack()
    }

    /// Undo `on_send` when the message could not be written after all.
    pub fn undo_send(&mut self, ack: u32) {
        self.in_flight -= 1;
        self.undo_ack(ack);
    }

    fn take_ack(&mut self) -> u32 {
        let a = self.consumed_unacked;
        self.consumed_unacked = 0;
        if a > 0 {
            self.acks_sent += 1;
        }
        self.cleared_mark = self.ack_mark.filter(|m| self.consumed >= *m);
        if self.cleared_mark.is_some() {
            self.ack_mark = None;
        }
        a
    }

    fn undo_ack(&mut self, ack: u32) {
        self.consumed_unacked += ack;
        if ack > 0 {
            self.acks_sent -= 1;
        }
        if let Some(m) = self.cleared_mark.take() {
            self.ack_mark = Some(self.ack_mark.map_or(m, |n| n.max(m)));
        }
    }

    /// The peer asked for an ack once we have consumed `arrived` messages
    /// (all that had arrived when its request did).
    pub fn request_ack(&mut self, arrived: u64) {
        if self.consumed >= arrived && self.consumed_unacked == 0 {
            return; // acked already (the ack may still be on its way)
        }
        self.ack_mark = Some(self.ack_mark.map_or(arrived, |m| m.max(arrived)));
    }

    /// The peer acknowledged `n` of our messages.
    pub fn on_ack(&mut self, n: u32) {
        self.in_flight = self.in_flight.saturating_sub(n);
    }

    /// We consumed one data message. Returns true when a dummy ack is due.
    pub fn on_consume(&mut self) -> bool {
        self.consumed_unacked += 1;
        self.consumed += 1;
        self.ack_due()
    }

    /// Messages consumed and not acknowledged yet.
    pub fn unacked(&self) -> u32 {
        self.consumed_unacked
    }

    /// Whether a dummy ack is due: we have consumed `window / 2` messages
    /// without acknowledging them, or everything the peer asked an ack for.
    pub fn ack_due(&self) -> bool {
        self.consumed_unacked >= (self.window / 2).max(1) || (self.consumed_unacked > 0 && self.ack_mark.is_some_and(|m| self.consumed >= m))
    }

    /// Undo `on_dummy` when the dummy could not be written.
    pub fn undo_dummy(&mut self, ack: u32) {
        self.dummies_sent -= 1;
        self.undo_ack(ack);
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

    #[test]
    fn a_closing_end_may_take_one_credit_beyond_the_window() {
        let mut a = Credits::new(2);
        a.on_send();
        a.on_send();
        assert!(!a.can_send());
        a.on_send_closing();
        assert_eq!(a.in_flight(), 3, "the held frame goes right before the TEARDOWN");
        a.on_ack(3);
        assert_eq!(a.in_flight(), 0);
    }

    #[test]
    fn an_ack_request_is_answered_once_its_messages_are_consumed() {
        let mut b = Credits::new(16);
        // Three messages arrived, then the sender's flush asked for an ack.
        b.request_ack(3);
        assert!(!b.on_consume());
        assert!(!b.on_consume());
        assert!(b.on_consume(), "all three consumed: ack now, not at window/2");
        let ack = b.on_dummy();
        assert_eq!(ack, 3);
        // The mark is spent: later consumes go back to window/2.
        assert!(!b.on_consume());
        // A dummy that could not be written restores the request.
        let mut c = Credits::new(16);
        c.request_ack(1);
        assert!(c.on_consume());
        let ack = c.on_dummy();
        c.undo_dummy(ack);
        assert!(c.ack_due());
        // A request for what was acked already asks for nothing.
        let mut d = Credits::new(16);
        d.on_consume();
        d.on_dummy();
        d.request_ack(1);
        assert!(!d.ack_due());
        assert!(!d.on_consume());
    }
}
