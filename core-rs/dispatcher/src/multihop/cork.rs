//! Corking a dispatcher's link: a burst of multi-hop sends wakes the monitor once.
//!
//! Every multi-hop send rings this core's monitor if it is parked. A program
//! that writes to many channels in one go (a GES broker's round: the event to
//! each next broker, a delivery to each local client) would wake the monitor
//! on its first message, and a monitor woken on a shared CPU often runs at
//! once: it forwards that one message, parks, and is woken again by the next.
//! Within a cork the messages are written as usual (nothing waits, nothing is
//! held back), but the wake-up is deferred to the cork's end, so the monitor
//! finds the whole burst in one pass.
//!
//! A cork belongs to the thread that made it: sends from other threads ring
//! as usual. Corks nest; the outermost end rings. The state lives with the
//! link, so a cork can be ended from anywhere (a cork left by another thread
//! still rings and is gone).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread::ThreadId;

use multihop_base::sync::lock;

/// The corks of one link.
#[derive(Default)]
pub struct Corks {
    /// How many threads hold a cork (Relaxed: only a shortcut for sends when
    /// none does; a thread's own cork is set before its own sends, in program
    /// order, and a stale non-zero only sends another thread to the lock).
    active: AtomicUsize,
    /// (thread, nesting depth, a wake-up was deferred).
    held: Mutex<Vec<(ThreadId, u32, bool)>>,
}

impl Corks {
    /// Start (or nest) this thread's cork.
    pub fn cork(&self) {
        let me = std::thread::current().id();
        let mut h = lock(&self.held);
        match h.iter_mut().find(|k| k.0 == me) {
            Some(k) => k.1 += 1,
            None => {
                h.push((me, 1, false));
                self.active.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// End a cork of `thread`; true when it was the outermost and a wake-up
    /// was deferred (the caller rings the monitor).
    pub fn uncork(&self, thread: ThreadId) -> bool {
        let mut h = lock(&self.held);
        let Some(i) = h.iter().position(|k| k.0 == thread) else { return false };
        h[i].1 -= 1;
        if h[i].1 > 0 {
            return false;
        }
        self.active.fetch_sub(1, Ordering::Relaxed);
        h.swap_remove(i).2
    }

    /// A send was written: true if this thread's cork takes its wake-up
    /// (false: the caller rings now).
    #[inline]
    pub fn defer(&self) -> bool {
        if self.active.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let me = std::thread::current().id();
        let mut h = lock(&self.held);
        match h.iter_mut().find(|k| k.0 == me) {
            Some(k) => {
                k.2 = true;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cork_defers_its_threads_wake_ups_to_its_outermost_end() {
        let c = Corks::default();
        assert!(!c.defer(), "no cork: ring now");
        c.cork();
        c.cork();
        let me = std::thread::current().id();
        assert!(!c.uncork(me), "nothing was sent yet");
        assert!(c.defer());
        assert!(std::thread::scope(|s| s.spawn(|| !c.defer()).join().unwrap()), "another thread rings at once");
        assert!(c.uncork(me), "the outermost end rings for the deferred send");
        assert!(!c.defer());
        assert!(!c.uncork(me), "no cork left");
    }
}
