"""Benchmark suites of multihop and the trace writer they record into (see :mod:`multihop.bench.trace`)."""
