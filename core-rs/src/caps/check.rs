//! What may not leave (TN-006 2.7: capabilities referring to inherently
//! local state are not sent): handles the runtime owns, and descriptors
//! that are not open.
//!
//! Runtime-owned handles are recognised by what they are, not by a list:
//! every shared-memory segment and doorbell of a runtime is a memfd named
//! `multihop:<what>` (`shm.rs`), and every control socket is a Unix socket
//! bound to, or connected to, a monitor's `mon-<core>.sock`.  So the check
//! needs no state, holds for any runtime's handles, and gives the same
//! answer in the monitor (which decides) as in the sending library (which
//! checks first, to name the handle before anything travels).

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

/// Why `fd` belongs to a runtime and may not be sent, or None if it may.
pub fn runtime_owned(fd: RawFd) -> Option<String> {
    let what = describe(fd)?;
    if let Some(rest) = what.strip_prefix("/memfd:multihop:") {
        let label = rest.strip_suffix(" (deleted)").unwrap_or(rest);
        return Some(format!("a runtime's shared-memory segment (memfd multihop:{label})"));
    }
    if what.starts_with("socket:") {
        for peer in [false, true] {
            if let Some(path) = unix_path(fd, peer).filter(|p| is_monitor_socket(p)) {
                return Some(format!("a runtime's control socket ({} {path})", if peer { "connected to" } else { "bound to" }));
            }
        }
    }
    None
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
        let raw = unsafe { libc::memfd_create(c"user-data".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0 && runtime_owned(raw).is_none());
        // SAFETY: `raw` is the descriptor made above, closed once.
        unsafe { libc::close(raw) };
        assert!(!is_open(raw) && !is_open(-1));
        assert_eq!(check_all(&[f.as_raw_fd(), raw]).unwrap_err().0, super::super::reason::NOT_OPEN);
        assert_eq!(check_all(&[seg.raw_fd()]).unwrap_err().1, 0);
        assert_eq!(check_all(&[f.as_raw_fd(); 40]).unwrap_err().0, super::super::reason::TOO_MANY);
        assert!(check_all(&[f.as_raw_fd(), f.as_raw_fd()]).is_ok());
    }

    #[test]
    fn monitor_sockets_by_path() {
        let dir = std::env::temp_dir().join(format!("mh-caps-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mon-3.sock");
        let _ = std::fs::remove_file(&path);
        let l = crate::sock::SeqListener::bind(&path).unwrap();
        let c = crate::sock::SeqSocket::connect(&path).unwrap();
        let s = l.accept().unwrap();
        assert!(runtime_owned(c.raw_fd()).unwrap().contains("connected to"));
        assert!(runtime_owned(s.raw_fd()).unwrap().contains("bound to"));
        let (a, _b) = crate::sock::SeqSocket::pair().unwrap();
        assert!(runtime_owned(a.raw_fd()).is_none());
        assert!(is_monitor_socket("/x/mon-12.sock") && !is_monitor_socket("/x/mon-.sock") && !is_monitor_socket("/x/my.sock"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
