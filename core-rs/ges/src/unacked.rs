//! A gateway's copies sent and not yet acknowledged, by sequence number.
//!
//! `Erp::send` numbers a gateway's copies 0, 1, 2, ... and keeps each until the neighbour
//! acknowledges it (cumulatively, up to a number, and in durable mode also one by one, out of
//! order); when the gateway is lost, what is still held is routed again, in order. The numbers
//! held are consecutive from the oldest, so they are slots of a ring that slides as
//! acknowledgements come: no allocation per copy (a map of them allocated a node every few copies
//! and the copy itself behind an `Arc`).

use std::collections::VecDeque;

/// The copies (`C`: `erp::Copy`) of one gateway sent and not yet acknowledged.
pub struct Unacked<C> {
    /// the sequence number of `slots[0]`
    base: u64,
    /// the copies from `base` on; None: acknowledged out of order
    slots: VecDeque<Option<C>>,
    /// how many slots hold a copy
    held: usize,
}

impl<C> Default for Unacked<C> {
    fn default() -> Self {
        Unacked { base: 0, slots: VecDeque::new(), held: 0 }
    }
}

impl<C> Unacked<C> {
    /// Keep `copy`, sent as number `seq` (the one after the last kept; any number when none is).
    pub fn push(&mut self, seq: u64, copy: C) {
        if self.slots.is_empty() {
            self.base = seq;
        }
        debug_assert_eq!(seq, self.base + self.slots.len() as u64, "a gateway's copies are numbered in order");
        self.slots.push_back(Some(copy));
        self.held += 1;
    }

    /// The neighbour handled the copies up to `upto` (none when negative) and those in `also`:
    /// hand each that was held to `done` with its number (ascending for `upto`, then in `also`'s
    /// order), forgetting it.
    pub fn ack(&mut self, upto: i64, also: &[u64], mut done: impl FnMut(u64, C)) {
        if upto >= 0 {
            while self.base <= upto as u64 {
                let Some(slot) = self.slots.pop_front() else { break };
                if let Some(c) = slot {
                    self.held -= 1;
                    done(self.base, c);
                }
                self.base += 1;
            }
        }
        for &s in also {
            if (s as i64) > upto && s >= self.base {
                if let Some(slot) = self.slots.get_mut((s - self.base) as usize) {
                    if let Some(c) = slot.take() {
                        self.held -= 1;
                        done(s, c);
                    }
                }
            }
        }
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.base += 1;
        }
    }

    /// How many copies are held.
    pub fn len(&self) -> usize {
        self.held
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// The copies held, with their numbers, oldest first.
    pub fn into_copies(self) -> impl Iterator<Item = (u64, C)> {
        let base = self.base;
        self.slots.into_iter().enumerate().filter_map(move |(i, c)| c.map(|c| (base + i as u64, c)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers held, each copy under its own number (the tests' copies are their numbers).
    fn numbers(u: Unacked<u64>) -> Vec<u64> {
        u.into_copies()
            .map(|(s, c)| {
                assert_eq!(c, s, "each copy under its own number");
                s
            })
            .collect()
    }

    #[test]
    fn acknowledgements_slide_the_window_in_order_and_out_of_order() {
        let mut u = Unacked::default();
        for s in 5..12 {
            u.push(s, s);
        }
        let mut done = Vec::new();
        fn settle(done: &mut Vec<u64>) -> impl FnMut(u64, u64) + '_ {
            move |s, c| {
                assert_eq!(c, s, "each copy under its own number");
                done.push(s);
            }
        }
        u.ack(-1, &[9, 7, 9, 3, 40], settle(&mut done)); // out of order only (a repeat, one below, one beyond: ignored)
        assert_eq!((done.clone(), u.len()), (vec![9, 7], 5));
        done.clear();
        u.ack(7, &[10], settle(&mut done)); // 5, 6 by the cumulative part (7 was done), then 10
        assert_eq!((done.clone(), u.len()), (vec![5, 6, 10], 2));
        assert_eq!(numbers(std::mem::take(&mut u)), vec![8, 11]);
        // an empty window takes any number next (after a lost gateway numbering starts again)
        u.push(0, 0);
        done.clear();
        u.ack(100, &[], settle(&mut done));
        assert_eq!((done, u.is_empty()), (vec![0], true));
        u.push(101, 101);
        assert_eq!(numbers(u), vec![101]);
    }
}
