"""Benchmark suites of multihop and the trace writer they record into (see :mod:`multihop.bench.trace`).

Importing this package limits numpy's BLAS thread pool to one thread (unless
the environment already says otherwise): the suites never multiply matrices,
and OpenBLAS's idle worker threads, one per CPU, spin on the very CPUs the
benchmark pins its processes to (measured: 5 % of the samples of a 2-CPU
multi-hop stream). Spawned benchmark processes inherit the setting.
"""

import os as _os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    _os.environ.setdefault(_var, "1")
