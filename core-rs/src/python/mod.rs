//! `multihop._core`: thin PyO3 wrappers over the engine, one pyclass per file.
//!
//! Rules here: no logic that the engine does not have; every blocking call
//! waits with the GIL released, in slices, and checks for signals between
//! slices (so Ctrl-C works); every engine error becomes the class of the
//! same name in `multihop.errors` (one error enum, one hierarchy); every
//! argument is checked (`args.rs`) before anything starts, with ValueError
//! or TypeError naming it.
//!
//! - [`args`]: argument checks and the error mapping;
//! - [`wait`]: waiting on a channel with the GIL released;
//! - [`channel`], [`service`], [`dispatcher`], [`fixed_layout`],
//!   [`forged_link`], [`handles`]: the pyclasses (`handles` also holds the
//!   glue of sending and receiving handles);
//! - [`async_bell`], [`pending_bind`]: what `multihop.aio` waits with;
//!   [`async_call`]: the awaitable of `recv_async` / `send_async`;
//! - [`functions`]: module functions (monitor process, tools, runtime lock);
//! - [`fast_send`]: generated stubs' native send methods;
//! - [`native_channels`]: the channels and dispatchers of native modules registered here (`multihop._ges`).

mod adopt;
mod args;
mod async_bell;
mod async_call;
mod channel;
mod cork;
mod dispatcher;
mod fast_send;
mod fixed_layout;
mod forged_link;
mod functions;
mod group;
mod handles;
mod native_channels;
mod pending_bind;
mod service;
mod wait;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<channel::Channel>()?;
    m.add_class::<service::Service>()?;
    m.add_class::<dispatcher::Dispatcher>()?;
    m.add_class::<forged_link::ForgedMonitorLink>()?;
    m.add_class::<fixed_layout::FixedLayout>()?;
    m.add_class::<handles::Handle>()?;
    m.add_class::<async_bell::AsyncBell>()?;
    m.add_class::<pending_bind::PendingBind>()?;
    m.add_class::<async_call::AsyncCall>()?;
    m.add_class::<cork::Cork>()?;
    functions::register(m)?;
    group::register(m)?;
    // GES's native engine is a module of its own (crate multihop-ges): registered here, nothing of it lives here
    multihop_ges::python::register(m, native_channels::hooks())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    defaults(m)?;
    Ok(())
}

/// The engine's defaults and limits (`multihop_base::defaults`, defined once), for the Python side to read
/// rather than restate: durations in seconds (float), sizes in bytes, counts as ints.
fn defaults(m: &Bound<'_, PyModule>) -> PyResult<()> {
    use multihop_base::defaults as d;
    m.add("DEFAULT_WINDOW", d::WINDOW)?;
    m.add("MAX_WINDOW", d::MAX_WINDOW)?;
    m.add("DEFAULT_TIMEOUT", d::TIMEOUT.as_secs_f64())?;
    m.add("REQUEST_TIMEOUT", d::REQUEST_TIMEOUT.as_secs_f64())?;
    m.add("DEFAULT_MAX_MESSAGE", d::MAX_MESSAGE)?;
    m.add("LIMIT_MAX_MESSAGE", d::LIMIT_MAX_MESSAGE)?;
    m.add("MAX_BATCH", d::MAX_BATCH)?;
    m.add("HELD_FRAMES", d::HELD_FRAMES)?;
    m.add("CLOSE_HELD_WAIT", d::CLOSE_HELD_WAIT.as_secs_f64())?;
    m.add("DEFAULT_BACKLOG", d::BACKLOG)?;
    m.add("MAX_BACKLOG", d::MAX_BACKLOG)?;
    m.add("MAX_HANDLES", d::MAX_HANDLES)?;
    m.add("DEFAULT_HANDLE_ROOM", d::HANDLE_ROOM)?;
    Ok(())
}
