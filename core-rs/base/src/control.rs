//! The control protocol: frames exchanged over the control sockets.
//!
//! A frame is one SEQPACKET datagram holding one JSON object tagged by `op`;
//! descriptors (segments, doorbells) ride along as SCM_RIGHTS, in the order
//! each message's documentation gives.  JSON keeps the control plane easy to
//! inspect; it is never on the data path (binds and exports only).
//!
//! Conversations:
//! * every connection starts with `Hello` and gets `Welcome`;
//! * dispatcher -> its monitor: `Export`, `Bind` (+ segment, doorbell),
//!   `ConnectReply` (+ doorbell when accepted), `Closed`;
//! * monitor -> dispatcher: `Connect` (+ segment, doorbell), replies;
//! * monitor -> initial monitor: `Register`, `Lookup`, `Unregister`;
//! * monitor -> server's monitor: `Bind` (forwarded, same descriptors);
//! * anyone -> monitor: `Status`, `Shutdown`;
//! * handles of a message (TN-006 2.7, `handles`): `Cap` frames, dispatcher ->
//!   its monitor -> (monitor to monitor, on `Relay` connections) -> the
//!   receiver's dispatcher, and the verdict back the same way.
//!
//! A frame of any size crosses as one or more datagrams (see `sock.rs`).

use std::os::fd::{OwnedFd, RawFd};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::sock::SeqSocket;

/// What kind of process opened a control connection.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Dispatcher,
    Monitor,
    Tool,
    /// A monitor's long-lived, one-way stream of `Cap` frames to a
    /// neighbour (its hello's `core` is the sender's core).
    Relay,
}

/// Which way a `Cap` frame travels.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CapStage {
    /// The handles, towards the receiving end (descriptors: the handles).
    Send,
    /// The receiving end's verdict (or a monitor's refusal), towards the sender.
    Reply,
    /// The sender gave up after `Send`: the receiving end drops the group.
    Cancel,
}

/// Why handles were refused: a reason code (`handles::reason`), the text, and
/// the index of the handle at fault when one is.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CapRefusal {
    pub reason: String,
    pub message: String,
    #[serde(default)]
    pub index: Option<u32>,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Msg {
    Hello {
        role: Role,
        core: u32,
    },
    Welcome {
        monitor_pid: u32,
        core: u32,
        conn: u64,
    },

    Export {
        req: u64,
        name: String,
    },
    Exported {
        req: u64,
        iref: u64,
    },
    /// Descriptors: [channel segment, client doorbell].
    Bind {
        req: u64,
        /// Service name, or empty when `iref` is given.
        name: String,
        iref: u64,
        transport: String,
        chan: u64,
        timeout_ms: u64,
        client_pid: u32,
        client_core: u32,
        /// Multi-hop: credit window, and the VCI the client receives on.
        #[serde(default)]
        window: u32,
        #[serde(default)]
        vci: u64,
    },
    /// UMP descriptors: [server doorbell]. Multi-hop: `vci` is what the
    /// client sends with, `hops` the monitors on the path.
    Bound {
        req: u64,
        chan: u64,
        iref: u64,
        service: String,
        server_pid: u32,
        server_core: u32,
        #[serde(default)]
        vci: u64,
        #[serde(default)]
        hops: u32,
    },
    Fail {
        req: u64,
        kind: ErrorKind,
        message: String,
    },
    /// A channel end of this dispatcher closed. `teardown`, when not 0, is
    /// the outgoing VCI of a multi-hop end whose TEARDOWN did not fit on the
    /// link: the monitor drains the link, then tears the circuit down.
    Closed {
        chan: u64,
        #[serde(default)]
        teardown: u64,
    },

    /// Descriptors: [channel segment, client doorbell].
    Connect {
        conn: u64,
        iref: u64,
        service: String,
        chan: u64,
        transport: String,
        client_pid: u32,
        client_core: u32,
        timeout_ms: u64,
        /// Multi-hop: the VCI the server sends with, window, path length.
        #[serde(default)]
        vci: u64,
        #[serde(default)]
        window: u32,
        #[serde(default)]
        hops: u32,
    },
    /// The bind of connect request `conn` gave up (timed out): a service
    /// that has not taken it yet drops it.
    ConnectCancel {
        conn: u64,
    },
    /// UMP descriptors: [server doorbell] when `accept`. Multi-hop: `vci`
    /// is what the server receives on.
    ConnectReply {
        conn: u64,
        accept: bool,
        reason: String,
        #[serde(default)]
        vci: u64,
        /// The request ran out of time while the backlog stayed full (a
        /// refusal the client sees as `Timeout`, as when its monitor's own
        /// wait ends first: which of the two clocks fires first is a race).
        #[serde(default)]
        expired: bool,
    },

    /// RTS -> initial monitor: the whole routing table
    /// (`table[src][dst] = next hop`).
    /// (Pairs, not maps: JSON map keys are strings.)
    SetTable {
        req: u64,
        table: Vec<(u32, Vec<(u32, u32)>)>,
    },
    /// A monitor asks the initial monitor for its row at boot.
    GetRow {
        req: u64,
        core: u32,
    },
    /// Its row, the neighbours it must open links to, and all its neighbours.
    Row {
        req: u64,
        row: Vec<(u32, u32)>,
        initiate: Vec<u32>,
        neighbours: Vec<u32>,
    },
    /// Open a monitor-to-monitor link. Descriptors: [segment, doorbell];
    /// answered by `Done` with [doorbell].
    LinkOpen {
        req: u64,
        from_core: u32,
    },
    /// A dispatcher opens its link to its monitor. Descriptors: [segment,
    /// doorbell]; answered by `Done` with [doorbell].
    DispatcherLink {
        req: u64,
    },
    /// One hop of a multi-hop bind: `vci` is what the receiver of this
    /// request sends back (towards the client) with.
    BindHop {
        req: u64,
        iref: u64,
        service: String,
        target_core: u32,
        from_core: u32,
        chan: u64,
        window: u32,
        vci: u64,
        hops: u32,
        client_pid: u32,
        client_core: u32,
        timeout_ms: u64,
    },
    /// The hop's answer: `vci` is what the asker sends (towards the server)
    /// with; `hops` the monitors on the whole path.
    HopOk {
        req: u64,
        vci: u64,
        hops: u32,
        server_pid: u32,
        server_core: u32,
    },

    Register {
        req: u64,
        name: String,
        core: u32,
        pid: u32,
    },
    Lookup {
        req: u64,
        name: String,
        iref: u64,
    },
    Found {
        req: u64,
        name: String,
        iref: u64,
        core: u32,
    },
    Unregister {
        iref: u64,
    },

    /// `limit`: most entries per list (dispatchers, services, channels,
    /// registry) in the reply; counts are always whole. `None`: every entry
    /// (the reply streams in pieces, whatever its size).
    Status {
        req: u64,
        #[serde(default)]
        limit: Option<u64>,
    },
    StatusReply {
        req: u64,
        status: serde_json::Value,
    },
    /// Group service -> a monitor (docs/groups.md §5): `body.op` is
    /// `install`, `remove` or `marks` (`monitor/multicast.rs` in multihop-monitor); answered by
    /// `GroupReply` or `Fail`.
    Group {
        req: u64,
        body: serde_json::Value,
    },
    GroupReply {
        req: u64,
        body: serde_json::Value,
    },
    /// The handles of one message, out of band (see `handles`). A UMP channel's
    /// frames are routed by `chan` towards its `to_side` end (0 client, 1
    /// server); a multi-hop channel's by `vci`, as its data is (each hop
    /// rewrites it). `req` is the sending dispatcher's request id; `seq`
    /// numbers the sending end's handle-carrying messages.
    Cap {
        stage: CapStage,
        req: u64,
        #[serde(default)]
        chan: u64,
        #[serde(default)]
        to_side: u8,
        #[serde(default)]
        vci: u64,
        seq: u64,
        count: u32,
        #[serde(default)]
        refused: Option<CapRefusal>,
    },
    /// A dispatcher withdraws one of its services (its handle was dropped).
    Unexport {
        req: u64,
        iref: u64,
    },
    Shutdown {
        req: u64,
    },
    Done {
        req: u64,
    },
}

impl Msg {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("control messages always serialise")
    }

    pub fn decode(frame: &[u8]) -> Result<Msg> {
        serde_json::from_slice(frame).map_err(|e| Error::protocol(format!("malformed control frame: {e}")))
    }

    /// The message's name (its `op`), for errors about it: never its whole
    /// text, which a hostile peer could make as large as a frame.
    pub fn op(&self) -> String {
        let text = format!("{self:?}");
        let end = text.find([' ', '{', '(']).unwrap_or(text.len());
        text[..end].to_string()
    }

    pub fn fail(req: u64, e: &Error) -> Msg {
        Msg::Fail { req, kind: e.kind, message: e.message.clone() }
    }

    /// Turn a `Fail` reply into the error it carries.
    pub fn into_result(self) -> Result<Msg> {
        match self {
            Msg::Fail { kind, message, .. } => Err(Error::new(kind, message)),
            other => Ok(other),
        }
    }
}

/// The request id a message carries (0 if it carries none), for a failure answering it.
pub fn req_of(msg: &Msg) -> u64 {
    serde_json::to_value(msg).ok().and_then(|v| v.get("req")?.as_u64()).unwrap_or(0)
}

/// Send a message with descriptors on a connected socket.
pub fn send(sock: &SeqSocket, msg: &Msg, fds: &[RawFd]) -> Result<()> {
    sock.send(&msg.encode(), fds).map_err(|e| Error::new(ErrorKind::Monitor, format!("control send failed: {e}")))
}

/// Largest request a monitor reads from a peer (requests are small; a
/// routing table for thousands of cores still fits).
pub const MAX_REQUEST: usize = 16 << 20;

/// Receive one message; `Ok(None)` on EOF.
pub fn recv(sock: &SeqSocket) -> Result<Option<(Msg, Vec<OwnedFd>)>> {
    recv_at_most(sock, crate::sock::MAX_FRAME)
}

/// Receive one message of at most `limit` bytes (a monitor reading a peer's
/// requests passes [`MAX_REQUEST`]); a longer one is a protocol error.
pub fn recv_at_most(sock: &SeqSocket, limit: usize) -> Result<Option<(Msg, Vec<OwnedFd>)>> {
    match recv_keeping_truncated(sock, limit)? {
        None => Ok(None),
        Some((msg, _, true)) => Err(Error::descriptors_cut(format!("control frame {}", msg.op()))),
        Some((msg, fds, false)) => Ok(Some((msg, fds))),
    }
}

/// `recv_at_most`, but a frame that lost descriptors to a full descriptor
/// table (MSG_CTRUNC) comes back with `true` and the descriptors it got,
/// so a `Cap` frame can be refused ("no room") rather than lost.
pub fn recv_keeping_truncated(sock: &SeqSocket, limit: usize) -> Result<Option<(Msg, Vec<OwnedFd>, bool)>> {
    match sock.recv_keeping_truncated(limit) {
        Ok(None) => Ok(None),
        Ok(Some((frame, fds, truncated))) => Ok(Some((Msg::decode(&frame)?, fds, truncated))),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            Err(Error::timeout("no answer on the control socket in time (is the monitor stopped or overloaded?)"))
        }
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(Error::protocol(format!("bad control frame: {e}"))),
        Err(e) => Err(Error::new(ErrorKind::Monitor, format!("control recv failed: {e}"))),
    }
}

/// Connect to a monitor socket and say hello (waiting up to 10 s for the answer).
pub fn connect(path: &Path, role: Role, core: u32) -> Result<(SeqSocket, u32)> {
    connect_within(path, role, core, Duration::from_secs(10))
}

/// Connect to a monitor socket and say hello, waiting up to `timeout` for
/// the answer (a stopped monitor accepts connections but never answers).
pub fn connect_within(path: &Path, role: Role, core: u32, timeout: Duration) -> Result<(SeqSocket, u32)> {
    let sock = SeqSocket::connect(path).map_err(|e| match (e.kind(), e.raw_os_error()) {
        (std::io::ErrorKind::PermissionDenied, _) => {
            Error::new(ErrorKind::Monitor, format!("permission denied: the monitor at {} belongs to another user", path.display()))
        }
        // No descriptor left for the socket: say which limit, not that the runtime is missing.
        (_, Some(libc::EMFILE | libc::ENFILE)) => Error::os(format_args!("cannot open a socket to the monitor at {}", path.display()), e),
        _ => Error::new(ErrorKind::RuntimeNotFound, format!("cannot reach monitor at {}: {e}", path.display())),
    })?;
    let timeout = timeout.max(Duration::from_millis(1));
    sock.set_send_timeout(timeout.min(Duration::from_secs(10)))?;
    sock.set_recv_timeout(Some(timeout))?;
    // A monitor that refuses us says why and hangs up, possibly before our
    // hello lands: read its answer even if the hello could not be sent.
    let sent = send(&sock, &Msg::Hello { role, core }, &[]);
    let answer = recv(&sock);
    if let (Err(e), Ok(None) | Err(_)) = (&sent, &answer) {
        return Err(e.clone());
    }
    match answer? {
        Some((Msg::Welcome { monitor_pid, .. }, _)) => Ok((sock, monitor_pid)),
        Some((Msg::Fail { kind, message, .. }, _)) => Err(Error::new(kind, message)),
        Some((other, _)) => Err(Error::protocol(format!("monitor answered hello with {other:?}"))),
        None => Err(Error::new(ErrorKind::Monitor, format!("monitor at {} closed the connection", path.display()))),
    }
}

/// One request-reply exchange on a fresh connection (monitor to monitor, or
/// a tool to a monitor).
pub fn call(path: &Path, role: Role, msg: &Msg, fds: &[RawFd], timeout: Duration) -> Result<(Msg, Vec<OwnedFd>)> {
    let (sock, _) = connect_within(path, role, 0, timeout)?;
    send(&sock, msg, fds)?;
    match recv(&sock)? {
        Some((reply, fds)) => Ok((reply.into_result()?, fds)),
        None => Err(Error::new(ErrorKind::Monitor, format!("monitor at {} hung up mid-request", path.display()))),
    }
}

/// Socket path of the monitor of `core` in a runtime directory.
pub fn monitor_socket(dir: &Path, core: u32) -> std::path::PathBuf {
    dir.join(format!("mon-{core}.sock"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let m = Msg::Lookup { req: 3, name: "echo".into(), iref: 0 };
        match Msg::decode(&m.encode()).unwrap() {
            Msg::Lookup { req, name, .. } => assert_eq!((req, name.as_str()), (3, "echo")),
            other => panic!("{other:?}"),
        }
        assert_eq!(Msg::decode(b"{\"op\":\"nope\"}").unwrap_err().kind, ErrorKind::Protocol);
        assert_eq!(Msg::decode(b"\xff\x00").unwrap_err().kind, ErrorKind::Protocol);
    }
}
