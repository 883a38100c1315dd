//! The group service's requests to this monitor (docs/groups.md §5):
//!
//! * `install {group_id, view, window, members: [[node, core, pid]],
//!   trees: [{dest, root_core, parent, children, local, below, depth}]}`: the fan-out
//!   entries of one view, only the trees through this core are looked at;
//!   links are resolved here (a parent or child core: the link to its
//!   monitor; a local node: the link of its dispatcher, found by pid);
//!   `below[i]` lists the destination members under `children[i]` and
//!   `depth` is this core's hops from the root (convergecast, `ccast.rs`);
//! * `remove {group_id, view?}`: drop the entries of a closed view (or of
//!   every view of the group), releasing senders waiting for their credit;
//! * `marks {pid}`: what the dead dispatcher `pid` wrote last on each
//!   stream, answered once its group member link is drained and gone (at
//!   most 5 s).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::Monitor;
use crate::forward::LinkPeer;
use crate::multicast::table::EntrySpec;
use crate::vci::LinkId;
use multihop_base::control::Msg;
use multihop_base::error::{Error, Result};
use multihop_base::sync::lock;
use multihop_base::wire::multicast::TreeKey;

fn field_u32(v: &Value, name: &str) -> Result<u32> {
    v.get(name)
        .and_then(Value::as_u64)
        .filter(|&x| x <= u32::MAX as u64)
        .map(|x| x as u32)
        .ok_or_else(|| Error::invalid(format!("group request: field {name:?} must be an integer in 0..2^32, got {:?}", v.get(name))))
}

fn list_u32(v: &Value, name: &str) -> Result<Vec<u32>> {
    let Some(items) = v.get(name).and_then(Value::as_array) else {
        return Err(Error::invalid(format!("group request: field {name:?} must be a list")));
    };
    items
        .iter()
        .map(|x| {
            x.as_u64()
                .filter(|&x| x <= u32::MAX as u64)
                .map(|x| x as u32)
                .ok_or_else(|| Error::invalid(format!("group request: {name:?} holds {x}, not a u32")))
        })
        .collect()
}

impl Monitor {
    pub(super) fn group_request(&self, req: u64, body: Value) -> Msg {
        let op = body.get("op").and_then(Value::as_str).unwrap_or("").to_string();
        let result = match op.as_str() {
            "install" => self.group_install(&body),
            "remove" => self.group_remove(&body),
            "marks" => self.group_marks(&body),
            other => Err(Error::invalid(format!("unknown group request {other:?} (install, remove, marks)"))),
        };
        match result {
            Ok(body) => Msg::GroupReply { req, body },
            Err(e) => Msg::fail(req, &e),
        }
    }

    /// This core's dispatcher links by pid (the first dispatcher of a process).
    fn dispatcher_links(&self) -> HashMap<u32, LinkId> {
        let conns: Vec<(u64, u32)> = lock(&self.dispatchers).iter().map(|(c, d)| (*c, d.pid)).collect();
        let f = self.fwd.lock();
        let mut out = HashMap::new();
        let mut sorted = conns;
        sorted.sort();
        for (conn, pid) in sorted {
            if let Some(l) = f.link_to(LinkPeer::Dispatcher(conn)) {
                out.entry(pid).or_insert(l);
            }
        }
        out
    }

    fn group_install(&self, body: &Value) -> Result<Value> {
        let me = self.cfg.core;
        let group_id = field_u32(body, "group_id")?;
        let view = field_u32(body, "view")?;
        let window = field_u32(body, "window")?.clamp(1, 4096);
        let mut node_pid: HashMap<u32, (u32, u32)> = HashMap::new();
        for m in body.get("members").and_then(Value::as_array).ok_or_else(|| Error::invalid("group install: members must be a list"))? {
            let t: Vec<u32> = m.as_array().map(|a| a.iter().filter_map(|x| x.as_u64().map(|x| x as u32)).collect()).unwrap_or_default();
            if t.len() != 3 {
                return Err(Error::invalid(format!("group install: a member is [node, core, pid], got {m}")));
            }
            node_pid.insert(t[0], (t[1], t[2]));
        }
        let links = self.dispatcher_links();
        let mut specs = Vec::new();
        let mut missing = Vec::new();
        for t in body.get("trees").and_then(Value::as_array).ok_or_else(|| Error::invalid("group install: trees must be a list"))? {
            let dest = field_u32(t, "dest")?;
            let root_core = field_u32(t, "root_core")?;
            let parent = t.get("parent").and_then(Value::as_u64).map(|p| p as u32);
            let children = list_u32(t, "children")?;
            let local = list_u32(t, "local")?;
            let on_tree = root_core == me || parent.is_some();
            if !on_tree {
                continue;
            }
            let f = self.fwd.lock();
            let from = match parent {
                Some(p) => match f.link_to(LinkPeer::Monitor(p)) {
                    Some(l) => vec![l],
                    None => return Err(Error::invalid(format!("monitor {me} has no link from monitor {p} (tree of {dest} rooted at {root_core})"))),
                },
                None => node_pid.values().filter(|(c, _)| *c == me).filter_map(|(_, pid)| links.get(pid).copied()).collect(),
            };
            // `below`: the destination members under each child (convergecast: who is missing when it dies).
            let below: Vec<Vec<u32>> = match t.get("below").and_then(Value::as_array) {
                Some(b) => b
                    .iter()
                    .map(|x| x.as_array().map(|a| a.iter().filter_map(|n| n.as_u64().map(|n| n as u32)).collect()).unwrap_or_default())
                    .collect(),
                None => Vec::new(),
            };
            let depth = t.get("depth").and_then(Value::as_u64).unwrap_or(0) as u32;
            let mut child_links = Vec::new();
            for (i, c) in children.into_iter().enumerate() {
                match f.link_to(LinkPeer::Monitor(c)) {
                    Some(l) => child_links.push((l, below.get(i).cloned().unwrap_or_default())),
                    None => return Err(Error::invalid(format!("monitor {me} has no link to monitor {c} (tree of {dest} rooted at {root_core})"))),
                }
            }
            let mut local_links = Vec::new();
            let mut absent = Vec::new();
            for n in local {
                match node_pid.get(&n).and_then(|(_, pid)| links.get(pid)) {
                    Some(&l) => local_links.push((n, l)),
                    None => {
                        missing.push(n); // gone already: its death is on its way to the service
                        absent.push(n);
                    }
                }
            }
            let parent_link = if parent.is_some() { from.first().copied() } else { None };
            drop(f);
            specs.push(EntrySpec {
                key: TreeKey { group_id, view, dest, root_core },
                window,
                from,
                parent: parent_link,
                children: child_links,
                local: local_links,
                absent,
                depth,
            });
        }
        let mut f = self.fwd.lock();
        for (pid, l) in &links {
            if node_pid.values().any(|(c, p)| *c == me && p == pid) {
                f.group.note_dispatcher(*l, *pid);
            }
        }
        let n = specs.len();
        for s in specs {
            f.group.install(s);
        }
        drop(f);
        self.fwd.poke();
        missing.sort();
        missing.dedup();
        Ok(json!({"entries": n, "missing": missing}))
    }

    fn group_remove(&self, body: &Value) -> Result<Value> {
        let group_id = field_u32(body, "group_id")?;
        let view = body.get("view").and_then(Value::as_u64).map(|v| v as u32);
        let mut out = Vec::new();
        let mut f = self.fwd.lock();
        let n = f.group.remove(group_id, view, &mut out);
        f.send_group(out);
        drop(f);
        self.fwd.poke(); // the forwarder rings the links written to
        Ok(json!({"removed": n}))
    }

    fn group_marks(&self, body: &Value) -> Result<Value> {
        let pid = field_u32(body, "pid")?;
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            // Only a group member's link of `pid` counts (noted at install): the same process may
            // have attached another dispatcher here since, which wrote nothing of these streams.
            let mut f = self.fwd.lock();
            if !f.group.has_dispatcher(pid) {
                let marks = f.group.take_marks(pid);
                return Ok(json!({"marks": marks}));
            }
            drop(f);
            if Instant::now() > deadline {
                return Err(Error::invalid(format!("a group member of pid {pid} is still attached to monitor {}", self.cfg.core)));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
