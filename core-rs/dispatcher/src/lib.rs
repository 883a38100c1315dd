//! multihop dispatcher side: what a process attached to a runtime holds.
//!
//! Stands on `multihop-base`; the bindings (C ABI, PyO3) stand on it. Bottom
//! to top, each module importing only those listed before it:
//!
//! - [`backlog`]: connect requests waiting for a service, the acceptor's wake-up;
//! - [`handles`]: handles that travel with messages, the receiving and sending
//!   ends' part (inboxes, delivery, the sending protocol);
//! - [`multicast`]: multicast group frames on the link (inbox, credits, port);
//! - [`multihop`]: the link to the monitor, multi-hop channel ends, held
//!   frames, corks;
//! - [`conn`]: [`MonitorConn`], the process's connection to its monitor: the
//!   socket, request/reply matching, liveness, the link, the routing of
//!   connect requests to services and of handles to inboxes; its reader and
//!   acceptor threads;
//! - [`ump`]: UMP channel ends; [`channel`]: [`Channel`], an end of either kind;
//! - [`service`]: an exported service, its backlog and acceptor's work;
//! - [`bind`]: bind options and a bind whose reply has not come yet;
//! - [`transport_choice`]: what transport "auto" stands for;
//! - [`dispatcher`]: [`Dispatcher`], on top of them all;
//! - [`fabric_export`]: a service exported to the runtime's fabric, the bridge's status (its control socket).

//!
//! The public face is what the bindings use, re-exported below; every other
//! item is the crate's own (`unreachable_pub` keeps it so).

#![warn(unreachable_pub)]

mod backlog;
mod bind;
mod channel;
mod conn;
mod dispatcher;
pub mod fabric_export;
mod handles;
mod multicast;
mod multihop;
mod service;
pub mod transport_choice;
mod ump;

pub use bind::{BindOptions, PendingBind};
pub use channel::{Channel, ChannelStats};
pub use conn::MonitorConn;
pub use dispatcher::Dispatcher;
pub use handles::inbox::InboxStats;
pub use multicast::port::{GroupPort, PortStats};
pub use multihop::channel::MhStats;
pub use multihop::cork::Corks;
pub use multihop::link::DispatcherLink;
pub use service::{OnConnect, PendingConnect, Service};
