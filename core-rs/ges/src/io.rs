//! What the engine needs of the runtime: of a channel, to receive the frames that are there, send
//! one frame without waiting and tell whether it is readable; of the broker's dispatcher, to wait
//! until something is readable (spinning, then parked on the process's doorbell, in slices) and to
//! defer its wake-ups of the monitor over a burst of sends (a cork). The runtime (`multihop-core`)
//! provides both: its extension hands the GES module a way to turn its Python `Channel` and
//! `Dispatcher` objects into these when it registers the module (`crate::python::register`), so this
//! crate never reaches into the runtime's internals and the runtime carries nothing of GES. Tests
//! drive the engine with in-memory channels instead.

use std::time::Instant;

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
    /// Append up to `max` frames that are there (none: nothing waits) to `out`, without waiting,
    /// each in a buffer `buf(len)` gives (`len` bytes long, to be overwritten); `Closed` once the
    /// channel is closed and nothing is left to read.
    fn recv_frames(&self, max: usize, buf: &mut dyn FnMut(usize) -> Vec<u8>, out: &mut Vec<Vec<u8>>) -> Result<(), Closed>;
    /// Send one frame now, or say why not.
    fn try_send(&self, frame: &[u8]) -> Sent;
    /// Whether a frame is there (or the channel is closed: a receive would say so).
    fn readable(&self) -> bool;
    /// Whether a frame of `len` bytes could be sent now (or the channel is closed); a no asks the peer
    /// to ring this process's doorbell when it makes room.
    fn writable(&self, len: usize) -> bool;
    /// Let this end's writes fill its whole buffer, not only the part a channel keeps small messages
    /// in by default (a UMP ring's soft capacity): the engine queues what it cannot write, and a
    /// subscriber that lags reads all that is there at each look, so a deeper ring wakes the broker
    /// fewer times to write more and keeps what waits out of its memory. Nothing by default.
    fn fill_whole_buffer(&self) {}
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// what the caller waits for holds
    Ready,
    /// the deadline passed
    TimedOut,
    /// a slice passed with nothing ready (a dead peer rings no doorbell: the caller looks again)
    Slice,
    /// a signal came: the caller returns to its program, which runs its handlers
    Interrupted,
}

/// What the engine needs of the broker's dispatcher.
pub trait Dispatcher: Send + Sync {
    /// Wait until `ready()` holds or `until` passes, at most one slice (the process's doorbell: every
    /// channel of the process rings it).
    fn wait(&self, until: Option<Instant>, ready: &mut dyn FnMut() -> bool) -> Waited;
    /// Run `f` with this thread's wake-ups of its monitor deferred to `f`'s end (one wake-up for a
    /// burst of sends).
    fn corked(&self, f: &mut dyn FnMut());
}
