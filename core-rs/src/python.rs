//! `multihop._core`: thin PyO3 wrappers over the engine.
//!
//! Rules here: no logic that the engine does not have; every blocking call
//! waits with the GIL released, in slices, and checks for signals between
//! slices (so Ctrl-C works); every engine error becomes the class of the
//! same name in `multihop.errors` (one error enum, one hierarchy).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyType};

use std::sync::Mutex;

use pyo3::types::PyWeakrefReference;

use crate::channel::{Waited, Want};
use crate::dispatcher::{process_doorbell, Dispatcher as EngineDispatcher, PendingConnect, Service as EngineService};
use crate::endpoint::Endpoint;
use crate::error::{Error, ErrorKind};
use crate::monitor::{self, MonitorConfig};

fn error_class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let module = ERRORS.get_or_try_init(py, || py.import("multihop.errors").map(|m| m.unbind()))?;
    Ok(module.bind(py).getattr(name)?.cast_into::<PyType>()?)
}

/// Map an engine error onto `multihop.errors`.
fn to_py(py: Python<'_>, e: Error) -> PyErr {
    if e.kind == ErrorKind::InvalidArgument {
        return PyValueError::new_err(e.message);
    }
    match error_class(py, e.kind.python_name()) {
        Ok(cls) => PyErr::from_type(cls, e.message),
        Err(err) => err,
    }
}

fn deadline(timeout: Option<f64>) -> PyResult<Option<Instant>> {
    match timeout {
        None => Ok(None),
        Some(t) if t.is_nan() || t < 0.0 => Err(PyValueError::new_err(format!("timeout must be >= 0 or None, got {t}"))),
        Some(t) => Ok(Some(Instant::now() + Duration::from_secs_f64(t.min(1e9)))),
    }
}

fn duration(timeout: Option<f64>, default: f64) -> PyResult<Duration> {
    let t = timeout.unwrap_or(default);
    if t.is_nan() || t < 0.0 {
        return Err(PyValueError::new_err(format!("timeout must be >= 0, got {t}")));
    }
    Ok(Duration::from_secs_f64(t.min(1e9)))
}

/// Holds a borrowed view of a bytes-like object's memory.
enum Bytes<'py> {
    Bytes(Bound<'py, PyBytes>),
    Buffer(PyUntypedBuffer),
}

impl<'py> Bytes<'py> {
    fn get(obj: &Bound<'py, PyAny>) -> PyResult<Bytes<'py>> {
        if let Ok(b) = obj.cast::<PyBytes>() {
            return Ok(Bytes::Bytes(b.clone()));
        }
        let buf = PyUntypedBuffer::get(obj)
            .map_err(|_| PyTypeError::new_err(format!("expected a bytes-like object, got {}", type_name(obj))))?;
        if !buf.is_c_contiguous() {
            return Err(PyValueError::new_err("the buffer must be C-contiguous"));
        }
        Ok(Bytes::Buffer(buf))
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Bytes(b) => b.as_bytes(),
            // SAFETY: a C-contiguous exported buffer of len_bytes bytes, held
            // for as long as the view lives; we only read it with the GIL held.
            Bytes::Buffer(b) => unsafe { std::slice::from_raw_parts(b.buf_ptr() as *const u8, b.len_bytes()) },
        }
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
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

/// Wait on a channel with the GIL released, one slice at a time.
fn wait(py: Python<'_>, ch: &Endpoint, want: Want, until: Option<Instant>) -> PyResult<bool> {
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

/// One end of a channel: ``send``/``recv`` and their batch, non-blocking and
/// numpy-record variants.
#[pyclass(frozen, weakref, module = "multihop._core")]
pub struct Channel {
    ch: Arc<Endpoint>,
}

impl Channel {
    fn try_recv_bytes<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let mut err = None;
        let got = self.ch.try_recv_with(|len, copy| {
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

    fn send_slice(&self, py: Python<'_>, data: &[u8], timeout: Option<f64>) -> PyResult<()> {
        send_waiting(py, &self.ch, data, timeout)
    }
}

/// Send on `ch`, waiting while there is no room; the deadline is computed
/// only if a wait is needed (reading the clock can cost a system call).
pub(crate) fn send_waiting(py: Python<'_>, ch: &Endpoint, data: &[u8], timeout: Option<f64>) -> PyResult<()> {
    let mut until: Option<Option<Instant>> = None;
    loop {
        match ch.try_send(&[data]) {
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

#[pymethods]
impl Channel {
    /// Send one message (any bytes-like object), waiting while the ring is
    /// full. Raises Timeout, ChannelClosed, MessageTooLarge.
    #[pyo3(signature = (data, timeout=None))]
    fn send(&self, py: Python<'_>, data: &Bound<'_, PyAny>, timeout: Option<f64>) -> PyResult<()> {
        if let Some(t) = timeout {
            if t.is_nan() || t < 0.0 {
                return Err(PyValueError::new_err(format!("timeout must be >= 0 or None, got {t}")));
            }
        }
        let bytes = Bytes::get(data)?;
        self.send_slice(py, bytes.as_slice(), timeout)
    }

    /// Send one message now or raise TxBusy.
    fn try_send(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let bytes = Bytes::get(data)?;
        self.ch.try_send(&[bytes.as_slice()]).map_err(|e| to_py(py, e))
    }

    /// Receive one message, waiting up to `timeout` seconds (None: forever).
    #[pyo3(signature = (timeout=None))]
    fn recv<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyBytes>> {
        if let Some(t) = timeout {
            if t.is_nan() || t < 0.0 {
                return Err(PyValueError::new_err(format!("timeout must be >= 0 or None, got {t}")));
            }
        }
        let mut until: Option<Option<Instant>> = None;
        loop {
            if let Some(b) = self.try_recv_bytes(py)? {
                return Ok(b);
            }
            // Only now (a wait is needed) read the clock for the deadline.
            let u = match until {
                Some(u) => u,
                None => *until.insert(deadline(timeout)?),
            };
            if !wait(py, &self.ch, Want::Readable, u)? {
                return Err(to_py(py, Error::timeout("recv timed out: no message arrived")));
            }
        }
    }

    /// Receive one message if one is there, else None.
    fn try_recv<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        self.try_recv_bytes(py)
    }

    /// Send every message of `messages` in order, waiting while the ring is
    /// full, until all are written or `timeout` passes. Returns how many were
    /// written (all of them unless the timeout passed; 0 means non-blocking).
    #[pyo3(signature = (messages, timeout=None))]
    fn send_batch(&self, py: Python<'_>, messages: &Bound<'_, PyAny>, timeout: Option<f64>) -> PyResult<usize> {
        let until = deadline(timeout)?;
        let held: Vec<Bytes<'_>> = messages.try_iter()?.map(|m| Bytes::get(&m?)).collect::<PyResult<_>>()?;
        let slices: Vec<&[u8]> = held.iter().map(|b| b.as_slice()).collect();
        let mut done = 0usize;
        while done < slices.len() {
            let n = self.ch.try_send_many(&mut slices[done..].iter().copied()).map_err(|e| to_py(py, e))?;
            done += n;
            if done < slices.len() && n == 0 {
                self.ch.note_busy();
                if !wait(py, &self.ch, Want::Writable(slices[done].len()), until)? {
                    break;
                }
            }
        }
        Ok(done)
    }

    /// Receive up to `max_count` messages: waits up to `timeout` for the
    /// first, then takes whatever else is already there. Returns [] on timeout.
    #[pyo3(signature = (max_count, timeout=None))]
    fn recv_batch<'py>(&self, py: Python<'py>, max_count: usize, timeout: Option<f64>) -> PyResult<Bound<'py, PyList>> {
        let until = deadline(timeout)?;
        let out = PyList::empty(py);
        if max_count == 0 {
            return Ok(out);
        }
        loop {
            let mut err = None;
            let n = self.ch.try_recv_many(max_count, &mut |len, copy| {
                let b = PyBytes::new_with(py, len, |buf| {
                    copy(buf);
                    Ok(())
                })
                .and_then(|b| out.append(b));
                match b {
                    Ok(()) => Ok(true),
                    Err(e) => {
                        err = Some(e);
                        Err(Error::new(ErrorKind::Interrupted, "python error"))
                    }
                }
            });
            match n {
                Ok(0) => {}
                Ok(_) => return Ok(out),
                Err(e) => return Err(err.unwrap_or_else(|| to_py(py, e))),
            }
            if !wait(py, &self.ch, Want::Readable, until)? {
                return Ok(out);
            }
        }
    }

    /// Send each row of a C-contiguous array (e.g. numpy, shape (n, ...))
    /// as one message; waits while the ring is full. Returns rows written.
    #[pyo3(signature = (records, timeout=None))]
    fn send_records(&self, py: Python<'_>, records: &Bound<'_, PyAny>, timeout: Option<f64>) -> PyResult<usize> {
        let until = deadline(timeout)?;
        let rows: usize = records.len()?;
        let bytes = Bytes::get(records)?;
        let data = bytes.as_slice();
        if rows == 0 {
            return Ok(0);
        }
        if data.len() % rows != 0 {
            return Err(PyValueError::new_err("records: total size is not a multiple of the row count"));
        }
        let size = data.len() / rows;
        let mut done = 0usize;
        while done < rows {
            let mut it = data[done * size..].chunks_exact(size.max(1)).map(|c| if size == 0 { &c[..0] } else { c });
            let n = if size == 0 {
                let empty: Vec<&[u8]> = vec![&[]; rows - done];
                self.ch.try_send_many(&mut empty.into_iter())
            } else {
                self.ch.try_send_many(&mut it)
            }
            .map_err(|e| to_py(py, e))?;
            done += n;
            if done < rows && n == 0 {
                self.ch.note_busy();
                if !wait(py, &self.ch, Want::Writable(size), until)? {
                    break;
                }
            }
        }
        Ok(done)
    }

    /// Receive up to `max_count` messages of exactly `record_size` bytes into
    /// a new uint8 array of shape (count, record_size): waits up to `timeout`
    /// for the first. A message of another size stops the batch and stays in
    /// the channel (ProtocolError if it is the first).
    #[pyo3(signature = (max_count, record_size, timeout=None))]
    fn recv_records<'py>(
        &self,
        py: Python<'py>,
        max_count: usize,
        record_size: usize,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let until = deadline(timeout)?;
        let np = py.import("numpy")?;
        let arr = np.call_method1("empty", ((max_count, record_size), "uint8"))?;
        let buf = PyUntypedBuffer::get(&arr)?;
        // SAFETY: a fresh, C-contiguous, writable uint8 array we own.
        let out = unsafe { std::slice::from_raw_parts_mut(buf.buf_ptr() as *mut u8, buf.len_bytes()) };
        let mut count = 0usize;
        let mut mismatch = None;
        loop {
            let got = self.ch.try_recv_many(max_count - count, &mut |len, copy| {
                if len != record_size {
                    mismatch = Some(len);
                    return Ok(false);
                }
                copy(&mut out[count * record_size..(count + 1) * record_size]);
                count += 1;
                Ok(true)
            });
            got.map_err(|e| to_py(py, e))?;
            if count > 0 || max_count == 0 {
                break;
            }
            if let Some(len) = mismatch {
                return Err(to_py(py, Error::protocol(format!("next message has {len} bytes, not the record size {record_size}; read it with recv()"))));
            }
            if !wait(py, &self.ch, Want::Readable, until)? {
                break;
            }
        }
        drop(buf);
        arr.get_item(pyo3::types::PySlice::new(py, 0, count as isize, 1))
    }

    /// Counters and bind-time facts as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.ch.stats();
        let i = self.ch.info();
        let d = PyDict::new(py);
        d.set_item("sent", s.sent)?;
        d.set_item("received", s.received)?;
        d.set_item("bytes_sent", s.bytes_sent)?;
        d.set_item("bytes_received", s.bytes_received)?;
        d.set_item("busy_count", s.busy_count)?;
        d.set_item("parks", s.parks)?;
        d.set_item("hops", s.hops)?;
        d.set_item("acks_sent", s.acks_sent)?;
        d.set_item("dummies_sent", s.dummies_sent)?;
        d.set_item("window", s.window)?;
        d.set_item("in_flight", s.in_flight)?;
        d.set_item("queued", s.queued)?;
        d.set_item("transport", i.transport)?;
        d.set_item("service", &i.service)?;
        d.set_item("side", format!("{:?}", i.side).to_lowercase())?;
        d.set_item("peer_pid", i.peer_pid)?;
        d.set_item("peer_core", i.peer_core)?;
        d.set_item("max_message", i.max_message)?;
        d.set_item("ring_slots", i.ring_slots)?;
        d.set_item("closed", self.ch.is_closed())?;
        Ok(d)
    }

    /// Close this end; the peer gets ChannelClosed after draining. Idempotent.
    fn close(&self) {
        self.ch.close();
    }

    /// A native send callable for one Flounder message of scalars (a
    /// generated stub's fast path, see `fast_send.rs`): it takes the message's
    /// arguments (`names`, by position or keyword), encodes them with `layout`
    /// straight onto this channel, and hands any call it is unsure of to
    /// `fallback` unchanged.
    fn _fast_sender(&self, py: Python<'_>, layout: &FixedLayout, names: Vec<String>, fallback: Py<PyAny>) -> PyResult<Py<PyAny>> {
        crate::fast_send::make(py, self.ch.clone(), layout.layout.clone(), &names, fallback)
    }

    /// Test hook: (VCI received on, VCI sent with) on the link to this
    /// end's monitor, for a multi-hop channel; None for UMP.
    fn _vcis(&self) -> Option<(u64, u64)> {
        match &*self.ch {
            Endpoint::Multihop(m) => Some(m.vcis()),
            Endpoint::Ump(_) => None,
        }
    }

    /// Whether this end was closed.
    #[getter]
    fn closed(&self) -> bool {
        self.ch.is_closed()
    }

    /// The channel's 64-bit identifier.
    #[getter]
    fn id(&self) -> u64 {
        self.ch.info().id
    }

    /// The service name this channel is bound to.
    #[getter]
    fn service(&self) -> String {
        self.ch.info().service.clone()
    }

    /// "ump" or "multihop".
    #[getter]
    fn transport(&self) -> &'static str {
        self.ch.info().transport
    }

    /// The largest message this channel carries, in bytes.
    #[getter]
    fn max_message(&self) -> usize {
        self.ch.max_message()
    }

    /// The pid of the process at the other end.
    #[getter]
    fn peer_pid(&self) -> u32 {
        self.ch.info().peer_pid
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.ch.close();
        false
    }

    fn __repr__(&self) -> String {
        let i = self.ch.info();
        format!(
            "<Channel {:#x} {} {:?} side={:?} peer_pid={}{}>",
            i.id,
            i.transport,
            i.service,
            i.side,
            i.peer_pid,
            if self.ch.is_closed() { " closed" } else { "" }
        )
    }
}

/// An exported service: ``accept`` connections to it.
#[pyclass(frozen, module = "multihop._core")]
pub struct Service {
    svc: EngineService,
    on_connect: Option<Py<PyAny>>,
    owner: Py<Dispatcher>,
}

fn connect_info<'py>(py: Python<'py>, p: &PendingConnect) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("service", &p.service)?;
    d.set_item("iref", p.iref)?;
    d.set_item("channel", p.chan)?;
    d.set_item("transport", &p.transport)?;
    d.set_item("client_pid", p.client_pid)?;
    d.set_item("client_core", p.client_core)?;
    Ok(d)
}

#[pymethods]
impl Service {
    /// The exported name.
    #[getter]
    fn name(&self) -> String {
        self.svc.name.clone()
    }

    /// The interface reference the registry gave this service.
    #[getter]
    fn iref(&self) -> u64 {
        self.svc.iref
    }

    /// Wait up to `timeout` seconds (None: forever) for a client, ask the
    /// `on_connect` callback (if any), and return the accepted Channel.
    /// Refused clients get BindError; accept keeps waiting for the next.
    #[pyo3(signature = (timeout=None))]
    fn accept(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Py<Channel>> {
        let until = deadline(timeout)?;
        loop {
            let slice = until.map_or(Duration::from_millis(50), |u| {
                u.saturating_duration_since(Instant::now()).min(Duration::from_millis(50))
            });
            let next = py.detach(|| self.svc.next_request(slice)).map_err(|e| to_py(py, e))?;
            match next {
                Some(p) => {
                    if let Some(cb) = &self.on_connect {
                        let verdict = cb.bind(py).call1((connect_info(py, &p)?,));
                        match verdict.and_then(|v| v.is_truthy()) {
                            Ok(true) => {}
                            Ok(false) => {
                                self.svc.refuse(p, "refused by the service's on_connect callback");
                                continue;
                            }
                            Err(e) => {
                                self.svc.refuse(p, &format!("the service's on_connect callback raised: {e}"));
                                return Err(e);
                            }
                        }
                    }
                    let ch = self.svc.accept(p).map_err(|e| to_py(py, e))?;
                    return self.owner.bind(py).borrow().adopt(py, Channel { ch: Arc::new(ch) });
                }
                None => {
                    py.check_signals()?;
                    if until.is_some_and(|u| Instant::now() >= u) {
                        return Err(to_py(py, Error::timeout(format!("no client bound to {:?} in time", self.svc.name))));
                    }
                }
            }
        }
    }

    fn __repr__(&self) -> String {
        format!("<Service {:?} iref={:#x}>", self.svc.name, self.svc.iref)
    }
}

/// This process attached to one core's monitor.
#[pyclass(frozen, module = "multihop._core")]
pub struct Dispatcher {
    d: EngineDispatcher,
    /// Weak references to this dispatcher's channels, for `poll`.
    channels: Mutex<Vec<Py<PyWeakrefReference>>>,
}

impl Dispatcher {
    /// Remember a new channel (weakly) for `poll` and hand it out.
    fn adopt(&self, py: Python<'_>, ch: Channel) -> PyResult<Py<Channel>> {
        let obj = Bound::new(py, ch)?;
        let weak = PyWeakrefReference::new(&obj)?;
        let mut list = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        list.retain(|w| w.bind(py).upgrade().is_some());
        list.push(weak.unbind());
        Ok(obj.unbind())
    }

    /// The live channels of this dispatcher.
    fn live_channels<'py>(&self, py: Python<'py>) -> Vec<Bound<'py, Channel>> {
        let list = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        list.iter().filter_map(|w| w.bind(py).upgrade()).filter_map(|o| o.cast_into::<Channel>().ok()).collect()
    }
}

#[pymethods]
impl Dispatcher {
    /// Attach to the monitor of `core` in the runtime directory `runtime_dir`.
    #[staticmethod]
    fn attach(py: Python<'_>, runtime_dir: PathBuf, core: u32) -> PyResult<Dispatcher> {
        let d = py.detach(|| EngineDispatcher::attach(&runtime_dir, core)).map_err(|e| to_py(py, e))?;
        Ok(Dispatcher { d, channels: Mutex::new(Vec::new()) })
    }

    /// The core this dispatcher is attached to.
    #[getter]
    fn core(&self) -> u32 {
        self.d.core()
    }

    /// Pid of this core's monitor.
    #[getter]
    fn monitor_pid(&self) -> u32 {
        self.d.monitor_pid()
    }

    /// Whether the monitor connection is up.
    #[getter]
    fn attached(&self) -> bool {
        self.d.is_attached()
    }

    /// Export `name`. `on_connect(info: dict) -> bool` may refuse clients.
    /// Raises ExportError when the name is taken or invalid.
    #[pyo3(signature = (name, on_connect=None))]
    fn export(slf: &Bound<'_, Self>, name: &str, on_connect: Option<Py<PyAny>>) -> PyResult<Service> {
        let py = slf.py();
        let me = slf.get();
        if let Some(cb) = &on_connect {
            if !cb.bind(py).is_callable() {
                return Err(PyTypeError::new_err("on_connect must be callable"));
            }
        }
        let svc = py.detach(|| me.d.export(name)).map_err(|e| to_py(py, e))?;
        Ok(Service { svc, on_connect, owner: slf.clone().unbind() })
    }

    /// Bind to service `name` (or `iref`) over `transport` ("ump": a ring
    /// pair straight to the service; "multihop": a virtual circuit through
    /// the monitors with a credit `window`). Raises BindError when the
    /// service is unknown or refuses, Timeout when it does not accept in time.
    #[pyo3(signature = (name=None, transport="ump", timeout=5.0, max_message=None, iref=None, window=16))]
    #[allow(clippy::too_many_arguments)]
    fn bind(
        &self,
        py: Python<'_>,
        name: Option<&str>,
        transport: &str,
        timeout: Option<f64>,
        max_message: Option<usize>,
        iref: Option<u64>,
        window: u32,
    ) -> PyResult<Py<Channel>> {
        let (name, iref) = match (name, iref) {
            (Some(n), None) => (n.to_string(), 0),
            (None, Some(i)) => (String::new(), i),
            _ => return Err(PyTypeError::new_err("bind needs exactly one of name or iref")),
        };
        let timeout = duration(timeout, 5.0)?;
        let mut pending: Option<PyErr> = None;
        let res = py.detach(|| {
            self.d.bind(&name, iref, transport, max_message, window, timeout, &mut || {
                Python::attach(|py| py.check_signals()).map_err(|e| {
                    pending = Some(e);
                    Error::new(ErrorKind::Interrupted, "interrupted")
                })
            })
        });
        match res {
            Ok(ch) => self.adopt(py, Channel { ch: Arc::new(ch) }),
            Err(e) => Err(pending.unwrap_or_else(|| to_py(py, e))),
        }
    }

    /// Wait up to `timeout` seconds (None: forever) until some channel of
    /// this dispatcher has a message or was closed; returns those channels
    /// ([] on timeout). Serves many clients from one thread.
    #[pyo3(signature = (timeout=None))]
    fn poll<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyList>> {
        let until = deadline(timeout)?;
        let list: Vec<Bound<'py, Channel>> = self.live_channels(py).into_iter().filter(|c| !c.get().ch.is_closed()).collect();
        let eps: Vec<Arc<Endpoint>> = list.iter().map(|c| c.get().ch.clone()).collect();
        let bell = process_doorbell().map_err(|e| to_py(py, e))?;
        let parks = std::sync::atomic::AtomicU64::new(0);
        loop {
            let ready = PyList::empty(py);
            for (c, ep) in list.iter().zip(&eps) {
                if ep.readable() {
                    ready.append(c)?;
                }
            }
            if !ready.is_empty() {
                return Ok(ready);
            }
            let w = py.detach(|| {
                crate::park::wait_until(&bell, &parks, crate::park::relay_spin_budget(), until, &mut || eps.iter().any(|e| e.readable()), &mut || false)
            });
            match w {
                Waited::TimedOut => return Ok(PyList::empty(py)),
                Waited::Slice | Waited::Interrupted => py.check_signals()?,
                Waited::Ready => {}
            }
        }
    }

    /// Messages that reached this dispatcher's link for no channel of ours.
    #[getter]
    fn link_dropped(&self) -> u64 {
        self.d.link_dropped()
    }

    /// Test hook: write a raw multi-hop frame (16-byte header + payload) on
    /// this dispatcher's link to its monitor, as a forger would.
    fn _inject_raw(&self, py: Python<'_>, frame: &[u8]) -> PyResult<()> {
        self.d.inject_raw(frame).map_err(|e| to_py(py, e))
    }

    /// Status of this core's monitor (a dict).
    fn monitor_status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let v = py.detach(|| self.d.monitor_status()).map_err(|e| to_py(py, e))?;
        py.import("json")?.call_method1("loads", (v.to_string(),))
    }

    /// Detach from the monitor: exported services vanish; channels stay usable.
    fn detach(&self) {
        self.d.detach();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.d.detach();
        false
    }

    fn __repr__(&self) -> String {
        format!("<Dispatcher core={} monitor_pid={}{}>", self.d.core(), self.d.monitor_pid(), if self.d.is_attached() { "" } else { " detached" })
    }
}

/// The wire layout of a Flounder message of scalars (see `fixed_layout.rs`),
/// built once per message by a generated stub.
#[pyclass(frozen, module = "multihop._core")]
pub struct FixedLayout {
    layout: crate::fixed_layout::FixedLayout,
}

#[pymethods]
impl FixedLayout {
    /// `fields`: one `(kind, n)` per argument, in order: ``("u", bytes)``,
    /// ``("i", bytes)``, ``("bool", 0)`` or ``("enum", number of values)``.
    #[new]
    fn new(number: u16, fields: Vec<(String, u32)>) -> PyResult<FixedLayout> {
        use crate::fixed_layout::Field;
        let mut out = Vec::with_capacity(fields.len());
        for (kind, n) in fields {
            out.push(match (kind.as_str(), n) {
                ("u", 1 | 2 | 4 | 8) => Field::Unsigned(n as u8),
                ("i", 1 | 2 | 4 | 8) => Field::Signed(n as u8),
                ("bool", _) => Field::Bool,
                ("enum", _) => Field::Enum(n),
                _ => return Err(PyValueError::new_err(format!("unknown fixed field ({kind:?}, {n}): expected ('u'|'i', 1|2|4|8), ('bool', 0) or ('enum', count)"))),
            });
        }
        if out.len() > 64 {
            return Err(PyValueError::new_err(format!("a fixed layout takes at most 64 fields, got {}", out.len())));
        }
        crate::fixed_layout::FixedLayout::new(number, out).map(|layout| FixedLayout { layout }).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// Bytes of an encoded message.
    #[getter]
    fn size(&self) -> usize {
        self.layout.size()
    }
}

/// Test hook: a link to a monitor that claims to come from another monitor
/// (see `forgery.rs`), for writing raw frames a neighbour could send.
#[pyclass(frozen, module = "multihop._core")]
pub struct ForgedMonitorLink {
    link: crate::forgery::ForgedMonitorLink,
}

#[pymethods]
impl ForgedMonitorLink {
    /// Open a link to the monitor of `core` (its socket in `runtime_dir`),
    /// claiming to be the monitor of `claimed_core`.
    #[new]
    fn new(py: Python<'_>, runtime_dir: PathBuf, core: u32, claimed_core: u32) -> PyResult<ForgedMonitorLink> {
        let link = py.detach(|| crate::forgery::ForgedMonitorLink::open(&runtime_dir, core, claimed_core)).map_err(|e| to_py(py, e))?;
        Ok(ForgedMonitorLink { link })
    }

    /// Write one raw multi-hop frame (16-byte header + payload) on the link.
    fn inject(&self, py: Python<'_>, frame: &[u8]) -> PyResult<()> {
        py.detach(|| self.link.inject(frame)).map_err(|e| to_py(py, e))
    }

    /// Close the link; the monitor forgets it.
    fn close(&self) {
        self.link.close();
    }
}

/// Run a monitor in this process until it is shut down (GIL released).
/// Returns the exit code.
#[pyfunction]
#[pyo3(signature = (runtime_dir, core, initial_core, cpu=None, owner_pid=None))]
fn run_monitor(
    py: Python<'_>,
    runtime_dir: PathBuf,
    core: u32,
    initial_core: u32,
    cpu: Option<usize>,
    owner_pid: Option<u32>,
) -> PyResult<i32> {
    let cfg = MonitorConfig { dir: runtime_dir, core, cpu, initial_core, owner_pid };
    py.detach(|| monitor::run(cfg)).map_err(|e| to_py(py, e))
}

/// Query a monitor's status over its socket without attaching (for tools).
#[pyfunction]
#[pyo3(signature = (socket_path, timeout=5.0))]
fn monitor_status<'py>(py: Python<'py>, socket_path: PathBuf, timeout: f64) -> PyResult<Bound<'py, PyAny>> {
    let t = duration(Some(timeout), 5.0)?;
    let v = py
        .detach(|| crate::control::call(&socket_path, crate::control::Role::Tool, &crate::control::Msg::Status { req: 1 }, &[], t))
        .map_err(|e| to_py(py, e))?;
    match v.0 {
        crate::control::Msg::StatusReply { status, .. } => py.import("json")?.call_method1("loads", (status.to_string(),)),
        other => Err(to_py(py, Error::protocol(format!("monitor answered status with {other:?}")))),
    }
}

/// Hand the whole routing table to the initial monitor (the RTS's job):
/// `table[src][dst] = next hop`. Later monitors fetch their rows from it.
#[pyfunction]
#[pyo3(signature = (socket_path, table, timeout=5.0))]
fn monitor_set_table(
    py: Python<'_>,
    socket_path: PathBuf,
    table: std::collections::BTreeMap<u32, std::collections::BTreeMap<u32, u32>>,
    timeout: f64,
) -> PyResult<()> {
    let t = duration(Some(timeout), 5.0)?;
    let table = table.into_iter().map(|(s, r)| (s, r.into_iter().collect())).collect();
    let msg = crate::control::Msg::SetTable { req: 1, table };
    py.detach(|| crate::control::call(&socket_path, crate::control::Role::Tool, &msg, &[], t))
        .map(|_| ())
        .map_err(|e| to_py(py, e))
}

/// Ask a monitor to shut down (for tools).
#[pyfunction]
#[pyo3(signature = (socket_path, timeout=5.0))]
fn monitor_shutdown(py: Python<'_>, socket_path: PathBuf, timeout: f64) -> PyResult<()> {
    let t = duration(Some(timeout), 5.0)?;
    py.detach(|| crate::control::call(&socket_path, crate::control::Role::Tool, &crate::control::Msg::Shutdown { req: 1 }, &[], t))
        .map(|_| ())
        .map_err(|e| to_py(py, e))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Channel>()?;
    m.add_class::<Service>()?;
    m.add_class::<Dispatcher>()?;
    m.add_class::<ForgedMonitorLink>()?;
    m.add_class::<FixedLayout>()?;
    m.add_function(wrap_pyfunction!(run_monitor, m)?)?;
    m.add_function(wrap_pyfunction!(monitor_status, m)?)?;
    m.add_function(wrap_pyfunction!(monitor_shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(monitor_set_table, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DEFAULT_MAX_MESSAGE", crate::channel::DEFAULT_MAX_MESSAGE)?;
    Ok(())
}
