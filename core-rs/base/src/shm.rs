//! Shared-memory segments: anonymous memfd files, sealed against resizing,
//! mapped shared.
//!
//! A segment has no name anywhere in the file system: it is reachable only
//! through its file descriptor, which travels between processes over the
//! control sockets (SCM_RIGHTS).  The creator seals the size, so a peer can
//! never shrink the file under a mapping and make us fault (SIGBUS); a
//! segment received from a peer is refused unless it carries that seal.

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

use rustix::fs::{fcntl_add_seals, fcntl_get_seals, fstat, ftruncate, memfd_create, MemfdFlags, SealFlags};
use rustix::io::{fcntl_dupfd_cloexec, Errno};
use rustix::mm::{mmap, munmap, MapFlags, ProtFlags};
use std::ptr::NonNull;

use crate::error::{Error, Result};

/// A close-on-exec duplicate of `fd` (descriptors handed to peers or kept
/// past the original's life).
pub fn dup_cloexec(fd: RawFd) -> Result<OwnedFd> {
    // -1 is not a descriptor (and is `BorrowedFd`'s niche): the kernel
    // refused it with EBADF, so do we.
    if fd < 0 {
        return Err(Error::os("dup descriptor", Errno::BADF.into()));
    }
    // SAFETY: `fd` >= 0 (checked above) and the BorrowedFd lives only for
    // this call, which only hands its number to fcntl: callers pass a
    // descriptor they hold (a segment's or a socket's), and one already
    // closed fails with EBADF, as with the raw fcntl.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    fcntl_dupfd_cloexec(fd, 0).map_err(|e| Error::os("dup descriptor", e.into()))
}

/// Seals every segment carries: its size is fixed for its whole life.
fn required_seals() -> SealFlags {
    SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL
}

/// A mapped memfd segment. Unmapped and closed on drop.
pub struct Segment {
    /// The runtime's own (`handles::owned`): never sent as a handle. Before `fd`: forgotten first.
    _owned: crate::handles::owned::Mark,
    ptr: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is plain shared memory owned by this value (unmapped
// only in Drop); every access to it goes through the atomics and protocols of
// the types built on top (ring, doorbell), which are what make concurrent use
// sound, whichever thread holds the Segment.
unsafe impl Send for Segment {}
// SAFETY: as for Send: &Segment only hands out raw pointers, and the types
// that dereference them synchronise through atomics in the mapping.
unsafe impl Sync for Segment {}

impl Segment {
    /// Create a zero-filled segment of `len` bytes; `label` shows in
    /// `/proc/PID/fd` and `/proc/PID/maps` for debugging only.
    pub fn create(label: &str, len: usize) -> Result<Segment> {
        if len == 0 {
            return Err(Error::invalid("a segment needs a non-zero length"));
        }
        let name = CString::new(format!("multihop:{label}")).map_err(|_| Error::invalid("segment label contains NUL"))?;
        let fd = memfd_create(name.as_c_str(), MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).map_err(|e| Error::os("memfd_create", e.into()))?;
        ftruncate(&fd, len as u64).map_err(|e| Error::os(format_args!("ftruncate segment to {len} bytes"), e.into()))?;
        fcntl_add_seals(&fd, required_seals()).map_err(|e| Error::os("seal segment", e.into()))?;
        Segment::map(fd, len)
    }

    /// Map a segment received from a peer. Its seals and size are checked:
    /// `min_len` is the least size the caller's layout needs.
    pub fn from_fd(fd: OwnedFd, min_len: usize) -> Result<Segment> {
        let seals = fcntl_get_seals(&fd).map_err(|_| Error::protocol("received descriptor is not a sealable memfd segment"))?;
        if !seals.contains(required_seals()) {
            return Err(Error::protocol("received segment is not sealed against resizing"));
        }
        let st = fstat(&fd).map_err(|e| Error::os("fstat segment", e.into()))?;
        let len = st.st_size as usize;
        if len < min_len.max(1) {
            return Err(Error::protocol(format!("received segment has {len} bytes, layout needs {min_len}")));
        }
        Segment::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> Result<Segment> {
        // SAFETY: a new shared mapping of a descriptor we own, for its full
        // length, at an address the kernel picks (no hint, no MAP_FIXED), so
        // it replaces no memory of ours; it lives until Drop unmaps it.
        let ptr = unsafe { mmap(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED, &fd, 0) }
            .map_err(|e| Error::os(format_args!("mmap {len} bytes"), e.into()))?;
        let _owned = crate::handles::owned::Mark::inode(fd.as_raw_fd(), crate::handles::owned::Kind::Segment);
        Ok(Segment { _owned, ptr: NonNull::new(ptr.cast::<u8>()).expect("mmap returned null"), len, fd })
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
        // SAFETY: offset + size_of::<T>() <= len was just asserted, so the
        // pointer stays inside the one mapping of `len` bytes.
        let p = unsafe { self.ptr.as_ptr().add(offset) };
        assert_eq!(p as usize % std::mem::align_of::<T>(), 0, "misaligned segment access");
        p as *mut T
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `map`, once; nothing
        // borrowed from the segment outlives it (borrows of `self` end here).
        // A failure (none is possible for a mapping we made) leaves it mapped.
        let _ = unsafe { munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_segment_is_zeroed_and_shared_between_mappings() {
        let a = Segment::create("test", 8192).unwrap();
        let b = Segment::from_fd(dup_cloexec(a.raw_fd()).unwrap(), 8192).unwrap();
        // SAFETY: byte 100 is inside both 8192-byte mappings of one file.
        unsafe {
            assert_eq!(*a.as_ptr().add(100), 0);
            *a.as_ptr().add(100) = 42;
            assert_eq!(*b.as_ptr().add(100), 42);
        }
    }

    #[test]
    fn unsealed_or_short_descriptors_are_refused() {
        let fd = memfd_create(c"plain", MemfdFlags::CLOEXEC).unwrap();
        ftruncate(&fd, 4096).unwrap();
        assert!(Segment::from_fd(fd, 64).is_err());
        let a = Segment::create("short", 4096).unwrap();
        let dup = dup_cloexec(a.raw_fd()).unwrap();
        let err = Segment::from_fd(dup, 1 << 20).err().unwrap();
        assert!(err.message.contains("layout needs"), "{err}");
    }
}
