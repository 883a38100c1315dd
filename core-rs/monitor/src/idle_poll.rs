//! Adaptive polling at idle priority, for a monitor's forwarding thread.
//!
//! Why: a monitor shares its CPU with the dispatchers of its core. When the
//! forwarder parks after every message, each hand-off through it costs a
//! futex wake and two context switches on that CPU (about 10 us each on the
//! 2-vCPU VM this was measured on): a round trip through two monitors paid
//! four of them and was twice as slow as `multiprocessing.Pipe`.
//!
//! What: after a step that moved messages, the forwarder polls its rings for
//! up to `MULTIHOP_MONITOR_POLL_US` (default 200 us; 0 turns polling off)
//! instead of parking, as long as traffic flows: while the recent gap between
//! busy steps (an EWMA) is below that cap. Traffic sparser than the cap never
//! polls, so an idle or quiet runtime costs what it did. (A budget of a few
//! times the gap, tried first, parked during the longer pauses of a stream
//! and paid a cross-CPU wake-up for each: one-way multi-hop throughput went
//! from ~680k to ~870k msg/s with the whole cap.)
//!
//! While it polls the thread runs under `SCHED_IDLE`: any runnable dispatcher
//! on the CPU preempts it at once, so polling only uses cycles the CPU would
//! otherwise idle away, and a sender finds the monitor awake (no futex wake).
//! Before parking the thread goes back to `SCHED_OTHER`, so a wake-up still
//! preempts as it did.
//!
//! Starvation guard: a `SCHED_IDLE` thread next to a CPU-bound one may not
//! run for a second or more (measured: 1.3-1.5 s). A guard thread (normal
//! priority) looks every millisecond, while the forwarder is active, at the
//! poller's heartbeat; if the poller is at idle priority and its heartbeat has
//! not moved, the guard moves it back to `SCHED_OTHER` (a fair share), so it
//! finishes its step and parks. With no work for `GUARD_ACTIVE` the guard
//! sleeps until work comes back.
//!
//! Scheduling group: `SCHED_IDLE` gives way only within the poller's own
//! scheduling group (its session, under autogroup). So the forwarder's
//! process leads a session of its own, kept light (`sched/session.rs`), and
//! the guard also feeds `sched/weight.rs` with how long the forwarder waited
//! to run: when something on the CPU that does not block (a compute job)
//! starves it, the group gets its fair share back and the forwarder stops
//! polling (the CPU is not idle then, so polling would only take turns from
//! that job) until a later probe finds the CPU free again. The guard itself
//! may run on any CPU, so what starves the forwarder does not starve its
//! guard too.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::sched::session::SchedGroup;
use crate::sched::weight::{Weight, WeightPolicy};
use multihop_base::peer::coarse_now_ns;

/// Default cap of the poll budget, in microseconds.
pub(crate) const DEFAULT_POLL_US: u64 = 200;
/// How often the guard looks at an active poller.
const GUARD_PERIOD: Duration = Duration::from_millis(1);
/// The guard stays on this long after the last busy step (coarse ns).
const GUARD_ACTIVE_NS: u64 = 100_000_000;

/// `MULTIHOP_MONITOR_POLL_US`, or the default.
pub(crate) fn poll_cap() -> Duration {
    let us = std::env::var("MULTIHOP_MONITOR_POLL_US").ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(DEFAULT_POLL_US);
    Duration::from_micros(us)
}

/// What the poller and its guard share.
struct Shared {
    /// The poller's kernel thread id; written once before the guard starts.
    tid: AtomicI32,
    /// True while the poller runs under SCHED_IDLE. Written by the poller
    /// (and cleared by the guard when it promotes); read by the guard.
    at_idle: AtomicBool,
    /// Bumped by the poller as it makes progress; the guard compares two
    /// readings one period apart. Relaxed: only "did it change" matters.
    heartbeat: AtomicU64,
    /// Coarse time (ns) of the last busy step; read by the guard to decide
    /// whether to stay on. Relaxed: a stale value only shifts that by a tick.
    last_work_ns: AtomicU64,
    /// Times the guard had to promote a starved poller (for status).
    promotions: AtomicU64,
    /// Bumped by the poller each time it enters the idle-priority phase;
    /// read by the guard to tell waiting by design from starvation.
    idle_entries: AtomicU64,
    /// The scheduling group's status (written by the guard on a change,
    /// read by status requests).
    group_status: Mutex<serde_json::Value>,
    /// True while the group is at its fair share because something on the
    /// CPU starved the forwarder: polling would then only take turns from
    /// that something. Written by the guard, read by the poller (Relaxed: a
    /// hint, acted on at the next budget).
    contended: AtomicBool,
    stop: AtomicBool,
    /// The guard sleeps on this while the forwarder is inactive.
    wake: (Mutex<bool>, Condvar),
}

/// The poller's side: owned by the forwarding thread.
pub(crate) struct IdlePoll {
    cap: Duration,
    shared: Arc<Shared>,
    gap_ewma_ns: u64,
    last_work: Instant,
    beats: u64,
}

fn set_policy(tid: i32, idle: bool) {
    let param = libc::sched_param { sched_priority: 0 };
    let policy = if idle { libc::SCHED_IDLE } else { libc::SCHED_OTHER };
    // Failure (e.g. a seccomp filter) only costs the optimisation.
    // SAFETY: a valid sched_param for a thread id of this process.
    unsafe { libc::sched_setscheduler(tid, policy, &param) };
}

impl IdlePoll {
    /// Set up polling for the calling thread with budget cap `cap` (zero: never
    /// poll, and no guard thread). With `own_group`, the process's scheduling
    /// group is made light and managed by the guard (a monitor; never a
    /// process that does not lead its own session, see `sched/session.rs`).
    pub(crate) fn start(cap: Duration, own_group: bool) -> IdlePoll {
        let group = (own_group && !cap.is_zero()).then(SchedGroup::join);
        let shared = Arc::new(Shared {
            // SAFETY: gettid takes no arguments and cannot fail.
            tid: AtomicI32::new(unsafe { libc::gettid() }),
            at_idle: AtomicBool::new(false),
            heartbeat: AtomicU64::new(0),
            last_work_ns: AtomicU64::new(coarse_now_ns()),
            promotions: AtomicU64::new(0),
            idle_entries: AtomicU64::new(0),
            group_status: Mutex::new(group.as_ref().map_or(serde_json::Value::Null, SchedGroup::status)),
            contended: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            wake: (Mutex::new(false), Condvar::new()),
        });
        if !cap.is_zero() {
            let g = shared.clone();
            std::thread::Builder::new().name("poll-guard".into()).spawn(move || guard(&g, group)).ok();
        }
        IdlePoll { cap, shared, gap_ewma_ns: cap.as_nanos() as u64 / 2, last_work: Instant::now(), beats: 0 }
    }

    /// A step moved messages: learn the gap since the previous busy step.
    pub(crate) fn on_work(&mut self) {
        if self.cap.is_zero() {
            return;
        }
        let now = Instant::now();
        let cap_ns = self.cap.as_nanos() as u64;
        let gap = (now - self.last_work).as_nanos().min(8 * cap_ns as u128) as u64;
        self.gap_ewma_ns = (7 * self.gap_ewma_ns + gap) / 8;
        self.last_work = now;
        self.beat();
        let coarse = coarse_now_ns();
        let before = self.shared.last_work_ns.swap(coarse, Ordering::Relaxed);
        if coarse.saturating_sub(before) >= GUARD_ACTIVE_NS {
            // The guard may be asleep: wake it (rare: once per quiet spell).
            let (flag, cv) = &self.shared.wake;
            *multihop_base::sync::lock(flag) = true;
            cv.notify_one();
        }
    }

    /// How long to poll now: the whole cap while traffic flows (busy steps
    /// come closer together than the cap, on average), zero when it is
    /// sparser. Parking early is the expensive mistake: the next message
    /// then needs a cross-CPU wake-up (~40 us in a VM), while polling at idle
    /// priority only uses cycles nobody else wants.
    pub(crate) fn budget(&self) -> Duration {
        let cap_ns = self.cap.as_nanos() as u64;
        if cap_ns == 0 || self.gap_ewma_ns > cap_ns || self.shared.contended.load(Ordering::Relaxed) {
            return Duration::ZERO;
        }
        self.cap
    }

    /// Enter the poll phase: run at idle priority.
    pub(crate) fn begin(&mut self) {
        if !self.shared.at_idle.load(Ordering::Relaxed) {
            self.shared.idle_entries.fetch_add(1, Ordering::Relaxed);
            self.shared.at_idle.store(true, Ordering::Relaxed);
            set_policy(0, true);
        }
    }

    /// A sign of life while polling (cheap: a relaxed store every 64 calls).
    #[inline]
    pub(crate) fn beat(&mut self) {
        self.beats = self.beats.wrapping_add(1);
        if self.beats & 63 == 0 {
            self.shared.heartbeat.store(self.beats, Ordering::Relaxed);
        }
    }

    /// About to park: back to normal priority, so a wake-up preempts.
    pub(crate) fn before_park(&mut self) {
        // swap: the guard may have promoted us (and cleared the flag) already.
        if self.shared.at_idle.swap(false, Ordering::Relaxed) {
            set_policy(0, false);
        }
    }

    /// Times the guard promoted a starved poller.
    pub(crate) fn promotions(&self) -> u64 {
        // Pairs with the guard's SeqCst increment before it changes the policy.
        self.shared.promotions.load(Ordering::SeqCst)
    }

    /// A handle for status requests on other threads.
    pub(crate) fn status_handle(&self) -> PollStatus {
        PollStatus(self.shared.clone())
    }
}

/// What other threads may read of a poller.
#[derive(Clone)]
pub(crate) struct PollStatus(Arc<Shared>);

impl PollStatus {
    /// The scheduling group's placement, weight and changes (`null` when
    /// this process does not manage one).
    pub(crate) fn group(&self) -> serde_json::Value {
        multihop_base::sync::lock(&self.0.group_status).clone()
    }
}

impl Drop for IdlePoll {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let (flag, cv) = &self.shared.wake;
        *multihop_base::sync::lock(flag) = true;
        cv.notify_one();
    }
}

/// Let the calling thread run on any CPU (the guard: a neighbour that
/// starves the forwarder on its CPU must not starve the guard too).
fn unpin_self() {
    // SAFETY: cpu_set_t is plain old data; all ones asks for every CPU and
    // the kernel keeps the ones this thread may use.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for cpu in 0..libc::CPU_SETSIZE as usize {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The kernel's count of nanoseconds thread `tid` of this process spent
/// runnable but not running (`run_delay`, second field of its schedstat).
struct RunDelay(Option<std::fs::File>);

impl RunDelay {
    fn open(tid: i32) -> RunDelay {
        RunDelay(std::fs::File::open(format!("/proc/self/task/{tid}/schedstat")).ok())
    }

    fn read(&mut self) -> Option<u64> {
        use std::io::{Read, Seek};
        let f = self.0.as_mut()?;
        let mut buf = [0u8; 96];
        f.rewind().ok()?;
        let n = f.read(&mut buf).ok()?;
        std::str::from_utf8(&buf[..n]).ok()?.split_whitespace().nth(1)?.parse().ok()
    }
}

/// The guard's view of the forwarder's scheduling group.
struct GroupKeeper {
    group: SchedGroup,
    policy: WeightPolicy,
    delay: RunDelay,
    /// (time, run_delay, idle entries) at the previous observation.
    prev: Option<(Instant, u64, u64)>,
    epoch: Instant,
}

impl GroupKeeper {
    fn new(group: SchedGroup, tid: i32) -> GroupKeeper {
        GroupKeeper { group, policy: WeightPolicy::new(0), delay: RunDelay::open(tid), prev: None, epoch: Instant::now() }
    }

    /// One guard period while the forwarder is active.
    fn observe(&mut self, s: &Shared) {
        let Some(waited) = self.delay.read() else { return };
        let now = Instant::now();
        let entries = s.idle_entries.load(Ordering::Relaxed);
        if let Some((t0, w0, e0)) = self.prev {
            let polling = entries != e0 || s.at_idle.load(Ordering::Relaxed);
            let elapsed = (now - t0).as_nanos() as u64;
            let at = (now - self.epoch).as_nanos() as u64;
            let wanted = self.policy.observe(at, elapsed, waited.saturating_sub(w0), polling);
            if self.group.weight() != Some(wanted) {
                // Refused (the kernel's rate limit): tried again next period.
                self.group.set(wanted);
                s.contended.store(self.group.weight() == Some(Weight::Fair), Ordering::Relaxed);
                *multihop_base::sync::lock(&s.group_status) = self.group.status();
            }
        }
        self.prev = Some((now, waited, entries));
    }

    /// The forwarder went quiet: the next period starts afresh.
    fn pause(&mut self) {
        self.prev = None;
    }
}

fn guard(s: &Shared, group: Option<SchedGroup>) {
    unpin_self();
    let mut keeper = group.map(|g| GroupKeeper::new(g, s.tid.load(Ordering::Relaxed)));
    let mut last_beat = s.heartbeat.load(Ordering::Relaxed);
    while !s.stop.load(Ordering::Relaxed) {
        let quiet = coarse_now_ns().saturating_sub(s.last_work_ns.load(Ordering::Relaxed)) >= GUARD_ACTIVE_NS;
        if quiet && !s.at_idle.load(Ordering::Relaxed) {
            if let Some(k) = keeper.as_mut() {
                k.pause();
            }
            let (flag, cv) = &s.wake;
            let mut woken = multihop_base::sync::lock(flag);
            if !*woken {
                woken = cv.wait_timeout(woken, Duration::from_secs(1)).unwrap_or_else(|p| p.into_inner()).0;
            }
            *woken = false;
            continue;
        }
        std::thread::sleep(GUARD_PERIOD);
        let beat = s.heartbeat.load(Ordering::Relaxed);
        if beat == last_beat && s.at_idle.swap(false, Ordering::Relaxed) {
            // Counted first: whoever sees the new policy sees the count too
            // (SeqCst; pairs with the load in `promotions`).
            s.promotions.fetch_add(1, Ordering::SeqCst);
            set_policy(s.tid.load(Ordering::Relaxed), false);
        }
        last_beat = beat;
        if let Some(k) = keeper.as_mut() {
            k.observe(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(cpu: usize) {
        // SAFETY: a zeroed cpu_set_t is valid; CPU_SET stays within it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }

    fn policy() -> i32 {
        // SAFETY: plain query of the calling thread's policy.
        unsafe { libc::sched_getscheduler(0) }
    }

    #[test]
    fn budget_is_the_cap_while_traffic_flows_and_zero_when_sparse() {
        let mut p = IdlePoll::start(Duration::from_micros(200), false);
        for _ in 0..64 {
            p.on_work(); // back-to-back steps: tiny gaps
        }
        assert_eq!(p.budget(), Duration::from_micros(200));
        for _ in 0..16 {
            std::thread::sleep(Duration::from_millis(2)); // gaps far beyond the cap
            p.on_work();
        }
        assert_eq!(p.budget(), Duration::ZERO);
        assert_eq!(IdlePoll::start(Duration::ZERO, false).budget(), Duration::ZERO);
    }

    #[test]
    fn guard_promotes_a_poller_starved_by_a_cpu_hog() {
        // SAFETY: plain query of the calling thread's CPU.
        let cpu = unsafe { libc::sched_getcpu() }.max(0) as usize;
        let stop = Arc::new(AtomicBool::new(false));
        let hog_stop = stop.clone();
        let hog = std::thread::spawn(move || {
            pin(cpu);
            let mut x = 0u64;
            while !hog_stop.load(Ordering::Relaxed) {
                x = x.wrapping_add(1);
                std::hint::black_box(x);
            }
        });
        let poller = std::thread::spawn(move || {
            pin(cpu);
            let mut p = IdlePoll::start(Duration::from_micros(200), false);
            p.on_work();
            p.begin();
            // Under heavy load the guard may promote us before we look: then
            // it has counted it (it counts before it changes the policy).
            let was_idle = policy() == libc::SCHED_IDLE;
            assert!(was_idle || p.promotions() >= 1, "begin() did not move the poller to SCHED_IDLE");
            // Poll (beating) until the guard moves us back to normal priority.
            let t0 = Instant::now();
            while policy() == libc::SCHED_IDLE && t0.elapsed() < Duration::from_secs(20) {
                p.beat();
                p.on_work();
            }
            let promoted = p.promotions();
            p.before_park();
            (promoted, policy())
        });
        let (promoted, after) = poller.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        hog.join().unwrap();
        assert!(promoted >= 1, "the guard never promoted the starved poller");
        assert_eq!(after, libc::SCHED_OTHER);
    }
}
