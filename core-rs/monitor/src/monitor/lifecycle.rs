//! A monitor's life as a process: pinned to its CPU, ended by a signal or
//! by its owner's exit, and what it leaves behind on the way out (nothing).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::{log, Monitor};
use multihop_base::control::monitor_socket;
use multihop_base::error::{Error, Result};
use multihop_base::peer::PeerWatch;
use multihop_base::sync::lock;

pub(super) fn pin_to_cpu(cpu: usize) -> Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(Error::invalid(format!("cpu {cpu} is beyond what sched_setaffinity can name ({})", libc::CPU_SETSIZE)));
    }
    // SAFETY: cpu_set_t is plain old data; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: a valid set of the size given.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(Error::os(format_args!("sched_setaffinity(cpu {cpu})"), std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Block SIGTERM/SIGINT/SIGHUP in every thread (set before any is spawned)
/// so one thread can take them with `sigwait` and shut down cleanly.
pub(super) fn block_termination_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain old data, initialised by sigemptyset; the
    // calls only read and write `set`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

pub(super) fn wait_signals(mon: Arc<Monitor>, set: libc::sigset_t) {
    let mut sig: libc::c_int = 0;
    // SAFETY: valid pointers to a set and an out value.
    if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
        log(mon.cfg.core, format_args!("signal {sig}: shutting down"));
        mon.begin_shutdown();
    }
}

pub(super) fn watch_owner(mon: Arc<Monitor>, owner: PeerWatch) {
    while !mon.stopping.load(Ordering::Relaxed) {
        if owner.is_dead() {
            log(mon.cfg.core, format_args!("owner process {} exited: shutting down", owner.pid()));
            mon.begin_shutdown();
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Monitor {
    /// The way out: remove our socket, let go of the runtime lock, and, if
    /// no other monitor holds it any more, remove the runtime directory.
    pub(super) fn cleanup(&self) {
        let _ = std::fs::remove_file(monitor_socket(&self.cfg.dir, self.cfg.core));
        drop(lock(&self.lock).take());
        match multihop_base::liveness::remove_if_unheld(&self.cfg.dir) {
            Ok(true) => log(self.cfg.core, "stopped; the last monitor out removed the runtime directory"),
            Ok(false) => log(self.cfg.core, "stopped"),
            Err(e) => log(self.cfg.core, format_args!("stopped; could not remove the runtime directory: {e}")),
        }
    }
}
