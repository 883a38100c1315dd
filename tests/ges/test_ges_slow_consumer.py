"""A subscriber that does not read is given up as a slow consumer past the broker's limit, on both event paths:
the broker's memory stays bounded, the subscriber sees a prefix of its events and then its channel closed (never a
gap), the other subscriber gets every event, and the broker says why."""

from __future__ import annotations

import time

import pytest

import multihop as mh
from multihop import ges
from multihop.ges.live import LiveSystem
from session import unique_name

LIMIT = 1 << 20  # the least a system accepts
PAYLOAD = 16384


@pytest.mark.parametrize("engine", ["native", "python"])
def test_a_subscriber_that_does_not_read_is_given_up_and_the_others_go_on(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MULTIHOP_GES_ENGINE", engine)  # read by the broker processes at start
    t = ges.Topology(levels=3)
    t.add_broker("1.1.1.1")
    with LiveSystem.up(t, unique_name("gesslow"), timeout=60, client_queue_limit=LIMIT) as system:
        reader = ges.connect(system.name, "1.1.1.1", "reader")
        stuck = ges.connect(system.name, "1.1.1.1", "stuck")
        pub = ges.connect(system.name, "1.1.1.1", "pub")
        try:
            for c in (reader, stuck):
                c.subscribe([("n", "*")])
                deadline = time.monotonic() + 20
                while c.active_level(1) < 4:
                    assert time.monotonic() < deadline, "the subscription did not become active"
                    time.sleep(0.01)
            sent: list[ges.EventId] = []
            got: list[ges.EventId] = []
            given_up: list[str] = []
            # At most 2,000 events of 16 KiB (32 MiB): the stuck client's ring (2 MiB) and the limit (1 MiB) are
            # passed long before; the reader keeps up meanwhile.
            for i in range(2000):
                sent.append(pub.publish({"n": i}, payload=bytes([i % 251]) * PAYLOAD))
                got += [e.id for e in reader.next_many(timeout=0)]
                if i % 25 == 24:
                    given_up = system.status("1.1.1.1")["given_up"]
                    if given_up:
                        break
            assert given_up, f"the client that does not read was not given up after {len(sent)} events of {PAYLOAD} bytes"
            for i in range(50):  # the broker goes on for the others
                sent.append(pub.publish({"n": 10_000 + i}))
            deadline = time.monotonic() + 30
            while len(got) < len(sent) and time.monotonic() < deadline:
                got += [e.id for e in reader.next_many(timeout=0.05)]
            assert got == sent, "the subscriber that reads got every event, once, in order"
            st = system.status("1.1.1.1")
            assert len(st["given_up"]) == 1 and "client stuck" in st["given_up"][0], st["given_up"]
            assert "slow consumer" in st["given_up"][0] and f"(limit {LIMIT})" in st["given_up"][0], st["given_up"]
            assert st["counters"]["slow_clients"] == 1 and st["client_queue_limit"] == LIMIT and st["engine"] == engine
            assert st["clients"] == 2, "the stuck client is detached, the others stay"
            # The stuck client reads what its channel held, a prefix of the events, then finds its channel closed.
            seen: list[ges.EventId] = []
            with pytest.raises(mh.ChannelClosed):
                for _ in range(10_000):  # bounded: its ring holds at most 2 MiB of events
                    seen += [e.id for e in stuck.next_many(timeout=1.0)]
            assert 0 < len(seen) < len(sent) and seen == sent[: len(seen)], "a prefix, never a gap"
            print(f"{engine}: given up after {len(sent) - 50} events of {PAYLOAD} B; it had read {len(seen)} of them: {st['given_up'][0]}")
        finally:
            for c in (reader, stuck, pub):
                try:
                    c.close()
                except mh.MultihopError:
                    pass


def test_a_client_queue_limit_below_1_mib_is_refused_before_anything_starts() -> None:
    t = ges.Topology(levels=3)
    t.add_broker("1.1.1.1")
    name = unique_name("gesslowbad")
    with pytest.raises(ValueError, match="client_queue_limit must be at least 1048576 bytes"):
        LiveSystem.up(t, name, client_queue_limit=4096)
    with pytest.raises(TypeError, match="client_queue_limit must be an int"):
        LiveSystem.up(t, name, client_queue_limit=1.5e6)  # type: ignore[arg-type]
    with pytest.raises(mh.RuntimeNotFound):
        mh.Runtime.attach(name)  # nothing was started
