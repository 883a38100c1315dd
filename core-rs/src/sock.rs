//! Control sockets: Unix SOCK_SEQPACKET with descriptor passing.
//!
//! One datagram is one control frame (JSON, see `control.rs`); descriptors
//! ride along as SCM_RIGHTS.  Every accepted peer's uid is checked with
//! SO_PEERCRED against ours before a single frame is read.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use crate::error::{Error, Result};

/// Largest control frame we accept.
pub const MAX_FRAME: usize = 256 * 1024;
/// Most descriptors one frame carries.
pub const MAX_FDS: usize = 4;

/// A connected SEQPACKET socket.
pub struct SeqSocket {
    fd: OwnedFd,
}

/// A listening SEQPACKET socket bound to a path.
pub struct SeqListener {
    fd: OwnedFd,
}

/// Credentials of the process at the other end.
#[derive(Clone, Copy, Debug)]
pub struct PeerCred {
    pub pid: u32,
    pub uid: u32,
}

fn sockaddr(path: &Path) -> Result<(libc::sockaddr_un, libc::socklen_t)> {
    let bytes = path.as_os_str().as_bytes();
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return Err(Error::invalid(format!("socket path too long ({} bytes): {}", bytes.len(), path.display())));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = (std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t;
    Ok((addr, len))
}

fn new_socket() -> Result<OwnedFd> {
    let raw = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(Error::os("socket(AF_UNIX, SOCK_SEQPACKET)", io::Error::last_os_error()));
    }
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

impl SeqListener {
    /// Bind and listen at `path` (which must not exist).
    pub fn bind(path: &Path) -> Result<SeqListener> {
        let fd = new_socket()?;
        let (addr, len) = sockaddr(path)?;
        if unsafe { libc::bind(fd.as_raw_fd(), &addr as *const _ as *const libc::sockaddr, len) } != 0 {
            return Err(Error::os(format_args!("bind {}", path.display()), io::Error::last_os_error()));
        }
        if unsafe { libc::listen(fd.as_raw_fd(), 128) } != 0 {
            return Err(Error::os("listen", io::Error::last_os_error()));
        }
        Ok(SeqListener { fd })
    }

    /// Accept one connection (blocking).
    pub fn accept(&self) -> io::Result<SeqSocket> {
        loop {
            let raw = unsafe { libc::accept4(self.fd.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut(), libc::SOCK_CLOEXEC) };
            if raw >= 0 {
                return Ok(SeqSocket { fd: unsafe { OwnedFd::from_raw_fd(raw) } });
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Make a blocked `accept` return (used at shutdown).
    pub fn shutdown(&self) {
        unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_RDWR) };
    }
}

impl SeqSocket {
    /// Connect to a listener at `path`.
    pub fn connect(path: &Path) -> io::Result<SeqSocket> {
        let fd = new_socket().map_err(|e| io::Error::other(e.message))?;
        let (addr, len) = sockaddr(path).map_err(|e| io::Error::other(e.message))?;
        if unsafe { libc::connect(fd.as_raw_fd(), &addr as *const _ as *const libc::sockaddr, len) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(SeqSocket { fd })
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// A second handle on the same socket (for a reader thread).
    pub fn try_clone(&self) -> io::Result<SeqSocket> {
        Ok(SeqSocket { fd: self.fd.try_clone()? })
    }

    /// The peer's pid and uid.
    pub fn peer_cred(&self) -> Result<PeerCred> {
        let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        let r = unsafe {
            libc::getsockopt(self.fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, &mut cred as *mut _ as *mut libc::c_void, &mut len)
        };
        if r != 0 {
            return Err(Error::os("getsockopt(SO_PEERCRED)", io::Error::last_os_error()));
        }
        Ok(PeerCred { pid: cred.pid as u32, uid: cred.uid })
    }

    /// Bound how long a send may block (a peer that stops reading).
    pub fn set_send_timeout(&self, t: Duration) {
        let tv = libc::timeval { tv_sec: t.as_secs() as libc::time_t, tv_usec: t.subsec_micros() as libc::suseconds_t };
        unsafe {
            libc::setsockopt(self.fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDTIMEO, &tv as *const _ as *const libc::c_void, std::mem::size_of::<libc::timeval>() as libc::socklen_t)
        };
    }

    /// Bound how long a recv may block; `None` blocks forever.
    pub fn set_recv_timeout(&self, t: Option<Duration>) {
        let t = t.unwrap_or(Duration::ZERO);
        let tv = libc::timeval { tv_sec: t.as_secs() as libc::time_t, tv_usec: t.subsec_micros().max(if t.is_zero() { 0 } else { 1 }) as libc::suseconds_t };
        unsafe {
            libc::setsockopt(self.fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv as *const _ as *const libc::c_void, std::mem::size_of::<libc::timeval>() as libc::socklen_t)
        };
    }

    /// Send one frame with up to [`MAX_FDS`] descriptors.
    pub fn send(&self, frame: &[u8], fds: &[RawFd]) -> io::Result<()> {
        assert!(fds.len() <= MAX_FDS);
        let mut iov = libc::iovec { iov_base: frame.as_ptr() as *mut libc::c_void, iov_len: frame.len() };
        let mut cbuf = [0u64; 8]; // CMSG_SPACE(4 * 4) fits in 64 bytes, u64 keeps alignment
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            let data_len = (fds.len() * std::mem::size_of::<RawFd>()) as u32;
            msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = unsafe { libc::CMSG_SPACE(data_len) } as usize;
            unsafe {
                let cmsg = libc::CMSG_FIRSTHDR(&msg);
                (*cmsg).cmsg_level = libc::SOL_SOCKET;
                (*cmsg).cmsg_type = libc::SCM_RIGHTS;
                (*cmsg).cmsg_len = libc::CMSG_LEN(data_len) as usize;
                std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg) as *mut RawFd, fds.len());
            }
        }
        loop {
            let r = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
            if r >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Receive one frame. `Ok(None)` on orderly EOF (the peer closed or died).
    pub fn recv(&self) -> io::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
        let mut buf = vec![0u8; MAX_FRAME];
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
        let mut cbuf = [0u64; 8];
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of_val(&cbuf);
        let n = loop {
            let r = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
            if r >= 0 {
                break r as usize;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        // Take ownership of every descriptor first, so none leaks on error.
        let mut fds = Vec::new();
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(cmsg) as *const RawFd;
                    let count = ((*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
                    for i in 0..count {
                        fds.push(OwnedFd::from_raw_fd(*data.add(i)));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
        }
        if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "control frame or its descriptors truncated"));
        }
        if n == 0 && fds.is_empty() {
            return Ok(None);
        }
        buf.truncate(n);
        Ok(Some((buf, fds)))
    }

    /// Shut both directions down (wakes a thread blocked in `recv`).
    pub fn shutdown(&self) {
        unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_RDWR) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_descriptors_cross_and_eof_is_seen() {
        let dir = std::env::temp_dir().join(format!("mh-sock-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);
        let l = SeqListener::bind(&path).unwrap();
        let c = SeqSocket::connect(&path).unwrap();
        let s = l.accept().unwrap();
        assert_eq!(s.peer_cred().unwrap().uid, unsafe { libc::getuid() });
        let seg = crate::shm::Segment::create("sock-test", 4096).unwrap();
        c.send(b"hello", &[seg.raw_fd()]).unwrap();
        let (frame, fds) = s.recv().unwrap().unwrap();
        assert_eq!(frame, b"hello");
        assert_eq!(fds.len(), 1);
        drop(c);
        assert!(s.recv().unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
