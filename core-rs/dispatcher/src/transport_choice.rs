//! `"auto"`: the transport a bind takes when the caller leaves the choice to
//! the runtime (Flounder's driver order, TN-006 §5.1). `Dispatcher::bind`
//! resolves it here, so Python (`d.bind(..., transport="auto")`, the
//! generated bindings) and the C ABI (`mh_bind(d, name, "auto", ...)`) share
//! one rule.
//!
//! The rule: UMP when the service's core is the client's own
//! core, or the routing table gives the service's core as its own next hop
//! from the client's core (the runtime links the two cores directly); a
//! multi-hop channel otherwise.  Both facts come from the initial monitor:
//! `Lookup` for the service's core, `GetRow` for the client core's row.

use std::path::Path;
use std::time::Duration;

use multihop_base::control::{self, monitor_socket, Msg, Role};
use multihop_base::defaults::REQUEST_TIMEOUT;
use multihop_base::error::{Error, ErrorKind, Result};

/// How long each of the two questions to the initial monitor may take.
const ASK_TIMEOUT: Duration = REQUEST_TIMEOUT;

/// The transport "auto" stands for when a dispatcher of `core` in the runtime
/// at `dir` binds to service `name` (or, when `name` is empty, to `iref`):
/// `"ump"` or `"multihop"`.
pub fn choose(dir: &Path, core: u32, name: &str, iref: u64) -> Result<&'static str> {
    let initial = initial_monitor(dir)?;
    let ask = |msg: &Msg| control::call(&initial, Role::Tool, msg, &[], ASK_TIMEOUT).map(|(reply, _)| reply);
    let lookup = Msg::Lookup { req: 1, name: name.to_string(), iref };
    let service_core = match ask(&lookup)? {
        Msg::Found { core, .. } => core,
        other => return Err(Error::protocol(format!("the registry answered a lookup with {other:?}"))),
    };
    if service_core == core {
        return Ok("ump");
    }
    let row = match ask(&Msg::GetRow { req: 2, core })? {
        Msg::Row { row, .. } => row,
        other => return Err(Error::protocol(format!("a routing-row request got {other:?}"))),
    };
    let direct = row.iter().any(|&(dst, next)| dst == service_core && next == service_core);
    Ok(if direct { "ump" } else { "multihop" })
}

/// The socket of the runtime's initial monitor: its first core, from `runtime.json`.
fn initial_monitor(dir: &Path) -> Result<std::path::PathBuf> {
    let meta = dir.join("runtime.json");
    let text = std::fs::read_to_string(&meta).map_err(|e| Error::new(ErrorKind::RuntimeNotFound, format!("cannot read {}: {e}", meta.display())))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::protocol(format!("{} is not valid JSON: {e}", meta.display())))?;
    let first = value["cores"][0].as_u64().ok_or_else(|| Error::protocol(format!("{} names no cores", meta.display())))?;
    Ok(monitor_socket(dir, first as u32))
}
