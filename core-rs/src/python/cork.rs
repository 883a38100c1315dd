//! `Cork`: `with d.corked():` defers this thread's monitor wake-ups on the
//! dispatcher's link to the block's end (`multihop_dispatcher::multihop::cork`). Left from another
//! thread it still ends the cork it was (and rings).

use std::sync::Arc;
use std::thread::ThreadId;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use multihop_dispatcher::DispatcherLink;

/// A cork of one dispatcher's link, entered and left on one thread.
#[pyclass(module = "multihop._core")]
pub struct Cork {
    link: Arc<DispatcherLink>,
    entered: Option<ThreadId>,
}

impl Cork {
    pub(crate) fn new(link: Arc<DispatcherLink>) -> Cork {
        Cork { link, entered: None }
    }
}

#[pymethods]
impl Cork {
    fn __enter__(mut slf: PyRefMut<'_, Self>) -> PyResult<PyRefMut<'_, Self>> {
        if slf.entered.is_some() {
            return Err(PyRuntimeError::new_err("this cork is already entered; make a new one with d.corked()"));
        }
        slf.link.corks.cork();
        slf.entered = Some(std::thread::current().id());
        Ok(slf)
    }

    /// Wake the monitor once if anything was sent in the block. Never swallows an exception.
    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        let Some(t) = self.entered.take() else { return Err(PyRuntimeError::new_err("this cork was not entered")) };
        if self.link.corks.uncork(t) {
            self.link.wake_monitor();
        }
        Ok(false)
    }
}
