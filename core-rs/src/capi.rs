//! The C ABI: `extern "C"` functions over the engine's public API. Header:
//! `core-rs/include/multihop.h` (the contract; keep the two in step).
//!
//! Rules kept by every entry point:
//! - errors are negative return codes ([`code_of`] is the one map from
//!   [`ErrorKind`]), with a message for `mh_last_error` in a thread-local;
//! - no panic crosses the boundary: each body runs under `catch_unwind`
//!   (a caught panic is `MH_E_INTERNAL`);
//! - NULL pointers and non-UTF-8 strings are `MH_E_INVALID`, never a crash;
//! - blocking calls wait in the engine's bounded slices (spin, then futex
//!   park) and simply go round again when a signal interrupts a slice.

#![allow(non_camel_case_types)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use multihop_base::defaults::{BACKLOG as DEFAULT_BACKLOG, CLOSE_HELD_WAIT, WINDOW as DEFAULT_WINDOW};
use multihop_base::error::{Error, ErrorKind, Progress, Result};
use multihop_base::handles::reason;
use multihop_base::paths;
use multihop_base::ringpair::{Waited, Want};
use multihop_dispatcher::{BindOptions, Channel as Endpoint, Dispatcher, Service};

pub const MH_OK: c_int = 0;
pub const MH_E_TIMEOUT: c_int = -1;
pub const MH_E_CLOSED: c_int = -2;
pub const MH_E_BUSY: c_int = -3;
pub const MH_E_TOO_LARGE: c_int = -4;
pub const MH_E_INVALID: c_int = -5;
pub const MH_E_PROTOCOL: c_int = -6;
pub const MH_E_BIND: c_int = -7;
pub const MH_E_NOT_FOUND: c_int = -8;
pub const MH_E_EXPORT: c_int = -9;
pub const MH_E_MONITOR: c_int = -10;
pub const MH_E_OS: c_int = -11;
pub const MH_E_INTERNAL: c_int = -12;
pub const MH_E_EXISTS: c_int = -13;
pub const MH_E_CAP: c_int = -14;
pub const MH_E_HELD_LOST: c_int = -15;

/// The one map from engine error kinds to C return codes.
pub fn code_of(kind: ErrorKind) -> c_int {
    match kind {
        ErrorKind::Timeout => MH_E_TIMEOUT,
        ErrorKind::ChannelClosed => MH_E_CLOSED,
        ErrorKind::TxBusy => MH_E_BUSY,
        ErrorKind::MessageTooLarge => MH_E_TOO_LARGE,
        ErrorKind::InvalidArgument => MH_E_INVALID,
        ErrorKind::Protocol => MH_E_PROTOCOL,
        ErrorKind::Bind => MH_E_BIND,
        ErrorKind::RuntimeNotFound => MH_E_NOT_FOUND,
        ErrorKind::RuntimeExists => MH_E_EXISTS,
        ErrorKind::Export => MH_E_EXPORT,
        ErrorKind::Monitor => MH_E_MONITOR,
        // Waits are retried on a signal, so Interrupted only escapes from a
        // system call outside them: report it as the OS failure it is.
        ErrorKind::Os | ErrorKind::Interrupted => MH_E_OS,
        ErrorKind::CapSend => MH_E_CAP,
        ErrorKind::HeldLost => MH_E_HELD_LOST,
    }
}

/// Static description of a code (NUL-terminated, for `mh_strerror`).
fn describe(code: c_int) -> &'static CStr {
    match code {
        MH_OK => c"success",
        MH_E_TIMEOUT => c"timed out",
        MH_E_CLOSED => c"channel closed (by either end, or the peer died)",
        MH_E_BUSY => c"no room in the ring now",
        MH_E_TOO_LARGE => c"message too large (for the channel, or for the buffer)",
        MH_E_INVALID => c"invalid argument",
        MH_E_PROTOCOL => c"protocol error",
        MH_E_BIND => c"bind failed",
        MH_E_NOT_FOUND => c"runtime or monitor not found",
        MH_E_EXPORT => c"export failed",
        MH_E_MONITOR => c"monitor failed or gone",
        MH_E_OS => c"operating-system call failed",
        MH_E_INTERNAL => c"internal error in libmultihop_core",
        MH_E_EXISTS => c"a live runtime of that name exists",
        MH_E_CAP => c"handles refused (runtime-owned, not open, too many, or no room at the receiver)",
        MH_E_HELD_LOST => c"closed, but messages held for the next credit did not leave (the monitor took nothing in time)",
        _ => c"unknown error code",
    }
}

// ---- handles ----------------------------------------------------------------

/// `mh_dispatcher`: this process attached to one core's monitor.
pub struct mh_dispatcher {
    disp: Dispatcher,
}

/// `mh_service`: an exported name.
pub struct mh_service {
    svc: Service,
}

/// `mh_channel`: one end of a channel.
pub struct mh_channel {
    ch: Endpoint,
}

// ---- errors -----------------------------------------------------------------

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(c"no error".to_owned());
}

fn set_last_error(msg: &str) {
    // A NUL inside a message would cut it short; replace it.
    let c = CString::new(msg.replace('\0', "\\0")).unwrap_or_else(|_| c"(unprintable error)".to_owned());
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

fn fail(e: Error) -> c_int {
    set_last_error(&e.message);
    code_of(e.kind)
}

/// Run `body`, turning its error into a code and any panic into `MH_E_INTERNAL`.
fn guard(what: &str, body: impl FnOnce() -> Result<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => MH_OK,
        Ok(Err(e)) => fail(e),
        Err(panic) => {
            let detail = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            set_last_error(&format!("{what}: internal error (panic): {detail}"));
            MH_E_INTERNAL
        }
    }
}

fn null(what: &str, arg: &str) -> Error {
    Error::invalid(format!("{what}: {arg} is NULL"))
}

/// A borrowed C string as `&str`.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that outlives the call.
unsafe fn string<'a>(what: &str, arg: &str, p: *const c_char) -> Result<&'a str> {
    if p.is_null() {
        return Err(null(what, arg));
    }
    CStr::from_ptr(p).to_str().map_err(|e| Error::invalid(format!("{what}: {arg} is not valid UTF-8 ({e})")))
}

/// A handle argument as a reference.
///
/// # Safety
/// `p` is NULL or a live handle made by this library.
unsafe fn handle<'a, T>(what: &str, arg: &str, p: *const T) -> Result<&'a T> {
    p.as_ref().ok_or_else(|| null(what, arg))
}

/// Check an out-pointer and clear it (so a failed call leaves NULL behind).
///
/// # Safety
/// `out` is NULL or writable.
unsafe fn out_ptr<'a, T>(what: &str, out: *mut *mut T) -> Result<&'a mut *mut T> {
    let o = out.as_mut().ok_or_else(|| null(what, "out"))?;
    *o = std::ptr::null_mut();
    Ok(o)
}

/// Longest finite wait: longer timeouts (and "no limit" where the engine
/// needs a number, as bind does) are this, 30 days.
const LONGEST: Duration = Duration::from_secs(30 * 24 * 3600);

/// A deadline for `timeout_ms`: `None` waits without limit.
fn deadline(timeout_ms: i64) -> Option<Instant> {
    (timeout_ms >= 0).then(|| Instant::now() + duration(timeout_ms))
}

/// `timeout_ms` as a finite duration, capped at [`LONGEST`] (negative: [`LONGEST`]).
fn duration(timeout_ms: i64) -> Duration {
    if timeout_ms < 0 {
        LONGEST
    } else {
        Duration::from_millis(timeout_ms as u64).min(LONGEST)
    }
}

// ---- runtime and dispatcher ---------------------------------------------------

/// # Safety
/// `runtime_name` is NULL or a C string; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mh_attach(runtime_name: *const c_char, core: u32, out: *mut *mut mh_dispatcher) -> c_int {
    guard("mh_attach", || {
        let out = out_ptr("mh_attach", out)?;
        let name = string("mh_attach", "runtime_name", runtime_name)?;
        let dir = paths::runtime_dir(name)?;
        if !dir.is_dir() {
            return Err(Error::new(
                ErrorKind::RuntimeNotFound,
                format!("no runtime named {name:?} (looked for {}); start one with multihop up {name}", dir.display()),
            ));
        }
        let disp = Dispatcher::attach(&dir, core).map_err(|e| Error::new(e.kind, format!("runtime {name:?}, core {core}: {}", e.message)))?;
        *out = Box::into_raw(Box::new(mh_dispatcher { disp }));
        Ok(())
    })
}

/// # Safety
/// `d` is NULL or a live dispatcher handle, not used again.
#[no_mangle]
pub unsafe extern "C" fn mh_detach(d: *mut mh_dispatcher) {
    guard("mh_detach", || {
        if !d.is_null() {
            let d = Box::from_raw(d);
            d.disp.detach();
        }
        Ok(())
    });
}

/// # Safety
/// `runtime_name` is NULL or a C string; `buf` is NULL or `cap` writable bytes; `len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mh_runtime_dir(runtime_name: *const c_char, buf: *mut c_char, cap: usize, len: *mut usize) -> c_int {
    guard("mh_runtime_dir", || {
        let len = len.as_mut().ok_or_else(|| null("mh_runtime_dir", "len"))?;
        let name = string("mh_runtime_dir", "runtime_name", runtime_name)?;
        let dir = paths::runtime_dir(name)?;
        let bytes = std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str());
        *len = bytes.len();
        if cap < bytes.len() + 1 {
            return Err(Error::new(
                ErrorKind::MessageTooLarge,
                format!("mh_runtime_dir: the path needs {} bytes with its NUL, the buffer has {cap}", bytes.len() + 1),
            ));
        }
        if buf.is_null() {
            return Err(null("mh_runtime_dir", "buf"));
        }
        let dst = std::slice::from_raw_parts_mut(buf as *mut u8, cap);
        dst[..bytes.len()].copy_from_slice(bytes);
        dst[bytes.len()] = 0;
        Ok(())
    })
}

// ---- services ---------------------------------------------------------------

/// # Safety
/// `d` is NULL or a live dispatcher handle; `name` NULL or a C string; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mh_export(d: *mut mh_dispatcher, name: *const c_char, out: *mut *mut mh_service) -> c_int {
    guard("mh_export", || {
        let out = out_ptr("mh_export", out)?;
        let d = handle("mh_export", "d", d)?;
        let name = string("mh_export", "name", name)?;
        let svc = d.disp.export(name, DEFAULT_BACKLOG, None).map_err(|e| Error::new(e.kind, format!("export {name:?}: {}", e.message)))?;
        *out = Box::into_raw(Box::new(mh_service { svc }));
        Ok(())
    })
}

/// # Safety
/// As for [`mh_export`].
#[no_mangle]
pub unsafe extern "C" fn mh_export_backlog(d: *mut mh_dispatcher, name: *const c_char, backlog: usize, out: *mut *mut mh_service) -> c_int {
    guard("mh_export_backlog", || {
        let out = out_ptr("mh_export_backlog", out)?;
        let d = handle("mh_export_backlog", "d", d)?;
        let name = string("mh_export_backlog", "name", name)?;
        let svc = d.disp.export(name, backlog, None).map_err(|e| Error::new(e.kind, format!("export {name:?}: {}", e.message)))?;
        *out = Box::into_raw(Box::new(mh_service { svc }));
        Ok(())
    })
}

/// # Safety
/// `s` is NULL or a live service handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mh_accept(s: *mut mh_service, timeout_ms: i64, out: *mut *mut mh_channel) -> c_int {
    guard("mh_accept", || {
        let out = out_ptr("mh_accept", out)?;
        let s = handle("mh_accept", "s", s)?;
        let end = deadline(timeout_ms);
        loop {
            // The wait is a condition variable notified on everything it waits for (a connection,
            // a refused one, the monitor gone, a detach): no slice to end but the deadline, and a
            // long one as a safety net, so an idle accept thread sleeps (as Python's does off its
            // main thread: python/service.rs).
            let slice = end.map_or(Duration::from_secs(60), |d| d.saturating_duration_since(Instant::now()).min(Duration::from_secs(60)));
            if let Some(ch) = s.svc.accept_next(slice)? {
                *out = Box::into_raw(Box::new(mh_channel { ch }));
                return Ok(());
            }
            if end.is_some_and(|d| Instant::now() >= d) {
                return Err(Error::timeout(format!("mh_accept: no client bound to {:?} within {timeout_ms} ms", s.svc.name)));
            }
        }
    })
}

/// # Safety
/// `s` is NULL or a live service handle, not used again.
#[no_mangle]
pub unsafe extern "C" fn mh_service_free(s: *mut mh_service) {
    guard("mh_service_free", || {
        if !s.is_null() {
            drop(Box::from_raw(s));
        }
        Ok(())
    });
}

// ---- channels ---------------------------------------------------------------

/// # Safety
/// `d` NULL or a live dispatcher handle; `name`, `transport` NULL or C strings; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mh_bind(
    d: *mut mh_dispatcher,
    name: *const c_char,
    transport: *const c_char,
    timeout_ms: i64,
    out: *mut *mut mh_channel,
) -> c_int {
    guard("mh_bind", || {
        let out = out_ptr("mh_bind", out)?;
        let d = handle("mh_bind", "d", d)?;
        let name = string("mh_bind", "name", name)?;
        let transport = string("mh_bind", "transport", transport)?;
        let opts = BindOptions { transport: transport.to_string(), max_message: None, window: DEFAULT_WINDOW, timeout: duration(timeout_ms) };
        let ch = d.disp.bind(name, 0, &opts, &mut || Ok(())).map_err(|e| Error::new(e.kind, format!("bind to {name:?}: {}", e.message)))?;
        *out = Box::into_raw(Box::new(mh_channel { ch }));
        Ok(())
    })
}

/// Wait for `want` until `end`; a signal just starts another slice.
fn wait_until(ch: &Endpoint, want: Want, end: Option<Instant>, what: &str) -> Result<()> {
    match ch.wait(want, end) {
        Waited::TimedOut => Err(Error::timeout(what.to_string())),
        Waited::Ready | Waited::Slice | Waited::Interrupted => Ok(()),
    }
}

/// # Safety
/// `ch` NULL or a live channel handle; `data` NULL or `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn mh_send(ch: *mut mh_channel, data: *const u8, len: usize, timeout_ms: i64) -> c_int {
    guard("mh_send", || {
        let ch = &handle("mh_send", "ch", ch)?.ch;
        let msg: &[u8] = match (data.is_null(), len) {
            (_, 0) => &[],
            (true, _) => return Err(null("mh_send", "data (with len > 0)")),
            (false, _) => std::slice::from_raw_parts(data, len),
        };
        let end = deadline(timeout_ms);
        loop {
            // A multi-hop send may hold the message for the channel's next credit (`held.rs`).
            match ch.send_or_hold(&[msg]) {
                Err(e) if e.kind == ErrorKind::TxBusy && timeout_ms != 0 => {}
                other => return other,
            }
            let what = format!("mh_send: no room for a message of {len} bytes within {timeout_ms} ms");
            wait_until(ch, Want::Writable(len), end, &what)?;
        }
    })
}

/// # Safety
/// `ch` NULL or a live channel handle; `buf` NULL or `cap` writable bytes; `len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mh_recv(ch: *mut mh_channel, buf: *mut u8, cap: usize, len: *mut usize, timeout_ms: i64) -> c_int {
    guard("mh_recv", || {
        let ch = &handle("mh_recv", "ch", ch)?.ch;
        let len = len.as_mut().ok_or_else(|| null("mh_recv", "len"))?;
        *len = 0;
        let dst: &mut [u8] = match (buf.is_null(), cap) {
            (_, 0) => &mut [],
            (true, _) => return Err(null("mh_recv", "buf (with cap > 0)")),
            (false, _) => std::slice::from_raw_parts_mut(buf, cap),
        };
        let end = deadline(timeout_ms);
        loop {
            // `try_recv_many` with a callback that declines leaves the message in
            // the channel (both transports), so a message longer than the buffer
            // stays for the next call.
            let mut too_large = false;
            let got = ch.try_recv_many(1, &mut |n, copy| {
                *len = n;
                if n > cap {
                    too_large = true;
                    return Ok(false);
                }
                copy(&mut dst[..n]);
                Ok(true)
            });
            if too_large {
                return Err(Error::new(
                    ErrorKind::MessageTooLarge,
                    format!("mh_recv: the message has {} bytes, the buffer {cap}; it stays in the channel", *len),
                ));
            }
            if got? == 1 {
                return Ok(());
            }
            *len = 0;
            let what =
                if timeout_ms == 0 { "mh_recv: no message waiting".to_string() } else { format!("mh_recv: no message within {timeout_ms} ms") };
            if timeout_ms == 0 {
                return Err(Error::timeout(what));
            }
            wait_until(ch, Want::Readable, end, &what)?;
        }
    })
}

/// Most handles one message carries (`MH_MAX_HANDLES`).
pub const MH_MAX_HANDLES: usize = multihop_base::handles::MAX_HANDLES;

/// # Safety
/// `ch` NULL or a live channel handle; `data` NULL or `len` readable bytes;
/// `fds` NULL (only if `nfds` is 0) or `nfds` readable descriptors.
#[no_mangle]
pub unsafe extern "C" fn mh_send_handles(
    ch: *mut mh_channel,
    data: *const u8,
    len: usize,
    fds: *const c_int,
    nfds: usize,
    give_away_mask: u64,
    timeout_ms: i64,
) -> c_int {
    guard("mh_send_handles", || {
        let ch = &handle("mh_send_handles", "ch", ch)?.ch;
        let msg: &[u8] = match (data.is_null(), len) {
            (_, 0) => &[],
            (true, _) => return Err(null("mh_send_handles", "data (with len > 0)")),
            (false, _) => std::slice::from_raw_parts(data, len),
        };
        let fds: &[c_int] = match (fds.is_null(), nfds) {
            (_, 0) => &[],
            (true, _) => return Err(null("mh_send_handles", "fds (with nfds > 0)")),
            (false, n) if n > 64 => {
                return Err(Error::cap_refused(
                    reason::TOO_MANY,
                    Some(MH_MAX_HANDLES),
                    format!("mh_send_handles: {n} handles on one message; at most {MH_MAX_HANDLES}"),
                ))
            }
            (false, n) => std::slice::from_raw_parts(fds, n),
        };
        if fds.is_empty() {
            return ch.send_blocking(&[msg], (timeout_ms >= 0).then(|| Duration::from_millis(timeout_ms as u64)));
        }
        let given = |i: usize| i < 64 && give_away_mask & (1 << i) != 0;
        // A repeated descriptor travels once per entry and is closed once: its entries must agree.
        for (i, fd) in fds.iter().enumerate() {
            if let Some(j) = fds[..i].iter().enumerate().position(|(j, f)| f == fd && given(j) != given(i)) {
                return Err(Error::invalid(format!(
                    "mh_send_handles: fds[{j}] and fds[{i}] are the same descriptor {fd}, given away in one and kept in the other \
                     (a repeated descriptor is given away in all its entries or in none)"
                )));
            }
        }
        ch.send_with_handles(msg, fds, deadline(timeout_ms), &mut || Ok(()))?;
        for (i, fd) in fds.iter().enumerate() {
            if given(i) && !fds[..i].contains(fd) {
                libc::close(*fd); // given away: the send went (once, however often it was listed)
            }
        }
        Ok(())
    })
}

/// # Safety
/// `ch` NULL or a live channel handle; `buf` NULL or `cap` writable bytes;
/// `len`, `nfds` NULL or writable; `fds` NULL or `fds_cap` writable entries.
#[no_mangle]
pub unsafe extern "C" fn mh_recv_handles(
    ch: *mut mh_channel,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
    fds: *mut c_int,
    fds_cap: usize,
    nfds: *mut usize,
    timeout_ms: i64,
) -> c_int {
    guard("mh_recv_handles", || {
        let ch = &handle("mh_recv_handles", "ch", ch)?.ch;
        let len = len.as_mut().ok_or_else(|| null("mh_recv_handles", "len"))?;
        let nfds = nfds.as_mut().ok_or_else(|| null("mh_recv_handles", "nfds"))?;
        *len = 0;
        *nfds = 0;
        if fds.is_null() || fds_cap < MH_MAX_HANDLES {
            return Err(Error::invalid(format!(
                "mh_recv_handles: fds must have room for MH_MAX_HANDLES ({MH_MAX_HANDLES}) descriptors, got {fds_cap}{}",
                if fds.is_null() { " (NULL)" } else { "" }
            )));
        }
        let dst: &mut [u8] = match (buf.is_null(), cap) {
            (_, 0) => &mut [],
            (true, _) => return Err(null("mh_recv_handles", "buf (with cap > 0)")),
            (false, _) => std::slice::from_raw_parts_mut(buf, cap),
        };
        let out = std::slice::from_raw_parts_mut(fds, fds_cap);
        let end = deadline(timeout_ms);
        loop {
            let mut too_large = false;
            let mut got = Vec::new();
            let r = ch.try_recv_with_handles(
                |n, copy| {
                    *len = n;
                    if n > cap {
                        too_large = true;
                        return Err(Error::new(ErrorKind::MessageTooLarge, "too large"));
                    }
                    copy(&mut dst[..n]);
                    Ok(())
                },
                &mut got,
            );
            if too_large {
                return Err(Error::new(
                    ErrorKind::MessageTooLarge,
                    format!("mh_recv_handles: the message has {} bytes, the buffer {cap}; it stays in the channel", *len),
                ));
            }
            if r?.is_some() {
                *nfds = got.len();
                for (slot, fd) in out.iter_mut().zip(got) {
                    *slot = std::os::fd::IntoRawFd::into_raw_fd(fd); // the caller owns it now
                }
                return Ok(());
            }
            *len = 0;
            if timeout_ms == 0 {
                return Err(Error::timeout("mh_recv_handles: no message waiting"));
            }
            wait_until(ch, Want::Readable, end, &format!("mh_recv_handles: no message within {timeout_ms} ms"))?;
        }
    })
}

/// # Safety
/// `ch` NULL or a live channel handle; `msgs` and `lens` NULL or `count`
/// readable entries, each `msgs[i]` NULL (only if `lens[i]` is 0) or
/// `lens[i]` readable bytes; `sent` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mh_send_batch(
    ch: *mut mh_channel,
    msgs: *const *const u8,
    lens: *const usize,
    count: usize,
    timeout_ms: i64,
    sent: *mut usize,
) -> c_int {
    let mut done = 0usize;
    let rc = guard("mh_send_batch", || {
        let ch = &handle("mh_send_batch", "ch", ch)?.ch;
        if count == 0 {
            return Ok(());
        }
        if msgs.is_null() || lens.is_null() {
            return Err(null("mh_send_batch", "msgs or lens (with count > 0)"));
        }
        // Everything that can be checked is checked before anything is sent.
        let ptrs = std::slice::from_raw_parts(msgs, count);
        let lens = std::slice::from_raw_parts(lens, count);
        let mut batch: Vec<&[u8]> = Vec::with_capacity(count);
        for (i, (&p, &n)) in ptrs.iter().zip(lens).enumerate() {
            batch.push(match (p.is_null(), n) {
                (_, 0) => &[],
                (true, _) => return Err(Error::invalid(format!("mh_send_batch: msgs[{i}] is NULL with lens[{i}] = {n}; nothing was sent"))),
                (false, _) => std::slice::from_raw_parts(p, n),
            });
        }
        ch.check_batch(&mut batch.iter().map(|m| m.len()))?;
        let end = deadline(timeout_ms);
        while done < count {
            let n = ch.try_send_many(&mut batch[done..].iter().copied()).map_err(|e| e.with_progress(Progress::Sent(done)))?;
            done += n;
            if done < count && n == 0 {
                if timeout_ms == 0 {
                    return Err(Error::new(ErrorKind::TxBusy, format!("mh_send_batch: no room after {done} of {count} messages")));
                }
                ch.note_busy();
                let what = format!("mh_send_batch: {done} of {count} messages sent within {timeout_ms} ms");
                wait_until(ch, Want::Writable(batch[done].len()), end, &what)?;
            }
        }
        Ok(())
    });
    if let Some(s) = sent.as_mut() {
        *s = done;
    }
    rc
}

/// # Safety
/// `ch` NULL or a live channel handle; `unconsumed` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mh_flush(ch: *mut mh_channel, timeout_ms: i64, unconsumed: *mut usize) -> c_int {
    let mut left = 0usize;
    let rc = guard("mh_flush", || {
        let ch = &handle("mh_flush", "ch", ch)?.ch;
        let end = deadline(timeout_ms);
        let mut asked = false;
        loop {
            match ch.flush_poll(&mut asked) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => {
                    if let Some(Progress::Unconsumed(n)) = e.progress {
                        left = n;
                    }
                    return Err(e);
                }
            }
            if ch.wait(Want::Flushed, end) == Waited::TimedOut {
                let e = ch.flush_timeout();
                if let Some(Progress::Unconsumed(n)) = e.progress {
                    left = n;
                }
                return Err(e);
            }
        }
    });
    if let Some(u) = unconsumed.as_mut() {
        *u = left;
    }
    rc
}

/// # Safety
/// `ch` NULL or a live channel handle.
#[no_mangle]
pub unsafe extern "C" fn mh_closed(ch: *const mh_channel) -> c_int {
    catch_unwind(AssertUnwindSafe(|| match ch.as_ref() {
        None => {
            set_last_error("mh_closed: ch is NULL");
            MH_E_INVALID
        }
        Some(c) => c.ch.is_closed() as c_int,
    }))
    .unwrap_or(MH_E_INTERNAL)
}

/// # Safety
/// `ch` NULL or a live channel handle, not used again.
#[no_mangle]
pub unsafe extern "C" fn mh_close(ch: *mut mh_channel) -> c_int {
    mh_close_timeout(ch, CLOSE_HELD_WAIT.as_millis() as i64, std::ptr::null_mut())
}

/// # Safety
/// `ch` NULL or a live channel handle, not used again; `lost` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mh_close_timeout(ch: *mut mh_channel, timeout_ms: i64, lost: *mut usize) -> c_int {
    let mut n = 0usize;
    let rc = guard("mh_close", || {
        if ch.is_null() {
            return Err(null("mh_close", "ch"));
        }
        let ch = Box::from_raw(ch);
        let wait = (timeout_ms >= 0).then(|| duration(timeout_ms));
        let r = ch.ch.close_within(wait, &mut || Ok(()));
        if let Err(Error { progress: Some(Progress::Lost(k)), .. }) = &r {
            n = *k;
        }
        r
    });
    if let Some(l) = lost.as_mut() {
        *l = n;
    }
    rc
}

/// # Safety
/// `ch` NULL or a live channel handle.
#[no_mangle]
pub unsafe extern "C" fn mh_max_message(ch: *const mh_channel) -> usize {
    catch_unwind(AssertUnwindSafe(|| ch.as_ref().map_or(0, |c| c.ch.max_message()))).unwrap_or(0)
}

// ---- errors -----------------------------------------------------------------

#[no_mangle]
pub extern "C" fn mh_strerror(code: c_int) -> *const c_char {
    describe(code).as_ptr()
}

/// The pointer stays valid until the next failing call in this thread.
#[no_mangle]
pub extern "C" fn mh_last_error() -> *const c_char {
    catch_unwind(|| LAST_ERROR.with(|e| e.borrow().as_ptr())).unwrap_or(c"(error message unavailable)".as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr;

    fn last() -> String {
        // SAFETY: mh_last_error returns a valid NUL-terminated string owned by this thread.
        unsafe { CStr::from_ptr(mh_last_error()).to_string_lossy().into_owned() }
    }

    #[test]
    fn every_kind_has_a_distinct_code_with_a_description() {
        use ErrorKind::*;
        let kinds = [
            RuntimeNotFound,
            RuntimeExists,
            Monitor,
            Export,
            Bind,
            ChannelClosed,
            TxBusy,
            Timeout,
            MessageTooLarge,
            Protocol,
            InvalidArgument,
            Os,
            CapSend,
            HeldLost,
        ];
        let mut codes: Vec<c_int> = kinds.iter().map(|k| code_of(*k)).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), kinds.len());
        for c in codes.iter().chain([MH_E_INTERNAL].iter()) {
            assert!(*c < 0);
            assert_ne!(describe(*c), c"unknown error code");
        }
        assert_eq!(describe(1), c"unknown error code");
    }

    #[test]
    fn null_arguments_are_invalid_not_crashes() {
        // SAFETY: every pointer passed is either null (what is tested) or valid for the call.
        unsafe {
            let mut d: *mut mh_dispatcher = ptr::null_mut();
            assert_eq!(mh_attach(ptr::null(), 0, &mut d), MH_E_INVALID);
            assert!(last().contains("runtime_name is NULL"), "{}", last());
            assert_eq!(mh_attach(c"x".as_ptr(), 0, ptr::null_mut()), MH_E_INVALID);
            let mut c: *mut mh_channel = ptr::null_mut();
            assert_eq!(mh_bind(ptr::null_mut(), c"s".as_ptr(), c"ump".as_ptr(), 0, &mut c), MH_E_INVALID);
            assert!(c.is_null());
            let mut n = 0usize;
            assert_eq!(mh_send(ptr::null_mut(), ptr::null(), 0, 0), MH_E_INVALID);
            assert_eq!(mh_recv(ptr::null_mut(), ptr::null_mut(), 0, &mut n, 0), MH_E_INVALID);
            assert_eq!(mh_close(ptr::null_mut()), MH_E_INVALID);
            assert_eq!(mh_max_message(ptr::null()), 0);
            mh_detach(ptr::null_mut());
            mh_service_free(ptr::null_mut());
        }
    }

    #[test]
    fn bad_names_and_utf8() {
        // SAFETY: valid C strings and a valid out pointer.
        unsafe {
            let mut d: *mut mh_dispatcher = ptr::null_mut();
            assert_eq!(mh_attach(c"../etc".as_ptr(), 0, &mut d), MH_E_INVALID);
            assert!(last().contains("invalid runtime name"), "{}", last());
            assert_eq!(mh_attach(c"\xff\xfe".as_ptr(), 0, &mut d), MH_E_INVALID);
            assert!(last().contains("not valid UTF-8"), "{}", last());
        }
    }

    #[test]
    fn last_error_is_per_thread() {
        // SAFETY: a null name (what is tested) and a valid out pointer.
        unsafe {
            let mut d: *mut mh_dispatcher = ptr::null_mut();
            assert_eq!(mh_attach(ptr::null(), 0, &mut d), MH_E_INVALID);
        }
        let other = std::thread::spawn(last).join().unwrap();
        assert_eq!(other, "no error");
        assert!(last().contains("NULL"));
    }

    #[test]
    fn panics_are_caught() {
        let rc = guard("test", || panic!("boom"));
        assert_eq!(rc, MH_E_INTERNAL);
        assert!(last().contains("boom"));
    }
}
