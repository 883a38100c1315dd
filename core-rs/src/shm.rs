//! Shared-memory segments: anonymous memfd files, sealed against resizing,
//! mapped shared.
//!
//! A segment has no name anywhere in the file system: it is reachable only
//! through its file descriptor, which travels between processes over the
//! control sockets (SCM_RIGHTS).  The creator seals the size, so a peer can
//! never shrink the file under a mapping and make us fault (SIGBUS); a
//! segment received from a peer is refused unless it carries that seal.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

use crate::error::{Error, Result};

/// A close-on-exec duplicate of `fd` (descriptors handed to peers or kept
/// past the original's life).
pub fn dup_cloexec(fd: RawFd) -> Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor the caller holds.
    let r = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if r < 0 {
        return Err(Error::os("dup descriptor", io::Error::last_os_error()));
    }
    // SAFETY: `r` is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// Seals every segment carries: its size is fixed for its whole life.
const REQUIRED_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// A mapped memfd segment. Unmapped and closed on drop.
pub struct Segment {
    ptr: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
}

// The mapping is plain shared memory; every access to it goes through the
// atomics and protocols of the types built on top (ring, doorbell).
unsafe impl Send for Segment {}
unsafe impl Sync for Segment {}

impl Segment {
    /// Create a zero-filled segment of `len` bytes; `label` shows in
    /// `/proc/PID/fd` and `/proc/PID/maps` for debugging only.
    pub fn create(label: &str, len: usize) -> Result<Segment> {
        if len == 0 {
            return Err(Error::invalid("a segment needs a non-zero length"));
        }
        let name = CString::new(format!("multihop:{label}")).map_err(|_| Error::invalid("segment label contains NUL"))?;
        // SAFETY: plain syscall with a valid C string.
        let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if raw < 0 {
            return Err(Error::os("memfd_create", io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(Error::os(format_args!("ftruncate segment to {len} bytes"), io::Error::last_os_error()));
        }
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, REQUIRED_SEALS) } != 0 {
            return Err(Error::os("seal segment", io::Error::last_os_error()));
        }
        Segment::map(fd, len)
    }

    /// Map a segment received from a peer. Its seals and size are checked:
    /// `min_len` is the least size the caller's layout needs.
    pub fn from_fd(fd: OwnedFd, min_len: usize) -> Result<Segment> {
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 {
            return Err(Error::protocol("received descriptor is not a sealable memfd segment"));
        }
        if seals & REQUIRED_SEALS != REQUIRED_SEALS {
            return Err(Error::protocol("received segment is not sealed against resizing"));
        }
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(Error::os("fstat segment", io::Error::last_os_error()));
        }
        let len = st.st_size as usize;
        if len < min_len.max(1) {
            return Err(Error::protocol(format!("received segment has {len} bytes, layout needs {min_len}")));
        }
        Segment::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> Result<Segment> {
        // SAFETY: mapping a descriptor we own, shared, for its full length.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::os(format_args!("mmap {len} bytes"), io::Error::last_os_error()));
        }
        Ok(Segment { ptr: NonNull::new(ptr as *mut u8).expect("mmap returned null"), len, fd })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// A pointer to a `T` at `offset`, checked against the segment bounds and
    /// `T`'s alignment.
    pub fn at<T>(&self, offset: usize) -> *mut T {
        assert!(offset + std::mem::size_of::<T>() <= self.len, "segment access out of bounds");
        let p = unsafe { self.ptr.as_ptr().add(offset) };
        assert_eq!(p as usize % std::mem::align_of::<T>(), 0, "misaligned segment access");
        p as *mut T
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `map`.
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_segment_is_zeroed_and_shared_between_mappings() {
        let a = Segment::create("test", 8192).unwrap();
        let dup = unsafe { libc::dup(a.raw_fd()) };
        let b = Segment::from_fd(unsafe { OwnedFd::from_raw_fd(dup) }, 8192).unwrap();
        unsafe {
            assert_eq!(*a.as_ptr().add(100), 0);
            *a.as_ptr().add(100) = 42;
            assert_eq!(*b.as_ptr().add(100), 42);
        }
    }

    #[test]
    fn unsealed_or_short_descriptors_are_refused() {
        let raw = unsafe { libc::memfd_create(c"plain".as_ptr(), libc::MFD_CLOEXEC) };
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        unsafe { libc::ftruncate(fd.as_raw_fd(), 4096) };
        assert!(Segment::from_fd(fd, 64).is_err());
        let a = Segment::create("short", 4096).unwrap();
        let dup = unsafe { OwnedFd::from_raw_fd(libc::dup(a.raw_fd())) };
        let err = Segment::from_fd(dup, 1 << 20).err().unwrap();
        assert!(err.message.contains("layout needs"), "{err}");
    }
}
