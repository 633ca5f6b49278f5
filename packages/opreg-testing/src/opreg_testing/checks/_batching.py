"""Building vmap test cases from one sample: in_dims patterns, batched inputs, the expected stack.

A case is one ``in_dims`` tuple per vmap level (outermost first) and a batch size per level.
Every per-sample argument of a batch is a *variant* of the sample's tensor: the element
order is permuted (deterministically), so values stay in the sample's domain (indices stay
valid, positive inputs stay positive) while the batch entries differ, which is what exposes a
batching rule that mixes them up. Arguments unbatched at a level are the same for all of its
entries, exactly as vmap sees them.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from opreg_core import SampleInput

InDim = int | None
Level = tuple[InDim, ...]  # one in_dim per positional argument


@dataclass(frozen=True)
class VmapCase:
    """One way to vmap an op over a sample: in_dims per level (outermost first), batch sizes."""

    levels: tuple[Level, ...]
    sizes: tuple[int, ...]

    @property
    def depth(self) -> int:
        return len(self.levels)

    def __str__(self) -> str:
        if self.depth == 1:
            return f"vmap in_dims={_dims(self.levels[0])}, batch size {self.sizes[0]}"
        inner = " / ".join(
            f"in_dims={_dims(d)} (size {s})" for d, s in zip(self.levels, self.sizes, strict=True)
        )
        return f"{self.depth} nested vmaps, outermost first: {inner}"


def _dims(level: Level) -> str:
    return "(" + ", ".join(map(str, level)) + ("," if len(level) == 1 else "") + ")"


def _tensors(value: Any) -> list[torch.Tensor] | None:
    """The tensors of a batchable argument (a tensor, or a non-empty list of only tensors)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(v, torch.Tensor) for v in value)
    ):
        return list(value)
    return None


def batchable(sample: SampleInput) -> dict[int, int]:
    """Positions of the arguments vmap can batch, with the smallest per-sample ndim of each."""
    found = {}
    for i, value in enumerate(sample.args):
        tensors = _tensors(value)
        if tensors is not None:
            found[i] = min(t.dim() for t in tensors)
    return found


def vmap_cases(sample: SampleInput, *, nested: bool = True) -> list[VmapCase]:
    """The in_dims patterns checked for a sample: 0, -1, a middle dim, None, mixed; nested 2-3."""
    positions = batchable(sample)
    if not positions:
        return []
    n = len(sample.args)
    order = sorted(positions)

    def level(dims: dict[int, InDim]) -> Level:
        return tuple(dims.get(i) for i in range(n))

    zero = level(dict.fromkeys(order, 0))
    last = level(dict.fromkeys(order, -1))
    middle = level({p: min(1, ndim) for p, ndim in positions.items()})
    patterns: list[tuple[Level, ...]] = [(zero,), (last,), (middle,)]
    if len(order) >= 2:
        for p in order[:3]:
            patterns.append((level({q: None if q == p else 0 for q in order}),))
        patterns.append((level({q: 0 if k % 2 == 0 else -1 for k, q in enumerate(order)}),))
    if nested:
        patterns += [(zero, zero), (last, middle), (zero, last, middle)]
        if len(order) >= 2:
            patterns.append((level({q: None if q == order[0] else 0 for q in order}), last))
    sizes = {1: (3,), 2: (2, 3), 3: (2, 3, 2)}
    unique = list(dict.fromkeys(patterns))
    return [VmapCase(p, sizes[len(p)]) for p in unique]


def _variant(value: torch.Tensor, position: int, key: tuple[int, ...]) -> torch.Tensor:
    """The sample's tensor for batch entry ``key``: its elements permuted (``key`` all 0: as is)."""
    if not any(key) or value.numel() <= 1:
        return value.detach().clone()
    generator = torch.Generator().manual_seed(zlib.crc32(repr((position, key)).encode()))
    perm = torch.randperm(value.numel(), generator=generator).to(value.device)
    return value.detach().reshape(-1)[perm].reshape(value.shape).clone()


def _entry_key(case: VmapCase, position: int, index: Sequence[int]) -> tuple[int, ...]:
    """The batch entry of an argument: its indices at the levels where it is batched."""
    return tuple(i for lvl, i in zip(case.levels, index, strict=True) if lvl[position] is not None)


def _value_at(sample: SampleInput, case: VmapCase, position: int, index: Sequence[int]) -> Any:
    value = sample.args[position]
    key = _entry_key(case, position, index)
    if isinstance(value, torch.Tensor):
        return _variant(value, position, key)
    return [_variant(t, position * 1000 + k, key) for k, t in enumerate(value)]


def entry(sample: SampleInput, case: VmapCase, index: Sequence[int]) -> SampleInput:
    """The per-sample arguments of the batch entry at ``index`` (one index per level)."""
    args = list(sample.args)
    for p in batchable(sample):
        if any(lvl[p] is not None for lvl in case.levels):
            args[p] = _value_at(sample, case, p, index)
    return SampleInput(tuple(args), sample.kwargs, sample.name)


def _stack(items: list[Any], dim: int) -> Any:
    if isinstance(items[0], torch.Tensor):
        return torch.stack(items, dim)
    return [torch.stack(list(ts), dim) for ts in zip(*items, strict=True)]


def batched_sample(sample: SampleInput, case: VmapCase) -> SampleInput:
    """The sample with every batchable argument stacked as ``case`` says (innermost first)."""
    args = list(sample.args)
    for p in batchable(sample):
        if all(lvl[p] is None for lvl in case.levels):
            continue

        def build(depth: int, index: tuple[int, ...], p: int = p) -> Any:
            if depth == case.depth:
                return _value_at(sample, case, p, index)
            dim = case.levels[depth][p]
            if dim is None:
                return build(depth + 1, (*index, 0))
            return _stack([build(depth + 1, (*index, i)) for i in range(case.sizes[depth])], dim)

        args[p] = build(0, ())
    return SampleInput(tuple(args), sample.kwargs, sample.name)


def stack_outputs(outputs: list[Any]) -> Any:
    """Stack per-entry outputs along a new dim 0 (tensors, sequences of tensors, constants)."""
    first = outputs[0]
    if isinstance(first, torch.Tensor):
        return torch.stack(outputs)
    if isinstance(first, (tuple, list)):
        stacked = [stack_outputs([o[i] for o in outputs]) for i in range(len(first))]
        return tuple(stacked) if isinstance(first, tuple) else stacked
    if any(o != first for o in outputs[1:]):
        raise ValueError(f"a non-tensor output differs between batch entries: {outputs!r}")
    return first


def expected_output(fn: Callable[..., Any], sample: SampleInput, case: VmapCase) -> Any:
    """What ``vmap`` should give: ``fn`` on every entry, stacked level by level."""
    results = {}
    for index in itertools.product(*(range(s) for s in case.sizes)):
        e = entry(sample, case, index)
        results[index] = fn(*e.args, **e.kwargs)

    def gather(depth: int, index: tuple[int, ...]) -> Any:
        if depth == case.depth:
            return results[index]
        return stack_outputs([gather(depth + 1, (*index, i)) for i in range(case.sizes[depth])])

    return gather(0, ())


def vmapped(
    fn: Callable[..., Any], case: VmapCase, kwargs: dict[str, Any], randomness: str
) -> Callable[..., Any]:
    """``vmap(vmap(...fn...))`` with the case's in_dims (``kwargs`` bound, unbatched)."""

    def call(*args: Any) -> Any:
        return fn(*args, **kwargs)

    wrapped: Callable[..., Any] = call
    for dims in reversed(case.levels):
        wrapped = torch.vmap(wrapped, in_dims=dims, randomness=randomness)
    return wrapped
