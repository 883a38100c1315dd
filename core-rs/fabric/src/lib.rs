//! multihop fabric: runtimes on several machines joined over Eclipse Zenoh (issue 27), the bridge's protocol.
//!
//! Each runtime of a fabric has one bridge: a hop of the multi-hop path like a monitor, which carries the frames
//! of bridged channels to the bridges of other runtimes as Zenoh puts. This crate is that bridge's protocol as
//! sans-IO state machines (after quinn-proto and h11): inputs are events with the time injected, outputs are
//! actions; no thread, no socket, no sleep. The Zenoh driver (the `multihop-bridge` binary, next) feeds it.
//!
//! The public face:
//!
//! - [`Bridge`] (module `bridge`): the bridge of one runtime: peers (sessions, heartbeats, liveness), binds,
//!   channels, batching; fed events, it gives [`Action`]s; [`Bridge::status`] for `multihop status`;
//! - [`FabricConfig`] (module `config`): the settings with their defaults, and the Zenoh config they stand for;
//! - [`Teardown`], [`BindRefused`] (module `reason`): why a channel closed, why a bind was refused;
//! - [`fabric_window`] (module `channel`, otherwise private: one channel direction's sequence numbers, credit
//!   window and probes);
//! - [`keys`]: the key space (`mh/<fabric>/{rt,svc,ch,bind,data,hb}/<runtime>...`) and the names in it, public
//!   for any program that observes a fabric;
//! - [`wire`]: what a put carries (envelope, records), decoded with every field checked, public for the same.
//!
//! docs/fabric.md has the model, the wire, the state machines, the failure bounds and the trust model.

#![warn(unreachable_pub)]

mod bridge;
mod channel;
mod config;
#[cfg(feature = "zenoh")]
pub mod driver;
pub mod keys;
mod reason;
#[cfg(feature = "zenoh")]
pub mod runtime_side;
pub mod wire;

pub use bridge::{Action, Bridge, ChanId, ChannelStatus, InputError, LocalError, Nanos, PeerStatus, Stats, Status};
pub use channel::fabric_window;
pub use config::{check_endpoint, ConfigError, Congestion, FabricConfig, Mode, Priority, Tls, PROTOCOLS};
pub use keys::{KeyKind, KeySpace, NameError};
pub use reason::{BindRefused, Refusal, Teardown, TeardownCode};
