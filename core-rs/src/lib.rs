//! multihop engine: shared-memory rings, doorbells, monitors and channels.
//!
//! Module map (one concept per file):
//! - [`error`]: the one error enum
//! - [`shm`]: memfd segments
//! - [`ring`]: the SPSC ring of cache-line slots
//! - [`park`]: spin-then-futex waiting and doorbells

pub mod error;
pub mod park;
pub mod ring;
pub mod shm;
pub mod peer;
pub mod sock;
pub mod channel;
