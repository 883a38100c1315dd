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
        if let Some(mut b) = kept_with_room(cap) {
            b.clear();
            return b;
        }
        return Vec::with_capacity(cap.next_power_of_two());
    }
    Vec::with_capacity(cap)
}

/// The smallest kept buffer with room for `cap` bytes (a large one is left for a large frame).
fn kept_with_room(cap: usize) -> Option<Vec<u8>> {
    FREE.with(|f| {
        let mut f = f.borrow_mut();
        let i = (0..f.len()).filter(|&i| f[i].capacity() >= cap).min_by_key(|&i| f[i].capacity())?;
        Some(f.swap_remove(i))
    })
}

/// A buffer of exactly `len` bytes whose contents are unspecified (what an earlier frame left: only
/// bytes no frame wrote yet are zeroed), for a receive that writes every one of them: a kept buffer
/// is not cleared and zeroed again on every frame.
pub fn take_sized(len: usize) -> Vec<u8> {
    if len >= KEEP_FROM {
        let mut b = kept_with_room(len).unwrap_or_else(|| Vec::with_capacity(len.next_power_of_two()));
        if b.len() >= len {
            b.truncate(len);
        } else {
            b.resize(len, 0);
        }
        return b;
    }
    vec![0; len]
}

/// Hand a buffer back (kept if large and there is room; its bytes stay as they are).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sized_buffer_is_exactly_as_long_as_asked_and_zeroed_only_past_what_was_written() {
        let mut b = take(8000);
        b.extend(std::iter::repeat_n(7u8, 8000));
        let cap = b.capacity();
        give(b);
        let b = take_sized(5000); // the kept one, cut to the length asked
        assert_eq!((b.len(), b.capacity()), (5000, cap));
        assert!(b.iter().all(|&x| x == 7));
        give(b);
        let b = take_sized(cap); // the same one again, grown: the bytes no frame wrote are zero
        assert_eq!(b.len(), cap);
        assert!(b[..5000].iter().all(|&x| x == 7) && b[5000..].iter().all(|&x| x == 0));
        let small = take_sized(100);
        assert_eq!(small, vec![0; 100]);
        assert!(take(9000).is_empty());
    }
}
