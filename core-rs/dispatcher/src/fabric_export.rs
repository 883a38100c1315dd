//! A service exported to the runtime's fabric, and the bridge's status: the dispatcher's side of the bridge's
//! control socket (`<runtime dir>/fabric.sock`, served by `multihop-bridge` when the runtime has a fabric).
//!
//! The protocol is lines of text, one request and one reply per line:
//!
//! ```text
//! export NAME   ->  ok | error TEXT     the connection stays open; NAME stays exported to the fabric until it
//!                                       closes (the service withdrawn, its process gone: the kernel closes it)
//! status        ->  one line of JSON    the bridge's view: peers, their services, bridged channels, counters
//! ```
//!
//! A service is local unless exported this way: the bridge answers a bind from another runtime only for a name
//! some live connection exported (docs/fabric.md, the trust model).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use multihop_base::error::{Error, ErrorKind, Result};

/// The bridge's control socket in a runtime directory.
pub const FABRIC_SOCKET: &str = "fabric.sock";

/// The control socket of the bridge of the runtime in `dir`.
pub fn fabric_socket(dir: &Path) -> PathBuf {
    dir.join(FABRIC_SOCKET)
}

/// One service's export to the fabric; dropping it withdraws the export.
#[derive(Debug)]
pub struct FabricExport {
    _conn: UnixStream,
}

fn connect(dir: &Path, timeout: Duration, what: &str) -> Result<UnixStream> {
    let path = fabric_socket(dir);
    let s = UnixStream::connect(&path).map_err(|e| {
        let kind = if what == "export" { ErrorKind::Export } else { ErrorKind::Monitor };
        let why = match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                format!("the runtime has no fabric (no bridge answers at {}): start it with a fabric", path.display())
            }
            _ => format!("cannot reach the runtime's bridge at {}: {e}", path.display()),
        };
        Error::new(kind, why)
    })?;
    s.set_read_timeout(Some(timeout)).map_err(|e| Error::os("fabric socket timeout", e))?;
    s.set_write_timeout(Some(timeout)).map_err(|e| Error::os("fabric socket timeout", e))?;
    Ok(s)
}

fn ask(s: &UnixStream, line: &str, timeout: Duration) -> Result<String> {
    (&*s).write_all(format!("{line}\n").as_bytes()).map_err(|e| Error::os("writing to the runtime's bridge", e))?;
    let mut reply = String::new();
    let mut r = BufReader::new(s);
    match r.read_line(&mut reply) {
        Ok(0) => Err(Error::new(ErrorKind::Monitor, "the runtime's bridge closed its control connection without answering")),
        Ok(_) => Ok(reply.trim_end().to_string()),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
            Err(Error::new(ErrorKind::Timeout, format!("the runtime's bridge did not answer {line:?} within {timeout:?}")))
        }
        Err(e) => Err(Error::os("reading from the runtime's bridge", e)),
    }
}

/// Tell the bridge of the runtime in `dir` that `service` (exported on this runtime) is exported to the fabric.
pub fn export_to_fabric(dir: &Path, service: &str, timeout: Duration) -> Result<FabricExport> {
    if service.contains(['\n', '@']) {
        return Err(Error::new(ErrorKind::Export, format!("service name {service:?} cannot be exported to a fabric: no '@' or newline in it")));
    }
    let s = connect(dir, timeout, "export")?;
    let reply = ask(&s, &format!("export {service}"), timeout)?;
    match reply.strip_prefix("error ") {
        None if reply == "ok" => {
            // From now on nothing is read: the connection only has to stay open.
            s.set_read_timeout(None).map_err(|e| Error::os("fabric socket timeout", e))?;
            Ok(FabricExport { _conn: s })
        }
        None => Err(Error::protocol(format!("the runtime's bridge answered export with {reply:?}"))),
        Some(why) => Err(Error::new(ErrorKind::Export, format!("the fabric refused to export {service:?}: {why}"))),
    }
}

/// The bridge's status (peers, their services, bridged channels with counters), as JSON.
pub fn fabric_status(dir: &Path, timeout: Duration) -> Result<serde_json::Value> {
    let s = connect(dir, timeout, "status")?;
    let reply = ask(&s, "status", timeout)?;
    serde_json::from_str(&reply).map_err(|e| Error::protocol(format!("the runtime's bridge answered status with bad JSON: {e}")))
}
