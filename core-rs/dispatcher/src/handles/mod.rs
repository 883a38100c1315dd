//! Handles over channels (TN-006 2.7's capabilities): OS handles (file
//! descriptors) that travel with a message, out of band, through the monitors.
//!
//! On Linux the counterpart of a Barrelfish capability is a descriptor: a
//! memfd segment, an eventfd, a pipe or socket end, a pidfd.  A message may
//! carry up to [`MAX_HANDLES`](multihop_base::handles::MAX_HANDLES) of them.  They never ride the rings (a
//! descriptor means nothing in another process): the sending dispatcher
//! hands them to its monitor over its control socket (SCM_RIGHTS); the
//! monitor checks them and passes them on, monitor to monitor
//! along the channel's path (a UMP channel's two monitors; a multi-hop
//! channel's every hop, routed by VCI as its data is) to the receiving
//! dispatcher, which keeps them in the channel end's [`inbox`] and answers;
//! the answer travels back the same way.  Only when the handles are safely
//! at the receiver does the sender write the message itself, in band, with
//! a marker naming its handle group.  So:
//!
//! * the receiver gets each message with exactly its handles, in channel
//!   order (the group is there before its message can be read);
//! * a refusal (a runtime-owned or closed handle, too many, no room at the
//!   receiver) reaches the sender as `CapSend` with a reason, and
//!   nothing was written: the channel goes on as if the send never happened;
//! * a `cap` is duplicated (the kernel copies the descriptor; the sender
//!   keeps its own), a `give_away_cap` is moved: the sender's descriptor is
//!   closed once the message is written (`end.rs`);
//! * nothing leaks: a monitor holds handles only while it passes them on;
//!   a receiver's inbox closes what it holds when its end goes, and the
//!   kernel closes what is in a dead process or in a socket nobody reads.
//!
//! The price is a round trip through the control plane per message that
//! carries handles (`benches/bench_caps.py`); messages without handles do
//! not pay anything.
//!
//! Here, the dispatcher's part:
//!
//! - [`inbox`]: a receiving end's groups of handles, and a dispatcher's
//!   table of inboxes;
//! - [`end`]: a channel end's side of it (send, take);
//! - [`deliver`]: the receiving dispatcher's reader thread's part.
//!
//! Shared with the monitors (`multihop_base::handles`): the runtime's own
//! descriptors ([`owned`](multihop_base::handles::owned)), what may not leave
//! ([`check`](multihop_base::handles::check)), the in-band
//! [`marker`](multihop_base::handles::marker), the refusal
//! [`reason`](multihop_base::handles::reason)s. The monitors' part is
//! `multihop_monitor`'s: routes for UMP channels (`handles::routes`; multi-hop
//! frames follow the forwarding table) and the relay (`monitor/handles.rs`).

pub(crate) mod deliver;
pub(crate) mod end;
pub(crate) mod inbox;
