"""What each column times: the callables of a row, built from the op and one sample.

- ``kernel``: the op itself, as users call it (on a device its Triton kernel serves, the
  dispatcher runs the Triton launcher; elsewhere the op's kernel is its fallback, so
  ``kernel`` is the op against its own fallback: what the registration costs);
- ``fallback``: the PyTorch fallback, called directly;
- ``compiled``: ``torch.compile(fallback, fullgraph=True, dynamic=False)`` (Inductor);
- host: ``op``, ``launcher`` (the Triton launcher called directly, or the fallback where no
  Triton kernel serves the device) and ``library`` (a bare ``torch.library`` op, defined
  with the op's schema, whose only kernel is that same launcher);
- train: forward + backward of the op against autograd through the fallback;
- vmap: ``vmap(op)`` against a loop over the batch (stacked) and ``vmap(fallback)``.
"""

from __future__ import annotations

import importlib
import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from opreg_core import SampleInput, VmapOp

from ..interpreter import triton_info, triton_problem
from .errors import BenchError
from .inputs import tensors_in

Fn = Callable[[], Any]

_libraries: dict[tuple[str, str], Any] = {}  # (op, dispatch key) -> the bare op (kept alive)
_namespaces = itertools.count()


@dataclass
class Subject:
    """An op on one device, with what ``kernel`` and ``launcher`` mean there."""

    op: VmapOp[Any, Any]
    device: torch.device
    launcher: Callable[..., Any]
    kernel: str  #: what the ``kernel`` column runs, in words
    triton: bool  #: whether the op's Triton kernel serves the device
    compiled: Callable[..., Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.op.qualname


def _resolve(launcher: Any) -> Callable[..., Any]:
    """A Triton launcher: the function, or the one a ``"module:function"`` string names."""
    if isinstance(launcher, str):
        module, _, attr = launcher.partition(":")
        resolved: Callable[..., Any] = getattr(importlib.import_module(module), attr)
        return resolved
    return launcher  # type: ignore[no-any-return]


def subject(op: VmapOp[Any, Any], device: torch.device) -> Subject:
    """``op`` on ``device``; :class:`BenchError` where its kernel cannot run there."""
    allowed = op.device_types
    if allowed is not None and device.type not in allowed:
        raise BenchError(
            op.qualname,
            f"is registered for {', '.join(allowed)} only, not for {device.type}",
        )
    info = triton_info(op)
    if info is not None and device.type in info.requested_device_types:
        problem = triton_problem()
        if problem is not None or device.type not in info.device_types:
            why = problem or f"no Triton kernel is registered for {device.type}"
            raise BenchError(
                op.qualname,
                f"its Triton kernel cannot run on {device} here ({why}): its times would be "
                "its fallback's",
            )
        launcher = info.launcher
        text = launcher if isinstance(launcher, str) else getattr(launcher, "__qualname__", "")
        return Subject(op, device, _resolve(launcher), f"Triton kernel ({text})", True)
    where = "Triton kernel" if info is not None else "kernel of its own"
    return Subject(
        op,
        device,
        op.fallback,
        f"the op itself (no {where} on {device.type}: the op runs its fallback)",
        False,
    )


def call(fn: Callable[..., Any], sample: SampleInput) -> Fn:
    args, kwargs = sample.args, sample.kwargs
    return lambda: fn(*args, **kwargs)


def compiled_fallback(target: Subject) -> Callable[..., Any]:
    """``torch.compile`` of the fallback (Inductor, fullgraph, a specialisation per size)."""
    if target.compiled is None:
        target.compiled = torch.compile(target.op.fallback, fullgraph=True, dynamic=False)
    return target.compiled


def library_op(target: Subject) -> Callable[..., Any]:
    """A bare ``torch.library`` op with the op's schema whose kernel for the device is the
    launcher: what the registration costs over a plain ``Library.define`` + ``impl``."""
    key = "CUDA" if target.device.type == "cuda" else target.device.type.upper()
    found = _libraries.get((target.name, key))
    if found is None:
        namespace = f"opreg_bench_{os.getpid()}_{next(_namespaces)}"
        lib = torch.library.Library(namespace, "DEF")  # type: ignore[no-untyped-call]
        lib.define(f"{target.op.opname}{target.op.schema}")  # type: ignore[no-untyped-call]
        lib.impl(target.op.opname, target.launcher, key)  # type: ignore[no-untyped-call]
        found = (lib, getattr(getattr(torch.ops, namespace), target.op.opname).default)
        _libraries[(target.name, key)] = found
    packet: Callable[..., Any] = found[1]
    return packet


def detached(sample: SampleInput) -> SampleInput:
    """The sample without autograd history (``requires_grad`` off)."""

    def plain(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.detach()
        if isinstance(value, (tuple, list)):
            return type(value)(plain(v) for v in value)
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return SampleInput(plain(sample.args), plain(sample.kwargs), sample.name)


def train_step(fn: Callable[..., Any], sample: SampleInput) -> Fn | None:
    """Forward + backward of ``fn`` on the sample's floating-point tensors (None: none)."""

    def leaf(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.detach().requires_grad_(True)
        if isinstance(value, (tuple, list)):
            return type(value)(leaf(v) for v in value)
        return value

    args = leaf(sample.args)
    kwargs = {k: leaf(v) for k, v in sample.kwargs.items()}
    inputs = [t for t in tensors_in((args, kwargs)) if t.requires_grad]
    if not inputs:
        return None
    probe = [t for t in tensors_in(fn(*args, **kwargs)) if t.requires_grad]
    grads = [torch.ones_like(t) for t in probe]

    def step() -> Any:
        outputs = [t for t in tensors_in(fn(*args, **kwargs)) if t.requires_grad]
        return torch.autograd.grad(outputs, inputs, grads, allow_unused=True)

    return step


def batched(sample: SampleInput, batch: int) -> tuple[tuple[Any, ...], tuple[int | None, ...]]:
    """The sample's positional arguments stacked ``batch`` times (tensors), and in_dims."""
    args = tuple(
        torch.stack([a] * batch) if isinstance(a, torch.Tensor) else a for a in sample.args
    )
    dims = tuple(0 if isinstance(a, torch.Tensor) else None for a in sample.args)
    return args, dims


def vmapped(fn: Callable[..., Any], sample: SampleInput, batch: int) -> Fn:
    args, dims = batched(sample, batch)
    mapped = torch.vmap(fn, in_dims=dims)
    kwargs = sample.kwargs
    return lambda: mapped(*args, **kwargs)


def looped(fn: Callable[..., Any], sample: SampleInput, batch: int) -> Fn:
    """``fn`` on each entry of the batch, the outputs stacked (what vmap replaces)."""
    args, kwargs = sample.args, sample.kwargs
    entries = [
        tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args) for _ in range(batch)
    ]

    def loop() -> Any:
        outputs = [fn(*entry, **kwargs) for entry in entries]
        first = outputs[0]
        if isinstance(first, torch.Tensor):
            return torch.stack(outputs)
        if isinstance(first, (tuple, list)):
            return tuple(torch.stack(list(parts)) for parts in zip(*outputs, strict=True))
        return outputs

    return loop


__all__ = [
    "Subject",
    "batched",
    "call",
    "compiled_fallback",
    "detached",
    "library_op",
    "looped",
    "subject",
    "train_step",
    "vmapped",
]
