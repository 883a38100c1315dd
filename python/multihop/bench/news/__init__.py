"""Measurements of the news application: live load and the benchmarks of ``benches/bench_dispatch.py``.

Moved out of :mod:`multihop.news` (issue 25: workloads and measurements are the benchmarks'):
:mod:`.workload` (sink hosts, a paced source, and a plain broker to compare with) and :mod:`.measure` (the
dispatch benchmarks as functions; ``multihop bench dispatch`` traces them).
"""
