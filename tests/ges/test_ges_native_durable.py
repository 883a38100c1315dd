"""One behaviour, two implementations, in durable mode: the native engine against the Python event path on the
random durability scenarios (``multihop.ges.durable_scenarios``: storage brokers, durable clients that roam and
resume, broker crashes and restarts on their stores, gateways lost and healed, lossy links).

Each scenario runs twice in the simulator with the same seed, once with every broker's event routing in Python
and once native (``Simulator(durable=True, native=True)``): both must pass the end-to-end check (every
subscriber got every matching event once, in order; the stores emptied) and make the same decisions, event by
event: every copy every broker sent to every other (its routing information included), the simulator's digest
of every delivery with its time (acknowledgements that follow causes, the stores' messages) and the brokers'
event counters (parked copies included).
"""

from __future__ import annotations

import pytest

from multihop.ges.durable_scenarios import run_durable_scenario


@pytest.mark.parametrize("seed", range(40))
def test_durable_scenarios_give_the_same_decisions(seed: int) -> None:
    py = run_durable_scenario(seed, trace=True)
    nat = run_durable_scenario(seed, native=True, trace=True)
    assert py.ok, f"seed {seed}: the reference failed"
    assert nat.ok, f"seed {seed}: native: {nat.report}, left in storage {nat.left_in_storage}, in queues {nat.left_in_queues}"
    for i, (a, b) in enumerate(zip(py.copies, nat.copies, strict=False)):
        assert a == b, f"seed {seed}: copy {i} differs: python {a}, native {b}"
    assert len(py.copies) == len(nat.copies), f"seed {seed}: {len(py.copies)} copies in Python, {len(nat.copies)} native"
    assert py.stats == nat.stats, f"seed {seed}: counters differ"
    assert py.digest == nat.digest, f"seed {seed}: the traces differ"
    assert py.stats["parked"] or py.faults or seed, "the scenario exercised nothing"
