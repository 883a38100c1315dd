/* multihop.h: the C ABI of the multihop runtime (libmultihop_core.so, core-rs/src/capi.rs; every declaration here is
 * checked against capi.rs by tests/c/test_capi_header.py).
 *
 * A C program attaches to a runtime started by `multihop up NAME` (or by a Python program with
 * multihop.Runtime.start), exports or binds services by name, and exchanges messages over UMP
 * channels with Python or C peers:
 *
 *     mh_dispatcher *d; mh_channel *ch;
 *     if (mh_attach("demo", 0, &d) != MH_OK) { fprintf(stderr, "%s\n", mh_last_error()); ... }
 *     if (mh_bind(d, "echo", "ump", 5000, &ch) != MH_OK) { ... }
 *     mh_send(ch, "ping", 4, -1);
 *     char buf[256]; size_t n;
 *     mh_recv(ch, buf, sizeof buf, &n, 1000);
 *     mh_close(ch); mh_detach(d);
 *
 * Build, from the repository's root: first the library without the Python feature, into a directory
 * of its own (target/release holds maturin's build of the same crate with the `python` feature, which
 * needs libpython: linking against it fails with undefined Py* symbols), then the program:
 *
 *     cargo build --release -p multihop-core --target-dir target/capi
 *     gcc prog.c -I core-rs/include -L target/capi/release -lmultihop_core -Wl,-rpath,$PWD/target/capi/release
 *
 * Conventions
 * - Every int-returning function returns MH_OK (0) or a negative MH_E_* code; mh_last_error() then
 *   holds a message (for this thread) naming what was wrong. Nothing panics or aborts across this
 *   boundary.
 * - A NULL handle, buffer or string (where one is required), or a string that is not UTF-8,
 *   gives MH_E_INVALID.
 * - timeout_ms: < 0 waits without limit, 0 does not wait, > 0 waits at most that many milliseconds.
 *   Waiting parks the thread on a futex (an idle waiter costs no CPU); a signal does not end a wait.
 * - Handles: a channel may be used from several threads at once (send and recv are each
 *   serialised); mh_close / mh_detach / mh_service_free free the handle, so no other thread may be
 *   using it then. UMP channels stay usable after their dispatcher is detached; multi-hop channels
 *   end with it (their data rides on its link), but keep it attached while mh_detach is not called.
 * - Out-pointers are set to NULL when a call fails.
 */
#ifndef MULTIHOP_H
#define MULTIHOP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- return codes ------------------------------------------------------------------------- */
#define MH_OK 0
#define MH_E_TIMEOUT -1    /* a blocking call reached its timeout */
#define MH_E_CLOSED -2     /* the channel was closed by either end, or the peer died */
#define MH_E_BUSY -3       /* no room now (timeout_ms 0) */
#define MH_E_TOO_LARGE -4  /* message over the channel's maximum, or (recv) over the buffer */
#define MH_E_INVALID -5    /* bad argument: NULL, not UTF-8, bad name or transport, bad value */
#define MH_E_PROTOCOL -6   /* the peer broke the wire or control protocol; a message did not decode */
#define MH_E_BIND -7       /* bind refused, unknown service, or no answer in time */
#define MH_E_NOT_FOUND -8  /* no runtime of that name, or no monitor for that core */
#define MH_E_EXPORT -9     /* export refused (name taken, bad name) */
#define MH_E_MONITOR -10   /* the monitor failed, died, or the dispatcher was detached */
#define MH_E_OS -11        /* an operating-system call failed (the message names it) */
#define MH_E_INTERNAL -12  /* a bug in the library (caught, reported, never propagated) */
#define MH_E_EXISTS -13    /* a live runtime of that name exists */
#define MH_E_CAP -14       /* handles refused (runtime-owned, not open, too many, no room at the
                            * receiver, receiving end closed); mh_last_error says which and why */
#define MH_E_HELD_LOST -15 /* mh_close: the channel is closed and freed, but messages held for the
                            * next credit did not leave (the monitor took nothing in time): lost */

/* Most handles (file descriptors) one message carries. */
#define MH_MAX_HANDLES 32

/* ---- handles ------------------------------------------------------------------------------ */
typedef struct mh_dispatcher mh_dispatcher; /* this process attached to one core's monitor */
typedef struct mh_service mh_service;       /* an exported service name */
typedef struct mh_channel mh_channel;       /* one end of a channel */

/* ---- runtime and dispatcher --------------------------------------------------------------- */
/* Attach to the monitor of `core` in the runtime `runtime_name`. The runtime's directory is found
 * as Python's multihop.paths.runtime_dir finds it ($MULTIHOP_RUNTIME_ROOT, else
 * $XDG_RUNTIME_DIR/multihop, else <tmp>/multihop-<uid>). MH_E_NOT_FOUND if there is no such
 * runtime or core; MH_E_INVALID for a malformed name. */
int mh_attach(const char *runtime_name, uint32_t core, mh_dispatcher **out);
/* Detach and free. Services exported through `d` vanish; channels stay usable. NULL is a no-op. */
void mh_detach(mh_dispatcher *d);
/* The directory of runtime `runtime_name` (whether or not it runs), NUL-terminated, into `buf`.
 * `*len` is set to the length without the NUL; MH_E_TOO_LARGE if cap < *len + 1. */
int mh_runtime_dir(const char *runtime_name, char *buf, size_t cap, size_t *len);

/* ---- services ----------------------------------------------------------------------------- */
/* Export `name` through `d` with a backlog of 16 connections. MH_E_EXPORT if the name is taken.
 * A client's mh_bind completes as soon as its connection is queued in the backlog (as a TCP
 * connect does): the same thread may bind, then accept. C has no connect callback: every client
 * is taken while there is room; when the backlog is full, further binds wait for room until their
 * timeout (then MH_E_TIMEOUT for them). */
int mh_export(mh_dispatcher *d, const char *name, mh_service **out);
/* mh_export with a backlog of `backlog` connections (1..65536; else MH_E_INVALID). */
int mh_export_backlog(mh_dispatcher *d, const char *name, size_t backlog, mh_service **out);
/* Take the next connection from the service's backlog. MH_E_TIMEOUT if none came. */
int mh_accept(mh_service *s, int64_t timeout_ms, mh_channel **out);
/* Free the service handle and withdraw the name: connections still in its backlog are closed
 * (their clients get MH_E_CLOSED) and the name can be exported again. NULL is a no-op. */
void mh_service_free(mh_service *s);

/* ---- channels ----------------------------------------------------------------------------- */
/* Bind to the service `name`; `transport` is "ump" (a ring pair shared with the server),
 * "multihop" (through the monitors, credit window of 16 messages, as Python's default) or "auto"
 * (UMP when the service's core is ours or the routing table links the two cores directly,
 * multi-hop otherwise: the rule of Python's generated bindings, multihop.idl.connect).
 * Completes once the connection is in the service's backlog. MH_E_BIND if refused or unknown,
 * MH_E_TIMEOUT if the backlog stayed full (timeout_ms < 0: no limit). Messages up to 1 MiB. */
int mh_bind(mh_dispatcher *d, const char *name, const char *transport, int64_t timeout_ms, mh_channel **out);
/* Send one message of `len` bytes (`data` may be NULL if len is 0). timeout_ms 0: MH_E_BUSY if the
 * ring is full. On a multi-hop channel whose credit window is used up the message is held for the
 * channel's next credit and MH_OK returned at once: it leaves with the next credit (sent by the
 * library's flusher thread if no call comes, and by an atexit hook at exit()), and is lost only if
 * the process is killed first (mh_flush waits until it is consumed). The call waits (or is
 * MH_E_BUSY) only once the held frames (4 of up to 64 messages) are full. MULTIHOP_HOLD=0 in the
 * environment turns holding off. MH_E_TOO_LARGE if len > mh_max_message(ch); MH_E_CLOSED if either
 * end closed. */
int mh_send(mh_channel *ch, const void *data, size_t len, int64_t timeout_ms);
/* Receive one message into `buf` (`buf` may be NULL if cap is 0) and set `*len` to its length.
 * If it is longer than `cap`: MH_E_TOO_LARGE, `*len` = the length needed, and the message stays
 * in the channel for the next call. MH_E_TIMEOUT if none came (timeout_ms 0: none was there);
 * MH_E_CLOSED once the peer closed (or died) and everything it sent has been read. */
int mh_recv(mh_channel *ch, void *buf, size_t cap, size_t *len, int64_t timeout_ms);
/* Send `count` messages in order (`msgs[i]` of `lens[i]` bytes; msgs[i] may be NULL if lens[i]
 * is 0), waiting while there is no room. The whole batch is checked first: a NULL message with a
 * length, or a message over mh_max_message(ch), fails (MH_E_INVALID / MH_E_TOO_LARGE) before
 * anything is sent. `*sent` (if not NULL) is always set to how many went: all of them on MH_OK;
 * fewer on MH_E_TIMEOUT (the timeout passed), MH_E_BUSY (timeout_ms 0 and no room) or
 * MH_E_CLOSED (the channel ended part-way). On a multi-hop channel consecutive messages travel
 * packed, up to 64 in a frame that takes one credit; the receiver gets them one by one, in order. */
int mh_send_batch(mh_channel *ch, const void *const *msgs, const size_t *lens, size_t count,
                  int64_t timeout_ms, size_t *sent);
/* Send one message with `nfds` handles (file descriptors: a memfd, an eventfd, a pipe or socket
 * end, a pidfd; at most MH_MAX_HANDLES). The handles travel out of band through the monitors and
 * arrive with exactly this message, in channel order; the call returns once the receiver holds
 * them and the message is written. A handle is duplicated (you keep your descriptor) unless bit i
 * of `give_away_mask` is set: then fds[i] is closed once the send went (Flounder's give_away_cap).
 * A descriptor listed more than once travels once per entry and, given away, is closed once; its
 * entries must agree on giving it away (else MH_E_INVALID, nothing sent).
 * MH_E_CAP if one is refused (one of the runtime's own descriptors, known by identity: a segment,
 * doorbell, control socket, peer pidfd or async doorbell, duplicates included; not open; an io_uring
 * instance, which the kernel does not pass; too many; the receiver has no room): nothing was sent,
 * the channel goes on, you keep every handle.
 * timeout_ms < 0 waits without limit. nfds 0 is mh_send. */
int mh_send_handles(mh_channel *ch, const void *data, size_t len, const int *fds, size_t nfds,
                    uint64_t give_away_mask, int64_t timeout_ms);
/* Receive one message as mh_recv does, and the handles sent with it into `fds` (`*nfds` of them;
 * 0 for a message sent without); they are yours to close. `fds` must have room for
 * MH_MAX_HANDLES entries (else MH_E_INVALID). mh_recv of a message that carries handles gives its
 * bytes and closes its handles. */
int mh_recv_handles(mh_channel *ch, void *buf, size_t cap, size_t *len, int *fds, size_t fds_cap,
                    size_t *nfds, int64_t timeout_ms);
/* Wait until every message sent so far has been consumed by the peer (multi-hop: its credits came
 * back; UMP: it read them): "accepted by mh_send" is not "delivered", this is. MH_E_TIMEOUT if
 * the timeout passed, MH_E_CLOSED if the channel ended first; `*unconsumed` (if not NULL) is set
 * to how many sent messages were not consumed (0 on MH_OK). */
int mh_flush(mh_channel *ch, int64_t timeout_ms, size_t *unconsumed);
/* 1 if this end is over (closed here, the peer closed it or died, or its monitor went away;
 * messages that arrived before can still be read), 0 if not, MH_E_INVALID for NULL. Looks now,
 * and tells the monitor the moment it knows (it then forgets the channel). */
int mh_closed(const mh_channel *ch);
/* Close this end (the peer reads what was sent, then gets MH_E_CLOSED) and free the handle.
 * NULL gives MH_E_INVALID. A multi-hop end first hands the messages it holds for the next credit
 * (see mh_send) to its monitor, waiting up to 5 s for room on the link; if some did not leave (the
 * monitor took nothing: stopped or overloaded) they are lost and mh_close returns MH_E_HELD_LOST
 * (mh_last_error says how many). The handle is freed whatever it returns. A channel already over
 * (the peer closed it or died) loses what it held with it, without an error, as messages in
 * flight are: mh_flush first says whether everything was consumed. */
int mh_close(mh_channel *ch);
/* mh_close, waiting up to `timeout_ms` (< 0: no limit) for room for the held messages; `*lost`
 * (if not NULL) is set to how many did not leave (0 unless MH_E_HELD_LOST). */
int mh_close_timeout(mh_channel *ch, int64_t timeout_ms, size_t *lost);
/* The largest message the channel carries, in bytes (0 for NULL). */
size_t mh_max_message(const mh_channel *ch);

/* ---- errors ------------------------------------------------------------------------------- */
/* A static description of a code ("unknown error code" for others). */
const char *mh_strerror(int code);
/* The message of the last failure in this thread (valid until the next failing call in this
 * thread); "no error" if none failed yet. */
const char *mh_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* MULTIHOP_H */
