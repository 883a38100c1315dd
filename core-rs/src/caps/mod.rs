//! Capabilities over channels (TN-006 2.7): OS handles (file descriptors)
//! that travel with a message, out of band, through the monitors.
//!
//! On Linux the counterpart of a Barrelfish capability is a descriptor: a
//! memfd segment, an eventfd, a pipe or socket end, a pidfd.  A message may
//! carry up to [`MAX_HANDLES`] of them.  They never ride the rings (a
//! descriptor means nothing in another process): the sending dispatcher
//! hands them to its monitor over its control socket (SCM_RIGHTS); the
//! monitor checks them ([`check`]) and passes them on, monitor to monitor
//! along the channel's path (a UMP channel's two monitors; a multi-hop
//! channel's every hop, routed by VCI as its data is) to the receiving
//! dispatcher, which keeps them in the channel end's [`inbox`] and answers;
//! the answer travels back the same way.  Only when the handles are safely
//! at the receiver does the sender write the message itself, in band, with
//! a [`marker`] naming its handle group.  So:
//!
//! * the receiver gets each message with exactly its handles, in channel
//!   order (the group is there before its message can be read);
//! * a refusal (a runtime-owned or closed handle, too many, no room at the
//!   receiver) reaches the sender as `CapSend` with a [`reason`], and
//!   nothing was written: the channel goes on as if the send never happened;
//! * a `cap` is duplicated (the kernel copies the descriptor; the sender
//!   keeps its own), a `give_away_cap` is moved: the sender's descriptor is
//!   closed once the message is written (`end.rs`);
//! * nothing leaks: a monitor holds handles only while it passes them on;
//!   a receiver's inbox closes what it holds when its end goes, and the
//!   kernel closes what is in a dead process or in a socket nobody reads.
//!
//! The price is a round trip through the control plane per message that
//! carries handles (`benches/bench_caps.py`); messages without handles do
//! not pay anything.
//!
//! - [`marker`]: the in-band prefix of a message that carries handles;
//! - [`check`]: what may not leave (runtime-owned, not open);
//! - [`owned`]: the runtime's own descriptors in this process, by identity;
//! - [`inbox`]: a receiving end's groups of handles, and a dispatcher's
//!   table of inboxes;
//! - [`end`]: a channel end's side of it (send, take);
//! - [`deliver`]: the receiving dispatcher's reader thread's part;
//! - [`routes`]: a monitor's routes for UMP channels (multi-hop frames
//!   follow the forwarding table; the relay itself is `monitor/caps.rs`).

pub mod check;
pub mod deliver;
pub mod end;
pub mod inbox;
pub mod marker;
pub mod owned;
pub mod routes;

pub use end::CapEnd;
pub use inbox::{DispatcherCaps, Inbox, InboxKey};

/// Most handles one message may carry (a monitor refuses more).
pub const MAX_HANDLES: usize = 32;

/// Most handles a receiving end keeps for messages not received yet, unless
/// its owner says otherwise (`Inbox::set_room`).
pub const DEFAULT_ROOM: usize = 1024;

/// Reason codes of a refusal (`CapSendError.reason` in Python).
pub mod reason {
    /// A handle the runtime owns: a ring segment, a doorbell, a control socket.
    pub const RUNTIME_OWNED: &str = "runtime_owned";
    /// A handle that is not an open descriptor.
    pub const NOT_OPEN: &str = "not_open";
    /// More than [`super::MAX_HANDLES`] handles on one message.
    pub const TOO_MANY: &str = "too_many";
    /// The receiver has no room: its inbox is full, or its process's
    /// descriptor table is (RLIMIT_NOFILE).
    pub const NO_ROOM: &str = "no_room";
    /// The receiving end (or the path to it) is gone.
    pub const CLOSED: &str = "closed";
    /// This end cannot send handles (it has no monitor connection).
    pub const UNSUPPORTED: &str = "unsupported";
}
