//! This monitor's routing row (TN-006 2.9): the initial monitor gets the
//! whole table from the RTS; a later monitor asks it for its row at boot,
//! then opens the links its row names (each undirected link is opened by its
//! lower core).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{log, Monitor, RowAndLinks, Table};
use multihop_base::control::{self, monitor_socket, Msg, Role};
use multihop_base::error::{Error, Result};
use multihop_base::sync::lock;

/// Row, links to open, and all neighbours of `core` in `table`.
pub(super) fn row_of(table: &Table, core: u32) -> Result<RowAndLinks> {
    let row = table.get(&core).cloned().ok_or_else(|| Error::invalid(format!("the routing table has no row for core {core}")))?;
    let mut neighbours = BTreeSet::new();
    for (src, r) in table {
        for &hop in r.values() {
            if *src == core && hop != core {
                neighbours.insert(hop);
            }
            if hop == core && *src != core {
                neighbours.insert(*src);
            }
        }
    }
    let initiate = neighbours.iter().copied().filter(|&n| core < n).collect();
    Ok((row, initiate, neighbours.into_iter().collect()))
}

impl Monitor {
    /// A later monitor's boot: get our row from the initial monitor, then
    /// open the links it names.
    pub(super) fn boot(self: Arc<Self>) {
        let path = monitor_socket(&self.cfg.dir, self.cfg.initial_core);
        let deadline = Instant::now() + Duration::from_secs(30);
        let row = loop {
            if self.stopping.load(Ordering::Relaxed) {
                return;
            }
            let msg = Msg::GetRow { req: 1, core: self.cfg.core };
            match control::call(&path, Role::Monitor, &msg, &[], Duration::from_secs(5)) {
                Ok((Msg::Row { row, initiate, neighbours, .. }, _)) => break (row.into_iter().collect(), initiate, neighbours),
                Ok((other, _)) => log(self.cfg.core, format_args!("initial monitor answered GetRow with {}", other.op())),
                Err(_) if Instant::now() < deadline => {}
                Err(e) => return log(self.cfg.core, format_args!("no routing row from the initial monitor: {e}")),
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        self.install_row(row.0, row.1, row.2);
    }

    pub(super) fn install_row(self: &Arc<Self>, row: BTreeMap<u32, u32>, initiate: Vec<u32>, neighbours: Vec<u32>) {
        *lock(&self.row) = row;
        *lock(&self.neighbours) = neighbours;
        for peer in initiate {
            let m = self.clone();
            let opened = super::spawn("link", move || {
                let deadline = Instant::now() + Duration::from_secs(30);
                while !m.stopping.load(Ordering::Relaxed) {
                    match m.open_monitor_link(peer) {
                        Ok(()) => return,
                        Err(e) if Instant::now() > deadline => {
                            return log(m.cfg.core, format_args!("could not open the link to monitor {peer}: {e}"));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            });
            if let Err(e) = opened {
                log(self.cfg.core, format_args!("{e}: no link to monitor {peer}"));
            }
        }
    }
}
