//! The channels a `Dispatcher` handed out, held weakly for its `poll`: what
//! `bind`, `accept` and a finished `bind_async` register their channel with.

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyWeakrefReference;

use super::channel::Channel;
use multihop_base::sync::lock;

/// Weak references to one dispatcher's channels; pruned of dead ones
/// whenever the list has doubled since the last pruning (amortised O(1) per
/// channel, also with 100,000 channels).
#[derive(Default)]
pub(crate) struct Adopted {
    channels: Mutex<(Vec<Py<PyWeakrefReference>>, usize)>,
}

impl Adopted {
    /// Remember a new channel (weakly) and hand it out.
    pub(crate) fn adopt(&self, py: Python<'_>, ch: Channel) -> PyResult<Py<Channel>> {
        let obj = Bound::new(py, ch)?;
        let weak = PyWeakrefReference::new(&obj)?;
        let mut guard = lock(&self.channels);
        let (list, pruned_at) = &mut *guard;
        if list.len() >= 2 * (*pruned_at).max(32) {
            list.retain(|w| w.bind(py).upgrade().is_some());
            *pruned_at = list.len();
        }
        list.push(weak.unbind());
        Ok(obj.unbind())
    }

    /// The live channels.
    pub(crate) fn live<'py>(&self, py: Python<'py>) -> Vec<Bound<'py, Channel>> {
        let guard = lock(&self.channels);
        guard.0.iter().filter_map(|w| w.bind(py).upgrade()).filter_map(|o| o.cast_into::<Channel>().ok()).collect()
    }
}
