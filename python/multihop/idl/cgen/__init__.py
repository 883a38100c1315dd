"""C back end: an interface model in, a header and a source file out.

The generated C speaks the same wire format as the Python back end
(``flounder-idl/WIRE.md``) and compiles with ``gcc -std=c11 -Wall -Wextra -Werror``.
For interface ``N`` and message ``M`` it provides (see the header's comments):

* types ``N_T_t`` for each struct, enum (constants ``N_VALUE``) and array typedef;
* ``int N_M_encode(uint8_t *buf, size_t cap, size_t *len, <in args>)``:
  ``*len`` is always set to the size needed; ``MH_E_TOO_LARGE`` if ``cap`` is
  smaller (so ``cap`` 0 asks for the size), ``MH_E_INVALID`` for a bad value;
* ``int N_M_decode(const uint8_t *buf, size_t len, <out params>)``:
  ``MH_E_PROTOCOL`` if the bytes are not a well-formed ``M``;
* ``N_rx_handlers`` (one function pointer per message), ``N_dispatch`` (decode
  by message number and call the handler), ``N_msgnum``, ``N_msg_name``,
  ``N_reencode`` (decode then encode again: checks a message is well-formed);
* over the C ABI of ``multihop.h``, through a binding ``N_binding`` (a channel
  and its rpc backlog; ``N_binding_init`` / ``N_binding_destroy``; made by
  ``N_bind(d, name, transport, timeout_ms, &b)`` with transport ``"ump"``,
  ``"multihop"`` or ``"auto"``, or on the service side by ``N_export`` and
  ``N_accept(svc, timeout_ms, &b)``):
  ``N_M_send`` per message, ``N_recv`` (hand out the oldest backlog message,
  else receive one, and dispatch it), and ``N_R_rpc`` per rpc (send the call,
  wait for the response, decode it).  While an rpc waits, other messages are
  kept in order in the backlog (at most ``N_BACKLOG_MAX``), never lost: see
  the text of the generated header.

Argument mapping: scalars by value (``uint64`` -> ``uint64_t``, ``size``/``iref``
/``errval``/``uintptr`` -> ``uint64_t``, ``intptr`` -> ``int64_t``); structs by
``const N_T_t *``; fixed arrays as arrays; ``T a[len, MAX]`` as ``const T *a, size_t len``;
strings as NUL-terminated ``const char *``.  On decode, bounded dynamic arrays
and strings are copied into caller buffers (``N_M_A_MAX`` elements; a string
needs ``MAX + 1`` bytes) and unbounded ones (``T a[len]``, ``string s``) are
``malloc``'d for the caller to ``free``.

Capabilities (``cap``, ``give_away_cap``, also in structs and arrays) are ``int``
file descriptors (-1 for none).  A message that carries them has an encoder that
also fills ``int mh_fds[MH_MAX_HANDLES]``, ``*mh_nfds`` and ``*mh_give`` (bit i: handle
i is given away) and a decoder that takes the handles that came (``mh_fds``,
``mh_nfds``); its send stub uses ``mh_send_handles``.  An interface with
capabilities receives with ``mh_recv_handles``: its ``N_dispatch``,
``N_reencode`` take the handles beside the bytes, its backlog keeps them, and a
handler owns the descriptors it is given (a message that does not decode has
its handles closed).
"""

from __future__ import annotations

from multihop.idl.ccheck import check_c_names
from multihop.idl.cgen.files import CFiles
from multihop.idl.checker import check_generatable
from multihop.idl.model import Interface

__all__ = ["generate_c"]


def generate_c(iface: Interface) -> tuple[str, str]:
    """Generate ``(header_text, source_text)`` for ``iface`` (files ``NAME.h`` and ``NAME.c``).

    Raises :class:`~multihop.idl.errors.IdlCodegenError` for interfaces the
    back end cannot generate: import-only models, and names whose C
    identifiers would collide (see :mod:`multihop.idl.ccheck`).
    """
    check_generatable(iface, "C")
    check_c_names(iface)
    g = CFiles(iface)
    return g.header(), g.source()
