//! The name registry (initial monitor only): name -> (iref, core), and the
//! exports and withdrawals of this core's dispatchers that feed it.

use std::time::Duration;

use super::{log, Monitor, ServiceEntry};
use multihop_base::control::{self, monitor_socket, Msg, Role};
use multihop_base::error::{Error, ErrorKind, Result};
use multihop_base::sync::lock;

/// Longest service name, in bytes.
pub(super) const MAX_SERVICE_NAME: usize = 256;

impl Monitor {
    pub(super) fn register(&self, req: u64, name: String, core: u32) -> Msg {
        if !self.is_initial() {
            return Msg::fail(req, &Error::protocol("register sent to a monitor that is not the initial one"));
        }
        let mut reg = lock(&self.registry);
        if let Some((iref, c)) = reg.get(&name) {
            return Msg::fail(req, &Error::new(ErrorKind::Export, format!("service name {name:?} is already exported (iref {iref:#x} on core {c})")));
        }
        let iref = (core as u64) << 40 | self.next_id();
        reg.insert(name, (iref, core));
        Msg::Exported { req, iref }
    }

    pub(super) fn unregister(&self, iref: u64) {
        lock(&self.registry).retain(|_, (i, _)| *i != iref);
    }

    pub(super) fn lookup(&self, req: u64, name: &str, iref: u64) -> Msg {
        let reg = lock(&self.registry);
        let found = if name.is_empty() {
            reg.iter().find(|(_, (i, _))| *i == iref).map(|(n, (i, c))| (n.clone(), *i, *c))
        } else {
            reg.get(name).map(|(i, c)| (name.to_string(), *i, *c))
        };
        match found {
            Some((name, iref, core)) => Msg::Found { req, name, iref, core },
            None => {
                let what = if name.is_empty() { format!("iref {iref:#x}") } else { format!("{name:?}") };
                Msg::fail(req, &Error::new(ErrorKind::Bind, format!("no service {what} is exported in this runtime")))
            }
        }
    }

    /// A registry call, answered here on the initial monitor or forwarded to it.
    pub(super) fn initial_call(&self, msg: &Msg) -> Result<Msg> {
        if self.is_initial() {
            let reply = match msg {
                Msg::Register { req, name, core, .. } => self.register(*req, name.clone(), *core),
                Msg::Lookup { req, name, iref } => self.lookup(*req, name, *iref),
                Msg::Unregister { iref } => {
                    self.unregister(*iref);
                    Msg::Done { req: 0 }
                }
                other => return Err(Error::protocol(format!("{} is not a registry call", other.op()))),
            };
            return reply.into_result();
        }
        let path = monitor_socket(&self.cfg.dir, self.cfg.initial_core);
        control::call(&path, Role::Monitor, msg, &[], Duration::from_secs(10)).map(|(m, _)| m)
    }

    /// A dispatcher of this core exports `name`.
    pub(super) fn export(&self, conn: u64, pid: u32, req: u64, name: String) -> Msg {
        if name.is_empty() || name.len() > MAX_SERVICE_NAME || name.chars().any(|c| c.is_control()) {
            return Msg::fail(
                req,
                &Error::new(ErrorKind::Export, format!("invalid service name {name:?}: 1..{MAX_SERVICE_NAME} bytes of printable characters")),
            );
        }
        match self.initial_call(&Msg::Register { req, name: name.clone(), core: self.cfg.core, pid }) {
            Ok(Msg::Exported { iref, .. }) => {
                lock(&self.services).insert(iref, ServiceEntry { name, dispatcher: conn });
                Msg::Exported { req, iref }
            }
            Ok(other) => Msg::fail(req, &Error::protocol(format!("registry answered {}", other.op()))),
            Err(e) => Msg::fail(req, &e),
        }
    }

    /// Withdraw services of this core (of dispatcher `conn`; `only`: just that iref).
    pub(super) fn unexport(&self, conn: u64, only: Option<u64>) {
        let gone: Vec<u64> = {
            let mut services = lock(&self.services);
            let irefs: Vec<u64> = services.iter().filter(|(i, s)| s.dispatcher == conn && only.is_none_or(|o| o == **i)).map(|(i, _)| *i).collect();
            for i in &irefs {
                services.remove(i);
            }
            irefs
        };
        for iref in gone {
            if let Err(e) = self.initial_call(&Msg::Unregister { iref }) {
                log(self.cfg.core, format_args!("could not unregister iref {iref:#x}: {e}"));
            }
        }
    }
}
