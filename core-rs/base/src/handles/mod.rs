//! Handles (file descriptors) that travel with messages (TN-006 2.7): what both sides of a runtime know
//! of them. The protocol (a dispatcher's inboxes and sending end, a monitor's relay and routes) is told in
//! `multihop_dispatcher::handles`; here are only its shared pieces:
//!
//! - [`owned`]: the runtime's own descriptors in this process, by identity;
//! - [`check`]: what may not leave (runtime-owned, not open, kinds the kernel does not pass);
//! - [`marker`]: the in-band prefix of a message that carries handles;
//! - [`reason`]: the reason codes of a refusal.

pub mod check;
pub mod marker;
pub mod owned;

/// Most handles one message may carry (a monitor refuses more).
pub const MAX_HANDLES: usize = crate::defaults::MAX_HANDLES;

/// Most handles a receiving end keeps for messages not received yet, unless
/// its owner says otherwise (`Inbox::set_room`).
pub const DEFAULT_ROOM: usize = crate::defaults::HANDLE_ROOM;

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
    /// The channel crosses a fabric to another machine (its other end is the runtime's bridge): handles cannot
    /// leave a machine.
    pub const BRIDGED: &str = "bridged";
    /// This end cannot send handles (it has no monitor connection).
    pub const UNSUPPORTED: &str = "unsupported";
}
