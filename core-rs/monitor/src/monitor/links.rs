//! Links: the ring pairs of the data plane, with a neighbouring monitor
//! (only where the routing tables name a next hop) or with a dispatcher of
//! this core.  The opener creates the segment and sends it with its doorbell
//! over the control socket; the other side maps it and answers with its own
//! doorbell.

use std::os::fd::OwnedFd;

use super::Monitor;
use crate::forward::LinkPeer;
use multihop_base::control::{self, monitor_socket, Msg, Role};
use multihop_base::error::{Error, ErrorKind, Result};
use multihop_base::park::Doorbell;
use multihop_base::peer::PeerWatch;
use multihop_base::ringpair::{create_segment, ChannelInfo, RingPair, Side};
use multihop_base::shm::{dup_cloexec, Segment};
use multihop_base::sync::lock;
use multihop_base::wire::LINK_MAX_MESSAGE;

impl Monitor {
    fn link_info(&self, peer_core: u32, peer_pid: u32, side: Side) -> ChannelInfo {
        ChannelInfo {
            id: 0,
            service: format!("link {} - {}", self.cfg.core, peer_core),
            transport: "link",
            side,
            peer_pid,
            peer_core,
            max_message: LINK_MAX_MESSAGE,
            ring_slots: 0,
        }
    }

    /// Create a link's segment and hand it to monitor `peer`.
    pub(super) fn open_monitor_link(&self, peer: u32) -> Result<()> {
        let path = monitor_socket(&self.cfg.dir, peer);
        let (sock, peer_pid) = control::connect(&path, Role::Monitor, self.cfg.core)?;
        let seg = create_segment(LINK_MAX_MESSAGE)?;
        control::send(&sock, &Msg::LinkOpen { req: 1, from_core: self.cfg.core }, &[seg.raw_fd(), self.bell.segment().raw_fd()])?;
        let (reply, mut fds) = control::recv(&sock)?.ok_or_else(|| Error::new(ErrorKind::Monitor, "peer hung up"))?;
        reply.into_result()?;
        let bell = fds.pop().ok_or_else(|| Error::protocol("link answer without a doorbell"))?;
        let ch = RingPair::open(
            seg,
            self.link_info(peer, peer_pid, Side::Client),
            self.bell.clone(),
            Doorbell::from_fd(bell)?,
            PeerWatch::new(peer_pid)?,
        )?;
        self.fwd.lock().add_link(ch, LinkPeer::Monitor(peer));
        self.fwd.poke();
        Ok(())
    }

    /// The other end of `open_monitor_link` or of a dispatcher's link.
    pub(super) fn accept_link(&self, peer: LinkPeer, peer_pid: u32, mut fds: Vec<OwnedFd>) -> Result<OwnedFd> {
        if fds.len() != 2 {
            return Err(Error::protocol(format!("link request carries {} descriptors, expected 2", fds.len())));
        }
        let bell = Doorbell::from_fd(fds.pop().expect("two descriptors"))?;
        let seg = Segment::from_fd(fds.pop().expect("two descriptors"), 0)?;
        let peer_core = match peer {
            LinkPeer::Monitor(c) => {
                // Links exist only where the routing table names a next hop
                // (before our row arrives we have no neighbours: the opener
                // retries).
                let neighbours = lock(&self.neighbours);
                if !neighbours.contains(&c) {
                    return Err(Error::new(
                        ErrorKind::Monitor,
                        format!("monitor {c} is not a neighbour of monitor {} in the routing table (neighbours: {:?})", self.cfg.core, *neighbours),
                    ));
                }
                c
            }
            LinkPeer::Dispatcher(_) => self.cfg.core,
        };
        let ch = RingPair::open(seg, self.link_info(peer_core, peer_pid, Side::Server), self.bell.clone(), bell, PeerWatch::new(peer_pid)?)?;
        let mut f = self.fwd.lock();
        if let LinkPeer::Monitor(_) = peer {
            if let Some(old) = f.link_to(peer) {
                f.remove_link(old); // a restarted peer replaces its old link
            }
        }
        f.add_link(ch, peer);
        drop(f);
        self.fwd.poke();
        dup_cloexec(self.bell.segment().raw_fd())
    }
}
