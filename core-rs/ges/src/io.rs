//! What the engine needs of a channel: receive the frames that are there, send one frame without
//! waiting. The runtime's channels (`multihop-core`) provide it: the runtime's extension hands the
//! GES module a way to turn its Python `Channel` objects into [`FrameChannel`]s when it registers the
//! module (`crate::python::register`), so this crate never reaches into the runtime's internals and
//! the runtime carries nothing of GES. Tests drive the engine with in-memory channels instead.

/// The channel was closed (by either end, or its peer died).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

/// What a non-blocking send did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// the frame is on its way
    Sent,
    /// no room or credit now: try again later (nothing was sent)
    Busy,
    /// the channel is closed
    Closed,
}

/// One end of a channel as the engine uses it (a multi-hop channel of the broker's dispatcher).
pub trait FrameChannel: Send + Sync {
    /// Append up to `max` frames that are there (none: nothing waits) to `out`, without waiting;
    /// `Closed` once the channel is closed and nothing is left to read.
    fn recv_frames(&self, max: usize, out: &mut Vec<Vec<u8>>) -> Result<(), Closed>;
    /// Send one frame now, or say why not.
    fn try_send(&self, frame: &[u8]) -> Sent;
}
