//! UMP channel ends: a ring pair directly between two dispatchers, no monitor
//! on the data path (TN-006's baseline that multi-hop is measured against).
//!
//! An end is a [`RingPair`] end (`multihop_base::ringpair`: the segment, its
//! rings, closing, waiting) that can also carry handles: the dispatcher that
//! made it gives it a [`CapEnd`] (its inbox and route, `handles/`), which
//! the ring pair reads the groups of marked messages from. Everything else
//! is the ring pair's, reached through `Deref`.

use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use multihop_base::error::Result;
use multihop_base::ringpair::RingPair;

use crate::handles::end::CapEnd;

/// One end of a UMP channel.
pub struct UmpChannel {
    end: RingPair,
    /// Handles: this end's inbox and route (ends made by a dispatcher).
    caps: OnceLock<Arc<CapEnd>>,
}

impl UmpChannel {
    /// A UMP end over a ring-pair end (its handles come with `set_caps`).
    pub fn new(end: RingPair) -> UmpChannel {
        UmpChannel { end, caps: OnceLock::new() }
    }

    /// Give this end its part in carrying handles (set once, by its dispatcher).
    pub fn set_caps(&self, c: Arc<CapEnd>) {
        self.end.set_handle_groups(c.clone());
        let _ = self.caps.set(c);
    }

    /// This end's part in carrying handles, if it has one.
    pub fn caps(&self) -> Option<&Arc<CapEnd>> {
        self.caps.get()
    }

    /// Both ends of one channel inside this process (each with its own
    /// doorbell): for tests and benchmarks that need no monitor.
    pub fn pair_in_process(max_message: usize) -> Result<(UmpChannel, UmpChannel)> {
        let (a, b) = RingPair::pair_in_process(max_message)?;
        Ok((UmpChannel::new(a), UmpChannel::new(b)))
    }
}

impl Deref for UmpChannel {
    type Target = RingPair;

    #[inline(always)]
    fn deref(&self) -> &RingPair {
        &self.end
    }
}
