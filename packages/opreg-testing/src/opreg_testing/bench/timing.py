"""Timing done right: warm-up, interleaved rounds, medians and spread.

Every function of a row is timed once per round, one after the other, so that a machine
whose speed drifts over seconds slows all of a round's functions alike; a ratio between two
of them is the median over rounds of the ratio within each round (:func:`paired_ratio`).
The order within a round rotates (round ``r`` starts with function ``r mod n``), so that no
function is always first: on a busy CPU the first sample of a round often runs before the
scheduler takes the core away, and a fixed order would favour one function.

- **Device time on CUDA**: CUDA events around each call, each call queued after an L2 flush
  (a buffer larger than the L2 cache written with zeros), which also gives the host a head
  start: the start event fires when the flush ends, by then the call's kernels are queued,
  so the events time the GPU's work rather than Python's.
- **Device time on CPU**: ``time.perf_counter`` around a batch of calls, the batch sized
  during warm-up to last at least :data:`CPU_MIN_SAMPLE_S` (a plain timer: the CPU has no
  events; there is no cache flush).
- **Host time**: ``time.perf_counter`` around many calls that are queued, not waited for
  (on CUDA the device is synchronised between functions, outside the timed part).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .rows import Figure

#: A CPU timing sample lasts at least this long (the batch of calls grows until it does).
CPU_MIN_SAMPLE_S = 2e-3
#: At most this many calls in one CPU or host timing sample.
MAX_CALLS = 10_000
#: Bytes written to flush the L2 cache before each CUDA call (at least twice the L2's size).
MIN_FLUSH_BYTES = 256 * 2**20

Fn = Callable[[], Any]


@dataclass(frozen=True)
class Settings:
    """How a row is timed: ``rounds`` interleaved rounds after ``warmup`` calls of each
    function; ``flush_l2`` flushes the L2 cache before each CUDA call."""

    rounds: int = 15
    warmup: int = 3
    flush_l2: bool = True
    host_rounds: int = 15

    def __post_init__(self) -> None:
        if self.rounds < 1 or self.warmup < 0 or self.host_rounds < 1:
            raise ValueError(f"rounds must be >= 1 and warmup >= 0, got {self}")


def summarize(samples: Sequence[float]) -> Figure:
    """The median of ``samples`` (seconds) with their first and third quartiles."""
    ordered = sorted(samples)
    if len(ordered) >= 4:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1, q3 = ordered[0], ordered[-1]
    return Figure(statistics.median(ordered), q1, q3, len(ordered))


def paired_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """The median over rounds of ``a[r] / b[r]``: the ratio of two functions timed in the
    same rounds (a drift of the machine's speed cancels within a round)."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True) if y > 0)


def synchronize(device: torch.device) -> None:
    """Wait for ``device``'s queued work (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Flusher:
    """Writes a buffer larger than the L2 cache (CUDA), so that each call starts cold."""

    def __init__(self, device: torch.device, enabled: bool) -> None:
        self.buffer: torch.Tensor | None = None
        if enabled and device.type == "cuda":
            l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0))
            nbytes = max(MIN_FLUSH_BYTES, 2 * l2)
            self.buffer = torch.empty(nbytes // 4, dtype=torch.int32, device=device)

    @property
    def nbytes(self) -> int:
        return 0 if self.buffer is None else self.buffer.numel() * 4

    def __call__(self) -> None:
        if self.buffer is not None:
            self.buffer.zero_()


def flush_bytes(device: torch.device) -> int:
    """How many bytes the L2 flush writes before each call on ``device`` (0: none)."""
    if device.type != "cuda":
        return 0
    l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0))
    return max(MIN_FLUSH_BYTES, 2 * l2)


def device_rounds(
    fns: Sequence[Fn],
    device: torch.device,
    settings: Settings,
    on_round: Callable[[int], None] | None = None,
) -> list[list[float]]:
    """Device time of one call of each function, in seconds, per round: ``[fn][round]``.

    Each function is first called ``settings.warmup`` times (errors surface there).
    ``on_round(r)`` is called before round ``r`` (the progress line).
    """
    for fn in fns:
        for _ in range(settings.warmup):
            fn()
    synchronize(device)
    if device.type == "cuda":
        return _cuda_rounds(fns, device, settings, on_round)
    calls = [_calls_for(fn, CPU_MIN_SAMPLE_S) for fn in fns]
    samples: list[list[float]] = [[] for _ in fns]
    for r in range(settings.rounds):
        if on_round is not None:
            on_round(r)
        for i in _rotated(len(fns), r):
            fn, n, out = fns[i], calls[i], samples[i]
            start = time.perf_counter()
            for _ in range(n):
                fn()
            out.append((time.perf_counter() - start) / n)
    return samples


def _cuda_rounds(
    fns: Sequence[Fn],
    device: torch.device,
    settings: Settings,
    on_round: Callable[[int], None] | None,
) -> list[list[float]]:
    flush = _Flusher(device, settings.flush_l2)
    events: list[list[tuple[Any, Any]]] = [[] for _ in fns]
    with torch.cuda.device(device):
        for r in range(settings.rounds):
            if on_round is not None:
                on_round(r)
            for i in _rotated(len(fns), r):
                fn, out = fns[i], events[i]
                start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                flush()
                start.record()
                fn()
                end.record()
                out.append((start, end))
            torch.cuda.synchronize(device)  # one round's events at a time: bounded queue
    return [[s.elapsed_time(e) / 1e3 for s, e in pairs] for pairs in events]


def _rotated(count: int, round_index: int) -> list[int]:
    """The order of the functions in round ``round_index``: rotated by one each round."""
    first = round_index % count if count else 0
    return [*range(first, count), *range(first)]


def _calls_for(fn: Fn, min_seconds: float) -> int:
    """How many calls of ``fn`` last at least ``min_seconds`` (CPU), doubling from one."""
    n = 1
    while n < MAX_CALLS:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - start >= min_seconds:
            break
        n *= 2
    return n


def host_rounds(
    fns: Sequence[Fn],
    device: torch.device,
    settings: Settings,
    calls: int | None = None,
    on_round: Callable[[int], None] | None = None,
) -> list[list[float]]:
    """Host time of one call of each function, in seconds, per round: ``[fn][round]``.

    Each sample is ``calls`` calls queued back to back (default: as many as last about
    :data:`CPU_MIN_SAMPLE_S` for the slowest function, at least 10); the device is
    synchronised after each function's sample, outside the timed part.
    """
    for fn in fns:
        for _ in range(max(settings.warmup, 10)):
            fn()
    synchronize(device)
    if calls is None:
        calls = max(10, min(_calls_for(fn, CPU_MIN_SAMPLE_S) for fn in fns))
        synchronize(device)
    samples: list[list[float]] = [[] for _ in fns]
    for r in range(settings.host_rounds):
        if on_round is not None:
            on_round(r)
        for i in _rotated(len(fns), r):
            fn, out = fns[i], samples[i]
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            out.append((time.perf_counter() - start) / calls)
            synchronize(device)
    return samples


def peak_bytes(fn: Fn, device: torch.device) -> int | None:
    """Peak CUDA memory one call of ``fn`` allocates beyond what was allocated before it;
    None off CUDA (not measured there)."""
    if device.type != "cuda":
        return None
    synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    synchronize(device)
    return max(0, torch.cuda.max_memory_allocated(device) - before)


__all__ = [
    "CPU_MIN_SAMPLE_S",
    "Settings",
    "device_rounds",
    "flush_bytes",
    "host_rounds",
    "paired_ratio",
    "peak_bytes",
    "summarize",
    "synchronize",
]
