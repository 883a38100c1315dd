//! `Dispatcher`: a process attached to one core's monitor, exporting services
//! and binding channels. It stands on top of everything else of this crate:
//! its connection to the monitor ([`MonitorConn`], which channels, services,
//! binds and group ports share), services (`service.rs`) and binds
//! (`bind.rs`).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use multihop_base::control::Msg;
use multihop_base::defaults::{MAX_BACKLOG, REQUEST_TIMEOUT};
use multihop_base::error::{Error, Result};

use crate::bind::{BindOptions, PendingBind};
use crate::channel::Channel;
use crate::conn::MonitorConn;
use crate::multihop::link::DispatcherLink;
use crate::service::{OnConnect, Service, ServiceQueue};

/// A process attached to a core's monitor (a handle: clones share one connection).
#[derive(Clone)]
pub struct Dispatcher {
    conn: Arc<MonitorConn>,
}

impl Dispatcher {
    /// Attach to the monitor of `core` in the runtime at `dir`.
    pub fn attach(dir: &Path, core: u32) -> Result<Dispatcher> {
        Ok(Dispatcher { conn: MonitorConn::attach(dir, core)? })
    }

    /// The connection to the monitor (what group ports and native modules use).
    pub fn conn(&self) -> &Arc<MonitorConn> {
        &self.conn
    }

    /// The ring pair with the monitor that multi-hop channels share.
    pub fn link(&self) -> Result<&Arc<DispatcherLink>> {
        self.conn.link()
    }

    /// Messages that arrived on the link for no channel of ours.
    pub fn link_dropped(&self) -> u64 {
        self.conn.link_dropped()
    }

    pub fn core(&self) -> u32 {
        self.conn.core()
    }

    pub fn monitor_pid(&self) -> u32 {
        self.conn.monitor_pid()
    }

    pub fn runtime_dir(&self) -> &Path {
        self.conn.runtime_dir()
    }

    pub fn is_attached(&self) -> bool {
        self.conn.is_attached()
    }

    /// Export `name` with a backlog of `backlog` connections that bound
    /// but were not accepted yet; the registry gives it an iref.
    /// `on_connect` (if any) decides, on the service's acceptor thread,
    /// whether to take each connection.
    pub fn export(&self, name: &str, backlog: usize, on_connect: Option<OnConnect>) -> Result<Service> {
        if backlog == 0 || backlog > MAX_BACKLOG {
            return Err(Error::invalid(format!("backlog must be from 1 to {MAX_BACKLOG} connections, got {backlog}")));
        }
        let acceptor = self.conn.acceptor()?;
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        let (reply, _) = self.conn.request(|req| Msg::Export { req, name: name.to_string() }, &[], deadline, &mut || Ok(()))?;
        match reply {
            Msg::Exported { iref, .. } => {
                // Connects for this iref may already be on their way: the
                // reader refuses those it finds no queue for, so register
                // the queue first thing.
                let queue = Arc::new(ServiceQueue::new(name, backlog, on_connect));
                self.conn.add_service(iref, queue.clone());
                Ok(Service::new(self.conn.clone(), name.to_string(), iref, queue, acceptor))
            }
            other => Err(Error::protocol(format!("monitor answered export with {}", other.op()))),
        }
    }

    /// Bind to a service by name (or by iref when `name` is empty); the
    /// bind completes once the service has the connection in its backlog.
    ///
    /// `opts.transport` "auto" is resolved first ([`crate::transport_choice`]).
    pub fn bind(&self, name: &str, iref: u64, opts: &BindOptions, interrupt: &mut dyn FnMut() -> Result<()>) -> Result<Channel> {
        let resolved;
        let opts = if opts.transport == "auto" {
            let transport = crate::transport_choice::choose(self.runtime_dir(), self.core(), name, iref)?;
            resolved = BindOptions { transport: transport.to_string(), ..opts.clone() };
            &resolved
        } else {
            opts
        };
        opts.check()?;
        let ch = self.bind_start(name, iref, opts)?.wait(interrupt)?;
        Ok(ch)
    }

    /// Send the bind request and return at once: the reply completes the
    /// bind later ([`PendingBind`]). `opts.transport` must be resolved
    /// ("ump" or "multihop") and `opts` checked.
    pub fn bind_start(&self, name: &str, iref: u64, opts: &BindOptions) -> Result<PendingBind> {
        PendingBind::start(&self.conn, name, iref, opts)
    }

    /// Status of this dispatcher's monitor (lists cut at `limit` entries).
    pub fn monitor_status(&self, limit: Option<u64>) -> Result<serde_json::Value> {
        let (reply, _) = self.conn.request(|req| Msg::Status { req, limit }, &[], Instant::now() + REQUEST_TIMEOUT, &mut || Ok(()))?;
        match reply {
            Msg::StatusReply { status, .. } => Ok(status),
            other => Err(Error::protocol(format!("monitor answered status with {}", other.op()))),
        }
    }

    /// Detach from the monitor (see [`MonitorConn::detach`]): services vanish
    /// and multi-hop channels end; UMP channels stay usable.
    pub fn detach(&self) {
        self.conn.detach();
    }
}
