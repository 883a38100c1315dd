"""Measurements of the groups application: calibration runs, live shoot-downs, the group path.

Moved out of :mod:`multihop.groups` (issue 25: applications keep what a user of them needs; testbeds,
calibrations and peer comparisons are the benchmarks'): :mod:`.calibrate` (a runtime's message costs into a
machine model, with the agents of :mod:`.agent` running the loops of :mod:`.probe`), :mod:`.calibrate_group`
(the live group path's costs), :mod:`.live` (a flat shoot-down over UMP channels), :mod:`.shootdown`
(shoot-downs and throughput through the monitors, against Pipes), and :mod:`.command` (``multihop groups
calibrate``). The models they write are read back by :mod:`multihop.groups.stored`.
"""
