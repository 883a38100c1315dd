//! When a monitor's scheduling group should be light, and when it needs its
//! fair share: a state machine fed with how long the forwarder waited to run.
//!
//! A monitor leads a session of its own and keeps its autogroup at the
//! lowest weight ([`Weight::Light`], nice 19: see `sched/session.rs`), so its
//! polling gives way to every other process on its CPU, whichever session
//! started them. The price comes when something on the CPU never blocks (a
//! compute job, a spinning program): at weight 15 against 1024 the monitor
//! would get ~1.5 % of the CPU and every message through it would wait a
//! scheduler tick or more. The runtime's own dispatchers block whenever their
//! credit window fills, so they never starve the monitor for long.
//!
//! So the group goes to its fair share ([`Weight::Fair`], nice 0) when the
//! forwarder, not polling, spent most of [`STARVED_PERIODS`] consecutive
//! periods runnable but not running (the kernel's `run_delay`), and back to
//! light once that has not happened for a while. Going back is a probe: if
//! starvation shows again within [`PROBE_WINDOW_NS`], the group returns to
//! its fair share and waits twice as long before the next probe (up to
//! [`MAX_PROBE_AFTER_NS`]); a probe that survives resets the wait.
//!
//! Sans-IO: time and waiting come in as numbers, the wanted weight goes
//! out; the guard thread (`idle_poll.rs`) reads the clock and the kernel's
//! counters and writes the weight.

/// The weight a monitor's scheduling group should have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Weight {
    /// Last in line on its CPU (autogroup nice 19).
    Light,
    /// A fair share, like any session (autogroup nice 0).
    Fair,
}

/// Consecutive starved periods that make the group go to its fair share.
pub(crate) const STARVED_PERIODS: u32 = 2;
/// A period shorter than this says nothing (the guard woke early).
const MIN_PERIOD_NS: u64 = 500_000;
/// First wait at the fair share before probing light again.
pub(crate) const FIRST_PROBE_AFTER_NS: u64 = 500_000_000;
/// Longest wait between probes.
pub(crate) const MAX_PROBE_AFTER_NS: u64 = 8_000_000_000;
/// A probe that sees no starvation for this long succeeded.
pub(crate) const PROBE_WINDOW_NS: u64 = 1_000_000_000;

/// The policy's state. Feed it with [`WeightPolicy::observe`].
#[derive(Debug)]
pub(crate) struct WeightPolicy {
    wanted: Weight,
    streak: u32,
    /// When the current weight was wanted (ns, the caller's clock).
    since: u64,
    probe_after: u64,
    /// True while a probe (light after fair) has not yet survived its window.
    probing: bool,
}

impl WeightPolicy {
    /// Start light at time `now`.
    pub(crate) fn new(now: u64) -> WeightPolicy {
        WeightPolicy { wanted: Weight::Light, streak: 0, since: now, probe_after: FIRST_PROBE_AFTER_NS, probing: false }
    }

    /// The weight wanted now.
    #[cfg(test)]
    pub(crate) fn wanted(&self) -> Weight {
        self.wanted
    }

    /// One observation period ending at `now`: it lasted `elapsed` ns, of
    /// which the forwarder waited `waited` ns runnable but not running;
    /// `polling` says it was at idle priority then (waiting is its purpose).
    /// Returns the weight wanted from now on.
    pub(crate) fn observe(&mut self, now: u64, elapsed: u64, waited: u64, polling: bool) -> Weight {
        let starved = !polling && elapsed >= MIN_PERIOD_NS && waited.saturating_mul(4) >= elapsed.saturating_mul(3);
        self.streak = if starved { self.streak + 1 } else { 0 };
        let held = now.saturating_sub(self.since);
        match self.wanted {
            Weight::Light => {
                if self.streak >= STARVED_PERIODS {
                    if self.probing {
                        self.probe_after = (self.probe_after * 2).min(MAX_PROBE_AFTER_NS);
                    }
                    self.set(Weight::Fair, now);
                } else if self.probing && held >= PROBE_WINDOW_NS {
                    self.probing = false;
                    self.probe_after = FIRST_PROBE_AFTER_NS;
                }
            }
            Weight::Fair => {
                if held >= self.probe_after {
                    self.set(Weight::Light, now);
                    self.probing = true;
                }
            }
        }
        self.wanted
    }

    fn set(&mut self, w: Weight, now: u64) {
        self.wanted = w;
        self.since = now;
        self.streak = 0;
    }

    /// How long the next fair spell lasts before a probe (for status).
    #[cfg(test)]
    pub(crate) fn probe_after_ns(&self) -> u64 {
        self.probe_after
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Feed `n` periods of 1 ms, each starved or not; returns the last answer.
    fn feed(p: &mut WeightPolicy, now: &mut u64, n: u32, starved: bool, polling: bool) -> Weight {
        let mut w = p.wanted();
        for _ in 0..n {
            *now += MS;
            w = p.observe(*now, MS, if starved { MS } else { 0 }, polling);
        }
        w
    }

    #[test]
    fn stays_light_while_the_forwarder_runs_when_it_wants() {
        let mut now = 0;
        let mut p = WeightPolicy::new(now);
        assert_eq!(feed(&mut p, &mut now, 10_000, false, false), Weight::Light);
        // Waiting while polling at idle priority is what polling is for.
        assert_eq!(feed(&mut p, &mut now, 10_000, true, true), Weight::Light);
        // Short stretches of waiting (a dispatcher filling its window) never add up.
        for _ in 0..1000 {
            feed(&mut p, &mut now, STARVED_PERIODS - 1, true, false);
            feed(&mut p, &mut now, 1, false, false);
        }
        assert_eq!(p.wanted(), Weight::Light);
    }

    #[test]
    fn goes_fair_after_consecutive_starved_periods_and_probes_back_with_backoff() {
        let mut now = 0;
        let mut p = WeightPolicy::new(now);
        assert_eq!(feed(&mut p, &mut now, STARVED_PERIODS - 1, true, false), Weight::Light);
        assert_eq!(feed(&mut p, &mut now, 1, true, false), Weight::Fair);
        // Fair until the first probe is due, whatever happens meanwhile.
        let periods = (FIRST_PROBE_AFTER_NS / MS) as u32;
        assert_eq!(feed(&mut p, &mut now, periods - 1, false, false), Weight::Fair);
        assert_eq!(feed(&mut p, &mut now, 1, false, false), Weight::Light);
        // The hog is still there: back to fair, and the next probe waits twice as long.
        assert_eq!(feed(&mut p, &mut now, STARVED_PERIODS, true, false), Weight::Fair);
        assert_eq!(p.probe_after_ns(), 2 * FIRST_PROBE_AFTER_NS);
        assert_eq!(feed(&mut p, &mut now, 2 * periods - 1, false, false), Weight::Fair);
        assert_eq!(feed(&mut p, &mut now, 1, false, false), Weight::Light);
        // This probe survives its window: the wait resets.
        assert_eq!(feed(&mut p, &mut now, (PROBE_WINDOW_NS / MS) as u32, false, false), Weight::Light);
        assert_eq!(p.probe_after_ns(), FIRST_PROBE_AFTER_NS);
    }

    #[test]
    fn backoff_is_bounded_and_short_periods_say_nothing() {
        let mut now = 0;
        let mut p = WeightPolicy::new(now);
        for _ in 0..20 {
            feed(&mut p, &mut now, STARVED_PERIODS, true, false);
            assert_eq!(p.wanted(), Weight::Fair);
            let wait = p.probe_after_ns();
            now += wait;
            assert_eq!(p.observe(now, MS, 0, false), Weight::Light);
        }
        assert_eq!(p.probe_after_ns(), MAX_PROBE_AFTER_NS);
        let mut q = WeightPolicy::new(0);
        for i in 1..100 {
            assert_eq!(q.observe(i * 100_000, 100_000, 100_000, false), Weight::Light);
        }
    }
}
