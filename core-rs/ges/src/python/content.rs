//! `event_texts`: a content dict's signature and canonical values, as `multihop.ges.event.make_event`
//! makes them, for the publisher's every event.
//!
//! Only the plain case is taken here: a non-empty `dict` whose names are `str` and whose values are
//! exactly `bool`, `int` (within i64), `float` (not NaN) or `str`, none with a forbidden character.
//! Anything else (a subclass, a huge int, NaN, a bad name, a string that is not valid UTF-8) is
//! answered `None`, and the Python function decides: it makes the text or raises the error that names
//! what is wrong. So the error messages have one author, and what this function returns is equal,
//! character for character, to what the Python code makes (tests/ges/test_ges_native_content.py
//! checks both on random contents).

use std::fmt::Write;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};

/// Characters no name or string value may hold (`event._FORBIDDEN`): NUL and the separators.
fn forbidden(c: char) -> bool {
    c == '\0' || ('\x1c'..='\x1f').contains(&c)
}

/// `(signature, values)` of `content`, or None when the Python code must decide (see the module docs).
#[pyfunction]
fn event_texts<'py>(py: Python<'py>, content: &Bound<'py, PyAny>) -> PyResult<Option<(Bound<'py, PyString>, Bound<'py, PyString>)>> {
    let Ok(dict) = content.cast_exact::<PyDict>() else { return Ok(None) };
    if dict.is_empty() {
        return Ok(None);
    }
    let (mut sig, mut vals) = (String::with_capacity(64), String::with_capacity(64));
    for (i, (name, value)) in dict.iter().enumerate() {
        let Ok(name) = name.cast_exact::<PyString>() else { return Ok(None) };
        let Ok(name) = name.to_str() else { return Ok(None) };
        if name.is_empty() || name.chars().any(|c| c == ':' || forbidden(c)) {
            return Ok(None);
        }
        if i > 0 {
            sig.push('\x1f');
            vals.push('\x1f');
        }
        sig.push_str(name);
        // (exact types only: bool before int, as isinstance(True, int) holds in Python)
        let ty = if let Ok(b) = value.cast_exact::<PyBool>() {
            vals.push_str(if b.is_true() { "b1" } else { "b0" });
            ":bool"
        } else if value.cast_exact::<PyInt>().is_ok() {
            let Ok(v) = value.extract::<i64>() else { return Ok(None) };
            let _ = write!(vals, "i{v}"); // (Python's f"i{value}": the same decimal text)
            ":int"
        } else if let Ok(f) = value.cast_exact::<PyFloat>() {
            if f.value().is_nan() {
                return Ok(None);
            }
            vals.push('f');
            vals.push_str(value.repr()?.to_str()?); // Python's repr: the shortest text that reads back
            ":float"
        } else if let Ok(s) = value.cast_exact::<PyString>() {
            let Ok(s) = s.to_str() else { return Ok(None) };
            if s.chars().any(forbidden) {
                return Ok(None);
            }
            vals.push('s');
            vals.push_str(s);
            ":str"
        } else {
            return Ok(None);
        };
        sig.push_str(ty);
    }
    Ok(Some((PyString::new(py, &sig), PyString::new(py, &vals))))
}

/// Register the function.
pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(event_texts, m)?)?;
    Ok(())
}
