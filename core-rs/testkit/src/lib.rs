//! multihop testkit: test hooks that play a hostile or buggy process of the
//! runtime's user. Not part of any library's public face: the bindings hand
//! them to the Python test suite under the names the tests use
//! (`_core.ForgedMonitorLink`, `Dispatcher._inject_raw`,
//! `Channel._send_handles_unchecked`).
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

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use multihop_base::control::{self, monitor_socket, Msg, Role};
use multihop_base::error::{Error, ErrorKind, Result};
use multihop_base::park::{process_doorbell, Doorbell};
use multihop_base::peer::PeerWatch;
use multihop_base::ringpair::{create_segment, ChannelInfo, RingPair, Side};
use multihop_base::wire::LINK_MAX_MESSAGE;
use multihop_dispatcher::{Channel, Dispatcher};

/// Our end of a link a monitor believes leads to monitor `claimed_core`.
pub struct ForgedMonitorLink {
    link: RingPair,
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
        let link = RingPair::open(seg, info, bell, Doorbell::from_fd(peer_bell)?, PeerWatch::new(monitor_pid)?)?;
        Ok(ForgedMonitorLink { link })
    }

    /// Write one raw frame on the link (waiting up to a second for room).
    pub fn inject(&self, frame: &[u8]) -> Result<()> {
        self.link.send_blocking(&[frame], Some(Duration::from_secs(1)))
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

/// Put a raw multi-hop frame on `d`'s link to its monitor, as a forger would
/// (the monitor must drop unknown VCIs and survive).
pub fn inject_raw(d: &Dispatcher, frame: &[u8]) -> Result<()> {
    d.link()?.ring().send_blocking(&[frame], Some(Duration::from_secs(1)))
}

/// Send `data` with the handles `fds` on `ch` without the sending library's
/// own check of the handles, so the sending side's monitor alone decides (as
/// it does for a program that does not use this library's checks).
pub fn send_with_handles_unchecked(ch: &Channel, data: &[u8], fds: &[RawFd], deadline: Option<Instant>) -> Result<()> {
    ch.send_with_handles_unchecked(data, fds, deadline)
}
