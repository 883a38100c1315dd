//! Multi-hop channels (TN-006 2.5-2.10): virtual circuits through the
//! monitors, every one of a dispatcher riding on its one link to its monitor.
//!
//! - [`link`]: the dispatcher's link, shared by its channels (the pump that
//!   sorts what arrives by VCI, the flusher thread);
//! - [`channel`]: a channel end (credit window, batches, teardown);
//! - [`held`]: the frames a blocking send holds for its next credit;
//! - [`cork`]: deferring a burst's wake-ups of the monitor to its end.

pub(crate) mod channel;
pub(crate) mod cork;
pub(crate) mod held;
pub(crate) mod link;
