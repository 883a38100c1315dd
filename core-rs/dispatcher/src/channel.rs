//! A channel end of either transport, behind one API.
//!
//! [`Channel`] is what bind and accept return and what the Python and C
//! layers hold: a UMP end (`ump.rs`: a ring pair, no monitor on the path) or
//! a multi-hop end (`multihop/channel.rs`: a virtual circuit through the
//! monitors).  Blocking helpers live here, once, over each transport's
//! `try_*` and `wait`.

use std::os::fd::{OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use multihop_base::error::{Error, ErrorKind, Progress, Result};
use multihop_base::handles::marker::{encode, MARK_BYTES};
use multihop_base::handles::{check, reason};
use multihop_base::ringpair::{ChannelInfo, CloseHook, Waited, Want};

use crate::handles::end::CapEnd;
use crate::handles::inbox::InboxStats;
use crate::multihop::channel::MhChannel;
use crate::ump::UmpChannel;

// A UMP end is the larger (its ring, the peer's doorbell and its pidfd, each with an identity mark:
// `handles::owned`); a Channel is made once per channel and lives behind an Arc, and boxing the UMP end
// would put a pointer chase on its hot path.
#[allow(clippy::large_enum_variant)]
pub enum Channel {
    Ump(UmpChannel),
    Multihop(MhChannel),
}

/// Counters of either transport; fields a transport lacks are zero.
#[derive(Clone, Debug, Default)]
pub struct ChannelStats {
    pub sent: u64,
    pub received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub busy_count: u64,
    pub parks: u64,
    pub hops: u32,
    pub acks_sent: u64,
    pub dummies_sent: u64,
    pub window: u32,
    pub in_flight: u32,
    pub queued: usize,
    /// Multi-hop: messages held for the next credit (`held.rs`), and held
    /// messages a close could not hand to a stopped monitor.
    pub held: u32,
    pub held_lost: u64,
}

macro_rules! both {
    ($self:expr, $c:ident => $e:expr) => {
        match $self {
            Channel::Ump($c) => $e,
            Channel::Multihop($c) => $e,
        }
    };
}

impl Channel {
    pub fn info(&self) -> &ChannelInfo {
        both!(self, c => c.info())
    }

    pub fn max_message(&self) -> usize {
        both!(self, c => c.max_message())
    }

    /// Whether `close` was called on this end.
    pub fn closed_here(&self) -> bool {
        both!(self, c => c.closed_here())
    }

    /// Whether this end is over (closed here, the peer closed it or died, or
    /// its monitor went away), looking now; what arrived before stays readable.
    pub fn is_closed(&self) -> bool {
        both!(self, c => c.is_closed())
    }

    /// The error for a message of `len` bytes, if it is too large.
    pub fn check_len(&self, len: usize) -> Result<()> {
        both!(self, c => c.check_len(len))
    }

    /// Check a whole batch before any of it is sent: every size, and that
    /// the channel is not over. Names the first message that is too large.
    pub fn check_batch(&self, lens: &mut dyn Iterator<Item = usize>) -> Result<()> {
        for (i, len) in lens.enumerate() {
            if let Err(e) = self.check_len(len) {
                return Err(Error::new(e.kind, format!("message {i} of the batch: {}; nothing was sent", e.message)));
            }
        }
        if self.closed_here() {
            return Err(Error::closed("the channel was closed by this end; nothing was sent").with_progress(Progress::Sent(0)));
        }
        Ok(())
    }

    /// Why this end is over, if it is (each transport's `close_cause`).
    pub fn close_cause(&self) -> Option<&'static str> {
        both!(self, c => c.close_cause())
    }

    /// Messages sent and not yet consumed by the peer.
    pub fn unconsumed(&self) -> usize {
        both!(self, c => c.unconsumed())
    }

    /// One look for a flush (see each transport's `flush_poll`).
    pub fn flush_poll(&self, asked: &mut bool) -> Result<bool> {
        both!(self, c => c.flush_poll(asked))
    }

    /// Wait until every message sent so far has been consumed by the peer,
    /// or `timeout` passes (Timeout) or the channel ends (ChannelClosed);
    /// both errors carry how many were not consumed.
    pub fn flush_blocking(&self, timeout: Option<Duration>) -> Result<()> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut asked = false;
        loop {
            if self.flush_poll(&mut asked)? {
                return Ok(());
            }
            if self.wait(Want::Flushed, deadline) == Waited::TimedOut {
                return Err(self.flush_timeout());
            }
        }
    }

    /// The error of a flush whose time ran out.
    pub fn flush_timeout(&self) -> Error {
        let n = self.unconsumed();
        Error::timeout(format!("flush timed out: {n} of the messages sent were not consumed by the peer yet")).with_progress(Progress::Unconsumed(n))
    }

    /// Close this end; a multi-hop end that could not hand what it held to
    /// its monitor says so on stderr (see `close_within` to be told).
    pub fn close(&self) {
        both!(self, c => c.close())
    }

    /// Close this end telling the other why: a multi-hop end's TEARDOWN carries `reason`, and the other end's
    /// ChannelClosed names it; a UMP end closes as [`Channel::close`] does (its ring has no room for a reason).
    pub fn close_with_reason(&self, reason: &str) {
        match self {
            Channel::Multihop(c) => c.close_with_reason(reason),
            Channel::Ump(c) => c.close(),
        }
    }

    /// Close this end, trying for `wait` (None: no limit) to hand what a
    /// multi-hop end holds for its next credit to its monitor: Err(HeldLost)
    /// with their count if some did not leave (`MhChannel::close_within`);
    /// `interrupt` runs between waits. The end is closed either way.
    pub fn close_within(&self, wait: Option<Duration>, interrupt: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        match self {
            Channel::Ump(c) => {
                c.close();
                Ok(())
            }
            Channel::Multihop(c) => c.close_within(wait, interrupt),
        }
    }

    pub fn set_on_close(&self, f: CloseHook) {
        both!(self, c => c.set_on_close(f))
    }

    #[inline]
    pub fn try_send(&self, parts: &[&[u8]]) -> Result<()> {
        both!(self, c => c.try_send(parts))
    }

    /// Send one message now, or (multi-hop, no credit or link room free)
    /// hold it for the channel's next credit (`held.rs`); TxBusy only when
    /// it can do neither. What blocking sends use; `try_send` never holds.
    #[inline]
    pub fn send_or_hold(&self, parts: &[&[u8]]) -> Result<()> {
        match self {
            Channel::Ump(c) => c.try_send(parts),
            Channel::Multihop(c) => c.send_or_hold(parts),
        }
    }

    pub fn try_send_many(&self, msgs: &mut dyn Iterator<Item = &[u8]>) -> Result<usize> {
        both!(self, c => c.try_send_many(msgs))
    }

    #[inline]
    pub fn try_recv_with<T>(&self, make: impl FnOnce(usize, &mut dyn FnMut(&mut [u8])) -> Result<T>) -> Result<Option<T>> {
        both!(self, c => c.try_recv_with(make))
    }

    pub fn try_recv_many(&self, max: usize, each: &mut dyn FnMut(usize, &mut dyn FnMut(&mut [u8])) -> Result<bool>) -> Result<usize> {
        both!(self, c => c.try_recv_many(max, each))
    }

    pub fn wait(&self, want: Want, deadline: Option<Instant>) -> Waited {
        both!(self, c => c.wait(want, deadline))
    }

    /// Whether a message is there or the channel is closed (for pollers).
    pub fn readable(&self) -> bool {
        both!(self, c => c.readable())
    }

    /// Whether `want` may succeed now or the channel is over: one look, for
    /// an event loop that waits on this process's doorbell itself
    /// (`async_bell.rs`). A writer's look asks its reader to ring when it
    /// frees room, as a blocking writer's wait does.
    pub fn is_ready(&self, want: Want) -> bool {
        both!(self, c => c.is_ready(want))
    }

    /// A UMP end's writes may fill its whole ring, not only its soft capacity
    /// (`RingPair::fill_whole_ring`); nothing for a multi-hop end (its window is its credit).
    pub fn fill_whole_ring(&self) {
        if let Channel::Ump(c) = self {
            c.fill_whole_ring();
        }
    }

    pub fn note_busy(&self) {
        both!(self, c => c.note_busy())
    }

    pub fn stats(&self) -> ChannelStats {
        match self {
            Channel::Ump(c) => {
                let s = c.stats();
                ChannelStats {
                    sent: s.sent,
                    received: s.received,
                    bytes_sent: s.bytes_sent,
                    bytes_received: s.bytes_received,
                    busy_count: s.busy_count,
                    parks: s.parks,
                    ..Default::default()
                }
            }
            Channel::Multihop(c) => {
                let s = c.stats();
                ChannelStats {
                    sent: s.sent,
                    received: s.received,
                    bytes_sent: s.bytes_sent,
                    bytes_received: s.bytes_received,
                    busy_count: s.busy_count,
                    parks: s.parks,
                    hops: c.hops(),
                    acks_sent: s.acks_sent,
                    dummies_sent: s.dummies_sent,
                    window: s.window,
                    in_flight: s.in_flight,
                    queued: s.queued,
                    held: s.held,
                    held_lost: s.held_lost,
                }
            }
        }
    }

    /// Refuse every handle sent to this end from now on, with `reason` and `text` (the sender's `CapSendError`):
    /// the fabric bridge's ends, since handles cannot leave a machine.
    pub fn refuse_handles(&self, reason: &str, text: &str) {
        if let Some(c) = self.caps() {
            c.inbox().refuse_all(reason, text);
        }
    }

    /// This end's part in carrying handles (every end a dispatcher made).
    pub fn caps(&self) -> Option<&Arc<CapEnd>> {
        both!(self, c => c.caps())
    }

    /// `try_recv_with` that also takes the message's handles into `handles`
    /// (empty for a message sent without); the caller owns them.
    pub fn try_recv_with_handles<T>(
        &self,
        make: impl FnOnce(usize, &mut dyn FnMut(&mut [u8])) -> Result<T>,
        handles: &mut Vec<OwnedFd>,
    ) -> Result<Option<T>> {
        both!(self, c => c.try_recv_with_handles(make, handles))
    }

    /// Send `data` with the handles `fds` (duplicated by the kernel as they
    /// leave; the caller still owns its descriptors and closes the ones it
    /// gives away once this returns Ok). Waits for room, then for the
    /// receiving end to hold the handles (see `handles/end.rs`), then writes
    /// the message; `interrupt` runs between waits. On any error nothing was
    /// delivered and the channel goes on: `CapSend` (refused, with the
    /// reason), `Timeout`, `ChannelClosed`, `MessageTooLarge`.
    pub fn send_with_handles(&self, data: &[u8], fds: &[RawFd], deadline: Option<Instant>, interrupt: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        self.send_handles(data, fds, deadline, interrupt, true)
    }

    /// Test hook (feature `test-hooks`, `multihop_testkit`): `send_with_handles`
    /// without this end's own check of the handles, so the sending side's
    /// monitor alone decides (as it does for a program that does not use this
    /// library's checks).
    #[cfg(feature = "test-hooks")]
    pub fn send_with_handles_unchecked(&self, data: &[u8], fds: &[RawFd], deadline: Option<Instant>) -> Result<()> {
        self.send_handles(data, fds, deadline, &mut || Ok(()), false)
    }

    fn send_handles(
        &self,
        data: &[u8],
        fds: &[RawFd],
        deadline: Option<Instant>,
        interrupt: &mut dyn FnMut() -> Result<()>,
        check_here: bool,
    ) -> Result<()> {
        let Some(caps) = self.caps().cloned() else {
            return Err(Error::cap_refused(
                reason::UNSUPPORTED,
                None,
                "this channel end was not made by a dispatcher: it has no monitor to carry handles",
            ));
        };
        self.check_len(data.len())?;
        if check_here {
            if let Err((why, i, text)) = check::check_all(fds) {
                return Err(Error::cap_refused(why, Some(i), text));
            }
        } else if fds.len() > multihop_base::sock::MAX_FDS {
            return Err(Error::invalid(format!("{} descriptors do not fit one control frame", fds.len())));
        }
        let _one = caps.one_sender();
        let want = Want::Writable(data.len() + MARK_BYTES);
        let wait_for_room = |interrupt: &mut dyn FnMut() -> Result<()>| -> Result<()> {
            self.note_busy();
            match self.wait(want, deadline) {
                Waited::TimedOut => Err(Error::timeout("send timed out: no room (ring full or credit window used up)")),
                Waited::Slice | Waited::Interrupted => interrupt(),
                Waited::Ready => Ok(()),
            }
        };
        // Room first, so the handles never wait at the receiver for a message held up here.
        loop {
            if self.is_closed() {
                return Err(Error::closed(format!("channel {:#x} to {:?} is closed; nothing was sent", self.info().id, self.info().service)));
            }
            let room = match self {
                Channel::Ump(c) => c.want_room(data.len() + MARK_BYTES),
                Channel::Multihop(c) => c.can_send_now(data.len() + MARK_BYTES),
            };
            if room {
                break;
            }
            wait_for_room(interrupt)?;
        }
        let seq = caps.send_group(fds, deadline, &|| self.is_closed(), interrupt, check_here)?;
        let mark = encode(seq, fds.len() as u32);
        loop {
            let r = match self {
                Channel::Ump(c) => c.try_send_marked(&mark, data),
                Channel::Multihop(c) => c.try_send_marked(&mark, data),
            };
            match r {
                Ok(()) => return Ok(()),
                Err(e) if e.kind == ErrorKind::TxBusy => {
                    if let Err(e) = wait_for_room(interrupt) {
                        caps.cancel(seq);
                        return Err(e);
                    }
                }
                Err(e) => {
                    caps.cancel(seq);
                    return Err(e);
                }
            }
        }
    }

    /// Handles waiting at this end for their messages, and the most it keeps.
    pub fn handle_stats(&self) -> InboxStats {
        self.caps().map(|c| c.inbox().stats()).unwrap_or_default()
    }

    /// Send, waiting while there is no room (ring or credit window).
    pub fn send_blocking(&self, parts: &[&[u8]], timeout: Option<Duration>) -> Result<()> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let len: usize = parts.iter().map(|p| p.len()).sum();
        loop {
            match self.send_or_hold(parts) {
                Err(e) if e.kind == ErrorKind::TxBusy => self.note_busy(),
                other => return other,
            }
            if self.wait(Want::Writable(len), deadline) == Waited::TimedOut {
                return Err(Error::timeout("send timed out: no room (ring full or credit window used up)"));
            }
        }
    }

    /// Receive, waiting for a message.
    pub fn recv_blocking(&self, timeout: Option<Duration>) -> Result<Vec<u8>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let got = self.try_recv_with(|len, copy| {
                let mut v = vec![0u8; len];
                copy(&mut v);
                Ok(v)
            })?;
            if let Some(v) = got {
                return Ok(v);
            }
            if self.wait(Want::Readable, deadline) == Waited::TimedOut {
                return Err(Error::timeout("recv timed out: no message"));
            }
        }
    }
}
