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
    /// For [`ErrorKind::CapSend`]: the reason code (`handles::reason`) and the
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

    /// Wrap an OS error with what we were doing when it happened. A full
    /// descriptor table (EMFILE, ENFILE) says which limit and its value.
    pub fn os(context: impl fmt::Display, err: io::Error) -> Error {
        match table_note(&err) {
            Some(note) => Error::new(ErrorKind::Os, format!("{context}: {err}: {note}")),
            None => Error::new(ErrorKind::Os, format!("{context}: {err}")),
        }
    }

    /// A control frame arrived with fewer descriptors than it carried
    /// (MSG_CTRUNC): this process's descriptor table is full (an OS error
    /// naming the limit), or a peer sent more than a frame carries (a
    /// protocol error).
    pub fn descriptors_cut(context: impl fmt::Display) -> Error {
        if descriptor_table_full() {
            Error::new(ErrorKind::Os, format!("{context}: its descriptors could not be taken: {}", limit_note()))
        } else {
            Error::protocol(format!("{context}: more descriptors than one control frame carries"))
        }
    }

    /// Handles refused for `reason` (a `handles::reason` code); `index` names
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

/// What this process is, for messages about its limits ("monitor 3"; a
/// dispatcher's process by default), set once at start.
static LABEL: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Name this process in messages about its limits (a monitor calls it with "monitor <core>").
pub fn set_process_label(label: String) {
    let _ = LABEL.set(label);
}

/// This process's RLIMIT_NOFILE: (soft, hard); `u64::MAX` for unlimited.
pub(crate) fn descriptor_limit() -> (u64, u64) {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: a valid out pointer; RLIMIT_NOFILE always exists.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return (u64::MAX, u64::MAX);
    }
    (lim.rlim_cur, lim.rlim_max)
}

/// Whether this process's descriptor table is full now (opening one more fails with EMFILE).
pub(crate) fn descriptor_table_full() -> bool {
    // SAFETY: open of a constant path with a valid C string; the descriptor, if any, is closed at once.
    let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd >= 0 {
        // SAFETY: the descriptor opened just above, closed once.
        unsafe { libc::close(fd) };
        return false;
    }
    io::Error::last_os_error().raw_os_error() == Some(libc::EMFILE)
}

/// "monitor 3 (pid 1234) has reached its limit of open descriptors, RLIMIT_NOFILE = 64 (hard limit 64); ..."
pub fn limit_note() -> String {
    let who = LABEL.get().map_or("this process", String::as_str);
    let (soft, hard) = descriptor_limit();
    let show = |v: u64| if v == u64::MAX { "unlimited".to_string() } else { v.to_string() };
    format!(
        "{who} (pid {}) has reached its limit of open descriptors, RLIMIT_NOFILE = {} (hard limit {}); raise it where the \
         runtime or program starts (ulimit -n, or resource.setrlimit)",
        std::process::id(),
        show(soft),
        show(hard)
    )
}

/// The note an OS error gets when it is a full descriptor table.
fn table_note(err: &io::Error) -> Option<String> {
    match err.raw_os_error() {
        Some(libc::EMFILE) => Some(limit_note()),
        Some(libc::ENFILE) => Some("the system-wide table of open files is full (fs.file-max)".into()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_descriptor_table_names_the_limit_and_its_value() {
        let e = Error::os("socket", io::Error::from_raw_os_error(libc::EMFILE));
        let (soft, _) = descriptor_limit();
        assert_eq!(e.kind, ErrorKind::Os);
        assert!(e.message.starts_with("socket: Too many open files"), "{}", e.message);
        assert!(e.message.contains(&format!("RLIMIT_NOFILE = {soft}")) && e.message.contains("this process (pid"), "{}", e.message);
        assert!(Error::os("x", io::Error::from_raw_os_error(libc::ENFILE)).message.contains("fs.file-max"));
        assert!(!Error::os("x", io::Error::from_raw_os_error(libc::ENOENT)).message.contains("RLIMIT"));
        assert!(!descriptor_table_full());
        assert_eq!(Error::descriptors_cut("frame").kind, ErrorKind::Protocol, "room in the table: the peer sent too many");
    }
}
