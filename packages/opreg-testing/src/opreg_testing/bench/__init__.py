"""``opreg bench`` and :func:`bench_op`: is the op fast?

For each op, on each device: device time of its kernel, its fallback and ``torch.compile`` of
its fallback on a ladder of sizes, with the bandwidth achieved against the device's copy
bandwidth and peak CUDA memory; host time per call against its launcher and a bare
``torch.library`` op; forward + backward against autograd through the fallback; ``vmap``
against a loop and against ``vmap(fallback)``. Results come as a :class:`BenchReport`
(a table, JSON, plots), and budgets (``--max-ratio kernel/compiled=1.0``) fail a CI run.

Small modules, one job each: ``ladder`` (sizes), ``inputs`` (samples at a size), ``timing``
(rounds, medians, CUDA events, L2 flush), ``calls`` (what each column runs), ``measure`` (the
rows of one op on one device), ``machine`` (the header, copy bandwidth), ``report`` (the
data and its JSON), ``table``, ``plot``, ``budgets``, ``progress`` and ``cli``. This package
and its ``report``, ``ladder``, ``budgets`` and ``cli`` modules import no torch.
"""

from __future__ import annotations

from .api import bench_op
from .errors import BenchError
from .report import BenchReport

__all__ = ["BenchError", "BenchReport", "bench_op"]
