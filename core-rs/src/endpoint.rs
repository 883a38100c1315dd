//! A channel end of either transport, behind one API.
//!
//! `Endpoint` is what bind and accept return and what the Python and C
//! layers hold: the UMP ring pair (no monitor on the path) or the multi-hop
//! virtual circuit (through the monitors).  Blocking helpers live here, once,
//! over each transport's `try_*` and `wait`.

use std::time::{Duration, Instant};

use crate::channel::{ChannelInfo, UmpChannel, Waited, Want};
use crate::error::{Error, ErrorKind, Result};
use crate::mhchannel::MhChannel;

pub enum Endpoint {
    Ump(UmpChannel),
    Multihop(MhChannel),
}

/// Counters of either transport; fields a transport lacks are zero.
#[derive(Clone, Debug, Default)]
pub struct EndpointStats {
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
}

macro_rules! both {
    ($self:expr, $c:ident => $e:expr) => {
        match $self {
            Endpoint::Ump($c) => $e,
            Endpoint::Multihop($c) => $e,
        }
    };
}

impl Endpoint {
    pub fn info(&self) -> &ChannelInfo {
        both!(self, c => c.info())
    }

    pub fn max_message(&self) -> usize {
        both!(self, c => c.max_message())
    }

    pub fn is_closed(&self) -> bool {
        both!(self, c => c.is_closed())
    }

    pub fn close(&self) {
        both!(self, c => c.close())
    }

    pub fn set_on_close(&self, f: crate::channel::CloseHook) {
        both!(self, c => c.set_on_close(f))
    }

    #[inline]
    pub fn try_send(&self, parts: &[&[u8]]) -> Result<()> {
        both!(self, c => c.try_send(parts))
    }

    pub fn try_send_many(&self, msgs: &mut dyn Iterator<Item = &[u8]>) -> Result<usize> {
        both!(self, c => c.try_send_many(msgs))
    }

    #[inline]
    pub fn try_recv_with<T>(&self, make: impl FnOnce(usize, &mut dyn FnMut(&mut [u8])) -> Result<T>) -> Result<Option<T>> {
        both!(self, c => c.try_recv_with(make))
    }

    pub fn try_recv_many(
        &self,
        max: usize,
        each: &mut dyn FnMut(usize, &mut dyn FnMut(&mut [u8])) -> Result<bool>,
    ) -> Result<usize> {
        both!(self, c => c.try_recv_many(max, each))
    }

    pub fn wait(&self, want: Want, deadline: Option<Instant>) -> Waited {
        both!(self, c => c.wait(want, deadline))
    }

    /// Whether a message is there or the channel is closed (for pollers).
    pub fn readable(&self) -> bool {
        both!(self, c => c.readable())
    }

    pub fn note_busy(&self) {
        both!(self, c => c.note_busy())
    }

    pub fn stats(&self) -> EndpointStats {
        match self {
            Endpoint::Ump(c) => {
                let s = c.stats();
                EndpointStats {
                    sent: s.sent,
                    received: s.received,
                    bytes_sent: s.bytes_sent,
                    bytes_received: s.bytes_received,
                    busy_count: s.busy_count,
                    parks: s.parks,
                    ..Default::default()
                }
            }
            Endpoint::Multihop(c) => {
                let s = c.stats();
                EndpointStats {
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
                }
            }
        }
    }

    /// Send, waiting while there is no room (ring or credit window).
    pub fn send_blocking(&self, parts: &[&[u8]], timeout: Option<Duration>) -> Result<()> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let len: usize = parts.iter().map(|p| p.len()).sum();
        loop {
            match self.try_send(parts) {
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
