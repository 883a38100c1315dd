//! What binds of both transports share: resolving a name at the registry,
//! asking the exporting dispatcher of this core (whose service answers from
//! its backlog, see `multihop_dispatcher`'s `service.rs`), and counting outcomes.

use std::os::fd::{OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use super::{ChannelEntry, Monitor};
use multihop_base::control::{self, Msg};
use multihop_base::error::{Error, ErrorKind, Result};
use multihop_base::sync::lock;

impl Monitor {
    /// Resolve a bind target (name, or iref when the name is empty) at the
    /// registry: (name, iref, core of the exporting dispatcher).
    pub(super) fn resolve(&self, req: u64, name: String, iref: u64) -> Result<(String, u64, u32)> {
        match self.initial_call(&Msg::Lookup { req, name, iref })? {
            Msg::Found { name, iref, core, .. } => Ok((name, iref, core)),
            other => Err(Error::protocol(format!("registry answered {}", other.op()))),
        }
    }

    /// Count a client bind's outcome and turn a failure into its reply.
    pub(super) fn bind_outcome(&self, req: u64, result: Result<(Msg, Vec<OwnedFd>)>) -> (Msg, Vec<OwnedFd>) {
        match result {
            Ok(ok) => {
                self.counters.binds_ok.fetch_add(1, Ordering::Relaxed);
                ok
            }
            Err(e) => {
                self.counters.binds_failed.fetch_add(1, Ordering::Relaxed);
                (Msg::fail(req, &e), vec![])
            }
        }
    }

    /// Send a `Connect` (made by `make` from its id) to dispatcher `disp`
    /// and wait for its answer. On acceptance the channel is recorded and
    /// the reply's VCI, descriptors and the dispatcher's pid are returned.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ask_dispatcher(
        &self,
        disp: u64,
        service: &str,
        chan: u64,
        transport: &str,
        client_pid: u32,
        make: impl FnOnce(u64) -> Msg,
        fds: &[RawFd],
        timeout_ms: u64,
    ) -> Result<(u64, Vec<OwnedFd>, u32)> {
        let (sock, server_pid) = match lock(&self.dispatchers).get(&disp) {
            Some(d) => (d.sock.clone(), d.pid),
            None => return Err(Error::new(ErrorKind::Bind, format!("the dispatcher exporting {service:?} is gone"))),
        };
        let conn = self.next_id();
        let (tx, rx) = mpsc::channel();
        lock(&self.pending).insert(conn, tx);
        if let Err(e) = control::send(&sock, &make(conn), fds) {
            lock(&self.pending).remove(&conn);
            return Err(Error::new(ErrorKind::Bind, format!("could not reach the service {service:?}: {e}")));
        }
        let answer = rx.recv_timeout(Duration::from_millis(timeout_ms));
        lock(&self.pending).remove(&conn);
        // An answer that landed between the timeout and the removal counts
        // (after the removal none can: a later one is torn down as late).
        let answer = answer.or_else(|e| rx.try_recv().map_err(|_| e));
        if answer.is_err() {
            // Tell the service before the client hears of it, so a backlog
            // that frees up later does not take a request nobody waits for.
            let _ = control::send(&sock, &Msg::ConnectCancel { conn }, &[]);
        }
        match answer {
            Ok((Msg::ConnectReply { accept: true, vci, .. }, rfds)) => {
                let marks = if transport == "ump" { super::ump_marks(&[fds, &Self::raw(&rfds)].concat()) } else { vec![] };
                let entry = ChannelEntry {
                    service: service.to_string(),
                    transport: transport.to_string(),
                    client_pid,
                    server_pid,
                    role: "server",
                    _marks: marks,
                };
                self.record_channel(chan, disp, entry);
                Ok((vci, rfds, server_pid))
            }
            Ok((Msg::ConnectReply { expired: true, .. }, _)) => Err(Error::new(
                ErrorKind::Timeout,
                format!("service {service:?} did not take the connection within {timeout_ms} ms (its backlog stayed full)"),
            )),
            Ok((Msg::ConnectReply { reason, .. }, _)) => {
                Err(Error::new(ErrorKind::Bind, format!("service {service:?} refused the connection: {reason}")))
            }
            Ok((other, _)) => Err(Error::protocol(format!("service answered {}", other.op()))),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "service {service:?} did not take the connection within {timeout_ms} ms (its backlog stayed full, or its process is stopped)"
                ),
            )),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(Error::new(ErrorKind::Bind, format!("the dispatcher exporting {service:?} went away"))),
        }
    }
}
