//! The fabric's settings, each with its documented default; the Zenoh driver turns them into a Zenoh config
//! ([`FabricConfig::zenoh_settings`]: the `(key, json5 value)` pairs `zenoh::Config::insert_json5` takes).

use std::fmt;
use std::time::Duration;

use crate::keys::{check_fabric, NameError};

/// Zenoh's session mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Default: bridges connect to each other directly (explicit endpoints), no router needed.
    Peer,
    /// Through a router.
    Client,
    Router,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Peer => "peer",
            Mode::Client => "client",
            Mode::Router => "router",
        }
    }
}

/// Zenoh's congestion control of a publisher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Congestion {
    /// Default: a put waits for room (the fabric's credit window keeps that wait short); never drops.
    Block,
    /// Zenoh's own default for puts: drops when its queue is full. The bridge's sequence numbers would then
    /// turn every drop into a teardown, so the fabric does not use it; it exists to be refused by [`FabricConfig::check`].
    Drop,
}

/// Zenoh's priorities, highest first (the numbers are Zenoh's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    RealTime = 1,
    InteractiveHigh = 2,
    InteractiveLow = 3,
    DataHigh = 4,
    Data = 5,
    DataLow = 6,
    Background = 7,
}

impl Priority {
    pub fn from_u8(v: u8) -> Option<Priority> {
        use Priority::*;
        [RealTime, InteractiveHigh, InteractiveLow, DataHigh, Data, DataLow, Background].into_iter().find(|p| *p as u8 == v)
    }
}

/// The default lease.
const DEFAULT_LEASE: Duration = Duration::from_secs(3);
/// The longest lease [`FabricConfig::check`] accepts.
const MAX_LEASE: Duration = Duration::from_secs(60);
/// The longest `wait_before_close` [`FabricConfig::check`] accepts: twice the longest lease.
const MAX_WAIT_BEFORE_CLOSE: Duration = MAX_LEASE.saturating_mul(2);

/// Protocols an endpoint may name (Zenoh's `proto/address`).
pub const PROTOCOLS: &[&str] = &["tcp", "tls", "quic", "udp", "unixsock-stream"];

/// The certificates of a bridge on `tls/` endpoints (Zenoh's TLS link, mutual authentication on): one key and
/// certificate for both sides of a link (a bridge listens and connects), signed by the fabric's CA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tls {
    /// PEM file of the certificate authority every bridge of the fabric is signed by.
    pub ca: String,
    /// PEM file of this bridge's certificate (its names or addresses as subject alternative names: a bridge that
    /// connects checks the listener's against the endpoint it dialled).
    pub cert: String,
    /// PEM file of this bridge's private key.
    pub key: String,
}

/// Every setting of a runtime's membership in a fabric.
#[derive(Clone, Debug, PartialEq)]
pub struct FabricConfig {
    /// The fabric's name: every key is under `mh/<name>/`; a bridge hears only its own fabric.
    pub name: String,
    /// Default [`Mode::Peer`].
    pub mode: Mode,
    /// Endpoints this bridge listens on (`tcp/10.213.0.1:7447`); default none.
    pub listen: Vec<String>,
    /// Endpoints this bridge connects to; default none (explicit endpoints: no scouting finds peers).
    pub connect: Vec<String>,
    /// Zenoh's multicast scouting; default off (a fabric is the endpoints it is given).
    pub multicast_scouting: bool,
    /// Default 3 s: Zenoh's link lease (`transport/link/tx/lease`) and the bridge's own: a peer with no sign of
    /// life for this long is dead, every channel to it torn down (at most lease + 1 s after its last sign).
    pub lease: Duration,
    /// Default 4: Zenoh's keep-alives per lease (`transport/link/tx/keep_alive`).
    pub keep_alive: u32,
    /// Default [`Congestion::Block`] (the only one [`FabricConfig::check`] accepts).
    pub congestion: Congestion,
    /// How long a blocked put waits before Zenoh closes the link (`queue/congestion_control/wait_before_close`):
    /// default twice the lease (6 s), and never below the lease: the lease alone says when a link is dead. A put
    /// waits while the peer's TCP stream stalls (a retransmission timeout on a lossy link, the peer paused for less
    /// than the lease); a shorter wait cut such live links (measured, docs/fabric.md §7, decision 13). A frozen or
    /// cut peer does not need it: the bridge's own lease declares it dead, and Zenoh's lease closes its transport.
    pub wait_before_close: Duration,
    /// A channel's priority unless its bind names one; default [`Priority::Data`]. One priority per channel,
    /// fixed at bind (Zenoh orders only within a priority).
    pub priority: Priority,
    /// Heartbeats' priority: default [`Priority::InteractiveHigh`] (not queued behind a channel's data).
    pub heartbeat_priority: Priority,
    /// Largest put of several frames for one peer runtime: default 64 KiB (a frame larger goes alone).
    pub batch_bytes: usize,
    /// Certificates for `tls/` endpoints (required by them): default none. With them, only a holder of a
    /// certificate of the same CA connects to this bridge or is connected to (mTLS).
    pub tls: Option<Tls>,
}

impl FabricConfig {
    /// The default `wait_before_close` for a lease: twice it (see the field).
    pub fn wait_before_close_for(lease: Duration) -> Duration {
        lease * 2
    }

    /// The defaults, for fabric `name` (checked).
    pub fn new(name: &str) -> Result<FabricConfig, NameError> {
        check_fabric(name)?;
        Ok(FabricConfig {
            name: name.to_string(),
            mode: Mode::Peer,
            listen: Vec::new(),
            connect: Vec::new(),
            multicast_scouting: false,
            lease: DEFAULT_LEASE,
            keep_alive: 4,
            congestion: Congestion::Block,
            wait_before_close: FabricConfig::wait_before_close_for(DEFAULT_LEASE),
            priority: Priority::Data,
            heartbeat_priority: Priority::InteractiveHigh,
            batch_bytes: 64 << 10,
            tls: None,
        })
    }

    /// A heartbeat to each peer every lease / 4.
    pub fn heartbeat_interval(&self) -> Duration {
        self.lease / 4
    }

    /// Every setting checked; the error names the setting.
    pub fn check(&self) -> Result<(), ConfigError> {
        let bad = |setting: &'static str, why: String| Err(ConfigError { setting, why });
        check_fabric(&self.name).map_err(|e| ConfigError { setting: "name", why: e.to_string() })?;
        for (setting, list) in [("listen", &self.listen), ("connect", &self.connect)] {
            for e in list {
                if let Err(why) = check_endpoint(e) {
                    return bad(setting, why);
                }
            }
        }
        if self.lease < Duration::from_millis(100) || self.lease > MAX_LEASE {
            return bad("lease", format!("{:?} outside 100 ms..=60 s", self.lease));
        }
        if !(1..=64).contains(&self.keep_alive) {
            return bad("keep_alive", format!("{} outside 1..=64", self.keep_alive));
        }
        if self.congestion != Congestion::Block {
            return bad("congestion", "only Block: a dropped put would close its channels (sequence gap)".to_string());
        }
        if self.wait_before_close < self.lease || self.wait_before_close > MAX_WAIT_BEFORE_CLOSE {
            let why = format!(
                "{:?} must be at least the lease {:?} (the lease says when a link is dead) and at most {:?}",
                self.wait_before_close, self.lease, MAX_WAIT_BEFORE_CLOSE
            );
            return bad("wait_before_close", why);
        }
        if !(4096..=16 << 20).contains(&self.batch_bytes) {
            return bad("batch_bytes", format!("{} outside 4096..=16 MiB", self.batch_bytes));
        }
        match &self.tls {
            None => {
                if let Some(e) = self.listen.iter().chain(&self.connect).find(|e| e.starts_with("tls/")) {
                    return bad("tls", format!("endpoint {e:?} is TLS: give the CA, the certificate and the key"));
                }
            }
            Some(t) => {
                for (what, path) in [("ca", &t.ca), ("cert", &t.cert), ("key", &t.key)] {
                    if path.is_empty() || path.chars().any(|c| c.is_control() || c == '"') {
                        return bad("tls", format!("{what} file {path:?}: empty, or a quote or control character in it"));
                    }
                }
            }
        }
        Ok(())
    }

    /// The Zenoh config this stands for, as `(key, json5 value)` pairs for `zenoh::Config::insert_json5`.
    pub fn zenoh_settings(&self) -> Vec<(&'static str, String)> {
        let list = |v: &[String]| format!("[{}]", v.iter().map(|e| format!("{e:?}")).collect::<Vec<_>>().join(","));
        let mut out = vec![
            ("mode", format!("{:?}", self.mode.as_str())),
            ("listen/endpoints", list(&self.listen)),
            ("connect/endpoints", list(&self.connect)),
            ("scouting/multicast/enabled", self.multicast_scouting.to_string()),
            ("scouting/gossip/enabled", "true".to_string()),
            ("transport/link/tx/lease", self.lease.as_millis().to_string()),
            ("transport/link/tx/keep_alive", self.keep_alive.to_string()),
            ("transport/link/tx/queue/congestion_control/block/wait_before_close", self.wait_before_close.as_micros().to_string()),
        ];
        if let Some(t) = &self.tls {
            out.extend([
                ("transport/link/tls/root_ca_certificate", format!("{:?}", t.ca)),
                ("transport/link/tls/listen_certificate", format!("{:?}", t.cert)),
                ("transport/link/tls/listen_private_key", format!("{:?}", t.key)),
                ("transport/link/tls/connect_certificate", format!("{:?}", t.cert)),
                ("transport/link/tls/connect_private_key", format!("{:?}", t.key)),
                ("transport/link/tls/enable_mtls", "true".to_string()),
            ]);
        }
        out
    }
}

/// `proto/address`, proto among [`PROTOCOLS`], an address of printable non-space characters.
pub fn check_endpoint(e: &str) -> Result<(), String> {
    let Some((proto, addr)) = e.split_once('/') else { return Err(format!("endpoint {e:?}: not proto/address")) };
    if !PROTOCOLS.contains(&proto) {
        return Err(format!("endpoint {e:?}: protocol {proto:?} not one of {}", PROTOCOLS.join(", ")));
    }
    if addr.is_empty() || addr.chars().any(|c| c.is_control() || c.is_whitespace() || c == '"') {
        return Err(format!("endpoint {e:?}: empty address or a space, quote or control character in it"));
    }
    Ok(())
}

/// A setting that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub setting: &'static str,
    pub why: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fabric setting {}: {}", self.setting, self.why)
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_ones() {
        let c = FabricConfig::new("lab").unwrap();
        assert_eq!(c.mode, Mode::Peer);
        assert!(c.listen.is_empty() && c.connect.is_empty());
        assert!(!c.multicast_scouting);
        assert_eq!(c.lease, Duration::from_secs(3));
        assert_eq!(c.keep_alive, 4);
        assert_eq!(c.congestion, Congestion::Block);
        assert_eq!(c.priority, Priority::Data);
        assert_eq!(c.heartbeat_interval(), Duration::from_millis(750));
        assert_eq!(c.wait_before_close, Duration::from_secs(6));
        assert_eq!(c.wait_before_close, c.lease * 2);
        c.check().unwrap();
        let z = c.zenoh_settings();
        assert!(z.contains(&("mode", "\"peer\"".to_string())));
        assert!(z.contains(&("scouting/multicast/enabled", "false".to_string())));
        assert!(z.contains(&("transport/link/tx/lease", "3000".to_string())));
        assert!(z.contains(&("transport/link/tx/keep_alive", "4".to_string())));
    }

    #[test]
    fn bad_settings_are_named() {
        assert!(FabricConfig::new("a/b").is_err());
        let ok = FabricConfig::new("lab").unwrap();
        let cases: Vec<(&str, Box<dyn Fn(&mut FabricConfig)>)> = vec![
            ("listen", Box::new(|c| c.listen.push("tcp10.0.0.1:7447".into()))),
            ("connect", Box::new(|c| c.connect.push("smoke/10.0.0.1:7447".into()))),
            ("connect", Box::new(|c| c.connect.push("tcp/".into()))),
            ("lease", Box::new(|c| c.lease = Duration::from_millis(10))),
            ("keep_alive", Box::new(|c| c.keep_alive = 0)),
            ("congestion", Box::new(|c| c.congestion = Congestion::Drop)),
            ("wait_before_close", Box::new(|c| c.wait_before_close = Duration::from_secs(2))),
            ("wait_before_close", Box::new(|c| c.wait_before_close = Duration::from_secs(121))),
            ("batch_bytes", Box::new(|c| c.batch_bytes = 10)),
            ("name", Box::new(|c| c.name = "-x".into())),
        ];
        for (setting, f) in cases {
            let mut c = ok.clone();
            f(&mut c);
            assert_eq!(c.check().unwrap_err().setting, setting);
        }
        let mut c = ok.clone();
        c.listen = vec!["tcp/10.213.0.1:7447".into()];
        c.connect = vec!["tls/hostb:7447".into()];
        assert_eq!(c.check().unwrap_err().setting, "tls", "a tls/ endpoint needs certificates");
        c.tls = Some(Tls { ca: "/etc/mh/ca.pem".into(), cert: "/etc/mh/a.pem".into(), key: "/etc/mh/a.key".into() });
        c.check().unwrap();
        let z = c.zenoh_settings();
        assert!(z.contains(&("connect/endpoints", "[\"tls/hostb:7447\"]".to_string())));
        assert!(z.contains(&("transport/link/tls/root_ca_certificate", "\"/etc/mh/ca.pem\"".to_string())));
        assert!(z.contains(&("transport/link/tls/enable_mtls", "true".to_string())));
        c.tls.as_mut().unwrap().key = String::new();
        assert_eq!(c.check().unwrap_err().setting, "tls");
        assert_eq!(Priority::from_u8(5), Some(Priority::Data));
        assert_eq!(Priority::from_u8(0), None);
        assert_eq!(Priority::from_u8(8), None);
    }
}
