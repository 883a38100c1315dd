//! Control sockets: Unix SOCK_SEQPACKET with descriptor passing.
//!
//! A control frame (JSON, see `control.rs`) of any size travels as one or
//! more datagrams: each datagram starts with one byte, [`PIECE_MORE`] when
//! more of the same frame follows, [`PIECE_LAST`] on the frame's last (or
//! only) piece, which alone carries the descriptors (SCM_RIGHTS).  So no
//! reply is bounded by what one datagram can hold (a socket's send buffer,
//! about 200 KiB by default): a status of 100,000 channels streams in
//! pieces.  Pieces of one frame are never interleaved with another frame's:
//! a socket serialises its senders.  A frame is at most [`MAX_FRAME`] bytes;
//! a longer one, a piece without a valid first byte, or an end of file in
//! the middle of a frame is an error, never an unbounded buffer.
//!
//! Every accepted peer's uid is checked with SO_PEERCRED against ours before
//! a single frame is read (see the monitor).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use crate::error::{Error, Result};

/// Largest control frame (all its pieces together) we accept.
pub const MAX_FRAME: usize = 64 << 20;
/// Largest piece sent in one datagram (with its first byte).
pub const PIECE: usize = 32 * 1024;
/// Most descriptors one frame carries (a message's handles travel in one
/// frame: see `caps/`).
pub const MAX_FDS: usize = 64;
/// Control buffer of one datagram, in u64 words (keeps cmsg alignment):
/// `CMSG_SPACE(MAX_FDS * 4)` is 16 + 256 bytes.
const CBUF_WORDS: usize = 34;
/// First byte of a piece that more of its frame follows.
pub const PIECE_MORE: u8 = 0;
/// First byte of a frame's last (or only) piece.
pub const PIECE_LAST: u8 = 1;

/// A connected SEQPACKET socket.
pub struct SeqSocket {
    fd: OwnedFd,
    /// Held while one frame's pieces are sent, so two threads sending on
    /// one socket never interleave pieces.
    sending: Mutex<()>,
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
    // SAFETY: sockaddr_un is plain old data; all zeroes is a valid value.
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
    // SAFETY: plain system call, no pointers.
    let raw = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(Error::os("socket(AF_UNIX, SOCK_SEQPACKET)", io::Error::last_os_error()));
    }
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

impl SeqListener {
    /// Bind and listen at `path` (which must not exist).
    pub fn bind(path: &Path) -> Result<SeqListener> {
        let fd = new_socket()?;
        let (addr, len) = sockaddr(path)?;
        // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
        if unsafe { libc::bind(fd.as_raw_fd(), &addr as *const _ as *const libc::sockaddr, len) } != 0 {
            return Err(Error::os(format_args!("bind {}", path.display()), io::Error::last_os_error()));
        }
        // SAFETY: plain system call on our descriptor.
        if unsafe { libc::listen(fd.as_raw_fd(), 1024) } != 0 {
            return Err(Error::os("listen", io::Error::last_os_error()));
        }
        Ok(SeqListener { fd })
    }

    /// Accept one connection (blocking).
    pub fn accept(&self) -> io::Result<SeqSocket> {
        loop {
            // SAFETY: null address pointers are allowed (we do not want the address).
            let raw = unsafe { libc::accept4(self.fd.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut(), libc::SOCK_CLOEXEC) };
            if raw >= 0 {
                // SAFETY: `raw` is a fresh descriptor that nothing else owns.
                return Ok(SeqSocket::from_owned(unsafe { OwnedFd::from_raw_fd(raw) }));
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Make a blocked `accept` return (used at shutdown).
    pub fn shutdown(&self) {
        // SAFETY: plain system call on our descriptor; failure only means it is already shut.
        unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_RDWR) };
    }
}

fn timeval(t: Duration) -> libc::timeval {
    // A non-zero duration under a microsecond must not become 0 (which means "forever").
    let usec = if t.as_secs() == 0 && t.subsec_micros() == 0 && !t.is_zero() { 1 } else { t.subsec_micros() };
    libc::timeval { tv_sec: t.as_secs().min(i32::MAX as u64) as libc::time_t, tv_usec: usec as libc::suseconds_t }
}

impl SeqSocket {
    fn from_owned(fd: OwnedFd) -> SeqSocket {
        SeqSocket { fd, sending: Mutex::new(()) }
    }

    /// Connect to a listener at `path`.
    pub fn connect(path: &Path) -> io::Result<SeqSocket> {
        let fd = new_socket().map_err(|e| io::Error::other(e.message))?;
        let (addr, len) = sockaddr(path).map_err(|e| io::Error::other(e.message))?;
        // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
        if unsafe { libc::connect(fd.as_raw_fd(), &addr as *const _ as *const libc::sockaddr, len) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(SeqSocket::from_owned(fd))
    }

    /// Both ends of a connected pair (for tests).
    pub fn pair() -> Result<(SeqSocket, SeqSocket)> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors socketpair writes.
        if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } != 0 {
            return Err(Error::os("socketpair(AF_UNIX, SOCK_SEQPACKET)", io::Error::last_os_error()));
        }
        // SAFETY: two fresh descriptors that nothing else owns.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok((SeqSocket::from_owned(a), SeqSocket::from_owned(b)))
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// A second handle on the same socket (for a reader thread).
    pub fn try_clone(&self) -> io::Result<SeqSocket> {
        Ok(SeqSocket::from_owned(self.fd.try_clone()?))
    }

    /// The peer's pid and uid.
    pub fn peer_cred(&self) -> Result<PeerCred> {
        // SAFETY: ucred is plain old data; all zeroes is a valid value.
        let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: `cred` and `len` are valid out pointers of the sizes given.
        let r =
            unsafe { libc::getsockopt(self.fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, &mut cred as *mut _ as *mut libc::c_void, &mut len) };
        if r != 0 {
            return Err(Error::os("getsockopt(SO_PEERCRED)", io::Error::last_os_error()));
        }
        Ok(PeerCred { pid: cred.pid as u32, uid: cred.uid })
    }

    fn set_timeout(&self, opt: libc::c_int, what: &str, tv: libc::timeval) -> Result<()> {
        // SAFETY: `tv` is a valid timeval and the length matches it.
        let r = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                &tv as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if r != 0 {
            // A timeout that did not take would silently become an infinite wait.
            return Err(Error::os(format_args!("setsockopt({what})"), io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Bound how long a send may block (a peer that stops reading).
    pub fn set_send_timeout(&self, t: Duration) -> Result<()> {
        self.set_timeout(libc::SO_SNDTIMEO, "SO_SNDTIMEO", timeval(t))
    }

    /// Bound how long a recv may block; `None` blocks forever.
    pub fn set_recv_timeout(&self, t: Option<Duration>) -> Result<()> {
        self.set_timeout(libc::SO_RCVTIMEO, "SO_RCVTIMEO", timeval(t.unwrap_or(Duration::ZERO)))
    }

    /// Send one frame of any size (up to [`MAX_FRAME`]) with up to
    /// [`MAX_FDS`] descriptors, in pieces of at most [`PIECE`] bytes.
    pub fn send(&self, frame: &[u8], fds: &[RawFd]) -> io::Result<()> {
        if fds.len() > MAX_FDS {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{} descriptors in one frame (at most {MAX_FDS})", fds.len())));
        }
        if frame.len() > MAX_FRAME {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("control frame of {} bytes (at most {MAX_FRAME})", frame.len())));
        }
        let _one_frame_at_a_time = self.sending.lock().unwrap_or_else(|p| p.into_inner());
        let body = PIECE - 1;
        let mut chunks = frame.chunks(body).peekable();
        if chunks.peek().is_none() {
            return self.send_piece(PIECE_LAST, &[], fds);
        }
        while let Some(chunk) = chunks.next() {
            if chunks.peek().is_some() {
                self.send_piece(PIECE_MORE, chunk, &[])?;
            } else {
                self.send_piece(PIECE_LAST, chunk, fds)?;
            }
        }
        Ok(())
    }

    fn send_piece(&self, mark: u8, chunk: &[u8], fds: &[RawFd]) -> io::Result<()> {
        let mut iov = [
            libc::iovec { iov_base: &mark as *const u8 as *mut libc::c_void, iov_len: 1 },
            libc::iovec { iov_base: chunk.as_ptr() as *mut libc::c_void, iov_len: chunk.len() },
        ];
        let mut cbuf = [0u64; CBUF_WORDS];
        // SAFETY: msghdr is plain old data; all zeroes is a valid value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = 2;
        if !fds.is_empty() {
            let data_len = std::mem::size_of_val(fds) as u32;
            msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
            // SAFETY: CMSG_* only compute sizes and offsets within `cbuf`,
            // which is large enough for MAX_FDS descriptors (checked above).
            unsafe {
                msg.msg_controllen = libc::CMSG_SPACE(data_len) as usize;
                let cmsg = libc::CMSG_FIRSTHDR(&msg);
                (*cmsg).cmsg_level = libc::SOL_SOCKET;
                (*cmsg).cmsg_type = libc::SCM_RIGHTS;
                (*cmsg).cmsg_len = libc::CMSG_LEN(data_len) as usize;
                std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg) as *mut RawFd, fds.len());
            }
        }
        loop {
            // SAFETY: `msg` points at live iovecs and control data for the call.
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

    /// Receive one whole frame. `Ok(None)` on orderly EOF (the peer closed
    /// or died) between frames; EOF inside a frame is an error.
    pub fn recv(&self) -> io::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
        self.recv_at_most(MAX_FRAME)
    }

    /// `recv` of a frame of at most `limit` bytes (a monitor reading
    /// requests, which are small, bounds what a peer can make it buffer).
    pub fn recv_at_most(&self, limit: usize) -> io::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
        match self.recv_keeping_truncated(limit)? {
            None => Ok(None),
            Some((_, _, true)) => Err(io::Error::new(io::ErrorKind::InvalidData, "control datagram's descriptors truncated")),
            Some((frame, fds, false)) => Ok(Some((frame, fds))),
        }
    }

    /// `recv_at_most`, but a frame whose descriptors the kernel could not
    /// all install (MSG_CTRUNC: the receiving process's descriptor table is
    /// full) is returned with the ones it got and `true`, so the receiver can
    /// refuse what it carried instead of losing the frame.
    pub fn recv_keeping_truncated(&self, limit: usize) -> io::Result<Option<(Vec<u8>, Vec<OwnedFd>, bool)>> {
        let limit = limit.min(MAX_FRAME);
        let mut frame = Vec::new();
        loop {
            let Some((mark, fds, truncated)) = self.recv_piece(&mut frame)? else {
                if frame.is_empty() {
                    return Ok(None);
                }
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the peer hung up in the middle of a control frame"));
            };
            match mark {
                PIECE_LAST if frame.len() <= limit => return Ok(Some((frame, fds, truncated))),
                PIECE_LAST => return Err(io::Error::new(io::ErrorKind::InvalidData, format!("control frame over {limit} bytes"))),
                PIECE_MORE if fds.is_empty() && !truncated => {
                    if frame.len() > limit {
                        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("control frame over {limit} bytes")));
                    }
                }
                PIECE_MORE => return Err(io::Error::new(io::ErrorKind::InvalidData, "descriptors on a piece that is not a frame's last")),
                other => return Err(io::Error::new(io::ErrorKind::InvalidData, format!("control datagram with unknown first byte {other}"))),
            }
        }
    }

    /// Receive one datagram, appending its body to `frame`: (first byte,
    /// descriptors, whether descriptors were lost to MSG_CTRUNC), or `None`
    /// on EOF.
    fn recv_piece(&self, frame: &mut Vec<u8>) -> io::Result<Option<(u8, Vec<OwnedFd>, bool)>> {
        let start = frame.len();
        frame.resize(start + PIECE, 0);
        let mut iov = libc::iovec { iov_base: frame[start..].as_mut_ptr() as *mut libc::c_void, iov_len: PIECE };
        let mut cbuf = [0u64; CBUF_WORDS];
        // SAFETY: msghdr is plain old data; all zeroes is a valid value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of_val(&cbuf);
        let n = loop {
            // SAFETY: `msg` points at a live buffer of PIECE bytes and at `cbuf`.
            let r = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
            if r >= 0 {
                break r as usize;
            }
            let e = io::Error::last_os_error();
            frame.truncate(start);
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
            frame.resize(start + PIECE, 0);
        };
        // Take ownership of every descriptor first, so none leaks on error.
        let mut fds = Vec::new();
        // SAFETY: the kernel filled `cbuf` with `msg_controllen` bytes of
        // well-formed control messages; we read only SCM_RIGHTS payloads.
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
        if msg.msg_flags & libc::MSG_TRUNC != 0 {
            frame.truncate(start);
            return Err(io::Error::new(io::ErrorKind::InvalidData, "control datagram truncated"));
        }
        let truncated = msg.msg_flags & libc::MSG_CTRUNC != 0;
        if n == 0 && fds.is_empty() && !truncated {
            frame.truncate(start);
            return Ok(None);
        }
        if n == 0 {
            frame.truncate(start);
            return Err(io::Error::new(io::ErrorKind::InvalidData, "empty control datagram"));
        }
        let mark = frame[start];
        frame.copy_within(start + 1..start + n, start);
        frame.truncate(start + n - 1);
        Ok(Some((mark, fds, truncated)))
    }

    /// Shut both directions down (wakes a thread blocked in `recv`).
    pub fn shutdown(&self) {
        // SAFETY: plain system call on our descriptor; failure only means it is already shut.
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
        assert_eq!(s.peer_cred().unwrap().uid, rustix::process::getuid().as_raw());
        let seg = crate::shm::Segment::create("sock-test", 4096).unwrap();
        c.send(b"hello", &[seg.raw_fd()]).unwrap();
        let (frame, fds) = s.recv().unwrap().unwrap();
        assert_eq!(frame, b"hello");
        assert_eq!(fds.len(), 1);
        drop(c);
        assert!(s.recv().unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn frames_larger_than_a_datagram_stream_in_pieces() {
        let (a, b) = SeqSocket::pair().unwrap();
        let seg = crate::shm::Segment::create("sock-test", 4096).unwrap();
        // Far beyond the socket buffer: the reader must run while we write.
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let want = big.clone();
        let fd = seg.raw_fd();
        let h = std::thread::spawn(move || {
            a.send(&big, &[fd]).unwrap();
            a.send(b"", &[]).unwrap();
            a.send(&[7u8; PIECE - 1], &[]).unwrap();
            a
        });
        let (frame, fds) = b.recv().unwrap().unwrap();
        assert_eq!(frame, want);
        assert_eq!(fds.len(), 1);
        assert_eq!(b.recv().unwrap().unwrap().0, b"");
        assert_eq!(b.recv().unwrap().unwrap().0, vec![7u8; PIECE - 1]);
        drop(h.join().unwrap());
        assert!(b.recv().unwrap().is_none());
    }

    #[test]
    fn malformed_pieces_and_eof_mid_frame_are_errors() {
        let (a, b) = SeqSocket::pair().unwrap();
        // A raw datagram with an unknown first byte.
        // SAFETY: a valid buffer of the given length.
        unsafe { libc::send(a.raw_fd(), b"{junk".as_ptr() as *const libc::c_void, 5, 0) };
        assert_eq!(b.recv().unwrap_err().kind(), io::ErrorKind::InvalidData);
        a.send_piece(PIECE_MORE, b"half", &[]).unwrap();
        drop(a);
        assert_eq!(b.recv().unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn timeouts_are_set_or_fail_loudly() {
        let (a, _b) = SeqSocket::pair().unwrap();
        a.set_recv_timeout(Some(Duration::from_nanos(10))).unwrap();
        assert_eq!(a.recv().unwrap_err().kind(), io::ErrorKind::WouldBlock);
        a.set_send_timeout(Duration::from_secs(1)).unwrap();
        // SAFETY: closing a descriptor we own a duplicate of; the socket stays open through `a`.
        let bad = SeqSocket::from_owned(unsafe { OwnedFd::from_raw_fd(libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY)) });
        let e = bad.set_recv_timeout(Some(Duration::from_secs(1))).unwrap_err();
        assert!(e.message.contains("SO_RCVTIMEO"), "{e}");
    }
}
