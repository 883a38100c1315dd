//! What may not leave (TN-006 2.7: capabilities referring to inherently
//! local state are not sent): handles the runtime owns, descriptors that are
//! not open, and kinds the kernel does not pass between processes.
//!
//! Runtime-owned handles are recognised by identity, never by name: every
//! segment, doorbell, control socket, pidfd and async doorbell of the
//! runtime records itself in this process's [`owned`](super::owned) table
//! when it is made, and a handle is refused when it is the same file (a
//! user's memfd named `multihop:mine` is the user's).  A monitor's table
//! also holds the segments and doorbells of the UMP binds it brokered, for
//! as long as they live; and a Unix socket bound, or connected, to a
//! monitor's `mon-<core>.sock` in the runtime root is a control connection
//! whoever made it. So the sending library (which checks first, to name the
//! handle before anything travels) knows every descriptor of its own
//! runtime, and the monitor (which decides) knows the ones it has seen.

use std::os::fd::RawFd;

/// Whether `fd` is an open descriptor of this process.
pub fn is_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD on any integer is harmless; -1/EBADF when not open.
    fd >= 0 && unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0
}

/// What `fd` is, as `/proc/self/fd` says ("/memfd:multihop:ump (deleted)",
/// "socket:[1234]", a path...), if it can be read.
fn describe(fd: RawFd) -> Option<String> {
    std::fs::read_link(format!("/proc/self/fd/{fd}")).ok().map(|p| p.to_string_lossy().into_owned())
}

/// The path a Unix socket is bound to (`peer`: connected to), if any.
fn unix_path(fd: RawFd, peer: bool) -> Option<String> {
    // SAFETY: sockaddr_un is plain old data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    let p = &mut addr as *mut libc::sockaddr_un as *mut libc::sockaddr;
    // SAFETY: `addr` and `len` are valid out pointers of the size given.
    let r = unsafe {
        if peer {
            libc::getpeername(fd, p, &mut len)
        } else {
            libc::getsockname(fd, p, &mut len)
        }
    };
    if r != 0 || addr.sun_family != libc::AF_UNIX as libc::sa_family_t {
        return None;
    }
    let off = std::mem::size_of::<libc::sa_family_t>();
    let n = (len as usize).saturating_sub(off).min(addr.sun_path.len());
    let bytes: Vec<u8> = addr.sun_path[..n].iter().map(|c| *c as u8).take_while(|b| *b != 0).collect();
    (!bytes.is_empty()).then(|| String::from_utf8_lossy(&bytes).into_owned())
}

/// Whether a socket path is a monitor's control socket (`.../mon-<core>.sock`).
fn is_monitor_socket(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.strip_prefix("mon-").and_then(|r| r.strip_suffix(".sock")).is_some_and(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `path` is inside this user's runtime root (where every runtime's directory is).
fn in_runtime_root(path: &str) -> bool {
    crate::paths::runtime_root().is_ok_and(|root| std::path::Path::new(path).starts_with(root))
}

/// The pid a pidfd refers to (`/proc/self/fdinfo`), if it says.
fn pidfd_pid(fd: RawFd) -> Option<String> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
    info.lines().find_map(|l| l.strip_prefix("Pid:")).map(|p| p.trim().to_string())
}

/// Why `fd` belongs to a runtime and may not be sent, or None if it may.
pub(crate) fn runtime_owned(fd: RawFd) -> Option<String> {
    if let Some(kind) = super::owned::owned(fd) {
        let detail = match (kind, describe(fd)) {
            (super::owned::Kind::Segment, Some(what)) => {
                what.strip_prefix("/memfd:").map(|l| format!(" (memfd {})", l.strip_suffix(" (deleted)").unwrap_or(l))).unwrap_or_default()
            }
            (super::owned::Kind::Pidfd, _) => pidfd_pid(fd).map(|p| format!(" of process {p}")).unwrap_or_default(),
            _ => String::new(),
        };
        return Some(format!("{}{detail}", kind.describe()));
    }
    if describe(fd)?.starts_with("socket:") {
        for peer in [false, true] {
            if let Some(path) = unix_path(fd, peer).filter(|p| is_monitor_socket(p) && in_runtime_root(p)) {
                return Some(format!("a runtime's control socket ({} {path})", if peer { "connected to" } else { "bound to" }));
            }
        }
    }
    None
}

/// Why the kernel would refuse to pass `fd` (SCM_RIGHTS), if it would.
pub(crate) fn unpassable(fd: RawFd) -> Option<&'static str> {
    match describe(fd)?.as_str() {
        "anon_inode:[io_uring]" => Some("an io_uring instance, which the kernel does not pass between processes"),
        _ => None,
    }
}

/// Check every handle of one message as it is about to leave: Err with
/// (reason code, index, text) for the first that may not.
pub fn check_all(fds: &[RawFd]) -> Result<(), (&'static str, usize, String)> {
    if fds.len() > super::MAX_HANDLES {
        return Err((
            super::reason::TOO_MANY,
            super::MAX_HANDLES,
            format!("{} handles on one message; at most {} may travel with one", fds.len(), super::MAX_HANDLES),
        ));
    }
    for (i, &fd) in fds.iter().enumerate() {
        if !is_open(fd) {
            return Err((super::reason::NOT_OPEN, i, format!("handle {i} (descriptor {fd}) is not open")));
        }
        if let Some(why) = runtime_owned(fd) {
            return Err((super::reason::RUNTIME_OWNED, i, format!("handle {i} (descriptor {fd}) is {why}: the runtime's own handles never leave")));
        }
        if let Some(why) = unpassable(fd) {
            return Err((super::reason::UNSUPPORTED, i, format!("handle {i} (descriptor {fd}) is {why}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn segments_sockets_and_plain_files() {
        let seg = crate::shm::Segment::create("ump", 4096).unwrap();
        assert!(runtime_owned(seg.raw_fd()).unwrap().contains("multihop:ump"));
        let bell = crate::park::Doorbell::create().unwrap();
        assert!(runtime_owned(bell.segment().raw_fd()).is_some());
        let f = std::fs::File::open("/dev/null").unwrap();
        assert!(runtime_owned(f.as_raw_fd()).is_none());
        // SAFETY: a valid C string; a user's memfd is not the runtime's.
        let raw = unsafe { libc::memfd_create(c"multihop:mine".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0 && runtime_owned(raw).is_none(), "a user's memfd, whatever its name");
        // A descriptor number that stays closed: not `raw` itself, which a test running beside this one may
        // be given again the moment it is closed (the kernel hands out the lowest free number), but a copy
        // far above the numbers those tests use, closed with it.
        // SAFETY: fcntl duplicates the open descriptor `raw`; both are closed once, here.
        let high = unsafe { libc::fcntl(raw, libc::F_DUPFD_CLOEXEC, 900) };
        assert!(high >= 900, "a free descriptor number from 900 up (RLIMIT_NOFILE above 900)");
        // SAFETY: the two descriptors made above, each closed once.
        unsafe {
            libc::close(raw);
            libc::close(high);
        }
        assert!(!is_open(high) && !is_open(-1));
        assert_eq!(check_all(&[f.as_raw_fd(), high]).unwrap_err().0, super::super::reason::NOT_OPEN);
        assert_eq!(check_all(&[seg.raw_fd()]).unwrap_err().1, 0);
        assert_eq!(check_all(&[f.as_raw_fd(); 40]).unwrap_err().0, super::super::reason::TOO_MANY);
        assert!(check_all(&[f.as_raw_fd(), f.as_raw_fd()]).is_ok());
    }

    #[test]
    fn monitor_sockets_by_path_in_the_runtime_root_and_our_own_by_identity() {
        use std::os::unix::net::{UnixListener, UnixStream};
        let inside = crate::paths::runtime_root().unwrap().join(format!("mh-caps-check-{}", std::process::id()));
        let outside = std::env::temp_dir().join(format!("mh-caps-check-{}", std::process::id()));
        for (dir, ours) in [(&inside, true), (&outside, false)] {
            std::fs::create_dir_all(dir).unwrap();
            let path = dir.join("mon-3.sock");
            let _ = std::fs::remove_file(&path);
            let l = UnixListener::bind(&path).unwrap();
            let c = UnixStream::connect(&path).unwrap();
            let (s, _) = l.accept().unwrap();
            if ours {
                assert!(runtime_owned(c.as_raw_fd()).unwrap().contains("connected to"));
                assert!(runtime_owned(s.as_raw_fd()).unwrap().contains("bound to"));
            } else {
                assert!(runtime_owned(c.as_raw_fd()).is_none(), "a user's socket named like a monitor's, elsewhere");
                assert!(runtime_owned(s.as_raw_fd()).is_none());
            }
            std::fs::remove_dir_all(dir).unwrap();
        }
        let (a, _b) = crate::sock::SeqSocket::pair().unwrap();
        assert!(runtime_owned(a.raw_fd()).unwrap().contains("control socket"), "the runtime's own socket, by identity");
        let (x, _y) = UnixStream::pair().unwrap();
        assert!(runtime_owned(x.as_raw_fd()).is_none());
        assert!(is_monitor_socket("/x/mon-12.sock") && !is_monitor_socket("/x/mon-.sock") && !is_monitor_socket("/x/my.sock"));
    }

    #[test]
    fn pidfds_and_io_uring() {
        let w = crate::peer::PeerWatch::new(std::process::id()).unwrap();
        let ours = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<RawFd>().ok())
            .filter(|&fd| describe(fd).is_some_and(|d| d == "anon_inode:[pidfd]"))
            .find(|&fd| runtime_owned(fd).is_some())
            .expect("the watch's pidfd is the runtime's");
        assert!(runtime_owned(ours).unwrap().contains(&format!("pidfd (it watches a peer process) of process {}", std::process::id())));
        // SAFETY: plain system call; a fresh descriptor we own.
        let users = unsafe { libc::syscall(libc::SYS_pidfd_open, std::process::id(), 0) } as RawFd;
        assert!(users >= 0 && runtime_owned(users).is_none(), "the user's own pidfd of the same process");
        // SAFETY: closing the descriptor made above, once.
        unsafe { libc::close(users) };
        drop(w);
        let mut p = [0u8; 120];
        // SAFETY: io_uring_setup with a zeroed params struct of the kernel's size.
        let ring = unsafe { libc::syscall(libc::SYS_io_uring_setup, 2u32, p.as_mut_ptr()) } as RawFd;
        if ring >= 0 {
            assert_eq!(check_all(&[ring]).unwrap_err().0, super::super::reason::UNSUPPORTED);
            // SAFETY: closing the descriptor made above, once.
            unsafe { libc::close(ring) };
        }
    }
}
