//! What a service's backlog is made of, below the connection that fills it:
//! the connect requests the reader thread queues ([`PendingConnect`]) and the
//! acceptor thread's wake-up ([`AcceptorWake`]). The backlog itself (the
//! queues, the set-up of each channel) is `service.rs`'s, behind the
//! `Backlog` interface the connection calls (`conn.rs`).

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use multihop_base::sync::lock;

/// Longest the acceptor sleeps without being poked (it then looks for
/// requests whose time ran out).
pub(crate) const ACCEPTOR_NAP: Duration = Duration::from_secs(1);

/// A connect request waiting for its service.
pub struct PendingConnect {
    pub(crate) conn: u64,
    pub iref: u64,
    pub service: String,
    pub chan: u64,
    pub transport: String,
    pub client_pid: u32,
    pub client_core: u32,
    pub(crate) vci: u64,
    pub(crate) window: u32,
    pub(crate) hops: u32,
    pub(crate) expires: Instant,
    pub(crate) fds: Vec<OwnedFd>,
}

impl PendingConnect {
    /// When the client's bind gives up (its timeout).
    pub fn expires(&self) -> Instant {
        self.expires
    }

    /// The credit window the client asked for (multi-hop).
    pub fn window(&self) -> u32 {
        self.window
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        conn: u64,
        iref: u64,
        service: String,
        chan: u64,
        transport: String,
        client_pid: u32,
        client_core: u32,
        vci: u64,
        window: u32,
        hops: u32,
        timeout_ms: u64,
        fds: Vec<OwnedFd>,
    ) -> PendingConnect {
        // The request arrives after the client's monitor started waiting, so
        // it expires here after the monitor gave up there: the client sees
        // Timeout, and the refusal sent on expiry only cleans up. A channel
        // taken just before expiry but after the monitor gave up is torn
        // down (the monitor answers a late acceptance with a TEARDOWN; a UMP
        // client marks its segment abandoned).
        let expires = Instant::now() + Duration::from_millis(timeout_ms.min(24 * 3600 * 1000));
        PendingConnect { conn, iref, service, chan, transport, client_pid, client_core, vci, window, hops, expires, fds }
    }
}

/// How the acceptor thread is woken: poked (a request came, room was made),
/// or stopped (its dispatcher is gone).
#[derive(Default)]
pub(crate) struct AcceptorWake {
    poked: Mutex<bool>,
    cv: Condvar,
    /// Set when the dispatcher is gone (Relaxed: the thread also re-checks
    /// its weak reference after every wake-up).
    stop: AtomicBool,
}

impl AcceptorWake {
    pub(crate) fn poke(&self) {
        *lock(&self.poked) = true;
        self.cv.notify_one();
    }

    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.poke();
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Sleep until poked, or until `wake_at` (at most [`ACCEPTOR_NAP`]).
    pub(crate) fn nap_until(&self, wake_at: Instant) {
        let mut poked = lock(&self.poked);
        if !*poked {
            let nap = wake_at.saturating_duration_since(Instant::now()).min(ACCEPTOR_NAP);
            poked = self.cv.wait_timeout(poked, nap).unwrap_or_else(|p| p.into_inner()).0;
        }
        *poked = false;
    }
}
