//! The receiving dispatcher's part: its reader thread hands a `Cap` frame's
//! handles to the end they are for, and answers along the route back.
//!
//! A group for an end this dispatcher does not have (it closed meanwhile)
//! is refused (`closed`) and its handles are closed here; a frame that lost
//! descriptors to a full descriptor table is refused (`no_room`).  The
//! answer to a multi-hop group travels back by the end's sending VCI, the
//! way its data would; to a UMP group by the channel id, towards the other
//! side.

use std::os::fd::OwnedFd;

use multihop_base::control::{CapRefusal, CapStage, Msg};
use multihop_base::handles::reason;

use super::inbox::{DispatcherInboxes, InboxKey};

/// Handle one `Cap` frame of stage `Send` or `Cancel` that reached this
/// dispatcher (`truncated`: the kernel could not install all its handles)
/// with the inboxes of its ends; returns the answer to send back, if any.
pub(crate) fn on_frame(inboxes: &DispatcherInboxes, msg: Msg, fds: Vec<OwnedFd>, truncated: bool) -> Option<Msg> {
    let Msg::Cap { stage, req, chan, to_side, vci, seq, count, .. } = msg else { return None };
    let key = if vci != 0 { InboxKey::Multihop { vci_in: vci } } else { InboxKey::Ump { chan, side: to_side } };
    let inbox = inboxes.find(key);
    match stage {
        CapStage::Cancel => {
            if let Some(ib) = inbox {
                ib.discard(seq);
            }
            None
        }
        CapStage::Send => {
            let (verdict, back_vci) = match &inbox {
                Some(ib) => (ib.store(seq, count, fds, truncated), ib.reply_vci()),
                None => {
                    (Err(CapRefusal { reason: reason::CLOSED.into(), message: "the receiving end of the channel is closed".into(), index: None }), 0)
                }
            };
            if vci != 0 && back_vci == 0 {
                return None; // no way back (the end is gone): the sender sees the channel close
            }
            Some(Msg::Cap { stage: CapStage::Reply, req, chan, to_side: 1 - to_side.min(1), vci: back_vci, seq, count: 0, refused: verdict.err() })
        }
        CapStage::Reply => None, // replies are matched to their request by the reader
    }
}
