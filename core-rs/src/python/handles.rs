//! `Handle`: an OS handle (file descriptor) received with a message, owned
//! by whoever holds the object and closed when it is collected; and the
//! glue of `Channel.send(..., handles=...)` / `recv_with_handles`.

use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::time::Instant;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyList, PyTuple};

use super::args::{to_py, type_name};
use crate::endpoint::Endpoint;
use crate::error::{Error, ErrorKind};

/// A file descriptor received with a message: ``fileno()`` (also ``int(h)``
/// and ``operator.index``) reads it, ``detach()`` takes it over (the object
/// no longer closes it), ``close()`` closes it, and so does collecting the
/// object. Sent on (``ch.send(data, handles=[h])``) it stays open here
/// unless given away.
#[pyclass(frozen, module = "multihop._core")]
pub struct Handle {
    fd: Mutex<Option<OwnedFd>>,
}

impl Handle {
    pub(crate) fn owning(fd: OwnedFd) -> Handle {
        Handle { fd: Mutex::new(Some(fd)) }
    }

    fn raw(&self) -> Option<RawFd> {
        self.fd.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|f| f.as_raw_fd())
    }

    fn open_fd(&self) -> PyResult<RawFd> {
        self.raw().ok_or_else(|| PyValueError::new_err("the handle is closed (or was detached)"))
    }
}

#[pymethods]
impl Handle {
    /// Take ownership of the open descriptor ``fd`` (it is closed with the object).
    #[new]
    fn new(fd: &Bound<'_, PyAny>) -> PyResult<Handle> {
        let fd = super::args::int(fd, "fd", 0, i32::MAX as i128)? as RawFd;
        if !crate::caps::check::is_open(fd) {
            return Err(PyValueError::new_err(format!("descriptor {fd} is not open")));
        }
        // SAFETY: an open descriptor the caller hands over to us.
        Ok(Handle::owning(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The descriptor number (ValueError once closed or detached).
    fn fileno(&self) -> PyResult<RawFd> {
        self.open_fd()
    }

    fn __index__(&self) -> PyResult<RawFd> {
        self.open_fd()
    }

    fn __int__(&self) -> PyResult<RawFd> {
        self.open_fd()
    }

    /// Give up ownership: returns the descriptor, which the caller now closes.
    fn detach(&self) -> PyResult<RawFd> {
        let fd = self.fd.lock().unwrap_or_else(|p| p.into_inner()).take();
        fd.map(IntoRawFd::into_raw_fd).ok_or_else(|| PyValueError::new_err("the handle is closed (or was detached)"))
    }

    /// Close the descriptor now (idempotent).
    fn close(&self) {
        drop(self.fd.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    /// Whether the descriptor was closed or detached.
    #[getter]
    fn closed(&self) -> bool {
        self.raw().is_none()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, PyTuple>) -> bool {
        self.close();
        false
    }

    fn __repr__(&self) -> String {
        match self.raw() {
            Some(fd) => match std::fs::read_link(format!("/proc/self/fd/{fd}")) {
                Ok(p) => format!("<Handle fd={fd} {}>", p.display()),
                Err(_) => format!("<Handle fd={fd}>"),
            },
            None => "<Handle closed>".into(),
        }
    }
}

/// The descriptors of a `handles=` argument (ints, `Handle`s, objects with
/// `fileno()`), and whether each is given away.
pub(crate) struct Outgoing<'py> {
    objs: Vec<Bound<'py, PyAny>>,
    pub fds: Vec<RawFd>,
    give: Vec<bool>,
}

impl<'py> Outgoing<'py> {
    pub(crate) fn get(handles: &Bound<'py, PyAny>, give_away: &Bound<'py, PyAny>) -> PyResult<Outgoing<'py>> {
        let objs: Vec<Bound<'py, PyAny>> = handles
            .try_iter()
            .map_err(|_| PyTypeError::new_err(format!("handles must be a list of descriptors, got {}", type_name(handles))))?
            .collect::<PyResult<_>>()?;
        let mut fds = Vec::with_capacity(objs.len());
        for (i, o) in objs.iter().enumerate() {
            let fd = if let Ok(h) = o.cast::<Handle>() {
                h.get().raw().unwrap_or(-1) // a closed Handle: refused as not open
            } else if o.is_instance_of::<PyBool>() {
                return Err(PyTypeError::new_err(format!("handles[{i}] must be a descriptor (int or an object with fileno()), got bool")));
            } else if let Ok(n) = o.extract::<i64>() {
                n.clamp(-1, i32::MAX as i64) as RawFd
            } else if o.hasattr("fileno")? {
                o.call_method0("fileno")?.extract::<RawFd>()?
            } else {
                return Err(PyTypeError::new_err(format!(
                    "handles[{i}] must be a descriptor (int or an object with fileno()), got {}",
                    type_name(o)
                )));
            };
            fds.push(fd);
        }
        let give = if let Ok(b) = give_away.cast::<PyBool>() {
            vec![b.is_true(); objs.len()]
        } else {
            let g: Vec<bool> = give_away
                .try_iter()
                .map_err(|_| PyTypeError::new_err("give_away must be a bool or a list of bools, one per handle"))?
                .map(|x| x.and_then(|x| x.is_truthy()))
                .collect::<PyResult<_>>()?;
            if g.len() != objs.len() {
                return Err(PyValueError::new_err(format!("give_away has {} entries for {} handles", g.len(), objs.len())));
            }
            g
        };
        Ok(Outgoing { objs, fds, give })
    }

    /// The send went: close what was given away (a `Handle` or an object
    /// with `close()` is closed through itself, so it never closes a reused
    /// descriptor number later).
    pub(crate) fn give_away(&self) -> PyResult<()> {
        for ((o, fd), give) in self.objs.iter().zip(&self.fds).zip(&self.give) {
            if !give {
                continue;
            }
            if let Ok(h) = o.cast::<Handle>() {
                h.get().close();
            } else if o.extract::<i64>().is_ok() {
                // SAFETY: the caller gave this descriptor away; it is ours to close.
                unsafe { libc::close(*fd) };
            } else if o.hasattr("close")? {
                o.call_method0("close")?;
            } else {
                // SAFETY: as above.
                unsafe { libc::close(*fd) };
            }
        }
        Ok(())
    }
}

/// `send(data, handles=...)`: the whole protocol with the GIL released,
/// signals checked between waits.
pub(crate) fn send(py: Python<'_>, ch: &Endpoint, data: &[u8], out: &Outgoing<'_>, until: Option<Instant>) -> PyResult<()> {
    let mut pending: Option<PyErr> = None;
    let fds: &[RawFd] = &out.fds;
    let r = py.detach(|| {
        ch.send_with_handles(data, fds, until, &mut || {
            Python::attach(|py| py.check_signals()).map_err(|e| {
                pending = Some(e);
                Error::new(ErrorKind::Interrupted, "interrupted")
            })
        })
    });
    match r {
        Ok(()) => out.give_away(),
        Err(e) => Err(pending.unwrap_or_else(|| to_py(py, e))),
    }
}

/// One message and its handles, if one is there: (bytes, [Handle, ...]).
pub(crate) fn try_recv<'py>(py: Python<'py>, ch: &Endpoint) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let mut err = None;
    let mut fds = Vec::new();
    let got = ch.try_recv_with_handles(
        |len, copy| {
            PyBytes::new_with(py, len, |buf| {
                copy(buf);
                Ok(())
            })
            .map_err(|e| {
                err = Some(e);
                Error::new(ErrorKind::Interrupted, "allocation failed")
            })
        },
        &mut fds,
    );
    let data = match got {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(e) => return Err(err.unwrap_or_else(|| to_py(py, e))),
    };
    let list = PyList::empty(py);
    for fd in fds {
        list.append(Bound::new(py, Handle::owning(fd))?)?;
    }
    Ok(Some(PyTuple::new(py, [data.into_any(), list.into_any()])?))
}
