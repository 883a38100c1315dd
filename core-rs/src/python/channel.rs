//! `Channel`: one end of a channel, with blocking, non-blocking, batch,
//! numpy-record and flush calls.

use std::sync::Arc;
use std::time::Instant;

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use super::args::{count, deadline, to_py, MAX_RECV_COUNT};
use super::async_call::{AsyncCall, Op};
use super::fixed_layout::FixedLayout;
use super::wait::{aio, send_waiting, try_recv_bytes, wait, Bytes};
use multihop_base::error::{Error, ErrorKind, Progress};
use multihop_base::ringpair::Want;
use multihop_dispatcher::Channel as Endpoint;

/// Most bytes one `recv_records` call may allocate for its array.
const MAX_RECORDS_BYTES: usize = 1 << 30;

/// One end of a channel: ``send``/``recv`` and their batch, non-blocking,
/// numpy-record and flush variants.
#[pyclass(frozen, weakref, module = "multihop._core")]
pub struct Channel {
    pub(crate) ch: Arc<Endpoint>,
}

impl Channel {
    pub(crate) fn new(ch: Endpoint) -> Channel {
        Channel { ch: Arc::new(ch) }
    }

    pub(crate) fn try_recv_bytes<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        try_recv_bytes(py, &self.ch)
    }

    /// Send `msgs` (already checked), waiting while there is no room, until
    /// all are written or `until` passes. A failure part-way carries `sent`.
    fn send_all(&self, py: Python<'_>, msgs: &[&[u8]], until: Option<Instant>) -> PyResult<usize> {
        let mut done = 0usize;
        while done < msgs.len() {
            let n = self.ch.try_send_many(&mut msgs[done..].iter().copied()).map_err(|e| to_py(py, e.with_progress(Progress::Sent(done))))?;
            done += n;
            if done < msgs.len() && n == 0 {
                self.ch.note_busy();
                if !wait(py, &self.ch, Want::Writable(msgs[done].len()), until)? {
                    break;
                }
            }
        }
        Ok(done)
    }
}

/// Close `ch`, trying for `wait` to hand what it held to its monitor, with
/// the GIL released and signals checked between waits; HeldLost if some did
/// not leave.
pub(crate) fn close_reporting(py: Python<'_>, ch: &Endpoint, wait: Option<std::time::Duration>) -> PyResult<()> {
    let mut pending: Option<PyErr> = None;
    let r = py.detach(|| {
        ch.close_within(wait, &mut || {
            Python::attach(|py| py.check_signals()).map_err(|e| {
                pending = Some(e);
                Error::new(ErrorKind::Interrupted, "interrupted")
            })
        })
    });
    r.map_err(|e| pending.unwrap_or_else(|| to_py(py, e)))
}

#[pymethods]
impl Channel {
    /// Send one message (any bytes-like object), waiting while the ring is
    /// full. Raises Timeout, ChannelClosed, MessageTooLarge.
    ///
    /// On a multi-hop channel whose credit window is used up the message is
    /// held for the next credit and the call returns at once (up to 4 frames
    /// of 64 messages; see docs/design.md §4): it leaves as credits come back,
    /// whether or not this program calls again. ``flush`` waits until it is
    /// consumed; ``MULTIHOP_HOLD=0`` turns holding off.
    ///
    /// ``handles``: descriptors to send with it (ints, ``Handle``s, objects
    /// with ``fileno()``; at most 32). They travel out of band through the
    /// monitors and arrive with exactly this message; the call returns once
    /// the receiver holds them and the message is written. They are
    /// duplicated (you keep yours) unless ``give_away`` (True, or one bool
    /// per handle) says to move them: those are closed once the send went.
    /// A refused handle raises CapSendError (``e.reason``, ``e.index``) and
    /// nothing is sent.
    #[pyo3(signature = (data, timeout=None, *, handles=None, give_away=None))]
    fn send(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>,
        handles: Option<&Bound<'_, PyAny>>,
        give_away: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        super::args::check_timeout(timeout)?;
        let bytes = Bytes::get(data)?;
        match handles {
            None => send_waiting(py, &self.ch, bytes.as_slice(), timeout),
            Some(h) => {
                let no = pyo3::types::PyBool::new(py, false).to_owned().into_any();
                let out = super::handles::Outgoing::get(h, give_away.unwrap_or(&no))?;
                if out.fds.is_empty() {
                    return send_waiting(py, &self.ch, bytes.as_slice(), timeout);
                }
                super::handles::send(py, &self.ch, bytes.as_slice(), &out, deadline(timeout)?)
            }
        }
    }

    /// Receive one message and the handles sent with it, waiting up to
    /// `timeout` seconds (None: forever): ``(bytes, [Handle, ...])`` (an
    /// empty list for a message sent without). The handles are yours: each
    /// ``Handle`` closes its descriptor when collected unless detached.
    #[pyo3(signature = (timeout=None))]
    fn recv_with_handles<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>,
    ) -> PyResult<Bound<'py, pyo3::types::PyTuple>> {
        let until = deadline(timeout)?;
        loop {
            if let Some(t) = super::handles::try_recv(py, &self.ch)? {
                return Ok(t);
            }
            if !wait(py, &self.ch, Want::Readable, until)? {
                return Err(to_py(py, Error::timeout("recv timed out: no message arrived")));
            }
        }
    }

    /// ``(bytes, [Handle, ...])`` if a message is there, else None.
    fn try_recv_with_handles<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, pyo3::types::PyTuple>>> {
        super::handles::try_recv(py, &self.ch)
    }

    /// Handles that arrived for messages not received yet.
    #[getter]
    fn pending_handles(&self) -> usize {
        self.ch.handle_stats().pending
    }

    /// The most handles this end keeps for messages not received yet (default
    /// 1024); a sender whose handles would not fit gets CapSendError
    /// (reason "no_room").
    #[getter]
    fn get_handle_room(&self) -> usize {
        self.ch.handle_stats().room
    }

    #[setter]
    fn set_handle_room(&self, room: &Bound<'_, PyAny>) -> PyResult<()> {
        let room = super::args::count(room, "handle_room", 0, 1 << 20)?;
        match self.ch.caps() {
            Some(c) => {
                c.inbox().set_room(room);
                Ok(())
            }
            None => Err(pyo3::exceptions::PyValueError::new_err("this channel end carries no handles")),
        }
    }

    /// Send one message now or raise TxBusy.
    fn try_send(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let bytes = Bytes::get(data)?;
        self.ch.try_send(&[bytes.as_slice()]).map_err(|e| to_py(py, e))
    }

    /// What `send` does before it would wait: send one message now or (multi-hop, no credit free)
    /// hold it for the next credit; TxBusy if neither can be done now (for `send_async`).
    fn _send_or_hold(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let bytes = Bytes::get(data)?;
        self.ch.send_or_hold(&[bytes.as_slice()]).map_err(|e| to_py(py, e))
    }

    /// Receive one message, waiting up to `timeout` seconds (None: forever).
    #[pyo3(signature = (timeout=None))]
    fn recv<'py>(&self, py: Python<'py>, #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>) -> PyResult<Bound<'py, PyBytes>> {
        super::args::check_timeout(timeout)?;
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

    /// ``await ch.recv_async(timeout=None)``: receive one message without
    /// blocking the event loop (``multihop.aio.recv``). A cancelled receive
    /// takes nothing off the channel; one that finds a message at once
    /// returns without a turn of the loop (``AsyncCall``).
    #[pyo3(signature = (timeout=None))]
    fn recv_async(slf: &Bound<'_, Self>, #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>) -> PyResult<AsyncCall> {
        super::args::check_timeout(timeout)?;
        aio(slf.py())?; // registers AsyncCall as a coroutine
        Ok(AsyncCall::new(slf.clone().into_any().unbind(), slf.get().ch.clone(), Op::Recv, timeout))
    }

    /// ``await ch.send_async(data, timeout=None)``: send one message, waiting
    /// for credit or ring room without blocking the event loop
    /// (``multihop.aio.send``). Nothing is sent before the awaiting task runs it.
    #[pyo3(signature = (data, timeout=None))]
    fn send_async(
        slf: &Bound<'_, Self>,
        data: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>,
    ) -> PyResult<AsyncCall> {
        super::args::check_timeout(timeout)?;
        aio(slf.py())?;
        Ok(AsyncCall::new(slf.clone().into_any().unbind(), slf.get().ch.clone(), Op::Send(data.clone().unbind()), timeout))
    }

    /// ``async for msg in ch``: messages until the peer closes the channel
    /// cleanly (the loop ends); other errors (a peer that died, Timeout) raise.
    fn __aiter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        aio(slf.py())?.getattr("Messages")?.call1((slf,))
    }

    /// Test and event-loop hook: whether a message (``want`` 0), room for
    /// ``size`` bytes (1) or a flush (2) may proceed now, looking for up to
    /// ``spin_us`` microseconds (the GIL held) before saying no.
    #[pyo3(signature = (want=0, size=0, spin_us=0))]
    fn _ready(&self, want: u8, size: usize, spin_us: u64) -> PyResult<bool> {
        let want = match want {
            0 => Want::Readable,
            1 => Want::Writable(size),
            2 => Want::Flushed,
            other => return Err(PyValueError::new_err(format!("want must be 0, 1 or 2, got {other}"))),
        };
        Ok(multihop_base::park::spin_until(std::time::Duration::from_micros(spin_us), &mut || self.ch.is_ready(want)))
    }

    /// Send every message of `messages` in order, waiting while there is no
    /// room, until all are written or `timeout` passes; returns how many
    /// were written (all of them unless the timeout passed). The whole batch
    /// is checked first (types, sizes, this end not closed): a bad one
    /// raises before anything is sent. If the channel closes part-way,
    /// ChannelClosed says how many went in ``e.sent``. On a multi-hop
    /// channel consecutive messages travel packed, up to 64 in a frame that
    /// takes one credit (they are received one by one, in order).
    #[pyo3(signature = (messages, timeout=None))]
    fn send_batch(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>,
    ) -> PyResult<usize> {
        let until = deadline(timeout)?;
        let items = messages.try_iter().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "messages must be an iterable of bytes-like objects, got {}",
                super::args::type_name(messages)
            ))
        })?;
        let held: Vec<Bytes<'_>> = items
            .enumerate()
            .map(|(i, m)| {
                let m = m?;
                Bytes::get(&m).map_err(|e| {
                    if e.is_instance_of::<pyo3::exceptions::PyTypeError>(py) {
                        pyo3::exceptions::PyTypeError::new_err(format!("message {i} of the batch: {}", e.value(py)))
                    } else {
                        e
                    }
                })
            })
            .collect::<PyResult<_>>()?;
        let slices: Vec<&[u8]> = held.iter().map(|b| b.as_slice()).collect();
        self.ch.check_batch(&mut slices.iter().map(|s| s.len())).map_err(|e| to_py(py, e))?;
        self.send_all(py, &slices, until)
    }

    /// Receive up to `max_count` messages: waits up to `timeout` for the
    /// first, then takes whatever else is already there. Returns [] on timeout.
    #[pyo3(signature = (max_count, timeout=None))]
    fn recv_batch<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = super::args::max_count)] max_count: usize,
        #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyList>> {
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
    /// as one message; waits while there is no room. Returns rows written
    /// (all unless the timeout passed). Checked whole first, like
    /// `send_batch`; a close part-way carries ``e.sent``.
    #[pyo3(signature = (records, timeout=None))]
    fn send_records(
        &self,
        py: Python<'_>,
        records: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>,
    ) -> PyResult<usize> {
        let until = deadline(timeout)?;
        let rows: usize = records.len().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "records must be a C-contiguous array of rows (e.g. numpy, shape (n, ...)), got {}",
                super::args::type_name(records)
            ))
        })?;
        let bytes = Bytes::get(records)?;
        let data = bytes.as_slice();
        if rows == 0 {
            return Ok(0);
        }
        if data.len() % rows != 0 {
            return Err(PyValueError::new_err("records: total size is not a multiple of the row count"));
        }
        let size = data.len() / rows;
        let msgs: Vec<&[u8]> = if size == 0 { vec![&[]; rows] } else { data.chunks_exact(size).collect() };
        self.ch.check_batch(&mut std::iter::repeat_n(size, rows)).map_err(|e| to_py(py, e))?;
        self.send_all(py, &msgs, until)
    }

    /// Receive up to `max_count` messages of exactly `record_size` bytes into
    /// a new uint8 array of shape (count, record_size): waits up to `timeout`
    /// for the first. A message of another size stops the batch and stays in
    /// the channel (ProtocolError if it is the first).
    #[pyo3(signature = (max_count, record_size, timeout=None))]
    fn recv_records<'py>(
        &self,
        py: Python<'py>,
        max_count: &Bound<'py, PyAny>,
        record_size: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let max_count = count(max_count, "max_count", 0, MAX_RECV_COUNT)?;
        let record_size = count(record_size, "record_size", 0, self.ch.max_message())?;
        if max_count.saturating_mul(record_size) > MAX_RECORDS_BYTES {
            return Err(PyValueError::new_err(format!(
                "max_count x record_size must be at most {MAX_RECORDS_BYTES} bytes, got {max_count} x {record_size}"
            )));
        }
        let until = deadline(timeout)?;
        let np = py.import("numpy")?;
        let arr = np.call_method1("empty", ((max_count, record_size), "uint8"))?;
        let buf = PyUntypedBuffer::get(&arr)?;
        // SAFETY: a fresh, C-contiguous, writable uint8 array we own.
        let out = unsafe { std::slice::from_raw_parts_mut(buf.buf_ptr() as *mut u8, buf.len_bytes()) };
        let mut got = 0usize;
        let mut mismatch = None;
        loop {
            let r = self.ch.try_recv_many(max_count - got, &mut |len, copy| {
                if len != record_size {
                    mismatch = Some(len);
                    return Ok(false);
                }
                copy(&mut out[got * record_size..(got + 1) * record_size]);
                got += 1;
                Ok(true)
            });
            r.map_err(|e| to_py(py, e))?;
            if got > 0 || max_count == 0 {
                break;
            }
            if let Some(len) = mismatch {
                return Err(to_py(
                    py,
                    Error::protocol(format!("next message has {len} bytes, not the record size {record_size}; read it with recv()")),
                ));
            }
            if !wait(py, &self.ch, Want::Readable, until)? {
                break;
            }
        }
        drop(buf);
        arr.get_item(pyo3::types::PySlice::new(py, 0, got as isize, 1))
    }

    /// Wait until every message sent so far has been consumed by the peer
    /// (for multi-hop: its credits came back; for UMP: it read them), at
    /// most `timeout` seconds (None: forever). Raises Timeout, or
    /// ChannelClosed if the channel ends first; both say how many sent
    /// messages were not consumed in ``e.unconsumed``.
    #[pyo3(signature = (timeout=None))]
    fn flush(&self, py: Python<'_>, #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>) -> PyResult<()> {
        let until = deadline(timeout)?;
        let mut asked = false;
        loop {
            if self.ch.flush_poll(&mut asked).map_err(|e| to_py(py, e))? {
                return Ok(());
            }
            if !wait(py, &self.ch, Want::Flushed, until)? {
                return Err(to_py(py, self.ch.flush_timeout()));
            }
        }
    }

    /// Messages sent and not yet consumed by the peer (as far as this end knows).
    #[getter]
    fn unconsumed(&self) -> usize {
        self.ch.unconsumed()
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
        d.set_item("held", s.held)?;
        d.set_item("held_lost", s.held_lost)?;
        let h = self.ch.handle_stats();
        d.set_item("handles_sent", self.ch.caps().map_or(0, |c| c.sent.load(std::sync::atomic::Ordering::Relaxed)))?;
        d.set_item("handles_received", h.taken)?;
        d.set_item("handles_discarded", h.discarded)?;
        d.set_item("handles_pending", h.pending)?;
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
    ///
    /// A multi-hop end first hands what it holds for its next credit (see
    /// ``send``) to its monitor, waiting up to ``timeout`` seconds (None: no
    /// limit) for room on the link. Messages that still did not leave (the
    /// monitor took nothing: stopped or overloaded) are lost: ``close``
    /// raises HeldLost, whose ``count`` says how many. The channel is closed
    /// either way. A channel already over (the peer closed it or died)
    /// loses what it held with it, counted in ``stats()["held_lost"]``, as
    /// messages in flight are: ``flush`` first says whether all were consumed.
    #[pyo3(signature = (timeout=Some(5.0)), text_signature = "($self, timeout=5.0)")]
    fn close(&self, py: Python<'_>, #[pyo3(from_py_with = super::args::secs)] timeout: Option<f64>) -> PyResult<()> {
        let wait = super::args::timeout("timeout", timeout)?;
        close_reporting(py, &self.ch, wait)
    }

    /// A native send callable for one Flounder message of scalars (a
    /// generated stub's fast path, see `fast_send.rs`): it takes the message's
    /// arguments (`names`, by position or keyword), encodes them with `layout`
    /// straight onto this channel, and hands any call it is unsure of to
    /// `fallback` unchanged.
    fn _fast_sender(&self, py: Python<'_>, layout: &FixedLayout, names: Vec<String>, fallback: Py<PyAny>) -> PyResult<Py<PyAny>> {
        super::fast_send::make(py, self.ch.clone(), layout.layout.clone(), &names, fallback)
    }

    /// Test hook: ``send(data, handles=fds)`` without this library's own check
    /// of the handles, so the sending side's monitor alone decides (as for a
    /// program that bypasses the library). Raises CapSendError when refused.
    fn _send_handles_unchecked(&self, py: Python<'_>, data: &[u8], fds: Vec<i32>) -> PyResult<()> {
        let until = Some(Instant::now() + std::time::Duration::from_secs(10));
        py.detach(|| multihop_testkit::send_with_handles_unchecked(&self.ch, data, &fds, until)).map_err(|e| to_py(py, e))
    }

    /// Test hook: (VCI received on, VCI sent with) on the link to this
    /// end's monitor, for a multi-hop channel; None for UMP.
    fn _vcis(&self) -> Option<(u64, u64)> {
        match &*self.ch {
            Endpoint::Multihop(m) => Some(m.vcis()),
            Endpoint::Ump(_) => None,
        }
    }

    /// Whether this end is over: closed here, or the peer closed it or
    /// died, or its monitor went away (messages that arrived before can
    /// still be read; then ChannelClosed). Looks now; the monitor is told
    /// the moment this end knows.
    #[getter]
    fn closed(&self) -> bool {
        self.ch.is_closed()
    }

    /// Why this end is over, or None while it is not: "this end", "peer"
    /// (the UMP peer closed it), "peer died" (the UMP peer's process exited
    /// without closing), "monitor gone" (this core's monitor died) or
    /// "teardown" (a multi-hop circuit was torn down: the peer closed it,
    /// died, or a monitor on the path died).
    #[getter]
    fn close_cause(&self) -> Option<&'static str> {
        self.ch.close_cause()
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

    /// Close (as ``close()``); if the block raised, a HeldLost of the close is
    /// a RuntimeWarning instead, so the block's own exception goes on.
    #[pyo3(signature = (*args))]
    fn __exit__(&self, py: Python<'_>, args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        let r = close_reporting(py, &self.ch, Some(multihop_base::defaults::CLOSE_HELD_WAIT));
        let raised = args.get_item(0).is_ok_and(|t| !t.is_none());
        match r {
            Err(e) if raised && e.is_instance(py, super::args::error_class(py, "HeldLost")?.as_any()) => {
                let msg = std::ffi::CString::new(e.value(py).str()?.to_string().replace('\0', "")).unwrap_or_default();
                PyErr::warn(py, &py.get_type::<pyo3::exceptions::PyRuntimeWarning>(), &msg, 1)?;
                Ok(false)
            }
            other => other.map(|()| false),
        }
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
            if self.ch.closed_here() { " closed" } else { "" }
        )
    }
}
