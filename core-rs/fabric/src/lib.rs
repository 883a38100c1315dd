//! multihop fabric: runtimes on several machines joined over Eclipse Zenoh (issue 27), the bridge's protocol.
//!
//! Each runtime of a fabric has one bridge: a hop of the multi-hop path like a monitor, which carries the frames
//! of bridged channels to the bridges of other runtimes as Zenoh puts. This crate is that bridge's protocol as
//! sans-IO state machines (after quinn-proto and h11): inputs are events with the time injected, outputs are
//! actions; no thread, no socket, no sleep. The Zenoh driver (the `multihop-bridge` binary, next) feeds it.
//!
//! - [`keys`]: the key space (`mh/<fabric>/{rt,svc,ch,bind,data,hb}/<runtime>...`) and the names in it;
//! - [`config`]: the settings with their defaults, and the Zenoh config they stand for;
//! - [`wire`]: what a put carries (envelope, records), decoded with every field checked;
//! - [`reason`]: why a channel closed, why a bind was refused;
//! - [`channel`]: one channel direction: sequence numbers, credit window, probes;
//! - [`bridge`]: the bridge of one runtime: peers (sessions, heartbeats, liveness), binds, channels, batching.
//!
//! docs/fabric.md has the model, the wire, the state machines, the failure bounds and the trust model.

#![warn(unreachable_pub)]

pub mod bridge;
pub mod channel;
pub mod config;
pub mod keys;
pub mod reason;
pub mod wire;

pub use bridge::{Action, Bridge, ChanId, InputError, LocalError, Nanos, Stats};
pub use config::{Congestion, FabricConfig, Mode, Priority};
pub use keys::{KeyKind, KeySpace, NameError};
pub use reason::{BindRefused, Refusal, Teardown, TeardownCode};
