//! A map that remembers the order its keys were first inserted in (as a Python `dict` does): the
//! event routing's outputs are made in the reference's order, so both implementations send the
//! same messages in the same order.

use std::hash::Hash;

use crate::fxhash::FxHashMap;

/// An insertion-ordered map (removal keeps the others' order; a key inserted again goes last).
#[derive(Debug, Clone)]
pub struct OrderedMap<K, V> {
    entries: Vec<(K, V)>,
    index: FxHashMap<K, usize>,
}

impl<K: Copy + Eq + Hash, V> Default for OrderedMap<K, V> {
    fn default() -> Self {
        OrderedMap { entries: Vec::new(), index: FxHashMap::default() }
    }
}

impl<K: Copy + Eq + Hash, V> OrderedMap<K, V> {
    /// The value of `k`.
    pub fn get(&self, k: &K) -> Option<&V> {
        self.index.get(k).map(|&i| &self.entries[i].1)
    }

    /// The value of `k`, mutable.
    pub fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        self.index.get(k).map(|&i| &mut self.entries[i].1)
    }

    /// Whether `k` is held.
    pub fn contains_key(&self, k: &K) -> bool {
        self.index.contains_key(k)
    }

    /// The value of `k`, made with `make` (and put last) if it is not held.
    pub fn entry_or(&mut self, k: K, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.index.get(&k) {
            Some(&i) => i,
            None => {
                self.entries.push((k, make()));
                self.index.insert(k, self.entries.len() - 1);
                self.entries.len() - 1
            }
        };
        &mut self.entries[i].1
    }

    /// Remove `k` (the others keep their order).
    pub fn remove(&mut self, k: &K) -> Option<V> {
        let i = self.index.remove(k)?;
        let (_, v) = self.entries.remove(i);
        for (key, _) in &self.entries[i..] {
            *self.index.get_mut(key).expect("indexed") -= 1;
        }
        Some(v)
    }

    /// The entries in order.
    pub fn iter(&self) -> impl Iterator<Item = &(K, V)> {
        self.entries.iter()
    }

    /// The entries in order, values mutable.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        self.entries.iter_mut().map(|(k, v)| (&*k, v))
    }

    /// The keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.entries.iter().map(|(k, _)| k)
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry, in order, the map left empty.
    pub fn take(&mut self) -> Vec<(K, V)> {
        self.index.clear();
        std::mem::take(&mut self.entries)
    }

    /// Every entry, in order, into `into` (emptied first), the map left empty with `into`'s old
    /// buffer (a map filled and taken every round allocates its list once).
    pub fn take_into(&mut self, into: &mut Vec<(K, V)>) {
        self.index.clear();
        into.clear();
        std::mem::swap(&mut self.entries, into);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_first_insertion_and_survives_removal() {
        let mut m = OrderedMap::default();
        for k in [5, 3, 9] {
            *m.entry_or(k, || 0) += 1;
        }
        *m.entry_or(3, || 0) += 1;
        assert_eq!(m.keys().copied().collect::<Vec<_>>(), vec![5, 3, 9]);
        m.remove(&5);
        *m.entry_or(5, || 0) += 1;
        assert_eq!(m.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>(), vec![(3, 2), (9, 1), (5, 1)]);
        assert_eq!(m.get(&9), Some(&1));
    }
}
