//! Whether a runtime is live: a lock its monitors hold for their whole life.
//!
//! A runtime directory holds a file [`LOCK_FILE`].  The starter takes an
//! exclusive `flock` on it ([`claim`]) and hands the very open file
//! description to every monitor it spawns (an inherited descriptor): an
//! `flock` belongs to the open file description, so the lock stays held as
//! long as any monitor is alive, and the kernel releases it when the last
//! one exits or is killed (kill -9 included).  Nothing else decides
//! liveness: a status request that fails (a busy monitor, a reply too large)
//! says nothing about it.
//!
//! Rules that follow from it:
//! - a runtime is *live* while the lock is held ([`probe`]); `Runtime.start`
//!   of a live name fails, `Runtime.attach` of a non-live one fails;
//! - a directory is emptied or removed only by whoever holds the lock
//!   exclusively *and* has checked that the path still names the file it
//!   locked ([`claim`], [`remove_if_unheld`]): a lock on a file that was
//!   unlinked (and maybe re-created) in between proves nothing, so the check
//!   is made after locking and the attempt retried;
//! - a monitor on its way out closes its descriptor, then tries to claim the
//!   directory: only the last one out succeeds, and removes it.
//!
//! A momentary claim or probe by another process can make a concurrent claim
//! fail once; [`claim`] therefore retries for [`CLAIM_PATIENCE`] before it
//! says the runtime is live.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};

/// Name of the lock file in a runtime directory.
pub(crate) const LOCK_FILE: &str = "lock";
/// How long a claim keeps trying while another process holds the lock
/// (long enough to ride out a probe, short next to a runtime's life).
pub(crate) const CLAIM_PATIENCE: Duration = Duration::from_millis(200);

/// What a runtime directory holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// No directory.
    Absent,
    /// A directory whose lock nobody holds: leftovers of a dead runtime.
    Stale,
    /// A monitor (or a starter) holds the lock.
    Live,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Absent => "absent",
            State::Stale => "stale",
            State::Live => "live",
        }
    }
}

/// An OS error about `dir`, worded for the common case of another user's runtime.
fn os_error(what: &str, dir: &Path, e: io::Error) -> Error {
    if e.kind() == io::ErrorKind::PermissionDenied {
        return Error::new(ErrorKind::Monitor, format!("permission denied: the runtime at {} belongs to another user ({what})", dir.display()));
    }
    Error::os(format!("{what} {}", dir.display()), e)
}

fn cpath(p: &Path) -> Result<std::ffi::CString> {
    std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(|_| Error::invalid(format!("path {} contains NUL", p.display())))
}

fn open_lock(dir: &Path, create: bool) -> io::Result<OwnedFd> {
    let c = cpath(&dir.join(LOCK_FILE)).map_err(|e| io::Error::other(e.message))?;
    let flags = libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW | if create { libc::O_CREAT } else { 0 };
    // SAFETY: a valid NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), flags, 0o600 as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `flock(fd, op | LOCK_NB)`: Ok(true) locked, Ok(false) held by another.
fn try_flock(fd: RawFd, op: libc::c_int) -> io::Result<bool> {
    loop {
        // SAFETY: plain system call on a descriptor the caller holds.
        if unsafe { libc::flock(fd, op | libc::LOCK_NB) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
}

/// Whether `fd` is (still) the file named `dir/lock`.
fn names_lock(fd: &OwnedFd, dir: &Path) -> bool {
    // SAFETY: stat is plain old data; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    match std::fs::symlink_metadata(dir.join(LOCK_FILE)) {
        Ok(md) => md.dev() == st.st_dev as u64 && md.ino() == st.st_ino as u64,
        Err(_) => false,
    }
}

/// Lock `dir/lock` exclusively if nobody holds it, checking that the path
/// still names the file locked. `Ok(None)`: held by someone else.
fn lock_exclusive(dir: &Path, create: bool) -> Result<Option<OwnedFd>> {
    for _ in 0..100 {
        let fd = match open_lock(dir, create) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && !create => return Ok(None),
            Err(e) => return Err(os_error("open its lock", dir, e)),
        };
        if !try_flock(fd.as_raw_fd(), libc::LOCK_EX).map_err(|e| Error::os("flock runtime lock", e))? {
            return Ok(None);
        }
        if names_lock(&fd, dir) {
            return Ok(Some(fd));
        }
        // The file was removed (and maybe re-created) while we locked it: again.
        if !create && !dir.join(LOCK_FILE).exists() {
            return Ok(None);
        }
    }
    Err(Error::new(ErrorKind::Os, format!("the lock of {} keeps being replaced", dir.display())))
}

/// The state of the runtime directory `dir` (creates nothing).
pub fn probe(dir: &Path) -> Result<State> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(State::Absent),
        Err(e) => return Err(os_error("stat", dir, e)),
        Ok(md) if !md.is_dir() => return Err(Error::invalid(format!("{} is not a directory", dir.display()))),
        Ok(_) => {}
    }
    let fd = match open_lock(dir, false) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(State::Stale),
        Err(e) => return Err(os_error("open its lock", dir, e)),
    };
    // A shared lock conflicts only with the holders' exclusive one.
    if try_flock(fd.as_raw_fd(), libc::LOCK_SH).map_err(|e| Error::os("flock runtime lock", e))? {
        Ok(State::Stale)
    } else {
        Ok(State::Live)
    }
}

/// Take over `dir` for a new runtime: create it (mode 0700) and its lock if
/// needed, lock it exclusively, and empty it of a dead runtime's leftovers.
/// Returns the locked descriptor (close-on-exec; hand it to the monitors),
/// or `RuntimeExists` when the runtime is live.
pub fn claim(dir: &Path) -> Result<OwnedFd> {
    if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(dir) {
        if e.kind() != io::ErrorKind::AlreadyExists {
            return Err(os_error("create", dir, e));
        }
    }
    let deadline = Instant::now() + CLAIM_PATIENCE;
    loop {
        if let Some(fd) = lock_exclusive(dir, true)? {
            clear_except_lock(dir)?;
            return Ok(fd);
        }
        if Instant::now() >= deadline {
            return Err(Error::new(ErrorKind::RuntimeExists, format!("a runtime is already running (or starting) in {}", dir.display())));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn clear_except_lock(dir: &Path) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::os(format!("read {}", dir.display()), e))?;
    for entry in entries.flatten() {
        if entry.file_name() == LOCK_FILE {
            continue;
        }
        let p = entry.path();
        let r = if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
        if let Err(e) = r {
            if e.kind() != io::ErrorKind::NotFound {
                return Err(Error::os(format!("remove stale {}", p.display()), e));
            }
        }
    }
    Ok(())
}

/// Check that `fd` is an exclusive lock on `dir/lock` (what a monitor is
/// handed at start); makes it close-on-exec.
pub fn check_held(fd: &OwnedFd, dir: &Path) -> Result<()> {
    if !names_lock(fd, dir) {
        return Err(Error::invalid(format!("descriptor {} is not the lock file of {}", fd.as_raw_fd(), dir.display())));
    }
    // Locking again through the same open file description is a no-op if it
    // holds the lock already, and fails only if someone else holds it.
    if !try_flock(fd.as_raw_fd(), libc::LOCK_EX).map_err(|e| Error::os("flock runtime lock", e))? {
        return Err(Error::new(ErrorKind::RuntimeExists, format!("another runtime holds the lock of {}", dir.display())));
    }
    // SAFETY: plain system call on a descriptor we own.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    Ok(())
}

/// Remove `dir` with everything in it if no live monitor holds its lock.
/// Returns whether it was removed (or was already gone).
pub fn remove_if_unheld(dir: &Path) -> Result<bool> {
    // Only "not found" means gone: a directory we may not look into is not.
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(os_error("stat", dir, e)),
        Ok(_) => {}
    }
    let Some(fd) = lock_exclusive(dir, false)? else {
        // No lock file at all: a directory this version did not make, or one
        // being made right now; leave it.
        return Ok(false);
    };
    clear_except_lock(dir)?;
    let _ = std::fs::remove_file(dir.join(LOCK_FILE));
    let _ = std::fs::remove_dir(dir);
    drop(fd);
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(true),
        _ => Ok(false),
    }
}

/// Held by a test that spawns a process (around the spawn) and by every test here for its whole run.
/// Between its fork and its exec a spawned child holds a copy of every descriptor of the test
/// process, close-on-exec or not, so a lock another test thread just dropped can still be held
/// for that moment: `remove_if_unheld` then rightly leaves the directory, and `probe` says
/// `Live`, which failed these tests about once in ten full runs.
#[cfg(test)]
pub(crate) static SPAWNING: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    fn no_spawns() -> std::sync::MutexGuard<'static, ()> {
        crate::sync::lock(&SPAWNING)
    }

    fn scratch(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("mh-live-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn claim_probe_and_removal_follow_the_lock() {
        let _serial = no_spawns();
        let dir = scratch("basic");
        assert_eq!(probe(&dir).unwrap(), State::Absent);
        let fd = claim(&dir).unwrap();
        std::fs::write(dir.join("mon-0.sock"), b"").unwrap();
        assert_eq!(probe(&dir).unwrap(), State::Live);
        assert_eq!(claim(&dir).unwrap_err().kind, ErrorKind::RuntimeExists);
        assert!(!remove_if_unheld(&dir).unwrap(), "a held directory is never removed");
        assert!(dir.join("mon-0.sock").exists());
        // A second descriptor on the same open file description keeps it held.
        let dup = fd.try_clone().unwrap();
        drop(fd);
        assert_eq!(probe(&dir).unwrap(), State::Live);
        check_held(&dup, &dir).unwrap();
        drop(dup);
        assert_eq!(probe(&dir).unwrap(), State::Stale);
        // Claiming a stale directory empties it but for the lock.
        let fd = claim(&dir).unwrap();
        assert!(!dir.join("mon-0.sock").exists());
        drop(fd);
        assert!(remove_if_unheld(&dir).unwrap());
        assert_eq!(probe(&dir).unwrap(), State::Absent);
    }

    #[test]
    fn a_lock_on_a_replaced_file_proves_nothing() {
        let _serial = no_spawns();
        let dir = scratch("replaced");
        let fd = claim(&dir).unwrap();
        // Someone removes the lock file while we hold it: a new claim must
        // not be fooled by our lock on the old inode, and ours no longer
        // counts for the directory.
        std::fs::remove_file(dir.join(LOCK_FILE)).unwrap();
        assert!(check_held(&fd, &dir).is_err());
        let fresh = claim(&dir).unwrap();
        assert_eq!(probe(&dir).unwrap(), State::Live);
        drop(fd);
        drop(fresh);
        assert!(remove_if_unheld(&dir).unwrap());
    }

    #[test]
    fn a_child_process_holding_the_descriptor_keeps_the_runtime_live() {
        let _serial = no_spawns();
        let dir = scratch("child");
        let fd = claim(&dir).unwrap();
        // SAFETY: make the descriptor inheritable for the child below.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) };
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        drop(fd);
        assert_eq!(probe(&dir).unwrap(), State::Live, "the child holds the lock");
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(probe(&dir).unwrap(), State::Stale, "kill -9 releases it");
        assert!(remove_if_unheld(&dir).unwrap());
    }
}
