//! What `multihop status` shows of one monitor: counts always whole, lists
//! (dispatchers, services, channels, registry) cut at `limit` entries each
//! when asked (`None`: all of them; the reply streams in pieces whatever its
//! size, see `sock.rs`).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use serde_json::{json, Value};

use super::Monitor;
use multihop_base::sync::lock;

fn take(limit: Option<u64>) -> usize {
    limit.map_or(usize::MAX, |l| l.min(usize::MAX as u64) as usize)
}

impl Monitor {
    pub(super) fn status(&self, limit: Option<u64>) -> Value {
        let n = take(limit);
        let (dispatchers, n_dispatchers) = {
            let d = lock(&self.dispatchers);
            let list: Vec<_> = d.iter().take(n).map(|(id, d)| json!({"id": id, "pid": d.pid, "channels": d.channels.len()})).collect();
            (list, d.len())
        };
        let (services, n_services) = {
            let s = lock(&self.services);
            let list: Vec<_> = s.iter().take(n).map(|(iref, s)| json!({"name": s.name, "iref": iref, "dispatcher": s.dispatcher})).collect();
            (list, s.len())
        };
        let (channels, n_channels) = {
            let c = lock(&self.channels);
            let list: Vec<_> = c
                .iter()
                .take(n)
                .map(|((disp, id), c)| {
                    json!({"id": id, "dispatcher": disp, "service": c.service, "transport": c.transport,
                           "client_pid": c.client_pid, "server_pid": c.server_pid, "side": c.role})
                })
                .collect();
            (list, c.len())
        };
        let (registry, n_registry) = if self.is_initial() {
            let r = lock(&self.registry);
            let list: Vec<_> = r.iter().take(n).map(|(name, (i, c))| json!({"name": name, "iref": i, "core": c})).collect();
            (Some(list), r.len())
        } else {
            (None, 0)
        };
        let data = self.fwd.status();
        let links_up = self.fwd.lock().monitor_links();
        let row: BTreeMap<String, u32> = lock(&self.row).iter().map(|(d, n)| (d.to_string(), *n)).collect();
        json!({
            "core": self.cfg.core,
            "pid": self.pid,
            "routing_row": row,
            "neighbours": *lock(&self.neighbours),
            "monitor_links_up": links_up,
            "data": data,
            "cpu": self.cfg.cpu,
            "initial": self.is_initial(),
            "uptime_s": self.started.elapsed().as_secs_f64(),
            "counts": {"dispatchers": n_dispatchers, "services": n_services, "channels": n_channels, "registry": n_registry},
            "limit": limit,
            "dispatchers": dispatchers,
            "services": services,
            "channels": channels,
            "registry": registry,
            "binds_ok": self.counters.binds_ok.load(Ordering::Relaxed),
            "binds_failed": self.counters.binds_failed.load(Ordering::Relaxed),
            "bad_frames": self.counters.bad_frames.load(Ordering::Relaxed),
            "refused_peers": self.counters.refused_peers.load(Ordering::Relaxed),
            "refused_descriptor_table_full": self.counters.refused_full.load(Ordering::Relaxed),
            "idle_hangups": self.counters.idle_hangups.load(Ordering::Relaxed),
            "handles": self.caps_status(),
        })
    }
}
