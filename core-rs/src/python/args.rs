//! Argument checks and the mapping of engine errors onto `multihop.errors`.
//!
//! Every argument a Python caller passes is checked here before anything
//! starts: the wrong type is a TypeError, a value out of range a ValueError,
//! and both name the argument (never a bare OverflowError or
//! UnicodeEncodeError from the conversion).

use std::time::{Duration, Instant};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyInt, PyString, PyType};

use multihop_base::error::{Error, ErrorKind, Progress};

pub(crate) fn error_class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let module = ERRORS.get_or_try_init(py, || py.import("multihop.errors").map(|m| m.unbind()))?;
    Ok(module.bind(py).getattr(name)?.cast_into::<PyType>()?)
}

/// Map an engine error onto `multihop.errors`; a batch's or flush's count
/// becomes the exception's `sent` or `unconsumed` attribute.
pub(crate) fn to_py(py: Python<'_>, e: Error) -> PyErr {
    if e.kind == ErrorKind::InvalidArgument {
        return PyValueError::new_err(e.message);
    }
    let err = match error_class(py, e.kind.python_name()) {
        Ok(cls) => PyErr::from_type(cls, e.message),
        Err(err) => return err,
    };
    let attr = match e.progress {
        Some(Progress::Sent(n)) => Some(("sent", n)),
        Some(Progress::Unconsumed(n)) => Some(("unconsumed", n)),
        Some(Progress::Lost(n)) => Some(("count", n)),
        None => None,
    };
    if let Some((name, n)) = attr {
        if let Err(e) = err.value(py).setattr(name, n) {
            return e;
        }
    }
    if let Some((reason, index)) = &e.refusal {
        let v = err.value(py);
        if let Err(e) = v.setattr("reason", reason.as_str()).and_then(|()| v.setattr("index", *index)) {
            return e;
        }
    }
    err
}

pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// A `timeout` argument: None, or a number of seconds (int or float; a bool
/// is not one), as given: its range is `timeout`'s check.
pub(crate) fn secs(obj: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
    if obj.is_none() {
        return Ok(None);
    }
    let number = !obj.is_instance_of::<PyBool>()
        && (obj.is_instance_of::<pyo3::types::PyFloat>() || obj.is_instance_of::<PyInt>() || obj.hasattr("__float__")?);
    match number.then(|| obj.extract::<f64>()) {
        Some(Ok(t)) => Ok(Some(t)),
        _ => Err(PyTypeError::new_err(format!(
            "timeout must be a number of seconds or None, got {} {}",
            type_name(obj),
            obj.repr().map(|r| r.to_string()).unwrap_or_default()
        ))),
    }
}

/// A timeout in seconds: None (forever) or a number >= 0.
pub(crate) fn timeout(name: &str, t: Option<f64>) -> PyResult<Option<Duration>> {
    match t {
        None => Ok(None),
        Some(t) if t.is_nan() || t < 0.0 => Err(PyValueError::new_err(format!("{name} must be >= 0 seconds or None, got {t}"))),
        Some(t) => Ok(Some(Duration::from_secs_f64(t.min(1e9)))),
    }
}

// `Channel.close`'s default timeout (a literal in its signature, so Python shows it) is the engine's.
const _: () = assert!(multihop_base::defaults::CLOSE_HELD_WAIT.as_secs() == 5);

/// Check a timeout argument without converting it (the hot paths only
/// read the clock when they have to wait).
#[inline]
pub(crate) fn check_timeout(t: Option<f64>) -> PyResult<()> {
    match t {
        Some(t) if t.is_nan() || t < 0.0 => Err(PyValueError::new_err(format!("timeout must be >= 0 seconds or None, got {t}"))),
        _ => Ok(()),
    }
}

/// The deadline of a timeout argument (None: no deadline).
pub(crate) fn deadline(t: Option<f64>) -> PyResult<Option<Instant>> {
    Ok(timeout("timeout", t)?.map(|d| Instant::now() + d))
}

/// An integer argument in `lo..=hi`.
pub(crate) fn int(obj: &Bound<'_, PyAny>, name: &str, lo: i128, hi: i128) -> PyResult<i128> {
    if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!("{name} must be an int, got bool {}", obj.repr()?)));
    }
    let v = match obj.extract::<i128>() {
        Ok(v) => v,
        Err(_) if obj.is_instance_of::<PyInt>() => {
            return Err(PyValueError::new_err(format!("{name} must be an int from {lo} to {hi}, got {}", obj.repr()?)))
        }
        Err(_) => return Err(PyTypeError::new_err(format!("{name} must be an int, got {} {}", type_name(obj), obj.repr()?))),
    };
    if v < lo || v > hi {
        return Err(PyValueError::new_err(format!("{name} must be an int from {lo} to {hi}, got {v}")));
    }
    Ok(v)
}

/// A `usize` argument in `lo..=hi`.
pub(crate) fn count(obj: &Bound<'_, PyAny>, name: &str, lo: usize, hi: usize) -> PyResult<usize> {
    Ok(int(obj, name, lo as i128, hi as i128)? as usize)
}

/// A string argument that is valid Unicode (no lone surrogates).
pub(crate) fn text(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<String> {
    let s = obj.cast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!("{name} must be a str, got {} {}", type_name(obj), obj.repr().map(|r| r.to_string()).unwrap_or_default()))
    })?;
    s.to_str().map(str::to_string).map_err(|e| {
        PyValueError::new_err(format!(
            "{name} {} is not valid Unicode (it cannot be encoded as UTF-8: {e})",
            obj.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    })
}

/// `window` of a bind: an int from 1 to `MAX_WINDOW` (the engine's range, the same on both transports),
/// said in words whatever the int.
pub(crate) fn window(obj: &Bound<'_, PyAny>) -> PyResult<u32> {
    let hi = multihop_base::defaults::MAX_WINDOW as i128;
    match int(obj, "window", 1, hi) {
        Ok(w) => Ok(w as u32),
        Err(e) if e.is_instance_of::<PyValueError>(obj.py()) => Err(PyValueError::new_err(format!(
            "window must be an int from 1 to {hi} (the most messages in flight on the channel, each way); {} is not a valid window",
            obj.repr()?
        ))),
        Err(e) => Err(e),
    }
}

/// `max_message` of a bind: an int from 1 to the transport's largest message (`BindOptions::max_message_limit`).
pub(crate) fn max_message(obj: &Bound<'_, PyAny>, transport: &str) -> PyResult<usize> {
    let hi = multihop_dispatcher::BindOptions::max_message_limit(transport).map_err(|e| PyValueError::new_err(e.message))?;
    match int(obj, "max_message", 1, hi as i128) {
        Ok(m) => Ok(m as usize),
        Err(e) if e.is_instance_of::<PyValueError>(obj.py()) => {
            Err(PyValueError::new_err(format!("max_message must be an int from 1 to {hi} bytes on a {transport} channel, got {}", obj.repr()?)))
        }
        Err(e) => Err(e),
    }
}

/// `backlog` of an export.
pub(crate) fn backlog(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    count(obj, "backlog", 1, multihop_base::defaults::MAX_BACKLOG)
}

/// `max_count` of a batch receive.
pub(crate) fn max_count(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    count(obj, "max_count", 0, MAX_RECV_COUNT)
}

/// Most messages one `recv_batch` or `recv_records` call asks for.
pub(crate) const MAX_RECV_COUNT: usize = 1 << 24;

/// `transport` of a bind: "ump", "multihop" or "auto" (resolved by the engine, `transport_choice.rs`).
pub(crate) fn transport(obj: &Bound<'_, PyAny>) -> PyResult<&'static str> {
    let t = text(obj, "transport")?;
    match t.as_str() {
        "ump" => Ok("ump"),
        "multihop" => Ok("multihop"),
        "auto" => Ok("auto"),
        other => Err(PyValueError::new_err(format!("transport must be \"ump\", \"multihop\" or \"auto\", got {other:?}"))),
    }
}
