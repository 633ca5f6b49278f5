"""Measuring one op on one device: each section's rows along the size ladder.

At each size of the ladder the device, train and vmap rows are timed; the host row once, on
tiny inputs. A column that cannot run (``torch.compile`` fails on the fallback, the fallback
has no vmap rule...) is reported missing with the reason; the ladder stops at the first size
whose inputs cannot be made or at which the op itself fails (out of memory, typically), and
says so; before making a size's inputs it stops when they would clearly not fit (four times
the previous size's bytes, scaled, beyond the memory free on the device).
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from opreg_core import SampleInput, VmapOp

from .calls import (
    Fn,
    Subject,
    call,
    compiled_fallback,
    detached,
    library_op,
    looped,
    subject,
    train_step,
    vmapped,
)
from .errors import BenchError
from .inputs import elements, free_bytes, io_bytes, is_out_of_memory, sample_at
from .ladder import HOST_SIZE, format_bytes, size_label
from .rows import RATIOS, SECTIONS, OpResult, Row
from .timing import Settings, device_rounds, host_rounds, paired_ratio, peak_bytes, summarize

#: Called with a line saying what is being timed now (the live progress line).
Status = Callable[[str], None]


@dataclass(frozen=True)
class Plan:
    """What to measure: the size ladder, the timing settings, the sections, whether the
    fallback is compiled, the vmap batch and which sample to scale (None: the first)."""

    sizes: tuple[int, ...]
    settings: Settings = field(default_factory=Settings)
    sections: tuple[str, ...] = tuple(SECTIONS)
    compile: bool = True
    vmap_batch: int = 8
    sample: str | None = None


class _Stop(Exception):
    """The ladder stops at this size (the message says why)."""


def _error(exc: BaseException) -> str:
    """``Type: first line`` of an error, cut after its third sentence (torch's out-of-memory
    message goes on about allocator settings)."""
    lines = str(exc).strip().splitlines()
    if not lines:
        return type(exc).__name__
    sentences = lines[0].split(". ")
    text = ". ".join(sentences[:3]) + ("." if len(sentences) > 3 else "")
    return f"{type(exc).__name__}: {text}"


def _probe(fn: Fn) -> tuple[Any, str | None]:
    """Run ``fn`` once: its output, or None and the error in one line (out of memory is
    re-raised: the ladder stops)."""
    try:
        return fn(), None
    except Exception as exc:
        if is_out_of_memory(exc):
            raise
        return None, _error(exc)


def _timed_row(
    row: Row,
    fns: dict[str, Fn | None],
    target: Subject,
    settings: Settings,
    status: Status,
    what: str,
    host: bool = False,
) -> Row:
    """Time the runnable columns of ``row`` in interleaved rounds; fill figures and ratios."""
    ready = {name: fn for name, fn in fns.items() if fn is not None}
    for name in fns:
        if fns[name] is None:
            row.figures[name] = None
    if not ready:
        return row
    names = list(ready)
    rounds = settings.host_rounds if host else settings.rounds

    def on_round(r: int) -> None:
        status(f"{what}: round {r + 1}/{rounds}")

    timer = host_rounds if host else device_rounds
    samples = timer([ready[n] for n in names], target.device, settings, on_round=on_round)
    by_name = dict(zip(names, samples, strict=True))
    for name in names:
        row.figures[name] = summarize(by_name[name])
    for ratio, (section, top, bottom) in RATIOS.items():
        if section == row.section and top in by_name and bottom in by_name:
            row.ratios[ratio] = paired_ratio(by_name[top], by_name[bottom])
    return row


def _columns(
    target: Subject, row: Row, candidates: dict[str, Fn | None], reasons: dict[str, str]
) -> dict[str, Fn | None]:
    """Probe each candidate once: those that raise are missing, with the reason."""
    ready: dict[str, Fn | None] = {}
    for name, fn in candidates.items():
        if fn is None:
            ready[name] = None
            row.missing[name] = reasons.get(name, "not applicable")
            continue
        _, problem = _probe(fn)
        if problem is not None:
            ready[name] = None
            row.missing[name] = problem
        else:
            ready[name] = fn
    return ready


def _device_row(target: Subject, plan: Plan, sample: SampleInput, size: int, status: Status) -> Row:
    label = size_label(size)
    row = Row("device", size, label, shapes=_shapes(sample))
    kernel = call(target.op, sample)
    try:
        output = kernel()
    except Exception as exc:
        if is_out_of_memory(exc):
            raise
        raise _Stop(f"the op raised at size {label}: {_error(exc)}") from exc
    row.bytes = io_bytes(sample, output)
    del output
    candidates: dict[str, Fn | None] = {
        "kernel": kernel,
        "fallback": call(target.op.fallback, sample),
    }
    reasons = {}
    if plan.compile and "device" in plan.sections:
        status(f"{target.name} [{target.device}] {label}: compiling the fallback")
        candidates["compiled"] = call(compiled_fallback(target), sample)
    else:
        candidates["compiled"] = None
        reasons["compiled"] = "off (--no-compile)"
    if "device" not in plan.sections:
        return row  # only its bytes: the ladder's memory estimate
    fns = _columns(target, row, candidates, reasons)
    _timed_row(
        row, fns, target, plan.settings, status, f"{target.name} [{target.device}] device {label}"
    )
    for name, fn in fns.items():
        if fn is not None:
            peak = peak_bytes(fn, target.device)
            if peak is not None:
                row.peak_bytes[name] = peak
    return row


def _train_row(
    target: Subject, plan: Plan, sample: SampleInput, size: int, status: Status
) -> Row | None:
    if not target.op.has_backward:
        return None
    label = size_label(size)
    row = Row("train", size, label, shapes=_shapes(sample))
    try:
        op_step = train_step(target.op, sample)
    except Exception as exc:
        if is_out_of_memory(exc):
            raise
        row.missing["op"] = _error(exc)
        op_step = None
    if op_step is None and "op" not in row.missing:
        return None  # no floating-point input: nothing to differentiate
    try:
        fallback_step = train_step(target.op.fallback, sample)
        reason = "" if fallback_step is not None else "no floating-point input"
    except Exception as exc:
        if is_out_of_memory(exc):
            raise
        fallback_step, reason = None, _error(exc)
    fns = _columns(
        target,
        row,
        {"op": op_step, "autograd": fallback_step},
        {"autograd": reason, "op": row.missing.get("op", "")},
    )
    what = f"{target.name} [{target.device}] fwd+bwd {label}"
    return _timed_row(row, fns, target, plan.settings, status, what)


def _vmap_row(target: Subject, plan: Plan, size: int, status: Status) -> Row:
    batch = plan.vmap_batch
    entry = detached(sample_at(target.op, target.device, max(1, size // batch), plan.sample))
    total = batch * elements(entry)
    label = f"{batch} x {size_label(elements(entry))}"
    row = Row("vmap", total, label, shapes=f"{batch} x {_shapes(entry)}")
    candidates: dict[str, Fn | None] = {
        "vmap(op)": vmapped(target.op, entry, batch),
        "loop": looped(target.op, entry, batch),
        "vmap(fallback)": vmapped(target.op.fallback, entry, batch),
    }
    fns = _columns(target, row, candidates, {})
    what = f"{target.name} [{target.device}] vmap {label}"
    return _timed_row(row, fns, target, plan.settings, status, what)


def _host_row(target: Subject, plan: Plan, status: Status) -> Row:
    sample = detached(sample_at(target.op, target.device, HOST_SIZE, plan.sample))
    row = Row("host", elements(sample), size_label(elements(sample)), shapes=_shapes(sample))
    reasons = {}
    try:
        library: Fn | None = call(library_op(target), sample)
    except Exception as exc:
        library, reasons["library"] = None, f"could not define it: {_error(exc)}"
    candidates = {
        "op": call(target.op, sample),
        "launcher": call(target.launcher, sample),
        "library": library,
    }
    fns = _columns(target, row, candidates, reasons)
    what = f"{target.name} [{target.device}] host time"
    return _timed_row(row, fns, target, plan.settings, status, what, host=True)


def _shapes(sample: SampleInput) -> str:
    from .inputs import tensors_in

    parts = []
    for t in tensors_in((sample.args, sample.kwargs)):
        dtype = str(t.dtype).removeprefix("torch.")
        parts.append(f"{'x'.join(map(str, t.shape)) or 'scalar'} {dtype}")
    return ", ".join(parts)


def _fits(previous: tuple[int, int] | None, size: int, device: torch.device) -> str | None:
    """Why ``size`` would not fit, from the previous size's bytes, or None."""
    if previous is None:
        return None
    last_size, last_bytes = previous
    need = 4 * last_bytes * size // max(last_size, 1)
    free = free_bytes(device)
    if free is not None and need > free:
        return (
            f"size {size_label(size)} would need about {format_bytes(need)} (4 x its inputs "
            f"and outputs), {format_bytes(free)} free on {device}"
        )
    return None


def _release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def measure(
    op: VmapOp[Any, Any],
    device: torch.device,
    plan: Plan,
    status: Status | None = None,
    name: str | None = None,
) -> OpResult:
    """Every section of ``plan`` for ``op`` on ``device``; ``name`` is the device's name in
    the result. :class:`BenchError` when the op cannot be benchmarked there at all."""
    with warnings.catch_warnings():  # torch's deprecations about itself (Inductor's import)
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch(\.|$)")
        return _measure(op, device, plan, status, name)


def _measure(
    op: VmapOp[Any, Any],
    device: torch.device,
    plan: Plan,
    status: Status | None,
    name: str | None,
) -> OpResult:
    say: Status = status or (lambda text: None)
    target = subject(op, device)
    result = OpResult(op.qualname, name or str(device), target.kernel)
    if not target.triton:
        result.notes.append(f"kernel = {target.kernel}; launcher = the fallback")
    sections = set(plan.sections)
    previous: tuple[int, int] | None = None
    for index, size in enumerate(plan.sizes):
        label = size_label(size)
        try:
            reason = _fits(previous, size, device)
            if reason is not None:
                raise _Stop(reason)
            try:
                sample = detached(sample_at(op, device, size, plan.sample))
            except BenchError:
                raise
            except Exception as exc:
                raise _Stop(f"its inputs at size {label} could not be made: {_error(exc)}") from exc
            row = _device_row(target, plan, sample, size, say)
            if "device" in sections:
                result.rows.append(row)
            previous = (size, row.bytes or 0)
            if "train" in sections:
                train = _train_row(target, plan, sample, size, say)
                if train is not None:
                    result.rows.append(train)
            del sample
            if "vmap" in sections:
                result.rows.append(_vmap_row(target, plan, size, say))
        except (_Stop, torch.OutOfMemoryError, MemoryError, RuntimeError) as exc:
            if not isinstance(exc, _Stop) and not is_out_of_memory(exc):
                raise
            text = (
                str(exc)
                if isinstance(exc, _Stop)
                else f"out of memory at size {label}: {_error(exc)}"
            )
            if index == 0:
                raise BenchError(
                    op.qualname, f"the size ladder does not fit from its first size: {text}"
                ) from None
            done = ", ".join(size_label(s) for s in plan.sizes[:index])
            result.stopped = f"stopped at size {label}: {text} (ran {done})"
            break
        finally:
            _release(device)
    if "host" in sections:
        result.rows.append(_host_row(target, plan, say))
    order = list(SECTIONS)
    result.rows.sort(key=lambda r: order.index(r.section))
    return result


__all__ = ["Plan", "Status", "measure"]
