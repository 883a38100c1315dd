//! A monitor's scheduling group: the session it leads, at the weight
//! `sched/weight.rs` asks for.
//!
//! Why: with autogroup scheduling (`kernel.sched_autogroup_enabled`, on in
//! most distributions' kernels) the scheduler first shares a CPU between
//! *sessions* by their weights, and only then between the threads of a
//! session by their policies. A monitor polling at `SCHED_IDLE` therefore gave
//! way only to threads of its own session: dispatchers started by anyone else
//! (a supervisor, `setsid`, cron, a service manager, or any program using a
//! runtime started by `multihop up`) shared the CPU with it half and half,
//! and waited out its time slice after every wake-up (a stream through two
//! monitors ran 4-9x slower than with the same processes in one session).
//!
//! What: every monitor is started in a session of its own (owned and
//! detached runtimes alike), and lowers its autogroup to nice 19 (weight 15
//! against 1024 for a session at nice 0). Its polling then comes last on its
//! CPU whoever started the other processes there, as it does for threads of
//! one session. Raising a nice value needs no privilege; lowering it back to
//! 0 needs none either, but the kernel accepts one autogroup change per 100 ms
//! machine-wide (`EAGAIN` otherwise: the caller retries).
//!
//! Only a session leader touches `/proc/self/autogroup` (a monitor started
//! by hand in a shell would otherwise renice the shell's session). Without
//! autogroup (disabled, or the monitor is in a cgroup of its own with the CPU
//! controller, where autogroup does not apply) nothing is changed and status
//! says why.

use std::io;

use serde_json::{json, Value};

use crate::sched::weight::Weight;

const AUTOGROUP: &str = "/proc/self/autogroup";

/// Where the monitor stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// It leads its session and may set its autogroup's nice value.
    OwnAutogroup,
    /// It does not lead its session (started by hand): left alone.
    NotSessionLeader,
    /// The kernel has no autogroup for it (disabled, not built, or a cgroup).
    NoAutogroup,
}

/// The calling process's scheduling group.
#[derive(Debug)]
pub(crate) struct SchedGroup {
    placement: Placement,
    weight: Option<Weight>,
    changes: u64,
    last_error: Option<String>,
}

fn leads_its_session() -> bool {
    // SAFETY: getsid(0) and getpid take no pointers and cannot fail for the caller.
    unsafe { libc::getsid(0) == libc::getpid() }
}

/// Whether the autogroup file exists and autogroup scheduling is on.
fn autogroup_active() -> bool {
    let enabled = std::fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled").map(|s| s.trim() == "1");
    matches!(enabled, Ok(true)) && std::fs::metadata(AUTOGROUP).is_ok()
}

fn write_nice(nice: i32) -> io::Result<()> {
    std::fs::write(AUTOGROUP, nice.to_string())
}

impl SchedGroup {
    /// Look at where the calling process stands and, if it leads its own
    /// session under autogroup, make the group light.
    pub(crate) fn join() -> SchedGroup {
        let placement = if !leads_its_session() {
            Placement::NotSessionLeader
        } else if !autogroup_active() {
            Placement::NoAutogroup
        } else {
            Placement::OwnAutogroup
        };
        let mut g = SchedGroup { placement, weight: None, changes: 0, last_error: None };
        g.set(Weight::Light);
        g
    }

    /// The weight in force (`None`: this process does not manage one).
    pub(crate) fn weight(&self) -> Option<Weight> {
        self.weight
    }

    /// Set the group's weight. True when it is in force now; false when the
    /// kernel refused (rate limit: try again later) or there is nothing to set.
    pub(crate) fn set(&mut self, w: Weight) -> bool {
        if self.placement != Placement::OwnAutogroup {
            return false;
        }
        if self.weight == Some(w) {
            return true;
        }
        let nice = match w {
            Weight::Light => 19,
            Weight::Fair => 0,
        };
        match write_nice(nice) {
            Ok(()) => {
                self.weight = Some(w);
                self.changes += 1;
                true
            }
            Err(e) => {
                self.last_error = Some(format!("autogroup nice {nice}: {e}"));
                false
            }
        }
    }

    /// For status: where the group stands and how often it changed.
    pub(crate) fn status(&self) -> Value {
        let placement = match self.placement {
            Placement::OwnAutogroup => "own autogroup",
            Placement::NotSessionLeader => "not a session leader: left as started",
            Placement::NoAutogroup => "no autogroup: left as started",
        };
        let weight = match self.weight {
            Some(Weight::Light) => "light (nice 19)",
            Some(Weight::Fair) => "fair (nice 0)",
            None => "unmanaged",
        };
        json!({"placement": placement, "weight": weight, "changes": self.changes, "last_error": self.last_error})
    }
}
