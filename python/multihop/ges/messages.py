"""The protocol messages brokers exchange, as plain immutable values.

The protocol machines take and return these; the simulator hands them over
as objects, the live broker encodes them with the generated Flounder stubs
of ``flounder-idl/ges_broker.if`` (:mod:`multihop.ges.live.wire`).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Union

from multihop.ges.gpp import Record

__all__ = ["Connections", "JoinRequest", "JoinReply", "Message"]


class Connections(NamedTuple):
    """GPP: connection records (each with the level of its near end as sent)."""

    records: tuple[Record, ...]


class JoinRequest(NamedTuple):
    """NAP: a newcomer asks for a gateway of ``level`` (routing paper 3.1).

    ``level`` 0: a single node asks to join a cluster as a level-0 gatekeeper.
    ``level`` l > 0: a whole level-``l`` unit asks to be added under the parent
    unit of the member it asks (it keeps its inner addresses, its prefix is
    renamed).  The request travels from member to member (``target`` is the
    member it is addressed to, ``path`` the brokers it passed, for the reply);
    ``tried`` are the members that were at their threshold already.
    """

    request: int  #: unique id of the request
    level: int  #: the kind of gatekeeper asked for (see above)
    unit: int  #: for level 0: the cluster to join, or 0 for "a cluster next to the target"
    target: int  #: the member this request is addressed to
    path: tuple[int, ...]  #: brokers the request went through (the reply goes back along it)
    tried: tuple[int, ...]  #: members that were full already


class JoinReply(NamedTuple):
    """NAP: the answer to a :class:`JoinRequest`."""

    request: int
    accepted_by: int  #: the member that takes the newcomer (-1 if none)
    assigned: int  #: the newcomer's address code (node) or its new unit id (unit addition); -1 if refused
    gatekeepers: tuple[int, ...]  #: when every member was full: the unit's gatekeepers one level up
    path: tuple[int, ...]  #: the way back (the reply is passed to path[-1], which pops it)
    reason: str  #: why it was refused ("" when accepted)


Message = Union[Connections, JoinRequest, JoinReply]


# ---- profiles and events (profile propagation, event routing, clients) --------------------------

from multihop.ges.event import EventData, EventId  # noqa: E402
from multihop.ges.profile import Chain  # noqa: E402

UP, DOWN = 1, 2  #: EventCopy.mode


class ProfileUpdate(NamedTuple):
    """PPP: broker ``origin``'s node profile changed (routing paper 3.3.5): to the deciders ``dests``.

    ``full``: ``added`` is the whole profile (a snapshot, for a decider that is new
    or lost track); else ``added`` / ``removed`` take version ``version - 1`` to
    ``version``.  The message is multicast: each broker on the way applies it if
    it is in ``dests`` and passes the rest on, grouped by next hop.
    """

    origin: int
    version: int
    full: bool
    added: tuple[Chain, ...]
    removed: tuple[Chain, ...]
    dests: tuple[int, ...]
    left: tuple[int, ...] = ()  #: units the message left (routing information: it never goes back into them)


class ProfileAck(NamedTuple):
    """PPP: decider ``decider`` applied ``origin``'s profile up to ``version`` (routed to ``origin``)."""

    origin: int
    decider: int
    version: int
    left: tuple[int, ...] = ()  #: units the message left


class ProfileResync(NamedTuple):
    """PPP: decider ``decider`` missed a version of ``origin``'s profile: send it a snapshot."""

    origin: int
    decider: int
    left: tuple[int, ...] = ()  #: units the message left


class EventCopy(NamedTuple):
    """ERP: an event with its routing information (routing paper 3.4).

    ``mode`` UP: climbing from the publisher's broker ``origin`` to a gatekeeper
    that decides unit ``unit(origin, level)`` (``targets``: the one chosen); DOWN: to be disseminated into each
    unit of ``targets``.  ``reached``: units that have the event, stripped of the
    levels below a gateway it crosses; ``hops``: brokers passed (the TTL counts them).
    """

    event: EventData
    origin: int
    mode: int
    level: int
    targets: tuple[int, ...]
    reached: tuple[int, ...]
    hops: int
    left: tuple[int, ...] = ()  #: units left on the way to the current targets (never re-entered)


class Events(NamedTuple):
    """ERP: event copies over one gateway, numbered from ``first_seq`` on that gateway (for the hop acks)."""

    first_seq: int
    copies: tuple[EventCopy, ...]


class EventAck(NamedTuple):
    """ERP: every copy numbered up to ``upto`` on this gateway was handled (the sender may forget them).

    ``also`` (durable mode): copies after ``upto`` that are safe too (a selective
    acknowledgement: an older copy still waiting for its next hops must not hold
    back the acknowledgement of newer ones, which could wait for this very gateway).
    """

    upto: int
    also: tuple[int, ...] = ()


# client <-> broker


class Attach(NamedTuple):
    """Client: the first message of a client (its id and incarnation)."""

    client: str
    incarnation: int


class Subscribe(NamedTuple):
    """Client: add profile ``chain`` as subscription ``sub``."""

    sub: int
    chain: Chain


class Unsubscribe(NamedTuple):
    """Client: remove subscription ``sub``."""

    sub: int


class Publish(NamedTuple):
    """Client: publish an event (durable clients: ``prev`` is the event they published before, if any)."""

    event: EventData
    prev: "EventId | None" = None


class ActiveQuery(NamedTuple):
    """Client: from which unit level on is subscription ``sub`` active (3.3.7)?"""

    sub: int


class ActiveReply(NamedTuple):
    """Broker: subscription ``sub`` is active up to ``level`` (0: this broker only; N + 1: the whole system)."""

    sub: int
    level: int


class Deliver(NamedTuple):
    """Broker: events for this client, in order."""

    events: tuple[EventData, ...]


class Refused(NamedTuple):
    """Broker: a client request was refused (``what`` names it, ``reason`` says why)."""

    what: str
    reason: str


# durability (GES service paper 6.1, 8.6-8.9, 9.1): client <-> broker


class DurableAttach(NamedTuple):
    """Client: the first message of a durable client (instead of :class:`Attach`).

    ``home`` is the storage broker that keeps its subscriptions and events (-1: not known
    yet, the attaching broker's cluster store becomes it); with ``resume`` the client
    presents ``previous`` (the broker of its last incarnation) and ``last``, the last
    event it received per publisher.  ``credential`` is the client's secret: a first
    connection registers it (its home keeps only a hash), a resume must present it.
    """

    client: str
    incarnation: int
    home: int
    previous: int
    last: tuple[EventId, ...]
    resume: bool
    credential: str = ""


#: why a durable attach was refused (:class:`AttachRefused`, :class:`SRefuse`): something else (no store, ...),
#: a resume that does not check out (unknown id, no or a wrong credential, a position never given),
#: an id in use (a plain connect of an id its home holds state for), the store cannot write now
REFUSED_OTHER, REFUSED_RESUME, REFUSED_IN_USE, REFUSED_UNAVAILABLE = 0, 1, 2, 3


class AttachRefused(NamedTuple):
    """Broker -> client: the durable attach was refused (``kind``: one of the ``REFUSED_*`` codes), and why."""

    kind: int
    reason: str


class Welcome(NamedTuple):
    """Broker -> client: the durable attach was accepted; ``replay`` events wait in storage."""

    home: int
    replay: int


class Stored(NamedTuple):
    """Broker -> client: these published events are in stable storage (the client's queue releases them)."""

    ids: tuple[EventId, ...]


class NotStored(NamedTuple):
    """Broker -> client: the client's home store could not store these events now, and why (a full disk);
    they stay in the client's queue and its broker sends them again."""

    ids: tuple[EventId, ...]
    reason: str


class DurableDeliver(NamedTuple):
    """Broker -> client: events from the client's storage broker, numbered by storage entry.

    ``prev`` is the entry sent before the first one here in this session (-1: the
    session starts, the client filters by its last event per publisher).
    """

    prev: int
    entries: tuple[tuple[int, EventData], ...]


class DurableAck(NamedTuple):
    """Client -> broker: every entry up to ``upto`` arrived (garbage collection)."""

    upto: int


class DurableNak(NamedTuple):
    """Client -> broker: a gap after entry ``after``: send again from there (retransmission)."""

    after: int


# durability: broker <-> broker, relayed along best hops to ``dst``


class Relay(NamedTuple):
    """A durability message from broker ``src`` to broker ``dst`` (not a neighbour), passed hop by hop."""

    dst: int
    src: int
    body: Any
    left: tuple[int, ...] = ()


class SRegister(NamedTuple):
    """Attaching broker -> home store: a durable client (re)connects (with its credential)."""

    client: str
    incarnation: int
    resume: bool
    last: tuple[EventId, ...]
    previous: int
    credential: str = ""


class SWelcome(NamedTuple):
    """Store -> attaching broker: accepted (``replay`` entries pending)."""

    client: str
    incarnation: int
    replay: int


class SRefuse(NamedTuple):
    """Store -> attaching broker: the attach is refused (``kind``: a ``REFUSED_*`` code), and why."""

    client: str
    incarnation: int
    reason: str
    kind: int = REFUSED_RESUME


class SSubscribe(NamedTuple):
    """Attaching broker -> home store: add (``chain`` set) or remove (``chain`` None) a subscription."""

    client: str
    sub: int
    chain: Any


class SSubAck(NamedTuple):
    """Store -> attaching broker: the subscription change is stored."""

    client: str
    sub: int


class SPublish(NamedTuple):
    """Attaching broker -> the client's home store: a client published ``events`` (in order), the first after ``prev``."""

    client: str
    events: tuple[EventData, ...]
    prev: EventId | None


class SStored(NamedTuple):
    """Store -> attaching broker: ``event`` is stored (the client's queue may release it)."""

    client: str
    event: EventId


class SNotStored(NamedTuple):
    """Store -> attaching broker: the store cannot write now (``reason``): ``event`` (and the rest of its
    publication) was not stored; the attaching broker sends it again later."""

    client: str
    event: EventId
    reason: str


class SDeliver(NamedTuple):
    """Store -> attaching broker: entries for a client session (see :class:`DurableDeliver`)."""

    client: str
    incarnation: int
    prev: int
    entries: tuple[tuple[int, EventData], ...]


class SAck(NamedTuple):
    """Attaching broker -> store: the client acknowledged up to ``upto`` (``nak``: and wants the rest again)."""

    client: str
    incarnation: int
    upto: int
    nak: bool


class SDetach(NamedTuple):
    """Attaching broker -> store: the client's session ended (it disconnected)."""

    client: str
    incarnation: int


class SActive(NamedTuple):
    """Attaching broker <-> store: the active level of a subscription (``level`` -2 in the question)."""

    client: str
    sub: int
    level: int
