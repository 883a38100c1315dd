//! Watching the process at the other end of a channel or link.
//!
//! A pidfd (Linux 5.3+) turns readable when its process exits, and unlike a
//! bare pid it cannot be fooled by pid reuse once opened.  Checks are cheap
//! (one `poll` with zero timeout) and rate-limited by the caller.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::{Error, Result};

/// A handle on another process that tells whether it is still alive.
pub struct PeerWatch {
    pid: u32,
    /// The runtime's own (`handles::owned`): never sent as a handle. Before `pidfd`: forgotten first.
    _owned: crate::handles::owned::Mark,
    pidfd: Option<OwnedFd>,
    /// Latched once the peer is seen dead; read and written only with
    /// Relaxed: it is a cache of the pidfd's state, not a publication.
    dead: AtomicBool,
    /// Coarse-clock time (ns) of the last pidfd poll; rate limit only.
    last_check_ns: AtomicU64,
}

/// How often the non-blocking paths look at the pidfd: a peer that died without closing is seen
/// within this (plus the caller's next look). Not 2 ms, which it was: a process that polls its
/// channels for readiness in a loop (a GES broker's engine looks at each of its links on every pass)
/// made a `poll` system call per idle channel every 2 ms, measured at 3 % of the testbed's brokers'
/// CPU flat out; a death seen 20 ms later changes nothing a caller waits for (park slices are 50 ms).
const CHECK_EVERY_NS: u64 = 20_000_000;

pub fn coarse_now_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl PeerWatch {
    /// Watch process `pid`. A pid that is already gone is reported dead.
    pub fn new(pid: u32) -> Result<PeerWatch> {
        let Some(target) = rustix::process::Pid::from_raw(pid as i32) else {
            return Err(Error::invalid(format!("pidfd_open({pid}): not a process id")));
        };
        let fd = match rustix::process::pidfd_open(target, rustix::process::PidfdFlags::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::SRCH) => {
                let _owned = crate::handles::owned::Mark::none();
                return Ok(PeerWatch { pid, _owned, pidfd: None, dead: AtomicBool::new(true), last_check_ns: AtomicU64::new(0) });
            }
            Err(e) => return Err(Error::os(format_args!("pidfd_open({pid})"), e.into())),
        };
        let _owned = crate::handles::owned::Mark::file(std::os::fd::AsRawFd::as_raw_fd(&fd), crate::handles::owned::Kind::Pidfd);
        Ok(PeerWatch { pid, _owned, pidfd: Some(fd), dead: AtomicBool::new(false), last_check_ns: AtomicU64::new(0) })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the peer has exited; polls the pidfd now.
    pub fn is_dead(&self) -> bool {
        if self.dead.load(Ordering::Relaxed) {
            return true;
        }
        let Some(fd) = &self.pidfd else { return true };
        let mut p = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
        let zero = rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 };
        let r = rustix::event::poll(&mut p, Some(&zero));
        let dead = matches!(r, Ok(n) if n > 0) && !p[0].revents().is_empty();
        if dead {
            self.dead.store(true, Ordering::Relaxed);
        }
        dead
    }

    /// Like `is_dead`, but polls at most every couple of milliseconds.
    #[inline]
    pub(crate) fn is_dead_throttled(&self) -> bool {
        if self.dead.load(Ordering::Relaxed) {
            return true;
        }
        let now = coarse_now_ns();
        if now.wrapping_sub(self.last_check_ns.load(Ordering::Relaxed)) < CHECK_EVERY_NS {
            return false;
        }
        self.last_check_ns.store(now, Ordering::Relaxed);
        self.is_dead()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sees_a_child_exit() {
        let mut child = {
            let _spawning = crate::sync::lock(&crate::liveness::SPAWNING);
            std::process::Command::new("sleep").arg("0.05").spawn().unwrap()
        };
        let w = PeerWatch::new(child.id()).unwrap();
        assert!(!w.is_dead());
        child.wait().unwrap();
        assert!(w.is_dead());
        assert!(PeerWatch::new(std::process::id()).map(|w| !w.is_dead()).unwrap());
    }
}
