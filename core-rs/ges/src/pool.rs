//! Buffers of frames, kept for the next frame of the thread: a broker's batches are up to 256 KiB,
//! and a buffer that size handed back to the allocator on every frame costs its pages again (page
//! faults, zeroing) on the next one. Small buffers go back to the allocator as usual.

use std::cell::RefCell;

/// Buffers at least this large are kept.
const KEEP_FROM: usize = 4096;
/// Most buffers kept per thread.
const KEEP: usize = 64;

thread_local! {
    static FREE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer with room for `cap` bytes (a kept one if one is large enough; a new one large
/// enough for the next power of two, so that it can be kept and serve any frame up to that: the
/// encoders ask for their messages' exact sizes, which differ a little from round to round).
pub fn take(cap: usize) -> Vec<u8> {
    if cap >= KEEP_FROM {
        let kept = FREE.with(|f| {
            let mut f = f.borrow_mut();
            // the smallest kept buffer with room (a large one is left for a large frame)
            let i = (0..f.len()).filter(|&i| f[i].capacity() >= cap).min_by_key(|&i| f[i].capacity())?;
            Some(f.swap_remove(i))
        });
        if let Some(mut b) = kept {
            b.clear();
            return b;
        }
        return Vec::with_capacity(cap.next_power_of_two());
    }
    Vec::with_capacity(cap)
}

/// Hand a buffer back (kept if large and there is room).
pub fn give(b: Vec<u8>) {
    if b.capacity() >= KEEP_FROM {
        FREE.with(|f| {
            let mut f = f.borrow_mut();
            if f.len() < KEEP {
                f.push(b);
            }
        });
    }
}

/// Keep the process's freed memory for its next allocations (glibc): the runtime's channels allocate a
/// buffer per message they receive, and a broker's messages are up to 256 KiB: glibc gives blocks that
/// large back to the kernel when they are freed (an `mmap` of their own, or the heap's top trimmed), so
/// every such message cost its pages again (page faults, zeroing: a tenth of a live broker's CPU).
/// Called once per process by the live engine; a no-op elsewhere.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: mallopt only changes the allocator's thresholds; it is called before the engine
            // allocates its buffers and reads no memory of ours. Blocks up to 16 MiB come from the heap
            // (glibc's largest mmap threshold on 64 bits is 32 MiB: a larger value is refused), and the
            // heap keeps up to 64 MiB free at its top.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, 16 << 20);
                libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
            }
        });
    }
}
