//! multihop engine: shared-memory rings, doorbells, monitors and channels.
//!
//! Module map (one concept per file):
//! - [`error`]: the one error enum
//! - [`shm`]: memfd segments
//! - [`ring`]: the SPSC ring of cache-line slots (`sync`: its atomics, std's or loom's)
//! - [`park`]: spin-then-futex waiting and doorbells
//! - [`async_bell`]: this process's doorbell as a descriptor an event loop watches
//! - [`peer`]: pidfd watch on the process at the other end
//! - [`paths`]: runtime directories and socket names
//! - [`liveness`]: the lock that says a runtime is live
//! - [`sock`]: SEQPACKET control sockets with descriptor passing
//! - [`control`]: control-protocol frames
//! - [`channel`]: UMP channel endpoints (also the rings of a link)
//! - [`wire`]: the multi-hop frame header
//! - [`flow`]: the credit window of a multi-hop channel end
//! - [`mhlink`]: a dispatcher's link to its monitor, shared by its multi-hop channels
//! - [`mhchannel`]: multi-hop channel endpoints
//! - [`endpoint`]: either kind of endpoint behind one type
//! - [`dispatcher`]: attach / export / bind
//! - [`pending_bind`]: a bind whose reply has not come yet (event loops)
//! - [`service`]: an exported service, its backlog and acceptor
//! - [`vci`]: a monitor's forwarding table
//! - [`forward`]: a monitor's data plane (links, forwarding loop)
//! - [`idle_poll`]: how a monitor's forwarder polls at idle priority
//! - [`link_queue`]: what waits for a monitor's outgoing link, served fairly over channels (deficit round robin)
//! - [`sched_group`]: a monitor's scheduling group (its own session, kept light)
//! - [`group_weight`]: when that group needs its fair share back (a state machine)
//! - [`monitor`]: the per-core monitor process (one concern per file under `monitor/`)
//! - [`fixed_layout`]: wire layout of a Flounder message of scalars
//! - [`transport_choice`]: what transport "auto" stands for (the C ABI's `mh_bind`)
//! - [`caps`]: handles (descriptors) that travel with messages, through
//!   the monitors (TN-006 2.7)
//! - [`capi`]: the C ABI (`include/multihop.h`)
//! - [`forgery`]: test hooks that attack a runtime as a hostile process would
//! - `python` (feature `python`): the PyO3 module `multihop._core`, one
//!   pyclass per file under `python/` (`fast_send`: generated stubs' native
//!   send methods)

pub mod async_bell;
pub mod capi;
pub mod caps;
pub mod channel;
pub mod control;
pub mod cork;
pub mod dispatcher;
pub mod endpoint;
pub mod error;
pub mod fixed_layout;
pub mod flow;
pub mod forgery;
pub mod forward;
pub mod group;
pub mod group_weight;
pub mod held;
pub mod idle_poll;
pub mod link_queue;
pub mod liveness;
pub mod mhchannel;
pub mod mhlink;
pub mod monitor;
pub mod park;
pub mod paths;
pub mod peer;
pub mod pending_bind;
pub mod ring;
pub mod sched_group;
pub mod service;
pub mod shm;
pub mod sock;
pub mod sync;
pub mod transport_choice;
pub mod vci;
pub mod wire;

#[cfg(feature = "python")]
mod python;
