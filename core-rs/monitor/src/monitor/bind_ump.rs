//! A UMP bind: the client's monitor resolves the name and forwards the bind
//! (with the client's ring segment and doorbell) to the service's monitor,
//! which asks the exporting dispatcher; its doorbell comes back the same way.
//! No monitor is on the channel's data path.

use std::os::fd::OwnedFd;
use std::time::Duration;

use super::{ChannelEntry, Monitor, MAX_BIND_TIMEOUT_MS};
use multihop_base::control::{self, monitor_socket, Msg, Role};
use multihop_base::error::{Error, ErrorKind, Result};
use multihop_base::sync::lock;

impl Monitor {
    /// The client's side of a bind: resolve, forward, relay.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn bind_from_client(
        &self,
        conn: u64,
        client_pid: u32,
        req: u64,
        name: String,
        iref: u64,
        transport: String,
        chan: u64,
        timeout_ms: u64,
        client_core: u32,
        fds: Vec<OwnedFd>,
    ) -> (Msg, Vec<OwnedFd>) {
        let result = (|| -> Result<(Msg, Vec<OwnedFd>)> {
            if fds.len() != 2 {
                return Err(Error::protocol(format!("bind carries {} descriptors, expected 2", fds.len())));
            }
            if transport != "ump" {
                return Err(Error::new(
                    ErrorKind::Bind,
                    format!("transport {transport:?} is not available (this runtime offers \"ump\" and \"multihop\")"),
                ));
            }
            let (name, iref, core) = self.resolve(req, name, iref)?;
            let timeout_ms = timeout_ms.min(MAX_BIND_TIMEOUT_MS);
            let fwd = Msg::Bind {
                req,
                name: name.clone(),
                iref,
                transport: transport.clone(),
                chan,
                timeout_ms,
                client_pid,
                client_core,
                window: 0,
                vci: 0,
            };
            let path = monitor_socket(&self.cfg.dir, core);
            let (reply, rfds) = control::call(&path, Role::Monitor, &fwd, &Self::raw(&fds), Duration::from_millis(timeout_ms + 2000))?;
            match reply {
                Msg::Bound { chan, iref, service, server_pid, server_core, .. } => {
                    let marks = super::ump_marks(&[Self::raw(&fds), Self::raw(&rfds)].concat());
                    let entry = ChannelEntry { service: service.clone(), transport, client_pid, server_pid, role: "client", _marks: marks };
                    self.record_channel(chan, conn, entry);
                    self.caps.routes.add(chan, 0, conn, server_core, self.cfg.core);
                    Ok((Msg::Bound { req, chan, iref, service, server_pid, server_core, vci: 0, hops: 0 }, rfds))
                }
                other => Err(Error::protocol(format!("service monitor answered {}", other.op()))),
            }
        })();
        self.bind_outcome(req, result)
    }

    /// The service's side of a UMP bind: ask the exporting dispatcher.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn bind_at_server(
        &self,
        req: u64,
        iref: u64,
        transport: String,
        chan: u64,
        timeout_ms: u64,
        client_pid: u32,
        client_core: u32,
        fds: Vec<OwnedFd>,
    ) -> (Msg, Vec<OwnedFd>) {
        let fail = |e: Error| (Msg::fail(req, &e), vec![]);
        if fds.len() != 2 {
            return fail(Error::protocol(format!("forwarded bind carries {} descriptors, expected 2", fds.len())));
        }
        let (service, disp) = {
            let services = lock(&self.services);
            match services.get(&iref) {
                Some(s) => (s.name.clone(), s.dispatcher),
                None => return fail(Error::new(ErrorKind::Bind, format!("service iref {iref:#x} is gone"))),
            }
        };
        let make = |conn| Msg::Connect {
            conn,
            iref,
            service: service.clone(),
            chan,
            transport: transport.clone(),
            client_pid,
            client_core,
            timeout_ms,
            vci: 0,
            window: 0,
            hops: 0,
        };
        let timeout_ms = timeout_ms.min(MAX_BIND_TIMEOUT_MS);
        match self.ask_dispatcher(disp, &service, chan, &transport, client_pid, make, &Self::raw(&fds), timeout_ms) {
            Ok((_, rfds, server_pid)) if rfds.len() == 1 => {
                self.caps.routes.add(chan, 1, disp, client_core, self.cfg.core);
                (Msg::Bound { req, chan, iref, service, server_pid, server_core: self.cfg.core, vci: 0, hops: 0 }, rfds)
            }
            Ok(_) => fail(Error::protocol(format!("service {service:?} accepted without its doorbell"))),
            Err(e) => fail(e),
        }
    }
}
