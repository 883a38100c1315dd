"""Independent checkers over recorded deliveries (the way Jepsen checks a history).

A :class:`History` records, per process, the order in which it sent and
delivered messages, and for every message its sender, its stream (the
destination id it was sent to) and its recipients (the destination set of the
view it was sent in).  The checkers read nothing else: they share no code
with the ordering machines, and they work out causality from the recorded
event order, not from any clock a message carried.

Each returns a list of violations (empty when the property holds), each a
sentence naming the processes and messages involved, at most ``limit``.

* :func:`check_delivery`: the view rule: every message reaches each of its
  recipients exactly once and nobody else; a process listed as dead may miss
  messages, and a ``lost`` sender's message may be missing at all surviving
  recipients alike (a dead sender's unstamped total-order ones);
* :func:`check_fifo`: each sender's messages of a stream in send order;
* :func:`check_causal`: a message only after every message of its stream
  that happened before it (Lamport's relation over the recorded events);
* :func:`check_total`: one order of each stream's messages that every
  process's deliveries follow.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from itertools import pairwise

__all__ = ["History", "Message", "check_delivery", "check_fifo", "check_causal", "check_total"]

Process = Hashable
MsgId = Hashable


@dataclass
class Message:
    """What the history knows of one message: who sent it, to which stream, and for whom."""

    msg: MsgId
    sender: Process
    stream: Hashable
    recipients: frozenset[Process]
    index: int = 0  # its position among the sender's sends to the stream, from 1


@dataclass
class History:
    """Sends and deliveries in each process's own order (the input of every checker)."""

    messages: dict[MsgId, Message] = field(default_factory=dict)
    events: dict[Process, list[tuple[str, MsgId]]] = field(default_factory=lambda: defaultdict(list))
    _counts: dict[tuple[Process, Hashable], int] = field(default_factory=lambda: defaultdict(int))

    def send(self, process: Process, msg: MsgId, stream: Hashable, recipients: Iterable[Process]) -> None:
        """Record that ``process`` sent ``msg`` to ``stream`` for ``recipients``."""
        if msg in self.messages:
            raise ValueError(f"message {msg!r} is recorded as sent twice")
        self._counts[(process, stream)] += 1
        self.messages[msg] = Message(msg, process, stream, frozenset(recipients), self._counts[(process, stream)])
        self.events[process].append(("send", msg))

    def readdress(self, msg: MsgId, recipients: Iterable[Process]) -> None:
        """Change the recipients of a message sent earlier (a total-order message stamped in a later view)."""
        self.messages[msg].recipients = frozenset(recipients)

    def deliver(self, process: Process, msg: MsgId) -> None:
        """Record that ``process`` delivered ``msg``."""
        self.events[process].append(("deliver", msg))

    def deliveries(self, process: Process) -> list[MsgId]:
        """The messages ``process`` delivered, in order."""
        return [m for kind, m in self.events.get(process, []) if kind == "deliver"]


def _capped(out: list[str], limit: int) -> bool:
    return len(out) >= limit


def check_delivery(h: History, dead: Iterable[Process] = (), lost: Iterable[Process] = (), limit: int = 20) -> list[str]:
    """Every message to each recipient exactly once, to nobody else, never before its send.

    ``dead`` processes may miss messages.  A message sent by one of the
    ``lost`` senders (a dead sender's unstamped total-order messages) may be
    missing, but then at every surviving recipient alike: all or none.
    """
    dead, lost = set(dead), set(lost)
    out: list[str] = []
    got: dict[MsgId, set[Process]] = defaultdict(set)
    for p, evs in h.events.items():
        for kind, m in evs:
            if kind != "deliver":
                continue
            if m not in h.messages:
                out.append(f"{p!r} delivered {m!r}, which nobody sent")
            elif p not in h.messages[m].recipients:
                out.append(f"{p!r} delivered {m!r}, but it is not among its recipients {sorted(map(repr, h.messages[m].recipients))}")
            elif p in got[m]:
                out.append(f"{p!r} delivered {m!r} twice")
            got[m].add(p)
            if _capped(out, limit):
                return out
    for m, info in h.messages.items():
        survivors = info.recipients - dead
        missing = survivors - got[m]
        if not missing:
            continue
        if info.sender in lost and missing == survivors:
            continue  # lost with its sender, at every survivor alike
        for p in sorted(missing, key=repr):
            out.append(f"{p!r} never delivered {m!r} (sent by {info.sender!r} to {info.stream!r})")
            if _capped(out, limit):
                return out
    return out


def check_fifo(h: History, limit: int = 20) -> list[str]:
    """At every process, each sender's messages of a stream in the order they were sent, none skipped.

    The j-th message of (sender, stream) a process delivers must be the j-th
    of that sender's messages to the stream that were addressed to it.
    """
    out: list[str] = []
    addressed: dict[tuple[Process, Process, Hashable], list[MsgId]] = defaultdict(list)
    for p, evs in h.events.items():
        for kind, m in evs:
            if kind == "send":
                info = h.messages[m]
                for r in info.recipients:
                    addressed[(r, p, info.stream)].append(m)
    for p in h.events:
        count: dict[tuple[Process, Hashable], int] = defaultdict(int)
        for m in h.deliveries(p):
            sent = h.messages.get(m)
            if sent is None:
                continue  # check_delivery reports it
            key = (sent.sender, sent.stream)
            want = addressed[(p, *key)]
            j = count[key]
            if j >= len(want) or want[j] != m:
                expected = want[j] if j < len(want) else "nothing more"
                out.append(f"{p!r} delivered {m!r} from {sent.sender!r} to {sent.stream!r} where FIFO wants {expected!r}")
                if _capped(out, limit):
                    return out
            count[key] = j + 1
    return out


def check_causal(h: History, limit: int = 20) -> list[str]:
    """Within each stream, nothing is delivered before a message of the stream that happened before it.

    Happened-before is computed from the recorded events restricted to the
    stream: a send follows everything its process did before it, a delivery
    follows the send.  Each process's knowledge is, per sender, the last of
    that sender's stream messages in its causal past.
    """
    out: list[str] = []
    streams = {info.stream for info in h.messages.values()}
    for stream in sorted(streams, key=repr):
        out += _check_causal_stream(h, stream, limit - len(out))
        if _capped(out, limit):
            break
    return out


def _check_causal_stream(h: History, stream: Hashable, limit: int) -> list[str]:
    out: list[str] = []
    evs = {p: [(k, m) for k, m in e if m in h.messages and h.messages[m].stream == stream] for p, e in h.events.items()}
    # per (recipient, sender): that sender's message indices addressed to the recipient, ascending
    addressed: dict[tuple[Process, Process], list[int]] = defaultdict(list)
    by_index: dict[tuple[Process, int], MsgId] = {}
    for m, info in h.messages.items():
        if info.stream != stream:
            continue
        by_index[(info.sender, info.index)] = m
        for r in info.recipients:
            addressed[(r, info.sender)].append(info.index)
    for lst in addressed.values():
        lst.sort()
    delivered: dict[tuple[Process, Process], set[int]] = defaultdict(set)
    frontier: dict[tuple[Process, Process], int] = defaultdict(int)  # addressed[...][:frontier] all delivered
    knows: dict[Process, dict[Process, int]] = defaultdict(dict)
    past: dict[MsgId, dict[Process, int]] = {}
    pos = {p: 0 for p in evs}
    remaining = sum(len(e) for e in evs.values())
    while remaining:  # each pass handles at least one event, or stops
        moved = False
        for p, e in evs.items():
            while pos[p] < len(e):
                kind, m = e[pos[p]]
                info = h.messages[m]
                if kind == "send":
                    past[m] = dict(knows[p])
                    knows[p][p] = info.index
                else:
                    if m not in past:
                        break  # its send is not handled yet
                    need = dict(past[m])
                    need[info.sender] = max(need.get(info.sender, 0), info.index - 1)
                    for s, upto in need.items():
                        want = addressed.get((p, s), [])
                        f = frontier[(p, s)]
                        if f < len(want) and want[f] <= upto:
                            before = by_index[(s, want[f])]
                            out.append(f"{p!r} delivered {m!r} before {before!r}, which happened before it (stream {stream!r})")
                            if len(out) >= limit:
                                return out
                            break
                    key = (p, info.sender)
                    delivered[key].add(info.index)
                    want = addressed.get(key, [])
                    while frontier[key] < len(want) and want[frontier[key]] in delivered[key]:
                        frontier[key] += 1
                    mine = knows[p]
                    for s, upto in past[m].items():
                        if upto > mine.get(s, 0):
                            mine[s] = upto
                    if info.index > mine.get(info.sender, 0):
                        mine[info.sender] = info.index
                pos[p] += 1
                remaining -= 1
                moved = True
        if not moved:
            stuck = sorted(repr(e[pos[p]][1]) for p, e in evs.items() if pos[p] < len(e))
            out.append(f"deliveries of messages never sent (or sent after they were delivered): {stuck[:5]}")
            return out
    return out


def check_total(h: History, limit: int = 20) -> list[str]:
    """Within each stream, all processes deliver in one order (their sequences never disagree).

    First each pair of processes is compared on the messages both delivered
    (a witness pair is named); then the union of every process's successive
    deliveries must have no cycle (which also catches disagreements that
    only show across three or more processes).
    """
    out: list[str] = []
    per: dict[Hashable, dict[Process, list[MsgId]]] = defaultdict(dict)
    for p in h.events:
        seqs: dict[Hashable, list[MsgId]] = defaultdict(list)
        for m in h.deliveries(p):
            if m in h.messages:
                seqs[h.messages[m].stream].append(m)
        for stream, seq in seqs.items():
            per[stream][p] = seq
    for stream, seqs in sorted(per.items(), key=lambda kv: repr(kv[0])):
        procs = sorted(seqs, key=repr)
        for i, p in enumerate(procs):
            where = {m: k for k, m in enumerate(seqs[p])}
            for q in procs[i + 1 :]:
                common = [m for m in seqs[q] if m in where]
                for a, b in pairwise(common):
                    if where[a] > where[b]:
                        out.append(f"{q!r} delivered {a!r} before {b!r}, {p!r} the other way round (stream {stream!r})")
                        break
                if _capped(out, limit):
                    return out
        if not out and _has_cycle(seqs.values()):
            out.append(f"the deliveries of stream {stream!r} admit no single order (a cycle across processes)")
    return out[:limit]


def _has_cycle(sequences: Iterable[list[MsgId]]) -> bool:
    """Whether the 'delivered right before' edges of all sequences form a cycle (Kahn's algorithm)."""
    succ: dict[MsgId, set[MsgId]] = defaultdict(set)
    indeg: dict[MsgId, int] = defaultdict(int)
    for seq in sequences:
        for m in seq:
            indeg.setdefault(m, 0)
        for a, b in pairwise(seq):
            if b not in succ[a]:
                succ[a].add(b)
                indeg[b] += 1
    ready = [m for m, d in indeg.items() if d == 0]
    done = 0
    while ready:
        m = ready.pop()
        done += 1
        for n in succ.get(m, ()):
            indeg[n] -= 1
            if indeg[n] == 0:
                ready.append(n)
    return done < len(indeg)
