//! This process's doorbell as a file descriptor an event loop can watch.
//!
//! Writers ring a process's doorbell with `FUTEX_WAKE` on its epoch word
//! (`park.rs`).  An event loop cannot block in a futex, so an [`AsyncBell`]
//! turns that very wake into readability of a descriptor, without a thread:
//! an io_uring instance with one `IORING_OP_FUTEX_WAIT` (Linux 6.7+) on the
//! epoch word.  The ring's descriptor is readable when the wait completes,
//! that is when a writer rang (or the epoch had already moved).  So whoever
//! rings the doorbell today wakes the loop, through the kernel, directly.
//!
//! Where io_uring is missing or refuses futex waits (older kernels, seccomp
//! filters, `kernel.io_uring_disabled`), one bridge thread per process parks
//! on the doorbell and writes an eventfd instead: the same descriptor
//! contract, one extra wake-up.
//!
//! The protocol is the doorbell's event count: [`AsyncBell::arm`] counts the
//! loop as a waiter and starts the wait on the epoch it read; the caller then
//! looks at its channels once more and returns to its loop; when the
//! descriptor turns readable, [`AsyncBell::consume`] takes the completion
//! and un-counts the waiter, and the caller looks at its channels.  While
//! armed, every write to this process costs its writer one FUTEX_WAKE, as a
//! parked receiver does.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::park::Doorbell;

const IORING_OP_FUTEX_WAIT: u8 = 51;
const FUTEX2_SIZE_U32: i32 = 0x02;
const FUTEX_BITSET_MATCH_ANY: u64 = 0xffff_ffff;
const IORING_OFF_SQ_RING: i64 = 0;
const IORING_OFF_CQ_RING: i64 = 0x0800_0000;
const IORING_OFF_SQES: i64 = 0x1000_0000;

#[repr(C)]
#[derive(Default)]
struct SqOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    flags: u32,
    dropped: u32,
    array: u32,
    resv1: u32,
    user_addr: u64,
}

#[repr(C)]
#[derive(Default)]
struct CqOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    overflow: u32,
    cqes: u32,
    flags: u32,
    resv1: u32,
    user_addr: u64,
}

#[repr(C)]
#[derive(Default)]
struct Params {
    sq_entries: u32,
    cq_entries: u32,
    flags: u32,
    sq_thread_cpu: u32,
    sq_thread_idle: u32,
    features: u32,
    wq_fd: u32,
    resv: [u32; 3],
    sq_off: SqOffsets,
    cq_off: CqOffsets,
}

#[repr(C)]
struct Sqe {
    opcode: u8,
    flags: u8,
    ioprio: u16,
    fd: i32,
    addr2: u64,
    addr: u64,
    len: u32,
    op_flags: u32,
    user_data: u64,
    buf_index: u16,
    personality: u16,
    file_index: u32,
    addr3: u64,
    pad: u64,
}

#[repr(C)]
struct Cqe {
    user_data: u64,
    res: i32,
    flags: u32,
}

struct Map {
    ptr: *mut u8,
    len: usize,
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `map`.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

fn map(fd: RawFd, len: usize, off: i64) -> io::Result<Map> {
    // SAFETY: mapping an io_uring region of the size the kernel reported.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_POPULATE, fd, off) };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(Map { ptr: p as *mut u8, len })
}

/// A two-entry io_uring used for one futex wait at a time.
struct Uring {
    /// The runtime's own (`handles::owned`): never sent as a handle. Before `fd`: forgotten first.
    _owned: crate::handles::owned::Mark,
    fd: OwnedFd,
    sq: Map,
    cq: Map,
    sqes: Map,
    p: Params,
}

// SAFETY: the ring mappings are plain memory owned by this value and only
// touched under the AsyncBell's mutex, whichever thread holds it.
unsafe impl Send for Uring {}

impl Uring {
    fn new() -> io::Result<Uring> {
        let mut p = Params::default();
        // SAFETY: io_uring_setup with a valid params struct.
        let r = unsafe { libc::syscall(libc::SYS_io_uring_setup, 2u32, &mut p as *mut Params) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(r as i32) };
        let sq = map(fd.as_raw_fd(), p.sq_off.array as usize + p.sq_entries as usize * 4, IORING_OFF_SQ_RING)?;
        let cq = map(fd.as_raw_fd(), p.cq_off.cqes as usize + p.cq_entries as usize * std::mem::size_of::<Cqe>(), IORING_OFF_CQ_RING)?;
        let sqes = map(fd.as_raw_fd(), p.sq_entries as usize * std::mem::size_of::<Sqe>(), IORING_OFF_SQES)?;
        let _owned = crate::handles::owned::Mark::file(fd.as_raw_fd(), crate::handles::owned::Kind::AsyncBell);
        Ok(Uring { _owned, fd, sq, cq, sqes, p })
    }

    fn u32_at(m: &Map, off: u32) -> &AtomicU32 {
        // SAFETY: an offset the kernel gave for a u32 field of this mapping.
        unsafe { &*(m.ptr.add(off as usize) as *const AtomicU32) }
    }

    /// Submit FUTEX_WAIT(word == expected).
    fn submit_wait(&self, word: &AtomicU32, expected: u32) -> io::Result<()> {
        let tail_a = Self::u32_at(&self.sq, self.p.sq_off.tail);
        let mask = Self::u32_at(&self.sq, self.p.sq_off.ring_mask).load(Ordering::Relaxed);
        let tail = tail_a.load(Ordering::Relaxed);
        let idx = tail & mask;
        // SAFETY: slot `idx` of the SQE array, ours until the kernel consumes it.
        unsafe {
            let sqe = (self.sqes.ptr as *mut Sqe).add(idx as usize);
            std::ptr::write(
                sqe,
                Sqe {
                    opcode: IORING_OP_FUTEX_WAIT,
                    flags: 0,
                    ioprio: 0,
                    fd: FUTEX2_SIZE_U32,
                    addr2: expected as u64,
                    addr: word.as_ptr() as u64,
                    len: 0,
                    op_flags: 0,
                    user_data: 1,
                    buf_index: 0,
                    personality: 0,
                    file_index: 0,
                    addr3: FUTEX_BITSET_MATCH_ANY,
                    pad: 0,
                },
            );
            *(self.sq.ptr.add(self.p.sq_off.array as usize) as *mut u32).add(idx as usize) = idx;
        }
        // Publishes the SQE to the kernel; pairs with its acquire of the tail.
        tail_a.store(tail.wrapping_add(1), Ordering::Release);
        // SAFETY: io_uring_enter on our ring: submit one, wait for none.
        let r = unsafe { libc::syscall(libc::SYS_io_uring_enter, self.fd.as_raw_fd(), 1u32, 0u32, 0u32, std::ptr::null::<u8>(), 0usize) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Take every completion; the result of the last, if any.
    fn reap(&self) -> Option<i32> {
        let head_a = Self::u32_at(&self.cq, self.p.cq_off.head);
        // Pairs with the kernel's release of the tail as it posts completions.
        let tail = Self::u32_at(&self.cq, self.p.cq_off.tail).load(Ordering::Acquire);
        let mask = Self::u32_at(&self.cq, self.p.cq_off.ring_mask).load(Ordering::Relaxed);
        let mut head = head_a.load(Ordering::Relaxed);
        let mut last = None;
        while head != tail {
            // SAFETY: a posted completion entry.
            let cqe = unsafe { &*((self.cq.ptr.add(self.p.cq_off.cqes as usize) as *const Cqe).add((head & mask) as usize)) };
            let _ = cqe.user_data;
            last = Some(cqe.res);
            let _ = cqe.flags;
            head = head.wrapping_add(1);
        }
        // Hands the entries back; pairs with the kernel's acquire of the head.
        head_a.store(head, Ordering::Release);
        last
    }
}

/// How readability is made.
enum Engine {
    Uring(Uring),
    /// A bridge thread parks on the doorbell and writes this eventfd.
    Bridge {
        /// The runtime's own (`handles::owned`). Before `efd`: forgotten first.
        _owned: crate::handles::owned::Mark,
        efd: Arc<OwnedFd>,
        wanted: Arc<(Mutex<Option<u32>>, std::sync::Condvar)>,
        stop: Arc<AtomicBool>,
    },
}

struct State {
    engine: Engine,
    armed: bool,
    in_flight: bool,
}

/// This process's doorbell as a pollable descriptor (see the module text).
pub struct AsyncBell {
    bell: Arc<Doorbell>,
    state: Mutex<State>,
}

impl AsyncBell {
    /// Watch `bell` (this process's doorbell): io_uring if the kernel lets
    /// us wait on a futex through it, else a bridge thread and an eventfd.
    pub fn new(bell: Arc<Doorbell>) -> Result<AsyncBell> {
        let engine = match Self::probe_uring(&bell) {
            Some(u) => Engine::Uring(u),
            None => Self::bridge(&bell)?,
        };
        Ok(AsyncBell { bell, state: Mutex::new(State { engine, armed: false, in_flight: false }) })
    }

    /// An io_uring whose futex wait works here (a wait on a stale value
    /// completes at once with EAGAIN), or None.
    fn probe_uring(bell: &Doorbell) -> Option<Uring> {
        if std::env::var_os("MULTIHOP_ASYNC_BRIDGE").is_some() {
            return None; // tests of the fallback
        }
        let u = Uring::new().ok()?;
        let word = bell.epoch_word();
        let stale = word.load(Ordering::SeqCst).wrapping_add(1);
        u.submit_wait(word, stale).ok()?;
        for _ in 0..1000 {
            if let Some(res) = u.reap() {
                return (res == -libc::EAGAIN).then_some(u);
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        None
    }

    fn bridge(bell: &Arc<Doorbell>) -> Result<Engine> {
        // SAFETY: plain system call.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(Error::os("eventfd", io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor we own.
        let efd = Arc::new(unsafe { OwnedFd::from_raw_fd(raw) });
        let wanted = Arc::new((Mutex::new(None::<u32>), std::sync::Condvar::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (b, e, w, s) = (bell.clone(), efd.clone(), wanted.clone(), stop.clone());
        std::thread::Builder::new()
            .name("mh-async-bell".into())
            .spawn(move || bridge_loop(&b, &e, &w, &s))
            .map_err(|e| Error::os("spawn the async doorbell's bridge thread", e))?;
        let _owned = crate::handles::owned::Mark::file(efd.as_raw_fd(), crate::handles::owned::Kind::AsyncBell);
        Ok(Engine::Bridge { _owned, efd, wanted, stop })
    }

    /// The descriptor to watch for readability.
    pub fn fileno(&self) -> RawFd {
        match &crate::sync::lock(&self.state).engine {
            Engine::Uring(u) => u.fd.as_raw_fd(),
            Engine::Bridge { efd, .. } => efd.as_raw_fd(),
        }
    }

    /// "io_uring" or "bridge".
    pub fn kind(&self) -> &'static str {
        match &crate::sync::lock(&self.state).engine {
            Engine::Uring(_) => "io_uring",
            Engine::Bridge { .. } => "bridge",
        }
    }

    /// Count the event loop as a waiter and make the descriptor turn readable
    /// at the next ring. Then look at the channels once more before sleeping.
    pub fn arm(&self) -> Result<()> {
        let mut st = crate::sync::lock(&self.state);
        if st.armed {
            return Ok(());
        }
        let seen = self.bell.arm();
        st.armed = true;
        if st.in_flight {
            return Ok(()); // the earlier wait is still there; it completes at the next ring
        }
        let r = match &st.engine {
            Engine::Uring(u) => u.submit_wait(self.bell.epoch_word(), seen).map_err(|e| Error::os("io_uring futex wait", e)),
            Engine::Bridge { wanted, .. } => {
                *crate::sync::lock(&wanted.0) = Some(seen);
                wanted.1.notify_one();
                Ok(())
            }
        };
        match r {
            Ok(()) => {
                st.in_flight = true;
                Ok(())
            }
            Err(e) => {
                self.bell.disarm();
                st.armed = false;
                Err(e)
            }
        }
    }

    /// The descriptor turned readable: take the wake-up and stop counting the
    /// loop as a waiter. Then look at the channels.
    pub fn consume(&self) {
        let mut st = crate::sync::lock(&self.state);
        let done = match &st.engine {
            Engine::Uring(u) => u.reap().is_some(),
            Engine::Bridge { efd, .. } => {
                let mut v = 0u64;
                // SAFETY: reading 8 bytes into a u64 from our nonblocking eventfd.
                let n = unsafe { libc::read(efd.as_raw_fd(), &mut v as *mut u64 as *mut libc::c_void, 8) };
                n == 8
            }
        };
        if done {
            st.in_flight = false;
        }
        if st.armed {
            st.armed = false;
            self.bell.disarm();
        }
    }
}

impl Drop for AsyncBell {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        if st.armed {
            self.bell.disarm();
        }
        if let Engine::Bridge { wanted, stop, .. } = &st.engine {
            stop.store(true, Ordering::Relaxed);
            wanted.1.notify_one();
            self.bell.ring_always();
        }
    }
}

/// The fallback: wait until asked, park on the doorbell until the epoch
/// moves past what the loop saw, write the eventfd.
fn bridge_loop(bell: &Doorbell, efd: &OwnedFd, wanted: &(Mutex<Option<u32>>, std::sync::Condvar), stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let seen = {
            let mut w = crate::sync::lock(&wanted.0);
            while w.is_none() && !stop.load(Ordering::Relaxed) {
                w = wanted.1.wait_timeout(w, Duration::from_secs(1)).unwrap_or_else(|p| p.into_inner()).0;
            }
            match w.take() {
                Some(s) => s,
                None => return,
            }
        };
        // The loop counts as a waiter already (arm), so writers ring.
        while bell.epoch_word().load(Ordering::SeqCst) == seen && !stop.load(Ordering::Relaxed) {
            bell.park(Duration::from_millis(500), &mut || bell.epoch_word().load(Ordering::SeqCst) != seen);
        }
        let one = 1u64;
        // SAFETY: writing 8 bytes to our eventfd.
        unsafe { libc::write(efd.as_raw_fd(), &one as *const u64 as *const libc::c_void, 8) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(fd: RawFd, ms: i32) -> bool {
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, ms) > 0 }
    }

    fn rings_turn_the_descriptor_readable(ab: AsyncBell, bell: Arc<Doorbell>) {
        let fd = ab.fileno();
        ab.arm().unwrap();
        assert!(!readable(fd, 20), "readable with nothing rung");
        let b2 = bell.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            b2.ring()
        });
        assert!(readable(fd, 5000), "a ring did not wake the descriptor");
        assert!(h.join().unwrap(), "the writer did not see the armed loop as a waiter");
        ab.consume();
        assert!(!readable(fd, 0) || ab.kind() == "bridge");
        // Disarmed: writers skip the wake-up entirely.
        assert!(!bell.ring());
        // A ring between arm and the wait's submission is not lost (the epoch moved).
        ab.arm().unwrap();
        bell.ring();
        assert!(readable(fd, 5000));
        ab.consume();
    }

    #[test]
    fn io_uring_or_bridge() {
        let bell = Arc::new(Doorbell::create().unwrap());
        let ab = AsyncBell::new(bell.clone()).unwrap();
        rings_turn_the_descriptor_readable(ab, bell);
    }

    #[test]
    fn bridge_fallback() {
        let bell = Arc::new(Doorbell::create().unwrap());
        let ab =
            AsyncBell { bell: bell.clone(), state: Mutex::new(State { engine: AsyncBell::bridge(&bell).unwrap(), armed: false, in_flight: false }) };
        assert_eq!(ab.kind(), "bridge");
        rings_turn_the_descriptor_readable(ab, bell);
    }
}
