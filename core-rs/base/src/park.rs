//! Waiting: spin a bounded while, then park on a futex doorbell.
//!
//! Every process (dispatcher or monitor) owns one [`Doorbell`], a word in a
//! small shared segment that every ring it reads from can ring.  So a
//! process waits on one word however many rings it reads.
//!
//! The protocol is an event count:
//!
//! * a reader about to sleep increments `waiters`, reads `epoch`, checks its
//!   rings once more, and only then calls `FUTEX_WAIT(epoch, seen)`;
//! * a writer publishes its message, issues a `SeqCst` fence, and reads
//!   `waiters`; only if it is non-zero does it bump `epoch` and
//!   `FUTEX_WAKE`.
//!
//! The two `SeqCst` operations (the reader's increment, the writer's fence)
//! order the pair: either the writer sees the waiter, or the reader's final
//! check sees the message.  A writer pays one fence and one load of a line
//! that is only written when someone parks, so a reader that is spinning
//! costs its writer no syscall and no cache-line transfer.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::thread::futex;

use crate::error::Result;
use crate::shm::Segment;

/// Size of a doorbell segment: one page.
pub(crate) const DOORBELL_BYTES: usize = 4096;

#[repr(C, align(128))]
struct DoorbellWord {
    /// Bumped by every ring that found a waiter; the futex word.
    /// Synchronises with the `epoch` load in `park` (via the futex compare).
    epoch: AtomicU32,
    /// Threads of the owning process currently parked or about to park.
    /// Written by the owner (`park`), read by writers in `ring` after their
    /// `SeqCst` fence.
    waiters: AtomicU32,
}

/// A process's doorbell, or a mapping of a peer's.
pub struct Doorbell {
    seg: Segment,
}

/// Why a park returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The condition held (checked before sleeping) or someone rang.
    Ready,
    /// The slice ended with nothing rung.
    Slice,
    /// A signal arrived: the caller should look at it (e.g. Ctrl-C).
    Interrupted,
}

impl Doorbell {
    /// A new doorbell for this process.
    pub fn create() -> Result<Doorbell> {
        Ok(Doorbell { seg: Segment::create("doorbell", DOORBELL_BYTES)? })
    }

    /// Map a peer's doorbell received over a control socket.
    pub fn from_fd(fd: OwnedFd) -> Result<Doorbell> {
        Ok(Doorbell { seg: Segment::from_fd(fd, DOORBELL_BYTES)? })
    }

    pub fn segment(&self) -> &Segment {
        &self.seg
    }

    fn word(&self) -> &DoorbellWord {
        // SAFETY: the segment is at least a page, page-aligned, and lives as long as self.
        unsafe { &*self.seg.at::<DoorbellWord>(0) }
    }

    /// Wake the owner if it is parked. Call after publishing (release-storing)
    /// whatever the owner waits for. Returns true when the owner had a
    /// waiter (so a wake-up was sent).
    #[inline]
    pub fn ring(&self) -> bool {
        // Orders our earlier publish before the `waiters` load; pairs with the
        // SeqCst increment of `waiters` in `park`.
        fence(Ordering::SeqCst);
        let w = self.word();
        if w.waiters.load(Ordering::Relaxed) != 0 {
            self.ring_slow();
            return true;
        }
        false
    }

    /// Bump the epoch and wake whoever waits, waiters counted or not (to
    /// end a waiting thread of our own).
    pub(crate) fn ring_always(&self) {
        self.ring_slow();
    }

    #[cold]
    fn ring_slow(&self) {
        let w = self.word();
        // Changes the futex word so a waiter between its `epoch` load and its
        // FUTEX_WAIT does not sleep.
        w.epoch.fetch_add(1, Ordering::SeqCst);
        futex_wake(&w.epoch);
    }

    /// Count the caller as a waiter that sleeps elsewhere (an event loop
    /// watching [`crate::async_bell`]'s descriptor) and return the epoch to
    /// wait on. As in `park`: after this, re-check what you wait for; every
    /// ring from now on bumps the epoch and wakes the futex word. Undo with
    /// [`Doorbell::disarm`].
    pub fn arm(&self) -> u32 {
        let w = self.word();
        // Announce the waiter before the caller's last check; pairs with the fence in `ring`.
        w.waiters.fetch_add(1, Ordering::SeqCst);
        w.epoch.load(Ordering::SeqCst)
    }

    /// Undo one [`Doorbell::arm`].
    pub(crate) fn disarm(&self) {
        // Pairs with `arm`; writers that still see the waiter only ring once more.
        self.word().waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// The futex word (its address, for a wait submitted elsewhere, e.g. io_uring).
    pub(crate) fn epoch_word(&self) -> &AtomicU32 {
        &self.word().epoch
    }

    /// Park the calling thread of the owning process for at most `slice`,
    /// unless `ready()` holds. Returns early when rung or signalled.
    pub fn park(&self, slice: Duration, ready: &mut dyn FnMut() -> bool) -> Wake {
        let w = self.word();
        // Announce the waiter before the last check; pairs with the fence in `ring`.
        w.waiters.fetch_add(1, Ordering::SeqCst);
        let seen = w.epoch.load(Ordering::SeqCst);
        let result = if ready() {
            Wake::Ready
        } else {
            match futex_wait(&w.epoch, seen, slice) {
                Ok(true) => Wake::Ready,
                Ok(false) => Wake::Slice,
                Err(_) => Wake::Interrupted,
            }
        };
        w.waiters.fetch_sub(1, Ordering::SeqCst);
        result
    }
}

/// The futex flags of a doorbell: none. Not `PRIVATE`: the word lives in a
/// segment mapped by several processes, and a private futex is keyed by this
/// process's address space, so a wake from another process would miss it.
const SHARED: futex::Flags = futex::Flags::empty();

/// `FUTEX_WAIT` on a shared (not process-private) word. `Ok(true)` when woken
/// or the word had changed, `Ok(false)` on timeout, `Err` on EINTR.
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) -> io::Result<bool> {
    let ts = futex::Timespec { tv_sec: timeout.as_secs().try_into().unwrap_or(futex::Secs::MAX), tv_nsec: timeout.subsec_nanos() as futex::Nsecs };
    match futex::wait(word, SHARED, expected, Some(&ts)) {
        Ok(()) => Ok(true),
        Err(Errno::AGAIN) => Ok(true),
        Err(Errno::TIMEDOUT) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

fn futex_wake(word: &AtomicU32) {
    // Whoever waits is woken; an error (none is possible on a valid word) has no one to tell.
    let _ = futex::wake(word, SHARED, i32::MAX as u32);
}

/// Result of one bounded wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waited {
    Ready,
    /// A slice passed; call again (after checking signals).
    Slice,
    TimedOut,
    Interrupted,
}

/// Longest one park lasts before the waiter returns to look at signals and
/// its peers' health.
pub const PARK_SLICE: Duration = crate::defaults::WAIT_SLICE;

/// This process's doorbell: every ring this process reads rings it (its dispatchers' links and channels,
/// a forger's link). Re-created after a fork (the child must not share its parent's).
pub fn process_doorbell() -> Result<Arc<Doorbell>> {
    static BELL: OnceLock<Mutex<Option<(u32, Arc<Doorbell>)>>> = OnceLock::new();
    let mut slot = crate::sync::lock(BELL.get_or_init(|| Mutex::new(None)));
    let pid = std::process::id();
    if let Some((p, d)) = slot.as_ref() {
        if *p == pid {
            return Ok(d.clone());
        }
    }
    let d = Arc::new(Doorbell::create()?);
    *slot = Some((pid, d.clone()));
    Ok(d)
}

/// Wake an event loop of this process that waits on its doorbell (`async_bell.rs`) for a control-plane
/// event (a reply, a connection to accept, the monitor gone): a fence and a load when none waits.
pub fn ring_event_loop() {
    if let Ok(bell) = process_doorbell() {
        bell.ring();
    }
}

/// Spin, then park on `bell` for at most one slice, until `ready()` holds or
/// `deadline` passes. `on_slice()` runs after a slice that saw nothing and
/// may turn it into `Ready` (e.g. a peer found dead).
pub fn wait_until(
    bell: &Doorbell,
    parks: &AtomicU64,
    spin: Duration,
    deadline: Option<Instant>,
    ready: &mut dyn FnMut() -> bool,
    on_slice: &mut dyn FnMut() -> bool,
) -> Waited {
    let now = Instant::now();
    let left = deadline.map(|d| d.saturating_duration_since(now));
    if left == Some(Duration::ZERO) {
        return if ready() { Waited::Ready } else { Waited::TimedOut };
    }
    let budget = left.map_or(spin, |l| l.min(spin));
    if spin_until(budget, ready) {
        return Waited::Ready;
    }
    let slice = deadline.map_or(PARK_SLICE, |d| d.saturating_duration_since(Instant::now()).min(PARK_SLICE));
    if slice.is_zero() {
        return Waited::TimedOut;
    }
    parks.fetch_add(1, Ordering::Relaxed);
    match bell.park(slice, ready) {
        Wake::Ready => Waited::Ready,
        Wake::Interrupted => Waited::Interrupted,
        Wake::Slice => {
            if on_slice() || ready() {
                Waited::Ready
            } else if deadline.is_some_and(|d| Instant::now() >= d) {
                Waited::TimedOut
            } else {
                Waited::Slice
            }
        }
    }
}

fn budget_from_env(var: &str, default_us: u64) -> Duration {
    let us = std::env::var(var).ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(default_us);
    Duration::from_micros(us)
}

/// How long a UMP endpoint spins before parking: its peer is another
/// dispatcher, normally on another CPU. `MULTIHOP_SPIN_US` overrides the
/// default of 50 us: long enough to catch a reply across cores without a
/// syscall, short enough that an idle waiter costs nothing measurable.
pub(crate) fn spin_budget() -> Duration {
    static BUDGET: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(|| budget_from_env("MULTIHOP_SPIN_US", 50))
}

/// How long a relay spins before parking: a monitor's forwarder, or a
/// multi-hop endpoint, whose next hop is the monitor pinned to its own CPU.
/// Spinning there only delays the process it waits for (measured: a 50 us
/// spin made a two-monitor round trip 10x slower), so by default a relay
/// checks a few dozen times and parks. `MULTIHOP_RELAY_SPIN_US` overrides it
/// (worth raising on machines with a spare core per monitor). The default,
/// zero, looks once and parks.
pub fn relay_spin_budget() -> Duration {
    static BUDGET: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(|| budget_from_env("MULTIHOP_RELAY_SPIN_US", 0))
}

/// Spin until `ready()` holds or `budget` passes. Every 64 rounds it looks
/// at the clock and yields the CPU: free when nothing else wants this CPU,
/// and it lets a peer that shares it (this core's monitor, or anything in an
/// oversubscribed runtime) run instead of waiting out our spin.
///
/// A zero budget checks once: a relay's next hop shares its CPU, so every
/// extra look only delays it.
#[inline]
pub fn spin_until(budget: Duration, ready: &mut dyn FnMut() -> bool) -> bool {
    if budget.is_zero() {
        return ready();
    }
    let start = Instant::now();
    let mut i: u32 = 0;
    loop {
        if ready() {
            return true;
        }
        i = i.wrapping_add(1);
        if i.is_multiple_of(64) {
            if start.elapsed() >= budget {
                return false;
            }
            std::thread::yield_now();
        }
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn park_times_out_without_ring_and_returns_on_ring() {
        let db = Arc::new(Doorbell::create().unwrap());
        let t = Instant::now();
        assert_eq!(db.park(Duration::from_millis(20), &mut || false), Wake::Slice);
        assert!(t.elapsed() >= Duration::from_millis(15));

        let flag = Arc::new(AtomicBool::new(false));
        let (db2, flag2) = (db.clone(), flag.clone());
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            flag2.store(true, Ordering::Release);
            db2.ring();
        });
        let t = Instant::now();
        let mut got = false;
        while t.elapsed() < Duration::from_secs(5) {
            if db.park(Duration::from_secs(5), &mut || flag.load(Ordering::Acquire)) == Wake::Ready && flag.load(Ordering::Acquire) {
                got = true;
                break;
            }
        }
        h.join().unwrap();
        assert!(got);
        assert!(t.elapsed() < Duration::from_secs(2), "ring did not wake the parked thread");
    }

    /// The futex is the shared kind: a wake through another mapping of the
    /// doorbell (what a peer process has) reaches a thread parked on this one.
    /// A private futex is keyed by address space and address, so this wake,
    /// at another address, would be lost and the park would run its 10 s.
    #[test]
    fn a_ring_through_another_mapping_wakes_the_parked_thread() {
        let db = Doorbell::create().unwrap();
        let peer = Doorbell::from_fd(crate::shm::dup_cloexec(db.segment().raw_fd()).unwrap()).unwrap();
        assert_ne!(db.segment().as_ptr(), peer.segment().as_ptr());
        let parker = rustix::thread::gettid().as_raw_nonzero().get();
        let h = std::thread::spawn(move || {
            // Wait (bounded) until the parking thread is inside FUTEX_WAIT (its system call, as
            // /proc shows it), so the wake below must reach the kernel's wait queue, not a check.
            let in_futex = || {
                std::fs::read_to_string(format!("/proc/self/task/{parker}/syscall"))
                    .is_ok_and(|s| s.split_whitespace().next() == Some(&libc::SYS_futex.to_string()))
            };
            let t = Instant::now();
            while !(peer.word().waiters.load(Ordering::SeqCst) > 0 && in_futex()) {
                assert!(t.elapsed() < Duration::from_secs(5), "the doorbell's thread never parked");
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(peer.ring());
        });
        let t = Instant::now();
        assert_eq!(db.park(Duration::from_secs(10), &mut || false), Wake::Ready);
        assert!(t.elapsed() < Duration::from_secs(5), "the wake through the other mapping was lost");
        h.join().unwrap();
    }
}
