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
use multihop_base::error::{Error, ErrorKind};
use multihop_dispatcher::Channel as Endpoint;

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
        multihop_base::sync::lock(&self.fd).as_ref().map(|f| f.as_raw_fd())
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
        if !multihop_base::handles::check::is_open(fd) {
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
        let fd = multihop_base::sync::lock(&self.fd).take();
        fd.map(IntoRawFd::into_raw_fd).ok_or_else(|| PyValueError::new_err("the handle is closed (or was detached)"))
    }

    /// Close the descriptor now (idempotent).
    fn close(&self) {
        drop(multihop_base::sync::lock(&self.fd).take());
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
///
/// A descriptor may appear more than once: it travels once per entry (the
/// receiver gets a handle for each), and if given away it is closed once,
/// after the send. Its entries must agree on whether it is given away
/// (closing it and keeping it cannot both hold).
pub(crate) struct Outgoing<'py> {
    objs: Vec<Bound<'py, PyAny>>,
    pub fds: Vec<RawFd>,
    give: Vec<bool>,
}

/// One `handles=` entry as a descriptor number: a closed `Handle` is -1
/// (refused as not open); an int out of a descriptor's range is a ValueError.
fn descriptor(i: usize, o: &Bound<'_, PyAny>) -> PyResult<RawFd> {
    let bad_type =
        || PyTypeError::new_err(format!("handles[{i}] must be a descriptor (int, Handle, or an object with fileno()), got {}", type_name(o)));
    let number = |n: &Bound<'_, PyAny>, what: &str| -> PyResult<RawFd> {
        let v: i128 = n.extract().map_err(|_| {
            PyValueError::new_err(format!(
                "handles[{i}]{what} is {}, out of range: a descriptor is an int in 0..={}",
                n.repr().map(|r| r.to_string()).unwrap_or_default(),
                i32::MAX
            ))
        })?;
        if !(0..=i32::MAX as i128).contains(&v) {
            return Err(PyValueError::new_err(format!("handles[{i}]{what} is {v}, out of range: a descriptor is an int in 0..={}", i32::MAX)));
        }
        Ok(v as RawFd)
    };
    if let Ok(h) = o.cast::<Handle>() {
        return Ok(h.get().raw().unwrap_or(-1));
    }
    if o.is_instance_of::<PyBool>() {
        return Err(bad_type());
    }
    if o.is_instance_of::<pyo3::types::PyInt>() || (!o.is_instance_of::<pyo3::types::PyFloat>() && o.hasattr("__index__")?) {
        return number(o, ""); // an int, or an int-like (numpy's) object
    }
    if o.hasattr("fileno")? {
        let n = o.call_method0("fileno")?;
        if n.is_instance_of::<PyBool>() || !n.is_instance_of::<pyo3::types::PyInt>() {
            return Err(PyTypeError::new_err(format!("handles[{i}].fileno() must return an int, got {}", type_name(&n))));
        }
        return number(&n, ".fileno()");
    }
    Err(bad_type())
}

impl<'py> Outgoing<'py> {
    pub(crate) fn get(handles: &Bound<'py, PyAny>, give_away: &Bound<'py, PyAny>) -> PyResult<Outgoing<'py>> {
        if handles.is_instance_of::<pyo3::types::PyString>() || handles.is_instance_of::<PyBytes>() {
            return Err(PyTypeError::new_err(format!("handles must be a list of descriptors, got {}", type_name(handles))));
        }
        let objs: Vec<Bound<'py, PyAny>> = handles
            .try_iter()
            .map_err(|_| PyTypeError::new_err(format!("handles must be a list of descriptors, got {}", type_name(handles))))?
            .collect::<PyResult<_>>()?;
        let fds = objs.iter().enumerate().map(|(i, o)| descriptor(i, o)).collect::<PyResult<Vec<_>>>()?;
        let give = give_away_flags(give_away, objs.len())?;
        for (i, (&fd, &g)) in fds.iter().zip(&give).enumerate() {
            if fd < 0 {
                continue;
            }
            if let Some(j) = fds[..i].iter().zip(&give[..i]).position(|(&f, &h)| f == fd && h != g) {
                return Err(PyValueError::new_err(format!(
                    "handles[{j}] and handles[{i}] are the same descriptor {fd}, given away in one and kept in the other; \
                     a repeated descriptor travels once per entry and is given away in all of them or in none"
                )));
            }
        }
        Ok(Outgoing { objs, fds, give })
    }

    /// The send went: close what was given away, each descriptor once (a
    /// `Handle` or an object with `close()` among its entries is closed
    /// through itself, so it never closes a reused descriptor number later;
    /// its other entries are then not closed again).
    pub(crate) fn give_away(&self) -> PyResult<()> {
        let mut done: Vec<RawFd> = Vec::new();
        for (i, (&fd, &give)) in self.fds.iter().zip(&self.give).enumerate() {
            if !give || done.contains(&fd) {
                continue;
            }
            done.push(fd);
            // The entry to close it through: a Handle first, then an object with close(), else the number.
            let same: Vec<&Bound<'py, PyAny>> = (i..self.fds.len()).filter(|&k| self.fds[k] == fd).map(|k| &self.objs[k]).collect();
            if let Some(h) = same.iter().find_map(|o| o.cast::<Handle>().ok()) {
                h.get().close();
                continue;
            }
            let closer = same.iter().find(|o| !o.is_instance_of::<pyo3::types::PyInt>() && o.hasattr("close").unwrap_or(false));
            match closer {
                Some(o) => {
                    o.call_method0("close")?;
                }
                // SAFETY: the caller gave this descriptor away; it is ours to close, once.
                None => unsafe {
                    libc::close(fd);
                },
            }
        }
        Ok(())
    }
}

/// `give_away`: a bool for every handle, or a sequence of bools, one per handle.
fn give_away_flags(give_away: &Bound<'_, PyAny>, n: usize) -> PyResult<Vec<bool>> {
    let must = || format!("give_away must be a bool or a sequence of bools (one per handle), got {}", type_name(give_away));
    if let Ok(b) = give_away.cast::<PyBool>() {
        return Ok(vec![b.is_true(); n]);
    }
    if give_away.is_instance_of::<pyo3::types::PyString>() || give_away.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(must()));
    }
    let items: Vec<Bound<'_, PyAny>> = give_away.try_iter().map_err(|_| PyTypeError::new_err(must()))?.collect::<PyResult<_>>()?;
    let mut g = Vec::with_capacity(items.len());
    for (i, x) in items.iter().enumerate() {
        match x.cast::<PyBool>() {
            Ok(b) => g.push(b.is_true()),
            Err(_) => return Err(PyTypeError::new_err(format!("give_away[{i}] must be a bool, got {}", type_name(x)))),
        }
    }
    if g.len() != n {
        return Err(PyValueError::new_err(format!(
            "give_away has {} entries for {n} handles: one bool per handle, or a single bool for all",
            g.len()
        )));
    }
    Ok(g)
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
