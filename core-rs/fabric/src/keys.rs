//! The fabric's key space and the names that go into it.
//!
//! ```text
//! mh/<fabric>/rt/<runtime>             liveliness token of each runtime's bridge
//! mh/<fabric>/svc/<runtime>/<service>  liveliness token per service exported to the fabric
//! mh/<fabric>/ch/<runtime>/<chan>      liveliness token per bridged channel (held by the bridge that opened it)
//! mh/<fabric>/bind/<runtime>           bind requests for that runtime's bridge
//! mh/<fabric>/data/<runtime>           frames (and acks, probes, teardowns, bind replies) for that runtime's bridge
//! mh/<fabric>/hb/<runtime>             heartbeats for that runtime's bridge
//! ```
//!
//! Every name is one key chunk: a fabric or runtime name follows the runtime-name rule of
//! [`multihop_base::paths::check_name`] (1-64 of `A-Z a-z 0-9 _ . -`, not starting with `.` or `-`); a service
//! name is the registry's (1-256 bytes, no control character) minus what would break a Zenoh key expression or the
//! `svc@runtime` syntax (`/ * $ ? # @`). A channel chunk is its id in decimal.

use std::fmt;

use multihop_base::paths::{check_name, MAX_NAME};

/// Longest service name, in bytes (the registry's limit).
pub const MAX_SERVICE_NAME: usize = 256;

/// The first chunk of every key of every fabric.
pub const ROOT: &str = "mh";

/// A name the key space cannot hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameError {
    /// What the name names: "fabric", "runtime" or "service".
    pub what: &'static str,
    pub name: String,
    pub why: String,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {} name {:?}: {}", self.what, self.name, self.why)
    }
}

impl std::error::Error for NameError {}

fn runtime_rule(what: &'static str, name: &str) -> Result<(), NameError> {
    check_name(name).map(|_| ()).map_err(|_| NameError {
        what,
        name: name.to_string(),
        why: format!("use 1-{MAX_NAME} characters from A-Z a-z 0-9 _ . -, not starting with . or -"),
    })
}

/// A fabric's name: the runtime-name rule.
pub fn check_fabric(name: &str) -> Result<(), NameError> {
    runtime_rule("fabric", name)
}

/// A runtime's name: the runtime-name rule (the one a runtime's directory is made with).
pub fn check_runtime(name: &str) -> Result<(), NameError> {
    runtime_rule("runtime", name)
}

/// The characters a service exported to the fabric may not hold: Zenoh's wildcard and reserved characters, and the
/// `@` of `svc@runtime`. A `/` is allowed between non-empty parts (`ges/lab/1.2.3`): its key then has one chunk per
/// part, the service being everything after the runtime.
pub const SERVICE_FORBIDDEN: &[char] = &['*', '$', '?', '#', '@'];

/// A service name that may be exported to the fabric (and bound as `service@runtime`).
pub fn check_service(name: &str) -> Result<(), NameError> {
    let bad = |why: String| Err(NameError { what: "service", name: name.to_string(), why });
    if name.is_empty() || name.len() > MAX_SERVICE_NAME {
        return bad(format!("use 1-{MAX_SERVICE_NAME} bytes (it has {})", name.len()));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return bad(format!("control character {c:?}"));
    }
    if let Some(c) = name.chars().find(|c| SERVICE_FORBIDDEN.contains(c)) {
        return bad(format!("{c:?} cannot be in a name on the fabric (none of * $ ? # @)"));
    }
    if name.split('/').any(str::is_empty) {
        return bad("a '/' only between non-empty parts (no leading, trailing or doubled '/')".to_string());
    }
    Ok(())
}

/// `"svc@runtime"` split into its service and runtime, both checked; `None` for a name without `@` (a local
/// service, as today).
pub fn split_target(target: &str) -> Option<Result<(&str, &str), NameError>> {
    let (svc, rt) = target.split_once('@')?;
    Some(check_service(svc).and_then(|()| check_runtime(rt)).map(|()| (svc, rt)))
}

/// What a key of the fabric is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyKind {
    Runtime,
    Service,
    Channel,
    Bind,
    Data,
    Heartbeat,
}

impl KeyKind {
    /// The key's third chunk.
    pub fn chunk(self) -> &'static str {
        match self {
            KeyKind::Runtime => "rt",
            KeyKind::Service => "svc",
            KeyKind::Channel => "ch",
            KeyKind::Bind => "bind",
            KeyKind::Data => "data",
            KeyKind::Heartbeat => "hb",
        }
    }

    fn from_chunk(s: &str) -> Option<KeyKind> {
        [KeyKind::Runtime, KeyKind::Service, KeyKind::Channel, KeyKind::Bind, KeyKind::Data, KeyKind::Heartbeat].into_iter().find(|k| k.chunk() == s)
    }
}

/// The keys of one fabric. Built from a checked fabric name; every function checks the names it is given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySpace {
    fabric: String,
}

/// A key of the fabric, taken apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    pub kind: KeyKind,
    pub runtime: String,
    /// The service of a `svc` key.
    pub service: Option<String>,
    /// The channel of a `ch` key.
    pub channel: Option<u64>,
}

impl KeySpace {
    pub fn new(fabric: &str) -> Result<KeySpace, NameError> {
        check_fabric(fabric)?;
        Ok(KeySpace { fabric: fabric.to_string() })
    }

    pub fn fabric(&self) -> &str {
        &self.fabric
    }

    fn of(&self, kind: KeyKind, runtime: &str) -> Result<String, NameError> {
        check_runtime(runtime)?;
        Ok(format!("{ROOT}/{}/{}/{runtime}", self.fabric, kind.chunk()))
    }

    /// `mh/<fabric>/rt/<runtime>`
    pub fn runtime(&self, runtime: &str) -> Result<String, NameError> {
        self.of(KeyKind::Runtime, runtime)
    }

    /// `mh/<fabric>/svc/<runtime>/<service>`
    pub fn service(&self, runtime: &str, service: &str) -> Result<String, NameError> {
        check_service(service)?;
        Ok(format!("{}/{service}", self.of(KeyKind::Service, runtime)?))
    }

    /// `mh/<fabric>/ch/<runtime>/<chan>`: `runtime` is the one whose bridge opened the channel.
    pub fn channel(&self, runtime: &str, chan: u64) -> Result<String, NameError> {
        Ok(format!("{}/{chan}", self.of(KeyKind::Channel, runtime)?))
    }

    /// `mh/<fabric>/bind/<runtime>`
    pub fn bind(&self, runtime: &str) -> Result<String, NameError> {
        self.of(KeyKind::Bind, runtime)
    }

    /// `mh/<fabric>/data/<runtime>`
    pub fn data(&self, runtime: &str) -> Result<String, NameError> {
        self.of(KeyKind::Data, runtime)
    }

    /// `mh/<fabric>/hb/<runtime>`
    pub fn heartbeat(&self, runtime: &str) -> Result<String, NameError> {
        self.of(KeyKind::Heartbeat, runtime)
    }

    /// What a subscriber of the whole fabric (`mh/<fabric>/**`) or of one kind (`mh/<fabric>/<kind>/*`) says.
    pub fn all(&self, kind: Option<KeyKind>) -> String {
        match kind {
            None => format!("{ROOT}/{}/**", self.fabric),
            Some(KeyKind::Service) => format!("{ROOT}/{}/svc/*/**", self.fabric),
            Some(KeyKind::Channel) => format!("{ROOT}/{}/ch/*/*", self.fabric),
            Some(k) => format!("{ROOT}/{}/{}/*", self.fabric, k.chunk()),
        }
    }

    /// A key of this fabric taken apart, every chunk checked; an error names what is wrong (another fabric's key
    /// included: a bridge ignores those).
    pub fn parse(&self, key: &str) -> Result<Key, String> {
        let parts: Vec<&str> = key.split('/').collect();
        let [root, fabric, kind, runtime, rest @ ..] = parts.as_slice() else {
            return Err(format!("key {key:?}: fewer than 4 chunks"));
        };
        if *root != ROOT {
            return Err(format!("key {key:?}: not under {ROOT}/"));
        }
        if *fabric != self.fabric {
            return Err(format!("key {key:?}: fabric {fabric:?}, not {:?}", self.fabric));
        }
        let kind = KeyKind::from_chunk(kind).ok_or_else(|| format!("key {key:?}: unknown kind {kind:?}"))?;
        check_runtime(runtime).map_err(|e| format!("key {key:?}: {e}"))?;
        let mut k = Key { kind, runtime: runtime.to_string(), service: None, channel: None };
        match (kind, rest) {
            (KeyKind::Service, parts) if !parts.is_empty() => {
                let svc = parts.join("/");
                check_service(&svc).map_err(|e| format!("key {key:?}: {e}"))?;
                k.service = Some(svc);
            }
            (KeyKind::Channel, [chan]) => {
                let ok = !chan.is_empty() && chan.bytes().all(|b| b.is_ascii_digit()) && (chan.len() == 1 || !chan.starts_with('0'));
                k.channel = Some(chan.parse().ok().filter(|_| ok).ok_or_else(|| format!("key {key:?}: channel {chan:?} is not a decimal u64"))?);
            }
            (KeyKind::Runtime | KeyKind::Bind | KeyKind::Data | KeyKind::Heartbeat, []) => {}
            _ => return Err(format!("key {key:?}: wrong number of chunks for a {} key", kind.chunk())),
        }
        Ok(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_built_and_parsed_back() {
        let ks = KeySpace::new("lab").unwrap();
        assert_eq!(ks.runtime("hosta").unwrap(), "mh/lab/rt/hosta");
        assert_eq!(ks.service("hosta", "echo.v1").unwrap(), "mh/lab/svc/hosta/echo.v1");
        assert_eq!(ks.channel("hosta", 17).unwrap(), "mh/lab/ch/hosta/17");
        assert_eq!(ks.bind("b").unwrap(), "mh/lab/bind/b");
        assert_eq!(ks.data("b").unwrap(), "mh/lab/data/b");
        assert_eq!(ks.heartbeat("b").unwrap(), "mh/lab/hb/b");
        assert_eq!(ks.all(None), "mh/lab/**");
        assert_eq!(ks.all(Some(KeyKind::Service)), "mh/lab/svc/*/**");
        assert_eq!(ks.all(Some(KeyKind::Channel)), "mh/lab/ch/*/*");
        assert_eq!(ks.all(Some(KeyKind::Runtime)), "mh/lab/rt/*");
        let k = ks.parse("mh/lab/svc/hosta/echo.v1").unwrap();
        assert_eq!((k.kind, k.runtime.as_str(), k.service.as_deref()), (KeyKind::Service, "hosta", Some("echo.v1")));
        assert_eq!(ks.parse("mh/lab/ch/a/17").unwrap().channel, Some(17));
        // A service with '/' (GES brokers: ges/<system>/<address>) is one chunk per part, parsed back whole.
        assert_eq!(ks.service("hosta", "ges/lab/1.2.3").unwrap(), "mh/lab/svc/hosta/ges/lab/1.2.3");
        assert_eq!(ks.parse("mh/lab/svc/hosta/ges/lab/1.2.3").unwrap().service.as_deref(), Some("ges/lab/1.2.3"));
        assert_eq!(ks.parse("mh/lab/data/a").unwrap().kind, KeyKind::Data);
    }

    #[test]
    fn bad_keys_are_refused_naming_why() {
        let ks = KeySpace::new("lab").unwrap();
        for (key, why) in [
            ("mh/lab/data", "fewer than 4"),
            ("xx/lab/data/a", "not under"),
            ("mh/other/data/a", "fabric \"other\""),
            ("mh/lab/nope/a", "unknown kind"),
            ("mh/lab/data/.a", "invalid runtime"),
            ("mh/lab/data/a/b", "wrong number"),
            ("mh/lab/svc/a", "wrong number"),
            ("mh/lab/ch/a/x", "not a decimal"),
            ("mh/lab/ch/a/01", "not a decimal"),
            ("mh/lab/ch/a/99999999999999999999", "not a decimal"),
        ] {
            let e = ks.parse(key).unwrap_err();
            assert!(e.contains(why), "{key}: {e}");
        }
    }

    #[test]
    fn names_that_would_break_the_key_space_are_refused() {
        for bad in ["", ".a", "-a", "a/b", "a*", "a b", "a@b", &"x".repeat(65)] {
            let e = check_runtime(bad).unwrap_err();
            assert_eq!(e.what, "runtime");
            assert!(e.to_string().contains("invalid runtime name"), "{e}");
            assert!(KeySpace::new(bad).is_err());
        }
        check_runtime(&"x".repeat(64)).unwrap();
        check_runtime("host-b.lab_1").unwrap();
        for bad in ["", "/a", "a/", "a//b", "a*", "$x", "a?", "a#", "echo@b", "a\nb", &"s".repeat(257)] {
            let e = check_service(bad).unwrap_err();
            assert_eq!(e.what, "service", "{bad:?}");
        }
        check_service("dispatch.SYSTEM.peer.7").unwrap();
        check_service("with space is printable").unwrap();
        let ks = KeySpace::new("lab").unwrap();
        assert!(ks.service("a", "x//y").is_err());
        assert!(ks.parse("mh/lab/svc/a/x//y").is_err());
        assert!(ks.data("a/b").is_err());
    }

    #[test]
    fn targets_split_at_the_at_sign() {
        assert_eq!(split_target("echo"), None);
        assert_eq!(split_target("echo@hostb"), Some(Ok(("echo", "hostb"))));
        assert_eq!(split_target("echo@host@b").unwrap().unwrap_err().what, "runtime");
        assert_eq!(split_target("@hostb").unwrap().unwrap_err().what, "service");
    }
}
