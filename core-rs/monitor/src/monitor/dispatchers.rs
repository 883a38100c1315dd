//! A dispatcher's long-lived connection: its exports, link, binds, the
//! answers of its services, the ends it closes, and what its death (or
//! detach) takes down.

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{ChannelEntry, DispatcherEntry, Monitor};
use crate::forward::LinkPeer;
use multihop_base::control::{self, Msg};
use multihop_base::error::{Error, ErrorKind};
use multihop_base::sock::SeqSocket;
use multihop_base::sync::lock;

impl Monitor {
    pub(super) fn serve_dispatcher(self: &Arc<Self>, conn: u64, pid: u32, sock: Arc<SeqSocket>) {
        lock(&self.dispatchers).insert(conn, DispatcherEntry { pid, sock: sock.clone(), channels: HashSet::new() });
        loop {
            let (msg, fds) = match control::recv_keeping_truncated(&sock, control::MAX_REQUEST) {
                // A message's handles may arrive short (this process's table is full): refused, not lost.
                Ok(Some((msg @ Msg::Cap { .. }, fds, truncated))) => {
                    self.cap_from_dispatcher(conn, msg, fds, truncated);
                    continue;
                }
                Ok(Some((msg, _, true))) => {
                    // Its descriptors did not fit in our table: say so to the waiting request at once.
                    self.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                    let e = Error::descriptors_cut(format!("monitor {}: request {}", self.cfg.core, msg.op()));
                    let _ = control::send(&sock, &Msg::fail(control::req_of(&msg), &e), &[]);
                    continue;
                }
                Ok(Some((msg, fds, false))) => (msg, fds),
                Ok(None) => break,
                Err(e) if e.kind == ErrorKind::Protocol => {
                    self.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                    let _ = control::send(&sock, &Msg::fail(0, &e), &[]);
                    continue;
                }
                Err(_) => break,
            };
            self.dispatcher_message(conn, pid, &sock, msg, fds);
        }
        self.dispatcher_gone(conn);
    }

    fn dispatcher_message(self: &Arc<Self>, conn: u64, pid: u32, sock: &Arc<SeqSocket>, msg: Msg, fds: Vec<OwnedFd>) {
        match msg {
            Msg::Export { req, name } => {
                let reply = self.export(conn, pid, req, name);
                let _ = control::send(sock, &reply, &[]);
            }
            Msg::Unexport { req, iref } => {
                self.unexport(conn, Some(iref));
                let _ = control::send(sock, &Msg::Done { req }, &[]);
            }
            Msg::DispatcherLink { req } => {
                let (reply, rfds) = match self.accept_link(LinkPeer::Dispatcher(conn), pid, fds) {
                    Ok(bell) => (Msg::Done { req }, vec![bell]),
                    Err(e) => (Msg::fail(req, &e), vec![]),
                };
                let _ = control::send(sock, &reply, &Self::raw(&rfds));
            }
            Msg::Bind { req, name, iref, transport, chan, timeout_ms, client_core, window, vci, .. } => {
                // A bind may wait for a service: it gets a thread of its own.
                let m = self.clone();
                let s = sock.clone();
                let started = super::spawn("bind", move || {
                    let (reply, rfds) = if transport == "multihop" {
                        (m.bind_multihop(conn, pid, req, name, iref, chan, timeout_ms, client_core, window, vci), vec![])
                    } else {
                        m.bind_from_client(conn, pid, req, name, iref, transport, chan, timeout_ms, client_core, fds)
                    };
                    let _ = control::send(&s, &reply, &Self::raw(&rfds));
                });
                if let Err(e) = started {
                    let _ = control::send(sock, &Msg::fail(req, &e), &[]);
                }
            }
            Msg::ConnectReply { conn: c, accept, vci, .. } => {
                let waiter = lock(&self.pending).remove(&c);
                let late = match waiter {
                    Some(tx) => tx.send((msg, fds)).is_err(),
                    None => true,
                };
                if late && accept && vci != 0 {
                    // The bind gave up before the service took it: tear the
                    // service's end of the multi-hop channel down.
                    let mut f = self.fwd.lock();
                    if let Some(l) = f.link_to(LinkPeer::Dispatcher(conn)) {
                        f.send_teardown(l, vci);
                    }
                    drop(f);
                    self.fwd.poke();
                }
            }
            Msg::Closed { chan, teardown } => {
                if teardown != 0 {
                    let mut f = self.fwd.lock();
                    if let Some(l) = f.link_to(LinkPeer::Dispatcher(conn)) {
                        f.teardown_after_drain(l, teardown);
                    }
                    drop(f);
                    self.fwd.poke();
                }
                self.forget_channel(conn, chan);
            }
            Msg::Status { req, limit } => {
                let _ = control::send(sock, &Msg::StatusReply { req, status: self.status(limit) }, &[]);
            }
            other => {
                self.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                let e = Error::protocol(format!("unexpected message {} from a dispatcher", other.op()));
                let _ = control::send(sock, &Msg::fail(0, &e), &[]);
            }
        }
    }

    /// Remember dispatcher `disp`'s end of channel `chan` (status, cleanup).
    pub(super) fn record_channel(&self, chan: u64, disp: u64, entry: ChannelEntry) {
        let mut dispatchers = lock(&self.dispatchers);
        let Some(d) = dispatchers.get_mut(&disp) else { return }; // gone meanwhile: nothing to keep
        d.channels.insert(chan);
        lock(&self.channels).insert((disp, chan), entry);
    }

    /// Dispatcher `disp` closed its end of `chan` (or saw it end).
    fn forget_channel(&self, disp: u64, chan: u64) {
        if let Some(d) = lock(&self.dispatchers).get_mut(&disp) {
            d.channels.remove(&chan);
        }
        lock(&self.channels).remove(&(disp, chan));
        self.caps.routes.forget(disp, chan);
    }

    fn dispatcher_gone(&self, conn: u64) {
        {
            let mut f = self.fwd.lock();
            if let Some(l) = f.link_to(LinkPeer::Dispatcher(conn)) {
                f.drain_and_remove(l); // forwards what it sent, then tears its channels down
            }
        }
        self.fwd.poke();
        let entry = lock(&self.dispatchers).remove(&conn);
        self.caps.routes.forget_dispatcher(conn);
        self.unexport(conn, None);
        if let Some(d) = entry {
            let mut chans = lock(&self.channels);
            for c in d.channels {
                chans.remove(&(conn, c));
            }
        }
    }
}
