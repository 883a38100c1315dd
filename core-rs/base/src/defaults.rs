//! The runtime's defaults and limits, defined once: every other module (and the Python package, through
//! `multihop._core`'s constants) reads them here instead of restating them.
//!
//! Each is the default of something a caller may choose, or a bound the runtime keeps; a module that needs
//! a value of its own (a monitor's hello timeout, a ring's geometry) keeps it beside the code it tunes.

use std::time::Duration;

/// Credit window of a multi-hop channel, each way (messages in flight before a send waits), and of each
/// edge of a multicast group's tree: Barrelfish's default (TN-006 2.10).
pub const WINDOW: u32 = 16;

/// Largest window a bind may ask for.
pub const MAX_WINDOW: u32 = 4096;

/// How long a bind (and, on the Python side, every blocking call that names no timeout of its own) waits.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// How long a control request to a monitor (attach's link, export, status, a group request, a question to
/// the registry) may take before it fails with Timeout.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest one wait lasts (a park on a doorbell, a wait for a reply) before the waiter looks at signals
/// (Ctrl-C) and at its peers' health, then waits again.
pub const WAIT_SLICE: Duration = Duration::from_millis(50);

/// Largest message of a channel unless its bind says otherwise (UMP), and of every multi-hop channel.
pub const MAX_MESSAGE: usize = 1 << 20;

/// Largest maximum message a UMP channel may ask for.
pub const LIMIT_MAX_MESSAGE: usize = 64 << 20;

/// Most messages in one multi-hop frame: a batch sent with `send_batch`, or the held frames a sender builds
/// while it has no credit.
pub const MAX_BATCH: usize = 64;

/// Most frames a multi-hop end holds for its next credits (of up to [`MAX_BATCH`] messages each): with
/// every credit in use a blocking send returns at once for up to this many frames' worth of messages (256
/// small ones), so a sender and its receiver trade a window's worth of credits per wake-up rather than one
/// frame's.
pub const HELD_FRAMES: usize = 4;

/// How long a close tries by default to hand what its end held to the monitor (`close_within`): a live
/// monitor drains its link in microseconds; one at idle priority on a loaded machine may not run for a
/// second or more.
pub const CLOSE_HELD_WAIT: Duration = Duration::from_secs(5);

/// The same for an end dropped without a close (`Drop`, with Python's lock held maybe) or a dispatcher that
/// detaches: shorter, and a loss is only said on stderr.
pub const DROP_HELD_WAIT: Duration = Duration::from_secs(1);

/// How often a dispatcher's flusher thread pumps its link while ends hold messages: the longest a held
/// frame waits after its credit came back when the program makes no call on the runtime (one that does
/// sends it at once).
pub const FLUSH_TICK: Duration = Duration::from_millis(1);

/// Connections a service keeps for `accept` (bound, not accepted yet) unless told otherwise.
pub const BACKLOG: usize = 16;

/// Largest backlog a service may ask for.
pub const MAX_BACKLOG: usize = 65_536;

/// Most handles (file descriptors) one message may carry (a monitor refuses more).
pub const MAX_HANDLES: usize = 32;

/// Most handles a receiving end keeps for messages not received yet, unless its owner says otherwise.
pub const HANDLE_ROOM: usize = 1024;
