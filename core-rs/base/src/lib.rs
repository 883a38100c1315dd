//! multihop base: what both kinds of process of a runtime (a dispatcher and a monitor) stand on.
//!
//! The bottom layer of the engine's crates (`multihop-base` <- `multihop-dispatcher`, `multihop-monitor` <-
//! the bindings): it knows nothing of channels, services or monitors, only the pieces they are made of.
//!
//! - [`error`]: the one error enum;
//! - [`defaults`]: window, timeouts, batch and handle limits, defined once;
//! - [`sync`]: the ring's atomics (std's, or loom's) and the one [`lock`] helper;
//! - [`shm`]: memfd segments; [`ring`]: the SPSC ring of cache-line slots;
//! - [`ringpair`]: a pair of rings in one segment and the end each side holds (UMP channels and links);
//! - [`park`]: spin-then-futex waiting, doorbells and this process's doorbell;
//!   [`async_bell`]: that doorbell as a descriptor an event loop watches;
//! - [`peer`]: pidfd watch on the process at the other end; [`liveness`]: the lock that says a runtime is live;
//! - [`paths`]: runtime directories and socket names; [`random`]: identifiers from the OS random source;
//! - [`sock`]: SEQPACKET control sockets with descriptor passing; [`control`]: control-protocol frames;
//! - [`wire`]: the multi-hop frame header and the multicast group frame format; [`flow`]: credit flow;
//! - [`handles`]: what both sides know of handles that travel with messages (the runtime's own descriptors,
//!   what may not leave, the in-band marker, refusal reasons);
//! - [`fixed_layout`]: wire layout of a Flounder message of scalars.

pub mod async_bell;
pub mod control;
pub mod defaults;
pub mod error;
pub mod fixed_layout;
pub mod flow;
pub mod handles;
pub mod liveness;
pub mod park;
pub mod paths;
pub mod peer;
pub mod random;
pub mod ring;
pub mod ringpair;
pub mod shm;
pub mod sock;
pub mod sync;
pub mod wire;

pub use error::{Error, ErrorKind, Progress, Result};
pub use park::{process_doorbell, Doorbell, Waited};
pub use ringpair::{ChannelInfo, RingPair, Side, Want};
pub use sync::lock;
