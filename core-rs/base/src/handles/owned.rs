//! The runtime's own descriptors in this process, known by identity.
//!
//! A descriptor is the runtime's when the runtime made or received it for
//! its own use: a shared-memory segment (a ring pair, a doorbell), a control
//! socket, a pidfd watching a peer, the io_uring or eventfd behind an async
//! doorbell.  Each records itself here when it is made ([`Mark`], held by
//! the object that owns the descriptor and dropped with it), so the check
//! of a handle about to leave (`check.rs`) asks "is this one of ours?" of
//! the kernel's identity of the file, never of a name a user could also
//! give (a user's memfd named `multihop:mine` is the user's):
//!
//! * a file with an inode of its own (a memfd, a socket) is known by
//!   `(st_dev, st_ino)`: a duplicate, or a reopening of the memfd through
//!   `/proc/self/fd`, is the same inode;
//! * a file on a shared inode (every eventfd and io_uring instance shares
//!   the anonymous inode; the pidfds of one process share its pidfs inode) is
//!   known by its open file: `kcmp(KCMP_FILE)` against the descriptor the
//!   runtime holds (the same number, where `kcmp` is not allowed).
//!
//! A monitor records the segments it maps and, for as long as the channel
//! lives, the segments and doorbells of the UMP binds it brokered, so it
//! recognises them too when a program that bypasses the library sends one.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::{Mutex, MutexGuard};

/// What a marked descriptor is, for the refusal's message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A ring pair's or a doorbell's memfd segment.
    Segment,
    /// A control socket (to or of a monitor).
    ControlSocket,
    /// A pidfd the runtime watches a peer process with.
    Pidfd,
    /// The io_uring instance or eventfd of an async doorbell.
    AsyncBell,
}

impl Kind {
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Segment => "a runtime's shared-memory segment",
            Kind::ControlSocket => "a runtime's control socket",
            Kind::Pidfd => "a runtime's pidfd (it watches a peer process)",
            Kind::AsyncBell => "a runtime's async doorbell (io_uring or eventfd)",
        }
    }
}

#[derive(Default)]
struct Entry {
    /// Marks of the whole inode, by kind.
    whole: Vec<Kind>,
    /// Marks of one open file on this inode: (descriptor the runtime holds, kind).
    files: Vec<(RawFd, Kind)>,
}

type Registry = HashMap<(u64, u64), Entry>;

fn registry() -> MutexGuard<'static, Registry> {
    static REG: std::sync::LazyLock<Mutex<Registry>> = std::sync::LazyLock::new(Default::default);
    crate::sync::lock(&REG)
}

/// `(st_dev, st_ino)` of an open descriptor.
fn identity(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: `stat` is plain old data (all zeroes is valid) and `st` a valid
    // out pointer; fstat of a number that is not open fails with EBADF.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// Whether descriptors `a` and `b` of this process are the same open file.
fn same_file(a: RawFd, b: RawFd) -> bool {
    if a == b {
        return true;
    }
    const KCMP_FILE: libc::c_long = 0;
    let pid = std::process::id() as libc::c_long;
    // SAFETY: kcmp only compares two descriptors of our own process; it
    // touches no memory of ours. 0 means the same file.
    let r = unsafe { libc::syscall(libc::SYS_kcmp, pid, pid, KCMP_FILE, a as libc::c_long, b as libc::c_long) };
    r == 0
}

/// The record of one runtime descriptor; forgotten when dropped (keep it
/// beside the descriptor, declared before it, so it goes first).
#[derive(Debug)]
pub struct Mark {
    /// (identity, the open file for a file mark, kind); boxed, so a mark costs its owner one word.
    key: Option<Box<((u64, u64), Option<RawFd>, Kind)>>,
}

impl Mark {
    /// A mark that records nothing (a descriptor fstat could not read).
    pub fn none() -> Mark {
        Mark { key: None }
    }

    /// Record the inode of `fd` (a memfd or a socket: an inode of its own) as the runtime's.
    pub fn inode(fd: RawFd, kind: Kind) -> Mark {
        let Some(id) = identity(fd) else { return Mark::none() };
        registry().entry(id).or_default().whole.push(kind);
        Mark { key: Some(Box::new((id, None, kind))) }
    }

    /// Record the open file `fd` (on a shared inode: a pidfd, an eventfd, an
    /// io_uring) as the runtime's, for as long as the mark lives; `fd` must
    /// stay open that long.
    pub fn file(fd: RawFd, kind: Kind) -> Mark {
        let Some(id) = identity(fd) else { return Mark::none() };
        registry().entry(id).or_default().files.push((fd, kind));
        Mark { key: Some(Box::new((id, Some(fd), kind))) }
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        let Some(&(id, file, kind)) = self.key.as_deref() else { return };
        let mut reg = registry();
        let Some(e) = reg.get_mut(&id) else { return };
        match file {
            None => {
                if let Some(i) = e.whole.iter().position(|k| *k == kind) {
                    e.whole.swap_remove(i);
                }
            }
            Some(fd) => {
                if let Some(i) = e.files.iter().position(|&(f, k)| f == fd && k == kind) {
                    e.files.swap_remove(i);
                }
            }
        }
        if e.whole.is_empty() && e.files.is_empty() {
            reg.remove(&id);
        }
    }
}

/// What `fd` is if it is one of the runtime's own descriptors in this
/// process (by identity), else None.
pub fn owned(fd: RawFd) -> Option<Kind> {
    let id = identity(fd)?;
    let reg = registry();
    let e = reg.get(&id)?;
    if let Some(k) = e.whole.first() {
        return Some(*k);
    }
    e.files.iter().find(|&&(f, _)| same_file(fd, f)).map(|&(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    fn memfd(name: &std::ffi::CStr) -> OwnedFd {
        // SAFETY: a valid C string; a fresh descriptor we own.
        unsafe { OwnedFd::from_raw_fd(libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC)) }
    }

    fn eventfd() -> OwnedFd {
        // SAFETY: plain system call; a fresh descriptor we own.
        unsafe { OwnedFd::from_raw_fd(libc::eventfd(0, libc::EFD_CLOEXEC)) }
    }

    #[test]
    fn an_inode_mark_knows_duplicates_and_reopenings_not_names() {
        let ours = memfd(c"anything");
        let mark = Mark::inode(ours.as_raw_fd(), Kind::Segment);
        let dup = ours.try_clone().unwrap();
        let reopened = std::fs::File::open(format!("/proc/self/fd/{}", ours.as_raw_fd())).unwrap();
        assert_eq!(owned(ours.as_raw_fd()), Some(Kind::Segment));
        assert_eq!(owned(dup.as_raw_fd()), Some(Kind::Segment));
        assert_eq!(owned(reopened.as_raw_fd()), Some(Kind::Segment));
        let named_like_ours = memfd(c"multihop:mine");
        assert_eq!(owned(named_like_ours.as_raw_fd()), None, "a name decides nothing");
        drop(mark);
        assert_eq!(owned(ours.as_raw_fd()), None, "forgotten with its mark");
        assert_eq!(owned(-1), None);
    }

    #[test]
    fn a_file_mark_knows_that_open_file_only() {
        let ours = eventfd();
        let mark = Mark::file(ours.as_raw_fd(), Kind::AsyncBell);
        let dup = ours.try_clone().unwrap();
        let users = eventfd(); // the same anonymous inode, another file
        assert_eq!(owned(ours.as_raw_fd()), Some(Kind::AsyncBell));
        assert_eq!(owned(dup.as_raw_fd()), Some(Kind::AsyncBell), "a duplicate is the same open file");
        assert_eq!(owned(users.as_raw_fd()), None);
        drop(mark);
        assert_eq!(owned(dup.as_raw_fd()), None);
    }
}
