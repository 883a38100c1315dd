//! Waiting on a channel from Python: with the GIL released, one slice at a
//! time, checking for signals between slices; and the bytes-like views
//! that send calls read from.

use std::time::{Duration, Instant};

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::args::{deadline, to_py, type_name};
use multihop_base::error::{Error, ErrorKind};
use multihop_base::ringpair::{Waited, Want};
use multihop_dispatcher::Channel as Endpoint;

/// Holds a borrowed view of a bytes-like object's memory.
pub(crate) enum Bytes<'py> {
    Bytes(Bound<'py, PyBytes>),
    Buffer(PyUntypedBuffer),
}

impl<'py> Bytes<'py> {
    pub(crate) fn get(obj: &Bound<'py, PyAny>) -> PyResult<Bytes<'py>> {
        if let Ok(b) = obj.cast::<PyBytes>() {
            return Ok(Bytes::Bytes(b.clone()));
        }
        let buf = PyUntypedBuffer::get(obj).map_err(|_| PyTypeError::new_err(format!("expected a bytes-like object, got {}", type_name(obj))))?;
        if holds_references(buf.format().to_bytes()) {
            // numpy's name of the dtype, of the array or of the one a memoryview shows; else the buffer's format.
            let dtype = obj
                .getattr("dtype")
                .or_else(|_| obj.getattr("obj").and_then(|o| o.getattr("dtype")))
                .and_then(|d| d.str())
                .map(|d| format!("dtype {d}"))
                .unwrap_or_else(|_| format!("format {:?}", buf.format().to_string_lossy()));
            return Err(PyTypeError::new_err(format!(
                "cannot send an array of {dtype}: it holds references to Python objects (pointers that mean \
                 nothing in another process), not data; send plain values (numbers, bytes) or encode them first"
            )));
        }
        if !buf.is_c_contiguous() {
            return Err(PyValueError::new_err("the buffer must be C-contiguous"));
        }
        Ok(Bytes::Buffer(buf))
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Bytes(b) => b.as_bytes(),
            // SAFETY: a C-contiguous exported buffer of len_bytes bytes, held
            // for as long as the view lives; we only read it with the GIL held.
            Bytes::Buffer(b) => unsafe { std::slice::from_raw_parts(b.buf_ptr() as *const u8, b.len_bytes()) },
        }
    }
}

/// Whether a buffer's struct-module format has an object (`O`) item anywhere (numpy's
/// `dtype.hasobject`: an object dtype, or a structured one with an object field); field names
/// (`:name:` in a `T{...}` format) are not items.
fn holds_references(format: &[u8]) -> bool {
    let mut in_name = false;
    for &c in format {
        match c {
            b':' => in_name = !in_name,
            b'O' if !in_name => return true,
            _ => {}
        }
    }
    false
}

/// How long a receiver polls with the GIL held before it releases it: a
/// reply that lands within a few microseconds then costs no GIL hand-over
/// on either side (the GIL is free for others again well within Python's
/// own 5 ms switch interval).
const GIL_SPIN: Duration = Duration::from_micros(4);

/// Poll `ch` for up to GIL_SPIN while holding the GIL. True if it became ready.
#[inline]
fn spin_with_gil(ch: &Endpoint) -> bool {
    if let Endpoint::Multihop(_) = ch {
        return false; // its next hop shares our CPU: do not hold it up
    }
    let start = Instant::now();
    for i in 0u32.. {
        if ch.readable() {
            return true;
        }
        if i % 16 == 15 && start.elapsed() >= GIL_SPIN {
            return false;
        }
        std::hint::spin_loop();
    }
    false
}

/// Wait on a channel with the GIL released, one slice at a time. False
/// when `until` passed.
pub(crate) fn wait(py: Python<'_>, ch: &Endpoint, want: Want, until: Option<Instant>) -> PyResult<bool> {
    if matches!(want, Want::Readable) && spin_with_gil(ch) {
        return Ok(true);
    }
    match py.detach(|| ch.wait(want, until)) {
        Waited::Ready => Ok(true),
        Waited::TimedOut => Ok(false),
        Waited::Slice | Waited::Interrupted => {
            py.check_signals()?;
            Ok(true)
        }
    }
}

/// Send on `ch`, waiting while there is no room; the deadline is computed
/// only if a wait is needed (reading the clock can cost a system call).
pub(crate) fn send_waiting(py: Python<'_>, ch: &Endpoint, data: &[u8], timeout: Option<f64>) -> PyResult<()> {
    let mut until: Option<Option<Instant>> = None;
    loop {
        match ch.send_or_hold(&[data]) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind == ErrorKind::TxBusy => {
                ch.note_busy();
                let u = match until {
                    Some(u) => u,
                    None => *until.insert(deadline(timeout)?),
                };
                if !wait(py, ch, Want::Writable(data.len()), u)? {
                    return Err(to_py(py, Error::timeout("send timed out: the receiver did not make room")));
                }
            }
            Err(e) => return Err(to_py(py, e)),
        }
    }
}

/// `multihop.aio`, where the coroutines behind the `*_async` methods live.
pub(crate) fn aio(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static AIO: pyo3::sync::PyOnceLock<Py<PyModule>> = pyo3::sync::PyOnceLock::new();
    Ok(AIO.get_or_try_init(py, || py.import("multihop.aio").map(|m| m.unbind()))?.bind(py))
}

/// Receive one message into a new `bytes` if one is there (no waiting).
pub(crate) fn try_recv_bytes<'py>(py: Python<'py>, ch: &Endpoint) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let mut err = None;
    let got = ch.try_recv_with(|len, copy| {
        PyBytes::new_with(py, len, |buf| {
            copy(buf);
            Ok(())
        })
        .map_err(|e| {
            err = Some(e);
            Error::new(ErrorKind::Interrupted, "allocation failed")
        })
    });
    match got {
        Ok(v) => Ok(v),
        Err(e) => Err(err.unwrap_or_else(|| to_py(py, e))),
    }
}
