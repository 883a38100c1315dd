//! The one error enum of the engine.
//!
//! Every fallible call in the crate returns [`Error`].  Its [`ErrorKind`] is
//! what the Python layer maps onto the exception hierarchy of
//! `multihop.errors` (by the kind's name) and what the C ABI maps onto its
//! negative return codes, so there is exactly one list of failure kinds.

use std::fmt;
use std::io;

use serde::{Deserialize, Serialize};

/// What went wrong, independent of the message text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorKind {
    /// No runtime of that name, or its monitors are gone.
    RuntimeNotFound,
    /// A live runtime of that name exists (its lock is held).
    RuntimeExists,
    /// A monitor failed, died, or answered something unexpected.
    Monitor,
    /// Export refused (duplicate name, bad name).
    Export,
    /// Bind refused, unknown service, or no answer.
    Bind,
    /// The channel was closed by either end or its peer died.
    ChannelClosed,
    /// Non-blocking send found no room.
    TxBusy,
    /// A blocking call reached its timeout.
    Timeout,
    /// Message longer than the channel's maximum.
    MessageTooLarge,
    /// A peer broke the wire or control protocol.
    Protocol,
    /// Bad argument from the caller.
    InvalidArgument,
    /// An operating-system call failed.
    Os,
    /// A blocking call was interrupted by a signal the caller must handle.
    Interrupted,
    /// Handles sent with a message were refused (TN-006 2.7's
    /// `multihop_cap_reply`): the refusal's reason says why.
    CapSend,
    /// A close could not hand the messages a multi-hop end held for its
    /// next credit to its monitor in time (`held.rs`): they are lost, and
    /// the error says how many ([`Progress::Lost`]). The channel is closed.
    HeldLost,
}

impl ErrorKind {
    /// The name of the matching class in `multihop.errors`.
    pub fn python_name(self) -> &'static str {
        match self {
            ErrorKind::RuntimeNotFound => "RuntimeNotFound",
            ErrorKind::RuntimeExists => "RuntimeExists",
            ErrorKind::Monitor => "MonitorError",
            ErrorKind::Export => "ExportError",
            ErrorKind::Bind => "BindError",
            ErrorKind::ChannelClosed => "ChannelClosed",
            ErrorKind::TxBusy => "TxBusy",
            ErrorKind::Timeout => "Timeout",
            ErrorKind::MessageTooLarge => "MessageTooLarge",
            ErrorKind::Protocol => "ProtocolError",
            ErrorKind::InvalidArgument => "MultihopError",
            ErrorKind::Os => "MonitorError",
            ErrorKind::Interrupted => "MultihopError",
            ErrorKind::CapSend => "CapSendError",
            ErrorKind::HeldLost => "HeldLost",
        }
    }
}

/// An engine error: a kind and a message that names what was wrong.
#[derive(Debug, Clone)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    /// How far a multi-message call got before it failed: messages a batch
    /// sent (`e.sent` in Python), or messages a flush found not consumed
    /// (`e.unconsumed`); see [`Progress`].
    pub progress: Option<Progress>,
    /// For [`ErrorKind::CapSend`]: the reason code (`caps::reason`) and the
    /// index of the handle at fault, if one is.
    pub refusal: Option<(String, Option<usize>)>,
}

/// The count an error of a multi-message call carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// A batch failed after sending this many of its messages.
    Sent(usize),
    /// A flush ended with this many sent messages not yet consumed.
    Unconsumed(usize),
    /// A close lost this many messages it held (`e.count` in Python).
    Lost(usize),
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { kind, message: message.into(), progress: None, refusal: None }
    }

    /// The same error, saying how far a multi-message call got.
    pub fn with_progress(mut self, p: Progress) -> Error {
        self.progress = Some(p);
        self
    }

    /// Wrap an OS error with what we were doing when it happened.
    pub fn os(context: impl fmt::Display, err: io::Error) -> Error {
        Error::new(ErrorKind::Os, format!("{context}: {err}"))
    }

    /// Handles refused for `reason` (a `caps::reason` code); `index` names
    /// the handle at fault.
    pub fn cap_refused(reason: &str, index: Option<usize>, message: impl Into<String>) -> Error {
        Error { kind: ErrorKind::CapSend, message: message.into(), progress: None, refusal: Some((reason.to_string(), index)) }
    }

    pub fn closed(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::ChannelClosed, message)
    }

    pub fn timeout(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Timeout, message)
    }

    pub fn invalid(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidArgument, message)
    }

    pub fn protocol(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Protocol, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
