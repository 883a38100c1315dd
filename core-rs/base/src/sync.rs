//! Atomics and cells for the ring: std's, or loom's under `--cfg loom` so
//! the ring protocol can be model-checked (see `ring.rs`, `loom_model`).

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell as Cell;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU64, Ordering};

/// `std::cell::UnsafeCell` with loom's access API: every access says
/// whether it reads or writes, through a raw pointer only.
#[cfg(not(loom))]
#[repr(transparent)]
pub(crate) struct Cell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> Cell<T> {
    #[allow(dead_code)] // used by the heap-backed ring of the tests
    pub(crate) const fn new(v: T) -> Cell<T> {
        Cell(std::cell::UnsafeCell::new(v))
    }

    /// Read access through a raw pointer.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Write access through a raw pointer.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Lock `m`, taking it over if a thread panicked while holding it: every
/// mutex of the runtime guards state that stays consistent between
/// statements (a panic cannot leave it half-written), so a poisoned lock is
/// as good as a clean one. The one lock helper of the workspace.
#[inline]
pub fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
