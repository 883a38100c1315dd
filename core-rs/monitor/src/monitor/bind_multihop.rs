//! A multi-hop bind (TN-006 2.5): the client's monitor resolves the name,
//! then the bind travels hop by hop along the routing rows to the service's
//! monitor, which asks the exporting dispatcher.  Each node draws its VCIs
//! (reserved until installed) and installs the server-to-client entry
//! *before* passing the bind on, so a service that sends at once never has
//! its first message dropped; the client-to-server entry goes in when the
//! answer comes back.

use std::time::Duration;

use super::{ChannelEntry, Monitor, MAX_BIND_TIMEOUT_MS};
use crate::forward::LinkPeer;
use crate::vci::{Entry, LinkId};
use multihop_base::control::{self, monitor_socket, Msg, Role};
use multihop_base::error::{Error, ErrorKind, Result};
use multihop_base::sync::lock;

/// What every hop of one bind passes on unchanged.
pub(super) struct Hop<'a> {
    pub iref: u64,
    pub service: &'a str,
    pub target_core: u32,
    pub chan: u64,
    pub window: u32,
    pub client_pid: u32,
    pub client_core: u32,
    pub timeout_ms: u64,
}

impl Monitor {
    /// The client's side of a multi-hop bind: resolve, then route hop by hop.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn bind_multihop(
        &self,
        conn: u64,
        client_pid: u32,
        req: u64,
        name: String,
        iref: u64,
        chan: u64,
        timeout_ms: u64,
        client_core: u32,
        window: u32,
        vci: u64,
    ) -> Msg {
        let result = (|| -> Result<(Msg, Vec<std::os::fd::OwnedFd>)> {
            let (name, iref, core) = self.resolve(req, name, iref)?;
            let left = self.fwd.lock().link_to(LinkPeer::Dispatcher(conn)).ok_or_else(|| Error::protocol("bind from a dispatcher without a link"))?;
            let timeout_ms = timeout_ms.min(MAX_BIND_TIMEOUT_MS);
            let hop = Hop { iref, service: &name, target_core: core, chan, window, client_pid, client_core, timeout_ms };
            let (v_left, hops, server_pid, server_core) = self.route_bind(left, vci, 0, &hop)?;
            let entry = ChannelEntry { service: name.clone(), transport: "multihop".into(), client_pid, server_pid, role: "client", _marks: vec![] };
            self.record_channel(chan, conn, entry);
            Ok((Msg::Bound { req, chan, iref, service: name, server_pid, server_core, vci: v_left, hops }, vec![]))
        })();
        self.bind_outcome(req, result).0
    }

    /// One node's part of a multi-hop bind. `left` is the link towards the
    /// client and `left_out` the VCI to use on it; the bind goes on to the
    /// next hop (or the service's dispatcher) and the answer comes back.
    /// Returns (VCI the left side sends to us with, hops, server pid, server
    /// core).
    pub(super) fn route_bind(&self, left: LinkId, left_out: u64, hops_before: u32, b: &Hop<'_>) -> Result<(u64, u32, u32, u32)> {
        let hops = hops_before + 1;
        let next = if b.target_core == self.cfg.core {
            let services = lock(&self.services);
            let s = services.get(&b.iref).ok_or_else(|| Error::new(ErrorKind::Bind, format!("service {:?} is gone", b.service)))?;
            LinkPeer::Dispatcher(s.dispatcher)
        } else {
            let hop = lock(&self.row)
                .get(&b.target_core)
                .copied()
                .ok_or_else(|| Error::new(ErrorKind::Bind, format!("monitor {} has no route to core {}", self.cfg.core, b.target_core)))?;
            LinkPeer::Monitor(hop)
        };
        // The server-to-client entry goes in first: the server may send as
        // soon as it has accepted, before our answer reaches the client.
        let (right, v_left, v_right) = {
            let mut f = self.fwd.lock();
            let right =
                f.link_to(next).ok_or_else(|| Error::new(ErrorKind::Bind, format!("monitor {} has no link to {next:?} (yet)", self.cfg.core)))?;
            let v_left = f.table.draw(left)?;
            let v_right = match f.table.draw(right) {
                Ok(v) => v,
                Err(e) => {
                    f.table.release(left, v_left);
                    return Err(e);
                }
            };
            f.table.insert(right, v_right, Entry { out_link: left, out_vci: left_out, partner: (left, v_left), chan: b.chan });
            (right, v_left, v_right)
        };
        let answer = match next {
            LinkPeer::Dispatcher(conn) => self.ask_service(conn, b, v_right, hops),
            LinkPeer::Monitor(hop) => {
                let msg = Msg::BindHop {
                    req: 1,
                    iref: b.iref,
                    service: b.service.to_string(),
                    target_core: b.target_core,
                    from_core: self.cfg.core,
                    chan: b.chan,
                    window: b.window,
                    vci: v_right,
                    hops,
                    client_pid: b.client_pid,
                    client_core: b.client_core,
                    timeout_ms: b.timeout_ms,
                };
                let path = monitor_socket(&self.cfg.dir, hop);
                match control::call(&path, Role::Monitor, &msg, &[], Duration::from_millis(b.timeout_ms + 2000)) {
                    Ok((Msg::HopOk { vci, hops, server_pid, server_core, .. }, _)) => Ok((vci, hops, server_pid, server_core)),
                    Ok((other, _)) => Err(Error::protocol(format!("monitor {hop} answered a bind hop with {}", other.op()))),
                    Err(e) => Err(e),
                }
            }
        };
        let mut f = self.fwd.lock();
        match answer {
            Ok((right_out, total, server_pid, server_core)) if f.table.contains(right, v_right) => {
                f.table.insert(left, v_left, Entry { out_link: right, out_vci: right_out, partner: (right, v_right), chan: b.chan });
                Ok((v_left, total, server_pid, server_core))
            }
            // Torn down on this side while the answer travelled: the server
            // closed at once (its TEARDOWN went on to the client), or the
            // client's side died. Install nothing; make sure the server's
            // side hears of it (a duplicate TEARDOWN is dropped harmlessly).
            Ok((right_out, total, server_pid, server_core)) => {
                f.table.release(left, v_left);
                f.send_teardown(right, right_out);
                Ok((v_left, total, server_pid, server_core))
            }
            Err(e) => {
                f.table.remove_pair(right, v_right);
                f.table.release(left, v_left);
                Err(e)
            }
        }
    }

    /// Ask the exporting dispatcher of this core to take a multi-hop
    /// channel. Returns (VCI it receives on, hops, its pid, this core).
    fn ask_service(&self, disp: u64, b: &Hop<'_>, vci: u64, hops: u32) -> Result<(u64, u32, u32, u32)> {
        let make = |conn| Msg::Connect {
            conn,
            iref: b.iref,
            service: b.service.to_string(),
            chan: b.chan,
            transport: "multihop".into(),
            client_pid: b.client_pid,
            client_core: b.client_core,
            timeout_ms: b.timeout_ms,
            vci,
            window: b.window,
            hops,
        };
        let (vci, _, server_pid) = self.ask_dispatcher(disp, b.service, b.chan, "multihop", b.client_pid, make, &[], b.timeout_ms)?;
        Ok((vci, hops, server_pid, self.cfg.core))
    }
}
