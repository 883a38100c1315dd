//! A short list kept inline (no allocation up to `N` items), for what every event copy carries: its
//! unit lists (targets, reached, left: a few units each) and where an event's values lie.

use std::ops::{Deref, DerefMut};

/// Up to `N` items inline, more on the heap.
#[derive(Clone)]
pub enum Small<T: Copy + Default, const N: usize> {
    Inline(u8, [T; N]),
    Heap(Vec<T>),
}

impl<T: Copy + Default, const N: usize> Default for Small<T, N> {
    fn default() -> Self {
        Small::Inline(0, [T::default(); N])
    }
}

impl<T: Copy + Default + std::fmt::Debug, const N: usize> std::fmt::Debug for Small<T, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: Copy + Default + PartialEq, const N: usize> PartialEq for Small<T, N> {
    fn eq(&self, o: &Self) -> bool {
        **self == **o
    }
}

impl<T: Copy + Default, const N: usize> Small<T, N> {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// A list of `items`.
    pub fn from_slice(items: &[T]) -> Self {
        if items.len() <= N {
            let mut a = [T::default(); N];
            a[..items.len()].copy_from_slice(items);
            Small::Inline(items.len() as u8, a)
        } else {
            Small::Heap(items.to_vec())
        }
    }

    /// Whether the items are held inline (no allocation of its own).
    pub fn is_inline(&self) -> bool {
        matches!(self, Small::Inline(..))
    }

    /// Make this the items of `parts`, one after the other, in place (inline if they fit, else in
    /// the heap list it has, grown if need be).
    pub fn set_from_parts(&mut self, parts: &[&[T]]) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        match self {
            Small::Inline(n, a) if len <= N => {
                let mut at = 0;
                for p in parts {
                    a[at..at + p.len()].copy_from_slice(p);
                    at += p.len();
                }
                *n = len as u8;
            }
            Small::Heap(v) if len > N => {
                v.clear();
                for p in parts {
                    v.extend_from_slice(p);
                }
            }
            _ => *self = Self::from_parts(parts),
        }
    }

    /// A list of the items of `parts`, one after the other (one allocation at most).
    pub fn from_parts(parts: &[&[T]]) -> Self {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len <= N {
            let mut a = [T::default(); N];
            let mut at = 0;
            for p in parts {
                a[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
            Small::Inline(len as u8, a)
        } else {
            Small::Heap(parts.concat())
        }
    }

    /// A list of the items of `it`.
    pub fn collect_from(it: impl IntoIterator<Item = T>) -> Self {
        let mut s = Self::new();
        for x in it {
            s.push(x);
        }
        s
    }

    /// Add an item at the end.
    pub fn push(&mut self, x: T) {
        match self {
            Small::Inline(n, a) if (*n as usize) < N => {
                a[*n as usize] = x;
                *n += 1;
            }
            Small::Inline(n, a) => {
                let mut v = a[..*n as usize].to_vec();
                v.push(x);
                *self = Small::Heap(v);
            }
            Small::Heap(v) => v.push(x),
        }
    }

    /// Keep the items `f` says yes to (in order).
    pub fn retain(&mut self, mut f: impl FnMut(&T) -> bool) {
        match self {
            Small::Inline(n, a) => {
                let mut k = 0;
                for i in 0..*n as usize {
                    if f(&a[i]) {
                        a[k] = a[i];
                        k += 1;
                    }
                }
                *n = k as u8;
            }
            Small::Heap(v) => v.retain(f),
        }
    }

    /// Remove every item.
    pub fn clear(&mut self) {
        *self = Self::new();
    }
}

impl<T: Copy + Default, const N: usize> Deref for Small<T, N> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            Small::Inline(n, a) => &a[..*n as usize],
            Small::Heap(v) => v,
        }
    }
}

impl<T: Copy + Default, const N: usize> DerefMut for Small<T, N> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Small::Inline(n, a) => &mut a[..*n as usize],
            Small::Heap(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_list_grows_onto_the_heap_and_keeps_its_order() {
        let mut s: Small<u64, 2> = Small::new();
        for x in [3, 1, 4, 1, 5] {
            s.push(x);
        }
        assert_eq!(&*s, &[3, 1, 4, 1, 5]);
        s.retain(|&x| x != 1);
        assert_eq!(&*s, &[3, 4, 5]);
        let mut t: Small<u64, 4> = Small::from_slice(&[1, 2, 3]);
        t.retain(|&x| x > 1);
        assert_eq!((&*t, t.len()), (&[2, 3][..], 2));
        assert!(Small::<u64, 4>::from_slice(&[1, 2, 3, 4, 5]) == Small::collect_from([1, 2, 3, 4, 5]));
        // sorted in place, inline and on the heap alike
        let (mut inline, mut heap) = (Small::<u64, 4>::from_slice(&[3, 1, 2]), Small::<u64, 2>::from_slice(&[3, 1, 2]));
        inline.sort_unstable();
        heap.sort_unstable();
        assert_eq!((&*inline, &*heap), (&[1, 2, 3][..], &[1, 2, 3][..]));
        // from parts: inline up to N, on the heap beyond
        let (two, three): (Small<u8, 4>, Small<u8, 4>) = (Small::from_parts(&[b"ab", b"cd"]), Small::from_parts(&[b"ab", b"cd", b"e"]));
        assert!(matches!(two, Small::Inline(4, _)) && matches!(three, Small::Heap(_)));
        assert_eq!((&*two, &*three), (&b"abcd"[..], &b"abcde"[..]));
    }
}
