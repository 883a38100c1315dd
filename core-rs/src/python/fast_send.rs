//! A generated Flounder stub's native send method for a message of scalars.
//!
//! `b.tx.three(a=1, b=2, c=3)` as a Python method costs a Python frame and
//! keyword binding, more than the send itself.  So for a message whose
//! arguments are all integers, bools or enums (`fixed_layout.rs`) the stub's
//! `tx.three` is instead a builtin function object made here, called through
//! the vectorcall protocol (`METH_FASTCALL | METH_KEYWORDS`): it matches the
//! arguments to the message's names, encodes them onto a stack buffer and
//! sends, with no Python object made on the way.
//!
//! It decides nothing else: a call with anything it is not sure of (an
//! unknown or repeated keyword, a missing argument, a `timeout` that is not
//! None or a number >= 0, a value that is not an exact int or bool, or out of
//! range) goes unchanged to the stub's Python encoder (`fallback`), which
//! sends it or raises the error it always raises.

use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyString, PyTuple};

use multihop_base::fixed_layout::{Field, FixedLayout, Value};
use multihop_dispatcher::Channel as Endpoint;

/// Marks an argument slot not given (calls have at most 64 arguments here).
const UNSET: u8 = u8::MAX;

/// What one native send callable holds (the `self` of its builtin function).
#[pyclass(frozen, module = "multihop._core")]
pub struct FastSend {
    ch: Arc<Endpoint>,
    layout: FixedLayout,
    /// The arguments' names, interned (call sites pass interned keywords,
    /// so most matches are a pointer comparison).
    names: Vec<Py<PyString>>,
    /// "timeout", interned: the one keyword besides the arguments.
    timeout_name: Py<PyString>,
    fallback: Py<PyAny>,
}

/// `PyMethodDef` holds raw pointers; this one is immutable and 'static.
struct MethodDef(ffi::PyMethodDef);
// SAFETY: never written after initialisation; CPython only reads it.
unsafe impl Sync for MethodDef {}

const DOC: &CStr = c"Send this message (a generated stub's native fast path; other calls go to its Python encoder).";

static DEF: MethodDef = MethodDef(ffi::PyMethodDef {
    ml_name: c"send".as_ptr(),
    ml_meth: ffi::PyMethodDefPointer { PyCFunctionFastWithKeywords: call },
    ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
    ml_doc: DOC.as_ptr(),
});

/// The builtin function object for one message.
pub fn make(py: Python<'_>, ch: Arc<Endpoint>, layout: FixedLayout, names: &[String], fallback: Py<PyAny>) -> PyResult<Py<PyAny>> {
    if names.len() != layout.fields().len() {
        return Err(PyRuntimeError::new_err(format!("{} names for a layout of {} fields", names.len(), layout.fields().len())));
    }
    let names = names.iter().map(|n| PyString::intern(py, n).unbind()).collect();
    let timeout_name = PyString::intern(py, "timeout").unbind();
    let this = Bound::new(py, FastSend { ch, layout, names, timeout_name, fallback })?;
    // SAFETY: DEF is 'static; `this` is a valid object, kept alive by the function.
    let f = unsafe { ffi::PyCMethod_New(&DEF.0 as *const _ as *mut _, this.as_ptr(), std::ptr::null_mut(), std::ptr::null_mut()) };
    if f.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference returned by CPython.
    Ok(unsafe { Bound::from_owned_ptr(py, f) }.unbind())
}

/// An argument as its field takes it: exact ints (exact bools for bool
/// fields); None for anything else.
#[inline]
fn value_of(f: Field, v: Borrowed<'_, '_, PyAny>) -> Option<Value> {
    if let Field::Bool = f {
        // SAFETY: Py_True is a static object.
        return v.is_exact_instance_of::<PyBool>().then(|| Value::Bool(v.as_ptr() == unsafe { ffi::Py_True() }));
    }
    if !v.is_exact_instance_of::<PyInt>() {
        return None;
    }
    match v.extract::<i64>() {
        Ok(x) => Some(Value::Signed(x)),
        Err(_) => v.extract::<u64>().ok().map(Value::Unsigned),
    }
}

impl FastSend {
    /// Hand the call to the stub's Python encoder unchanged (the slow path:
    /// the stable ABI of Python 3.11 has no vectorcall for us to forward with).
    fn call_fallback<'py>(
        &self,
        py: Python<'py>,
        all: &[*mut ffi::PyObject],
        nargs: usize,
        kwnames: *mut ffi::PyObject,
    ) -> PyResult<Bound<'py, PyAny>> {
        // SAFETY: borrowed references valid for this call.
        let item = |i: usize| unsafe { Bound::from_borrowed_ptr(py, all[i]) };
        let positional = PyTuple::new(py, (0..nargs).map(item))?;
        let kwargs = PyDict::new(py);
        for k in 0..all.len() - nargs {
            // SAFETY: kwnames is a tuple of str with one name per keyword argument.
            let name = unsafe { Bound::from_borrowed_ptr(py, ffi::PyTuple_GetItem(kwnames, k as ffi::Py_ssize_t)) };
            kwargs.set_item(name, item(nargs + k))?;
        }
        self.fallback.bind(py).call(positional, Some(&kwargs))
    }

    /// Encode the call's arguments into `out`: Some((length, timeout)), or
    /// None when the fast path does not take this call.
    fn encode(&self, py: Python<'_>, args: &[*mut ffi::PyObject], kwnames: *mut ffi::PyObject, out: &mut [u8]) -> Option<(usize, Option<f64>)> {
        let fields = self.layout.fields();
        // SAFETY: a non-null kwnames is the vectorcall's tuple of keyword names.
        let nkw = if kwnames.is_null() { 0 } else { (unsafe { ffi::PyTuple_Size(kwnames) }) as usize };
        let positional = args.len() - nkw;
        if positional > fields.len() || fields.len() >= UNSET as usize {
            return None;
        }
        // Which argument slot holds field i: positional first, then keywords.
        let mut slot = [UNSET; 64];
        for (i, s) in slot.iter_mut().enumerate().take(positional) {
            *s = i as u8;
        }
        let mut given = positional;
        let mut timeout = None;
        for k in 0..nkw {
            // SAFETY: kwnames is a tuple of nkw str objects (the vectorcall protocol).
            let name = unsafe { ffi::PyTuple_GetItem(kwnames, k as ffi::Py_ssize_t) };
            let value = args[positional + k];
            let mut i = self.names.iter().position(|n| n.as_ptr() == name);
            if i.is_none() && name != self.timeout_name.as_ptr() {
                i = self.slow_position(py, name);
            }
            let Some(i) = i else {
                // Only `timeout` besides the arguments: None or a number >= 0.
                timeout = Some(self.timeout(py, name, value)?);
                continue;
            };
            if i < positional || slot[i] != UNSET {
                return None; // given twice: the Python encoder says so
            }
            slot[i] = (positional + k) as u8;
            given += 1;
        }
        if given != fields.len() {
            return None; // an argument is missing
        }
        let n = self.layout.encode_with(out, |i| {
            // SAFETY: every slot was filled above with an index into `args`,
            // whose objects the caller keeps alive for the call.
            value_of(fields[i], unsafe { Borrowed::from_ptr(py, args[slot[i] as usize]) })
        })?;
        Some((n, timeout.flatten()))
    }

    /// The field named `name` when the call site's string is not our interned one.
    #[cold]
    fn slow_position(&self, py: Python<'_>, name: *mut ffi::PyObject) -> Option<usize> {
        // SAFETY: a borrowed reference valid for this call.
        let name = unsafe { Bound::from_borrowed_ptr(py, name) };
        self.names.iter().position(|n| n.bind(py).as_any().eq(&name).unwrap_or(false))
    }

    /// A `timeout=` keyword: Some(None) for None, Some(Some(t)) for a float or
    /// int t >= 0; None (the slow path, which explains) for anything else.
    fn timeout(&self, py: Python<'_>, name: *mut ffi::PyObject, value: *mut ffi::PyObject) -> Option<Option<f64>> {
        // SAFETY: borrowed references valid for this call.
        let (name, value) = unsafe { (Bound::from_borrowed_ptr(py, name), Bound::from_borrowed_ptr(py, value)) };
        if name.extract::<&str>().ok()? != "timeout" {
            return None;
        }
        if value.is_none() {
            return Some(None);
        }
        if !(value.is_exact_instance_of::<pyo3::types::PyFloat>() || value.is_exact_instance_of::<PyInt>()) {
            return None;
        }
        let t = value.extract::<f64>().ok()?;
        (t >= 0.0).then_some(Some(t))
    }
}

unsafe extern "C" fn call(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: CPython calls us holding the GIL.
        let py = unsafe { Python::assume_attached() };
        // SAFETY: `slf` is the FastSend given to PyCMethod_New, alive while
        // its function is (no reference count traffic needed here).
        let this = unsafe { Borrowed::from_ptr(py, slf).cast_unchecked::<FastSend>() };
        let this = this.get();
        // SAFETY: a non-null kwnames is the vectorcall's tuple of keyword names.
        let nkw = if kwnames.is_null() { 0 } else { unsafe { ffi::PyTuple_Size(kwnames) } };
        let count = (nargs + nkw) as usize;
        // SAFETY: the vectorcall protocol gives `count` valid pointers (args may be null when there are none).
        let all: &[*mut ffi::PyObject] = if count == 0 || args.is_null() { &[] } else { unsafe { std::slice::from_raw_parts(args, count) } };
        let mut small = [0u8; 128];
        let mut large;
        let buf: &mut [u8] = if this.layout.size() <= small.len() {
            &mut small
        } else {
            large = vec![0u8; this.layout.size()];
            &mut large
        };
        match this.encode(py, all, kwnames, buf) {
            Some((n, timeout)) => match super::wait::send_waiting(py, &this.ch, &buf[..n], timeout) {
                // SAFETY: the thread is attached; None is immortal and a new reference is returned.
                Ok(()) => unsafe {
                    ffi::Py_IncRef(ffi::Py_None());
                    ffi::Py_None()
                },
                Err(e) => {
                    e.restore(py);
                    std::ptr::null_mut()
                }
            },
            None => match this.call_fallback(py, all, nargs as usize, kwnames) {
                Ok(v) => v.into_ptr(),
                Err(e) => {
                    e.restore(py);
                    std::ptr::null_mut()
                }
            },
        }
    }));
    result.unwrap_or_else(|_| {
        // SAFETY: still holding the GIL.
        let py = unsafe { Python::assume_attached() };
        PyRuntimeError::new_err("panic in a stub's native send").restore(py);
        std::ptr::null_mut()
    })
}
