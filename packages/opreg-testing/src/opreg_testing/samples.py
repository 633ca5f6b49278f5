"""Sample inputs: gathering them from an op or the caller, naming, describing and copying them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import torch

from opreg_core import SampleInput

from ._private import tree_map_only
from .errors import NoSamplesError, SampleInputsError
from .target import Target

#: What a caller may pass as ``samples``: ``SampleInput`` objects or plain argument tuples,
#: or a single ``SampleInput``. ``None`` means the op's own ``sample_inputs(device)``.
SamplesArg = Iterable[SampleInput | tuple[Any, ...]] | SampleInput | None


def as_device(device: str | torch.device | None) -> torch.device | None:
    """Validate a ``device`` argument (``"cpu"``, ``"cuda:1"``, a ``torch.device`` or None)."""
    if device is None or isinstance(device, torch.device):
        return device
    if isinstance(device, str):
        try:
            return torch.device(device)
        except RuntimeError as exc:
            raise ValueError(f"invalid device {device!r}: {exc}") from None
    raise TypeError(f"device must be a string or a torch.device, got {type(device).__name__}")


def map_tensors(fn: Callable[[torch.Tensor], Any], value: Any) -> Any:
    """Apply ``fn`` to every tensor in a nested structure of args."""
    return tree_map_only(torch.Tensor, fn, value)


def strided_copy(
    t: torch.Tensor,
    stride: tuple[int, ...] | None = None,
    offset: int | None = None,
) -> torch.Tensor:
    """A fresh leaf tensor with ``t``'s values laid out with ``stride`` and storage ``offset``.

    By default ``t``'s own strides and offset (a layout-exact copy, which ``clone`` is not for
    views with gaps or an offset). The strides must not overlap; ``requires_grad`` is kept.
    """
    strides = tuple(int(s) for s in t.stride()) if stride is None else stride
    start = int(t.storage_offset()) if offset is None else offset
    shape = tuple(int(n) for n in t.shape)
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides, strict=True)) if t.numel() else 0
    storage = torch.empty(start + span, dtype=t.dtype, device=t.device).untyped_storage()
    out = torch.empty(0, dtype=t.dtype, device=t.device)
    out.set_(storage, start, shape, strides)
    with torch.no_grad():
        out.copy_(t.detach())
    return out.requires_grad_(t.requires_grad)


def _non_overlapping(t: torch.Tensor) -> bool:
    dims = sorted((int(s), int(n)) for n, s in zip(t.shape, t.stride(), strict=True) if n > 1)
    extent = 1
    for s, n in dims:
        if s < extent:
            return False
        extent = s * n
    return True


def _copy(t: torch.Tensor) -> torch.Tensor:
    plain = type(t) is torch.Tensor and t.layout == torch.strided
    if plain and (t.storage_offset() or not t.is_contiguous()) and _non_overlapping(t):
        out = strided_copy(t)
        return out if t.is_leaf else out.requires_grad_(False)
    out = t.detach().clone()
    return out.requires_grad_(t.requires_grad) if t.is_leaf else out


def clone_sample(sample: SampleInput) -> SampleInput:
    """A copy whose tensors are fresh clones, so an op that mutates cannot spoil the sample.

    Clones keep the layout (strides, storage offset) of non-overlapping views, so a layout
    variant of a sample (:mod:`opreg_testing.layouts`) reaches the op as it was built.
    """
    return dataclasses.replace(
        sample, args=map_tensors(_copy, sample.args), kwargs=map_tensors(_copy, sample.kwargs)
    )


def _one(value: object, index: int) -> SampleInput:
    if isinstance(value, SampleInput):
        sample = value
    elif isinstance(value, tuple):
        sample = SampleInput(value)
    else:
        raise TypeError(
            f"sample {index} must be a SampleInput or a tuple of arguments, "
            f"got {type(value).__name__}"
        )
    if not isinstance(sample.args, tuple) or not isinstance(sample.kwargs, dict):
        raise TypeError(f"sample {index}: SampleInput.args must be a tuple and kwargs a dict")
    name = sample.name or f"#{index}"
    return dataclasses.replace(sample, name=name)


def _listed(samples: object) -> list[object]:
    if isinstance(samples, SampleInput):
        return [samples]
    if isinstance(samples, (str, bytes)) or not isinstance(samples, Iterable):
        raise TypeError(
            "samples must be an iterable of SampleInput (or argument tuples), got "
            f"{type(samples).__name__}"
        )
    return list(samples)


def gather_samples(
    target: Target, samples: SamplesArg, device: torch.device | None
) -> list[SampleInput]:
    """The samples to check, each named (``SampleInput.name`` or ``#index``).

    Without ``samples`` the op's ``sample_inputs(device)`` hook provides them (on ``device``,
    default CPU); given samples are moved to ``device`` when one is given.
    """
    if samples is None:
        hook = target.opreg.sample_inputs if target.opreg is not None else None
        if hook is None:
            raise NoSamplesError(
                f"{target.name} has no sample inputs: pass samples=[SampleInput(...), ...] or "
                "register the op with sample_inputs=..."
            )
        where = device or torch.device("cpu")
        try:
            produced: list[object] = list(hook(where))
        except Exception as exc:
            raise SampleInputsError(
                f"{target.name}: sample_inputs({str(where)!r}) raised {type(exc).__name__}: {exc}"
            ) from exc
        device = None  # the hook already made them on the device
    else:
        produced = _listed(samples)
    result = [_one(s, i) for i, s in enumerate(produced)]
    if not result:
        raise NoSamplesError(f"{target.name}: the list of samples is empty")
    if device is not None:
        result = [
            dataclasses.replace(
                s,
                args=map_tensors(lambda t: t.to(device), s.args),
                kwargs=map_tensors(lambda t: t.to(device), s.kwargs),
            )
            for s in result
        ]
    return result


def _describe_value(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        shape = ", ".join(map(str, value.shape))
        dtype = str(value.dtype).removeprefix("torch.")
        where = "" if value.device.type == "cpu" else f" {value.device}"
        return f"Tensor[{shape}] {dtype}{where}{_describe_layout(value)}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_describe_value(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _describe_layout(t: torch.Tensor) -> str:
    """`` strides (1, 3)`` / `` offset 1`` for a tensor that is not plain contiguous."""
    if t.layout != torch.strided:
        return ""
    text = "" if t.is_contiguous() else f" strides {tuple(t.stride())}"
    return text + (f" offset {t.storage_offset()}" if t.storage_offset() else "")


def describe_sample(sample: SampleInput, arg_names: tuple[str, ...] = ()) -> str:
    """``'#0' (x: Tensor[3, 4] float32, scale: 2.0)``: the sample's name and its arguments."""
    parts = []
    for i, value in enumerate(sample.args):
        label = f"{arg_names[i]}: " if i < len(arg_names) else ""
        parts.append(label + _describe_value(value))
    parts.extend(f"{k}={_describe_value(v)}" for k, v in sample.kwargs.items())
    return f"{sample.name!r} ({', '.join(parts)})"
