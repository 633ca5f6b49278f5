"""The inputs of a row: the op's sample at a size of the ladder, and the bytes a call moves.

A registration names its inputs at a size by giving ``sample_inputs`` a ``size`` parameter:
``sample_inputs(device, size=n)`` then yields samples whose largest tensor has about ``n``
elements (the first sample, or the one named by ``sample=``, is used). Without one, the op's
own samples are scaled up: the first sample with a non-empty tensor of at least one dimension
(or the one named) has its largest tensor, and every tensor of the same rank and leading
size, repeated along the leading dimension until the largest has about ``n`` elements
(values repeat, so indices stay valid).
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import torch

from opreg_core import SampleInput, VmapOp

from .errors import BenchError


def takes_size(hook: Any) -> bool:
    """Whether a ``sample_inputs`` hook accepts ``size=`` (a parameter of that name, or
    ``**kwargs``)."""
    try:
        parameters = inspect.signature(hook).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        (p.name == "size" and p.kind is not p.POSITIONAL_ONLY) or p.kind is p.VAR_KEYWORD
        for p in parameters
    )


def tensors_in(value: Any) -> list[torch.Tensor]:
    """The tensors of an argument structure (tuples, lists, dicts), in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in tensors_in(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in tensors_in(item)]
    return []


def io_bytes(sample: SampleInput, output: Any) -> int:
    """Bytes one call moves at least: every input tensor read once, every output written."""
    return sum(
        t.numel() * t.element_size()
        for t in (*tensors_in(sample.args), *tensors_in(sample.kwargs), *tensors_in(output))
    )


def elements(sample: SampleInput) -> int:
    """Elements of the sample's largest tensor."""
    return max((t.numel() for t in tensors_in((sample.args, sample.kwargs))), default=0)


def _pick(
    op: VmapOp[Any, Any], samples: Iterable[Any], name: str | None, scalable: bool
) -> SampleInput:
    listed = [s if isinstance(s, SampleInput) else SampleInput(tuple(s)) for s in samples]
    if name is not None:
        for sample in listed:
            if sample.name == name:
                return sample
        names = ", ".join(repr(s.name) for s in listed if s.name) or "none named"
        raise BenchError(op.qualname, f"has no sample named {name!r} (its samples: {names})")
    for sample in listed:  # the first whose tensors are all non-empty (and not all 0-d)
        tensors = tensors_in((sample.args, sample.kwargs))
        if not tensors or any(t.numel() == 0 for t in tensors):
            continue
        if not scalable or max(tensors, key=torch.numel).dim() > 0:
            return sample
    raise BenchError(
        op.qualname,
        "none of its samples has a non-empty tensor to scale: give sample_inputs a size "
        "parameter (sample_inputs(device, size=n) yields inputs of about n elements)",
    )


def base_sample(op: VmapOp[Any, Any], device: torch.device, name: str | None = None) -> SampleInput:
    """The sample that :func:`sample_at` scales (the op's hook without ``size``)."""
    hook = op.sample_inputs
    if hook is None:
        raise BenchError(
            op.qualname,
            "has no sample_inputs to benchmark it with: register it with sample_inputs=... "
            "(a size parameter, sample_inputs(device, size=n), names the inputs of each size)",
        )
    try:
        produced = list(hook(device))
    except Exception as exc:
        raise BenchError(
            op.qualname, f"sample_inputs({str(device)!r}) raised {type(exc).__name__}: {exc}"
        ) from exc
    return _pick(op, produced, name, scalable=True)


def sample_at(
    op: VmapOp[Any, Any], device: torch.device, size: int, name: str | None = None
) -> SampleInput:
    """The op's inputs at ``size`` elements on ``device`` (see the module docstring).

    Raises what the hook or the allocation raises (the ladder stops there), and
    :class:`BenchError` for an op without samples or a sample that cannot be scaled.
    """
    hook: Any = op.sample_inputs
    if hook is not None and takes_size(hook):
        return _pick(op, list(hook(device, size=size)), name, scalable=False)
    return scale(op, base_sample(op, device, name), size)


def scale(op: VmapOp[Any, Any], sample: SampleInput, size: int) -> SampleInput:
    """``sample`` with its largest tensor (and those like it) repeated along dim 0 to about
    ``size`` elements."""
    largest = max(tensors_in((sample.args, sample.kwargs)), key=torch.numel)
    if largest.dim() == 0:
        raise BenchError(
            op.qualname,
            f"sample {sample.name!r} has only 0-d tensors, which cannot be scaled: give "
            "sample_inputs a size parameter",
        )
    rank, lead = largest.dim(), largest.shape[0]
    per_row = max(1, largest.numel() // max(lead, 1))
    rows = max(1, math.ceil(size / per_row))

    def grow(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if value.dim() != rank or value.shape[0] != lead:
                return value
            times = math.ceil(rows / lead)
            grown = value.detach().repeat(times, *([1] * (rank - 1)))[:rows].contiguous()
            return grown.requires_grad_(value.requires_grad)
        if isinstance(value, tuple):
            return tuple(grow(v) for v in value)
        if isinstance(value, list):
            return [grow(v) for v in value]
        if isinstance(value, dict):
            return {k: grow(v) for k, v in value.items()}
        return value

    return replace(sample, args=grow(sample.args), kwargs=grow(sample.kwargs))


def free_bytes(device: torch.device) -> int | None:
    """Memory free on ``device`` now (CUDA: the driver's count; CPU: available physical
    pages, on systems that report them), or None when unknown."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type == "cpu":
        try:
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    return None


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says an allocation failed (CUDA or CPU)."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        "out of memory" in text or "not enough memory" in text or "DefaultCPUAllocator" in text
    )


__all__ = [
    "base_sample",
    "elements",
    "free_bytes",
    "io_bytes",
    "is_out_of_memory",
    "sample_at",
    "scale",
    "takes_size",
    "tensors_in",
]
