//! The runtime for native modules registered by this extension (the GES engine, `multihop._ges`,
//! crate `multihop-ges`): a `Channel` object as a [`FrameChannel`] and a `Dispatcher` object as a
//! [`Dispatcher`](multihop_ges::io::Dispatcher), the narrow interfaces that module reads, writes and
//! waits through. A channel end: receive the frames that are there (`Endpoint::try_recv_many`),
//! send one frame without waiting (`Endpoint::try_send`), readable or writable (`Endpoint::readable`,
//! `Endpoint::is_ready`, which asks the peer to ring when it makes room). A
//! dispatcher: wait as `Dispatcher.poll` waits (spin, then park on the process's doorbell, in
//! slices: `park::wait_until`), and cork its link's wake-ups of the monitor as `d.corked()` does.
//! Nothing of GES is here: the interfaces are the module's, the implementations the runtime's.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use multihop_ges::io::{Closed, Dispatcher as DispatcherIo, FrameChannel, Sent, Waited as GesWaited};
use multihop_ges::python::Hooks;
use pyo3::prelude::*;

use super::args::to_py;
use super::channel::Channel;
use super::dispatcher::Dispatcher;
use multihop_base::error::ErrorKind;
use multihop_base::park::{self, Doorbell, Waited};
use multihop_base::ringpair::Want;
use multihop_dispatcher::{Channel as Endpoint, DispatcherLink};

/// A channel end as a [`FrameChannel`].
struct Frames(Arc<Endpoint>);

impl FrameChannel for Frames {
    fn recv_frames(&self, max: usize, buf: &mut dyn FnMut(usize) -> Vec<u8>, out: &mut Vec<Vec<u8>>) -> Result<(), Closed> {
        let r = self.0.try_recv_many(max, &mut |len, copy| {
            let mut v = buf(len);
            v.resize(len, 0); // (a no-op when `buf` kept its promise: `len` bytes, each overwritten here)
            copy(&mut v);
            out.push(v);
            Ok(true)
        });
        // (any other failure of a receive leaves the channel unusable too: the engine treats it as closed)
        r.map(|_| ()).map_err(|_| Closed)
    }

    fn try_send(&self, frame: &[u8]) -> Sent {
        match self.0.try_send(&[frame]) {
            Ok(()) => Sent::Sent,
            Err(e) if e.kind == ErrorKind::TxBusy => Sent::Busy,
            Err(_) => Sent::Closed,
        }
    }

    fn readable(&self) -> bool {
        self.0.readable()
    }

    fn writable(&self, len: usize) -> bool {
        self.0.is_ready(Want::Writable(len))
    }

    fn fill_whole_buffer(&self) {
        self.0.fill_whole_ring();
    }
}

/// A dispatcher's waiting and corking.
struct Waiter {
    link: Arc<DispatcherLink>,
    bell: Arc<Doorbell>,
    /// parks counted by `park::wait_until` (Relaxed: a statistic nobody reads back here)
    parks: AtomicU64,
}

impl DispatcherIo for Waiter {
    fn wait(&self, until: Option<Instant>, ready: &mut dyn FnMut() -> bool) -> GesWaited {
        match park::wait_until(&self.bell, &self.parks, park::relay_spin_budget(), until, ready, &mut || false) {
            Waited::Ready => GesWaited::Ready,
            Waited::TimedOut => GesWaited::TimedOut,
            Waited::Slice => GesWaited::Slice,
            Waited::Interrupted => GesWaited::Interrupted,
        }
    }

    fn corked(&self, f: &mut dyn FnMut()) {
        self.link.corks.cork();
        f();
        if self.link.corks.uncork(std::thread::current().id()) {
            self.link.wake_monitor();
        }
    }
}

/// A `multihop.Channel` as a [`FrameChannel`] (TypeError for anything else).
fn frame_channel(obj: &Bound<'_, PyAny>) -> PyResult<Arc<dyn FrameChannel>> {
    let ch = obj.cast::<Channel>()?;
    Ok(Arc::new(Frames(ch.get().ch.clone())))
}

/// A `multihop.Dispatcher`'s waiting and corking (TypeError for anything else).
fn dispatcher(obj: &Bound<'_, PyAny>) -> PyResult<Arc<dyn DispatcherIo>> {
    let py = obj.py();
    let d = obj.cast::<Dispatcher>()?;
    let link = d.borrow().engine().link().map_err(|e| to_py(py, e))?.clone();
    let bell = park::process_doorbell().map_err(|e| to_py(py, e))?;
    Ok(Arc::new(Waiter { link, bell, parks: AtomicU64::new(0) }))
}

/// What the GES module gets of the runtime when it is registered.
pub(super) fn hooks() -> Hooks {
    Hooks { channel: frame_channel, dispatcher }
}
