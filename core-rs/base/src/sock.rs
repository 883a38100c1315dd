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
//!
//! The system calls go through rustix (sockets, `sendmsg`/`recvmsg` with
//! SCM_RIGHTS, timeouts); only SO_PEERCRED stays raw libc (see
//! [`SeqSocket::peer_cred`] for why).

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use rustix::io::Errno;
use rustix::net::sockopt::{set_socket_timeout, Timeout};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags, Shutdown,
    SocketAddrUnix, SocketFlags, SocketType,
};

use crate::error::{Error, Result};

/// Largest control frame (all its pieces together) we accept.
pub const MAX_FRAME: usize = 64 << 20;
/// Largest piece sent in one datagram (with its first byte).
pub(crate) const PIECE: usize = 32 * 1024;
/// Most descriptors one frame carries (a message's handles travel in one
/// frame: see `handles`).
pub const MAX_FDS: usize = 64;
/// Control buffer of one received datagram: `CMSG_SPACE(MAX_FDS * 4)`, one
/// header (16 bytes on 64-bit Linux) and MAX_FDS descriptors, exactly: the
/// kernel installs at most MAX_FDS descriptors and flags MSG_CTRUNC past that
/// (a header's size is a multiple of the cmsg alignment, and so is
/// MAX_FDS * 4, so no padding is missing).
const CBUF_BYTES: usize = std::mem::size_of::<libc::cmsghdr>() + MAX_FDS * std::mem::size_of::<RawFd>();
/// Control buffer of one sent datagram (rustix's bound, with room to align).
const SEND_CBUF_BYTES: usize = rustix::cmsg_space!(ScmRights(MAX_FDS));
/// Longest socket path (`sun_path`, with its terminating NUL).
const SUN_PATH_BYTES: usize = std::mem::size_of::<libc::sockaddr_un>() - std::mem::size_of::<libc::sa_family_t>();
/// First byte of a piece that more of its frame follows.
pub(crate) const PIECE_MORE: u8 = 0;
/// First byte of a frame's last (or only) piece.
pub(crate) const PIECE_LAST: u8 = 1;

/// A connected SEQPACKET socket.
pub struct SeqSocket {
    /// The runtime's own (`handles::owned`): never sent as a handle. Before `fd`: forgotten first.
    _owned: crate::handles::owned::Mark,
    fd: OwnedFd,
    /// Held while one frame's pieces are sent, so two threads sending on
    /// one socket never interleave pieces.
    sending: Mutex<()>,
}

/// A listening SEQPACKET socket bound to a path.
pub struct SeqListener {
    _owned: crate::handles::owned::Mark,
    fd: OwnedFd,
}

/// Credentials of the process at the other end.
#[derive(Clone, Copy, Debug)]
pub struct PeerCred {
    pub pid: u32,
    pub uid: u32,
}

/// A control buffer aligned for `cmsghdr`, so rustix uses all of it
/// (`RecvAncillaryBuffer::new` skips to the first aligned byte).
#[repr(C, align(8))]
struct CmsgSpace<const N: usize>([MaybeUninit<u8>; N]);
const _: () = assert!(std::mem::align_of::<libc::cmsghdr>() <= 8);

impl<const N: usize> CmsgSpace<N> {
    fn new() -> Self {
        CmsgSpace([MaybeUninit::uninit(); N])
    }
}

fn sockaddr(path: &Path) -> Result<SocketAddrUnix> {
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= SUN_PATH_BYTES {
        return Err(Error::invalid(format!("socket path too long ({} bytes): {}", bytes.len(), path.display())));
    }
    // The one other refusal: a NUL inside the path (which the raw call used to cut the path at).
    SocketAddrUnix::new(bytes).map_err(|_| Error::invalid(format!("socket path contains a NUL byte: {}", path.display())))
}

fn new_socket() -> Result<OwnedFd> {
    rustix::net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)
        .map_err(|e| Error::os("socket(AF_UNIX, SOCK_SEQPACKET)", e.into()))
}

impl SeqListener {
    /// Bind and listen at `path` (which must not exist).
    pub fn bind(path: &Path) -> Result<SeqListener> {
        let fd = new_socket()?;
        let addr = sockaddr(path)?;
        rustix::net::bind(&fd, &addr).map_err(|e| Error::os(format_args!("bind {}", path.display()), e.into()))?;
        rustix::net::listen(&fd, 1024).map_err(|e| Error::os("listen", e.into()))?;
        Ok(SeqListener { _owned: crate::handles::owned::Mark::inode(fd.as_raw_fd(), crate::handles::owned::Kind::ControlSocket), fd })
    }

    /// Accept one connection (blocking).
    pub fn accept(&self) -> io::Result<SeqSocket> {
        loop {
            match rustix::net::accept_with(&self.fd, SocketFlags::CLOEXEC) {
                Ok(fd) => return Ok(SeqSocket::from_owned(fd)),
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Make a blocked `accept` return (used at shutdown).
    pub fn shutdown(&self) {
        // Failure only means it is already shut.
        let _ = rustix::net::shutdown(&self.fd, Shutdown::Both);
    }
}

/// A socket timeout as the kernel takes it: zero means "forever" (`None`);
/// whole microseconds, a fraction dropped (rustix would round it up), but a
/// non-zero duration under a microsecond is one microsecond, never 0; at
/// most `i32::MAX` seconds.
fn sock_timeout(t: Duration) -> Option<Duration> {
    if t.is_zero() {
        return None;
    }
    let t = Duration::new(t.as_secs().min(i32::MAX as u64), t.subsec_micros() * 1000);
    Some(t.max(Duration::from_micros(1)))
}

impl SeqSocket {
    fn from_owned(fd: OwnedFd) -> SeqSocket {
        SeqSocket {
            _owned: crate::handles::owned::Mark::inode(fd.as_raw_fd(), crate::handles::owned::Kind::ControlSocket),
            fd,
            sending: Mutex::new(()),
        }
    }

    /// Connect to a listener at `path`.
    pub fn connect(path: &Path) -> io::Result<SeqSocket> {
        // The OS error as it is (EMFILE stays EMFILE: the caller names the limit).
        let fd = rustix::net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)?;
        let addr = sockaddr(path).map_err(|e| io::Error::other(e.message))?;
        rustix::net::connect(&fd, &addr)?;
        Ok(SeqSocket::from_owned(fd))
    }

    /// Both ends of a connected pair (for tests).
    pub fn pair() -> Result<(SeqSocket, SeqSocket)> {
        let (a, b) = rustix::net::socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)
            .map_err(|e| Error::os("socketpair(AF_UNIX, SOCK_SEQPACKET)", e.into()))?;
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
    ///
    /// Raw libc, not `rustix::net::sockopt::socket_peercred`: rustix 1.1's
    /// `UCred::pid` is a non-zero `Pid`, but the kernel reports pid 0 for a
    /// peer outside our PID namespace (a process in a parent or sibling
    /// namespace connecting to a socket bound in ours). rustix then builds an
    /// invalid `Pid`: undefined behaviour, and as compiled here the niche
    /// turned its `Ok` into an `Err` of "os error 0" (seen with a listener
    /// under `unshare --pid`), so a same-uid peer there would be turned away
    /// with a nonsense error.
    pub fn peer_cred(&self) -> Result<PeerCred> {
        let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: `cred` and `len` are valid out pointers of the sizes given,
        // and every bit pattern is a valid libc::ucred (pid 0 included).
        let r =
            unsafe { libc::getsockopt(self.fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, &mut cred as *mut _ as *mut libc::c_void, &mut len) };
        if r != 0 {
            return Err(Error::os("getsockopt(SO_PEERCRED)", io::Error::last_os_error()));
        }
        Ok(PeerCred { pid: cred.pid as u32, uid: cred.uid })
    }

    fn set_timeout(&self, id: Timeout, what: &str, t: Option<Duration>) -> Result<()> {
        // A timeout that did not take would silently become an infinite wait.
        set_socket_timeout(&self.fd, id, t).map_err(|e| Error::os(format_args!("setsockopt({what})"), e.into()))
    }

    /// Bound how long a send may block (a peer that stops reading).
    pub fn set_send_timeout(&self, t: Duration) -> Result<()> {
        self.set_timeout(Timeout::Send, "SO_SNDTIMEO", sock_timeout(t))
    }

    /// Bound how long a recv may block; `None` blocks forever.
    pub fn set_recv_timeout(&self, t: Option<Duration>) -> Result<()> {
        self.set_timeout(Timeout::Recv, "SO_RCVTIMEO", sock_timeout(t.unwrap_or(Duration::ZERO)))
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
        let _one_frame_at_a_time = crate::sync::lock(&self.sending);
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
        let iov = [IoSlice::new(std::slice::from_ref(&mark)), IoSlice::new(chunk)];
        // -1 is not a descriptor (and is `BorrowedFd`'s niche): the kernel
        // refused it with EBADF, so do we.
        if fds.iter().any(|&fd| fd < 0) {
            return Err(Errno::BADF.into());
        }
        // SAFETY: every number is >= 0 (checked above), and each BorrowedFd
        // lives only for this call: rustix copies the numbers into the
        // SCM_RIGHTS message and never closes or reads through them. The
        // caller holds the descriptors open for the call, as it did for the raw
        // sendmsg; one it had already closed fails with EBADF in the kernel.
        let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(|&fd| unsafe { BorrowedFd::borrow_raw(fd) }).collect();
        let mut space = CmsgSpace::<SEND_CBUF_BYTES>::new();
        let mut control = SendAncillaryBuffer::new(&mut space.0);
        if !borrowed.is_empty() && !control.push(SendAncillaryMessage::ScmRights(&borrowed)) {
            // Cannot happen: the buffer holds MAX_FDS descriptors (checked in `send`).
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{} descriptors in one frame (at most {MAX_FDS})", fds.len())));
        }
        loop {
            match rustix::net::sendmsg(&self.fd, &iov, &mut control, SendFlags::NOSIGNAL) {
                Ok(_) => return Ok(()),
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
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
        let mut space = CmsgSpace::<CBUF_BYTES>::new();
        // Aligned, so all CBUF_BYTES are offered to the kernel (see CBUF_BYTES).
        let mut control = RecvAncillaryBuffer::new(&mut space.0);
        let got = loop {
            let mut iov = [IoSliceMut::new(&mut frame[start..])];
            match rustix::net::recvmsg(&self.fd, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
                Ok(got) => break got,
                Err(Errno::INTR) => continue,
                Err(e) => {
                    frame.truncate(start);
                    return Err(e.into());
                }
            }
        };
        // Take ownership of every descriptor first, so none leaks on error
        // (and whatever is not taken is closed when `control` drops).
        let mut fds = Vec::new();
        for msg in control.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = msg {
                fds.extend(received);
            }
        }
        let n = got.bytes;
        if got.flags.contains(ReturnFlags::TRUNC) {
            frame.truncate(start);
            return Err(io::Error::new(io::ErrorKind::InvalidData, "control datagram truncated"));
        }
        let truncated = got.flags.contains(ReturnFlags::CTRUNC);
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
        // Failure only means it is already shut.
        let _ = rustix::net::shutdown(&self.fd, Shutdown::Both);
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
        rustix::net::send(&a.fd, b"{junk", SendFlags::empty()).unwrap();
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
        // Not a socket: setsockopt fails (ENOTSOCK), and says which option.
        let bad = SeqSocket::from_owned(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
        let e = bad.set_recv_timeout(Some(Duration::from_secs(1))).unwrap_err();
        assert!(e.message.contains("SO_RCVTIMEO"), "{e}");
    }

    #[test]
    fn timeouts_keep_their_kernel_meaning() {
        // Zero is "forever" (rustix would refuse Some(ZERO) with EINVAL); whole
        // microseconds, never rounded up, never 0 when non-zero; at most i32::MAX seconds.
        assert_eq!(sock_timeout(Duration::ZERO), None);
        assert_eq!(sock_timeout(Duration::from_nanos(10)), Some(Duration::from_micros(1)));
        assert_eq!(sock_timeout(Duration::from_nanos(2_500)), Some(Duration::from_micros(2)));
        assert_eq!(sock_timeout(Duration::from_millis(1500)), Some(Duration::from_millis(1500)));
        assert_eq!(sock_timeout(Duration::from_secs(u64::MAX)), Some(Duration::from_secs(i32::MAX as u64)));
        // And the kernel takes them (it keeps jiffies, so only "set or forever" reads back exactly).
        use rustix::net::sockopt::socket_timeout;
        let (a, _b) = SeqSocket::pair().unwrap();
        a.set_send_timeout(Duration::ZERO).unwrap();
        assert_eq!(socket_timeout(&a.fd, Timeout::Send).unwrap(), None);
        a.set_recv_timeout(Some(Duration::from_nanos(10))).unwrap();
        assert!(socket_timeout(&a.fd, Timeout::Recv).unwrap().is_some());
        a.set_recv_timeout(None).unwrap();
        assert_eq!(socket_timeout(&a.fd, Timeout::Recv).unwrap(), None);
        a.set_send_timeout(Duration::from_secs(u64::MAX)).unwrap();
        assert!(socket_timeout(&a.fd, Timeout::Send).unwrap().is_some());
    }

    #[test]
    fn socket_paths_are_bounded_by_sun_path() {
        let long = Path::new("/").join("x".repeat(SUN_PATH_BYTES - 1));
        let e = SeqListener::bind(&long).err().unwrap();
        assert!(e.message.starts_with(&format!("socket path too long ({} bytes)", SUN_PATH_BYTES)), "{e}");
        // One byte shorter fits (with its NUL): the bind itself is what fails, in a directory that does not exist.
        let fits = Path::new("/nonexistent-mh-dir").join("x".repeat(SUN_PATH_BYTES - 1 - "/nonexistent-mh-dir/".len()));
        assert_eq!(fits.as_os_str().len(), SUN_PATH_BYTES - 1);
        let e = SeqListener::bind(&fits).err().unwrap();
        assert!(e.message.starts_with("bind "), "{e}");
        assert!(SeqSocket::connect(&long).err().unwrap().to_string().contains("socket path too long"));
    }

    /// Sends one datagram by hand: `body` (after `mark` unless `None`), with `n` copies of a descriptor.
    fn send_raw(to: &SeqSocket, mark: Option<u8>, body: &[u8], n: usize) {
        let null = std::fs::File::open("/dev/null").unwrap();
        let fds: Vec<BorrowedFd<'_>> = (0..n).map(|_| std::os::fd::AsFd::as_fd(&null)).collect();
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(n))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        assert!(n == 0 || control.push(SendAncillaryMessage::ScmRights(&fds)));
        let mark = mark.as_slice();
        rustix::net::sendmsg(&to.fd, &[IoSlice::new(mark), IoSlice::new(body)], &mut control, SendFlags::empty()).unwrap();
    }

    #[test]
    fn descriptors_past_max_fds_are_reported_truncated() {
        let (a, b) = SeqSocket::pair().unwrap();
        send_raw(&a, Some(PIECE_LAST), b"x", MAX_FDS);
        let (frame, fds, truncated) = b.recv_keeping_truncated(MAX_FRAME).unwrap().unwrap();
        assert_eq!((frame.as_slice(), fds.len(), truncated), (&b"x"[..], MAX_FDS, false));
        for fd in &fds {
            assert!(rustix::io::fcntl_getfd(fd).unwrap().contains(rustix::io::FdFlags::CLOEXEC));
        }
        // Two more than the control buffer holds: the kernel installs MAX_FDS and flags MSG_CTRUNC.
        send_raw(&a, Some(PIECE_LAST), b"y", MAX_FDS + 2);
        let (frame, fds, truncated) = b.recv_keeping_truncated(MAX_FRAME).unwrap().unwrap();
        assert_eq!((frame.as_slice(), fds.len(), truncated), (&b"y"[..], MAX_FDS, true));
        send_raw(&a, Some(PIECE_LAST), b"z", MAX_FDS + 2);
        let e = b.recv().unwrap_err();
        assert_eq!((e.kind(), e.to_string()), (io::ErrorKind::InvalidData, "control datagram's descriptors truncated".to_string()));
        // Descriptors on a piece that is not the last, an oversized datagram, and an empty one with a
        // descriptor (without one it reads as EOF: a zero-byte datagram is all recvmsg sees of a hang-up).
        send_raw(&a, Some(PIECE_MORE), b"w", 1);
        assert_eq!(b.recv().unwrap_err().to_string(), "descriptors on a piece that is not a frame's last");
        send_raw(&a, Some(PIECE_LAST), &vec![0u8; PIECE], 1);
        assert_eq!(b.recv().unwrap_err().to_string(), "control datagram truncated");
        send_raw(&a, None, b"", 1);
        assert_eq!(b.recv().unwrap_err().to_string(), "empty control datagram");
        // A frame over the caller's limit.
        a.send(&[1u8; 100], &[]).unwrap();
        assert_eq!(b.recv_at_most(50).unwrap_err().to_string(), "control frame over 50 bytes");
        // The socket still works, and EOF is still EOF.
        a.send(b"ok", &[]).unwrap();
        assert_eq!(b.recv().unwrap().unwrap().0, b"ok");
        drop(a);
        assert!(b.recv().unwrap().is_none());
    }

    #[test]
    fn a_bad_descriptor_is_refused_with_ebadf() {
        let (a, _b) = SeqSocket::pair().unwrap();
        assert_eq!(a.send(b"x", &[-1]).unwrap_err().raw_os_error(), Some(libc::EBADF));
    }
}
