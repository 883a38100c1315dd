//! The runtime's channels for native modules registered by this extension (the GES engine,
//! `multihop._ges`, crate `multihop-ges`): a `Channel` object as a [`FrameChannel`], the narrow
//! interface that module reads and writes channels through: receive the frames that are there
//! (`Endpoint::try_recv_many`), send one frame without waiting (`Endpoint::try_send`). Nothing of
//! GES is here; the interface is the module's, the implementation the runtime's public API.

use std::sync::Arc;

use multihop_ges::io::{Closed, FrameChannel, Sent};
use pyo3::prelude::*;

use super::channel::Channel;
use crate::endpoint::Endpoint;
use crate::error::ErrorKind;

/// A channel end as a [`FrameChannel`].
struct Frames(Arc<Endpoint>);

impl FrameChannel for Frames {
    fn recv_frames(&self, max: usize, out: &mut Vec<Vec<u8>>) -> Result<(), Closed> {
        let r = self.0.try_recv_many(max, &mut |len, copy| {
            let mut v = vec![0u8; len];
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
}

/// A `multihop.Channel` as a [`FrameChannel`] (TypeError for anything else).
pub(super) fn frame_channel(obj: &Bound<'_, PyAny>) -> PyResult<Arc<dyn FrameChannel>> {
    let ch = obj.cast::<Channel>()?;
    Ok(Arc::new(Frames(ch.get().ch.clone())))
}
