//! Test hooks that play a hostile or buggy process of the runtime's user.
//!
//! A monitor trusts nothing that arrives on a link: it must drop frames
//! whose (link, VCI) it does not know, count them, and keep forwarding
//! everything else.  [`ForgedMonitorLink`] lets the test suite check that on
//! a monitor-to-monitor link: it opens a link to a monitor the way a
//! neighbouring monitor does (`LinkOpen` over the control socket, with a ring
//! segment and a doorbell) while claiming a core of its choosing, and then
//! writes raw frames on it.  Claiming a real neighbour's core would replace
//! that neighbour's link (a restarted monitor does this), so tests claim a
//! core that is not a neighbour.

use std::path::Path;
use std::sync::Arc;

use crate::channel::{create_segment, ChannelInfo, Side, UmpChannel};
use crate::control::{self, monitor_socket, Msg, Role};
use crate::dispatcher::process_doorbell;
use crate::error::{Error, ErrorKind, Result};
use crate::mhchannel::LINK_MAX_MESSAGE;
use crate::park::Doorbell;
use crate::peer::PeerWatch;

/// Our end of a link a monitor believes leads to monitor `claimed_core`.
pub struct ForgedMonitorLink {
    link: UmpChannel,
}

impl ForgedMonitorLink {
    /// Open a link to the monitor of `core` in runtime `dir`, claiming to be
    /// the monitor of `claimed_core`.
    pub fn open(dir: &Path, core: u32, claimed_core: u32) -> Result<ForgedMonitorLink> {
        let (sock, monitor_pid) = control::connect(&monitor_socket(dir, core), Role::Monitor, claimed_core)?;
        let seg = create_segment(LINK_MAX_MESSAGE)?;
        let bell: Arc<Doorbell> = process_doorbell()?;
        control::send(&sock, &Msg::LinkOpen { req: 1, from_core: claimed_core }, &[seg.raw_fd(), bell.segment().raw_fd()])?;
        let (reply, mut fds) = control::recv(&sock)?.ok_or_else(|| Error::new(ErrorKind::Monitor, "monitor hung up"))?;
        reply.into_result()?;
        let peer_bell = fds.pop().ok_or_else(|| Error::protocol("link answer without a doorbell"))?;
        let info = ChannelInfo {
            id: 0,
            service: format!("forged link {claimed_core} - {core}"),
            transport: "link",
            side: Side::Client,
            peer_pid: monitor_pid,
            peer_core: core,
            max_message: LINK_MAX_MESSAGE,
            ring_slots: 0,
        };
        let link = UmpChannel::open(seg, info, bell, Doorbell::from_fd(peer_bell)?, PeerWatch::new(monitor_pid)?)?;
        Ok(ForgedMonitorLink { link })
    }

    /// Write one raw frame on the link (waiting up to a second for room).
    pub fn inject(&self, frame: &[u8]) -> Result<()> {
        self.link.send_blocking(&[frame], Some(std::time::Duration::from_secs(1)))
    }

    /// Close the link: the monitor forgets it.
    pub fn close(&self) {
        self.link.close();
    }
}

impl Drop for ForgedMonitorLink {
    fn drop(&mut self) {
        self.link.close();
    }
}
