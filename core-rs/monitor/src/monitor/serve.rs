//! A new connection: credentials first, then a hello within
//! [`HELLO_TIMEOUT`], then either a dispatcher's long-lived conversation
//! (`dispatchers.rs`) or one-shot requests from monitors and tools, answered
//! in order (an idle one is hung up on after [`REQUEST_IDLE`]).

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::routing::row_of;
use super::{log, Monitor, Table, HELLO_TIMEOUT, REQUEST_IDLE};
use crate::forward::LinkPeer;
use multihop_base::control::{self, Msg, Role};
use multihop_base::error::{Error, ErrorKind};
use multihop_base::sock::SeqSocket;
use multihop_base::sync::lock;

impl Monitor {
    pub(super) fn serve(self: Arc<Self>, sock: SeqSocket) {
        let cred = match sock.peer_cred() {
            Ok(c) => c,
            Err(e) => return log(self.cfg.core, e),
        };
        if cred.uid != self.uid {
            self.counters.refused_peers.fetch_add(1, Ordering::Relaxed);
            log(self.cfg.core, format_args!("refused a connection from uid {} (pid {})", cred.uid, cred.pid));
            // Read its hello first: closing with unread data would reset the
            // connection and the peer would never see why it was refused.
            let _ = sock.set_recv_timeout(Some(Duration::from_millis(500)));
            let _ = sock.recv_at_most(4096);
            let _ = control::send(
                &sock,
                &Msg::Fail { req: 0, kind: ErrorKind::Monitor, message: format!("uid {} may not attach to a runtime of uid {}", cred.uid, self.uid) },
                &[],
            );
            // And whatever else it sent right behind (bounded), for the same reason.
            let _ = sock.set_recv_timeout(Some(Duration::from_millis(50)));
            for _ in 0..16 {
                if !matches!(sock.recv_at_most(4096), Ok(Some(_))) {
                    break;
                }
            }
            return;
        }
        if let Err(e) = sock.set_send_timeout(Duration::from_secs(5)).and_then(|()| sock.set_recv_timeout(Some(HELLO_TIMEOUT))) {
            return log(self.cfg.core, e);
        }
        let (role, hello_core) = match control::recv_at_most(&sock, control::MAX_REQUEST) {
            Ok(Some((Msg::Hello { role, core }, _))) => (role, core),
            Ok(Some((other, _))) => {
                self.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                let _ = control::send(&sock, &Msg::fail(0, &Error::protocol(format!("expected hello, got {other:?}"))), &[]);
                return;
            }
            Ok(None) => return,
            Err(e) if e.kind == ErrorKind::Timeout => {
                self.counters.idle_hangups.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(e) => {
                self.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                let _ = control::send(&sock, &Msg::fail(0, &e), &[]);
                return;
            }
        };
        let idle = if matches!(role, Role::Dispatcher | Role::Relay) { None } else { Some(REQUEST_IDLE) };
        if let Err(e) = sock.set_recv_timeout(idle) {
            return log(self.cfg.core, e);
        }
        let conn = self.next_id();
        if control::send(&sock, &Msg::Welcome { monitor_pid: self.pid, core: self.cfg.core, conn }, &[]).is_err() {
            return;
        }
        match role {
            Role::Dispatcher => self.serve_dispatcher(conn, cred.pid, Arc::new(sock)),
            Role::Monitor | Role::Tool => self.serve_requests(sock, cred.pid),
            Role::Relay => self.serve_relay(sock, hello_core),
        }
    }

    /// Requests from other monitors and tools, answered in order.
    fn serve_requests(self: &Arc<Self>, sock: SeqSocket, peer_pid: u32) {
        loop {
            let (msg, fds) = match control::recv_at_most(&sock, control::MAX_REQUEST) {
                Ok(Some(m)) => m,
                Ok(None) => return,
                Err(e) if e.kind == ErrorKind::Timeout => {
                    self.counters.idle_hangups.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(e) if e.kind == ErrorKind::Protocol => {
                    self.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                    let _ = control::send(&sock, &Msg::fail(0, &e), &[]);
                    continue;
                }
                Err(_) => return,
            };
            let (reply, reply_fds) = self.answer(msg, fds, peer_pid);
            if control::send(&sock, &reply, &Self::raw(&reply_fds)).is_err() {
                return;
            }
            if matches!(reply, Msg::Done { .. }) && self.stopping.load(Ordering::Relaxed) {
                return;
            }
        }
    }

    fn answer(self: &Arc<Self>, msg: Msg, fds: Vec<OwnedFd>, peer_pid: u32) -> (Msg, Vec<OwnedFd>) {
        match msg {
            Msg::SetTable { req, table } => {
                let table: Table = table.into_iter().map(|(s, r)| (s, r.into_iter().collect())).collect();
                if !self.is_initial() {
                    return (Msg::fail(req, &Error::protocol("routing table sent to a monitor that is not the initial one")), vec![]);
                }
                match row_of(&table, self.cfg.core) {
                    Ok((row, initiate, neighbours)) => {
                        *lock(&self.table) = Some(table);
                        self.install_row(row, initiate, neighbours);
                        (Msg::Done { req }, vec![])
                    }
                    Err(e) => (Msg::fail(req, &e), vec![]),
                }
            }
            Msg::GetRow { req, core } => {
                let table = lock(&self.table);
                match table.as_ref().map(|t| row_of(t, core)) {
                    Some(Ok((row, initiate, neighbours))) => (Msg::Row { req, row: row.into_iter().collect(), initiate, neighbours }, vec![]),
                    Some(Err(e)) => (Msg::fail(req, &e), vec![]),
                    None => (Msg::fail(req, &Error::new(ErrorKind::Monitor, "the routing table is not set yet")), vec![]),
                }
            }
            Msg::LinkOpen { req, from_core } => match self.accept_link(LinkPeer::Monitor(from_core), peer_pid, fds) {
                Ok(bell) => (Msg::Done { req }, vec![bell]),
                Err(e) => (Msg::fail(req, &e), vec![]),
            },
            Msg::BindHop { req, iref, service, target_core, from_core, chan, window, vci, hops, client_pid, client_core, timeout_ms } => {
                let left = self.fwd.lock().link_to(LinkPeer::Monitor(from_core));
                let result = match left {
                    Some(left) => {
                        let hop =
                            super::bind_multihop::Hop { iref, service: &service, target_core, chan, window, client_pid, client_core, timeout_ms };
                        self.route_bind(left, vci, hops, &hop)
                    }
                    None => Err(Error::new(ErrorKind::Bind, format!("monitor {} has no link from monitor {from_core}", self.cfg.core))),
                };
                match result {
                    Ok((vci, hops, server_pid, server_core)) => (Msg::HopOk { req, vci, hops, server_pid, server_core }, vec![]),
                    Err(e) => (Msg::fail(req, &e), vec![]),
                }
            }
            Msg::Register { req, name, core, pid: _ } => (self.register(req, name, core), vec![]),
            Msg::Lookup { req, name, iref } => (self.lookup(req, &name, iref), vec![]),
            Msg::Unregister { iref } => {
                self.unregister(iref);
                (Msg::Done { req: 0 }, vec![])
            }
            Msg::Bind { req, iref, transport, chan, timeout_ms, client_pid, client_core, .. } => {
                self.bind_at_server(req, iref, transport, chan, timeout_ms, client_pid, client_core, fds)
            }
            Msg::Status { req, limit } => (Msg::StatusReply { req, status: self.status(limit) }, vec![]),
            Msg::Group { req, body } => (self.group_request(req, body), vec![]),
            Msg::Shutdown { req } => {
                self.begin_shutdown();
                (Msg::Done { req }, vec![])
            }
            other => {
                self.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                (Msg::fail(0, &Error::protocol(format!("unexpected request {}", other.op()))), vec![])
            }
        }
    }
}
