"""Building vmap test cases from one sample: in_dims patterns, batched inputs, the expected stack.

A case is one ``in_dims`` tuple per vmap level (outermost first) and a batch size per level.
Arguments unbatched at a level are the same for all of its entries, exactly as vmap sees them.

How the entries of a batch are built (``batch_entries``). Entry 0 at every level is the
sample as given; the other entries must differ from it in the statistics a wrong batching
rule would mix (mean, sum, norm, extremes, order), while staying in the sample's domain:

- ``"variants"``: every floating or complex tensor argument is a *value variant* of the
  sample's tensor: its elements permuted, then each multiplied by a positive factor in
  ``(0.4, 0.9)`` (one scale per entry times a per-element jitter). Signs are kept (positive
  inputs stay positive), magnitudes only shrink (a sample within ``[-1, 1]`` or ``[0, 1]``
  stays there), and ``0``, ``inf`` and ``nan`` stay where the permutation puts them (a
  nonzero value never rounds to 0). Integer and boolean tensors are only permuted (an index
  tensor stays in range: a check cannot know that an integer tensor is an index).
- ``"permute"``: every tensor argument is only permuted (the same multiset of values): for a
  domain that shrinking leaves (e.g. ``x >= 1``) but where the order of elements is free.
- ``"samples"``: the entries are the author's own samples of the same *signature* (same
  shapes, dtypes and devices of the batchable arguments, equal other arguments and keyword
  arguments, different values), in the order given, starting with the sample itself and
  cycling through the group; a sample without such partners is permuted as in ``"permute"``.
- ``"auto"`` (the checks' default): ``"samples"`` for a sample that has partners of the same
  signature, ``"variants"`` otherwise. So an op author whose domain is special (values tied
  to each other, bounds away from 0, ...) takes over by giving two or more samples of the same
  shapes with valid values; or passes ``batch_entries="permute"``/``"samples"`` to the vmap
  check (``check_vmap(op, batch_entries=...)``, ``options={"vmap": {"batch_entries": ...}}``).
  The other checks that build batches (the fake check's ``vmap(op)``, the kernel check's
  batched kernel) always use ``"auto"``, so same-signature samples cover every check.

Everything is deterministic: an entry's values depend only on the sample, the argument's
position and the entry's indices.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from opreg_core import SampleInput

InDim = int | None
Level = tuple[InDim, ...]  # one in_dim per positional argument


#: The ways of building batch entries (see the module docstring).
BATCH_ENTRIES: tuple[str, ...] = ("auto", "variants", "permute", "samples")


@dataclass(frozen=True)
class Entries:
    """How the entries of a batch get their values: ``mode`` and, for ``"samples"``, the group
    of same-signature samples (the sample itself first)."""

    mode: str = "variants"
    group: tuple[SampleInput, ...] = field(default=(), compare=False)

    def __str__(self) -> str:
        if self.mode == "samples":
            return f"entries from {len(self.group)} samples of the same signature"
        return "entries permuted" if self.mode == "permute" else "entries as value variants"


@dataclass(frozen=True)
class VmapCase:
    """One way to vmap an op over a sample: in_dims per level (outermost first), batch sizes,
    and how the batch entries are built."""

    levels: tuple[Level, ...]
    sizes: tuple[int, ...]
    entries: Entries = Entries()

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
    """The tensors of a batchable argument: a tensor, or a list of tensors and Nones (a
    ``Tensor?[]``) with at least one tensor. vmap batches each tensor of a list at the list's
    in_dim and leaves its Nones alone (a None holds no tensor to batch)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if (
        isinstance(value, (list, tuple))
        and any(isinstance(v, torch.Tensor) for v in value)
        and all(v is None or isinstance(v, torch.Tensor) for v in value)
    ):
        return [v for v in value if v is not None]
    return None


def batchable(sample: SampleInput) -> dict[int, int]:
    """Positions of the arguments vmap can batch, with the smallest per-sample ndim of each."""
    found = {}
    for i, value in enumerate(sample.args):
        tensors = _tensors(value)
        if tensors is not None:
            found[i] = min(t.dim() for t in tensors)
    return found


def vmap_cases(
    sample: SampleInput, *, nested: bool = True, entries: Entries = Entries()
) -> list[VmapCase]:
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
    return [VmapCase(p, sizes[len(p)], entries) for p in unique]


def _same(a: Any, b: Any) -> bool:
    """Equal values (tensors: same metadata and elements)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and _compatible(a, b)
            and bool(torch.equal(a, b))
        )
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(_same(x, y) for x, y in zip(a, b, strict=True))
        )
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # a value whose == is not a plain truth value
        return False


def _compatible(a: Any, b: Any) -> bool:
    """Both can be entries of one batch: tensors (or lists of them) of one shape and dtype."""
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and a.device == b.device
        )
    if a is None:  # a None element of a Tensor?[]: its partner is None too
        return b is None
    return (
        isinstance(a, (list, tuple))
        and type(a) is type(b)
        and len(a) == len(b)
        and all(_compatible(x, y) for x, y in zip(a, b, strict=True))
    )


def _partner(sample: SampleInput, other: SampleInput) -> bool:
    """``other`` has ``sample``'s signature and different values in a batchable argument."""
    if len(other.args) != len(sample.args) or other.kwargs.keys() != sample.kwargs.keys():
        return False
    if not all(_same(v, other.kwargs[k]) for k, v in sample.kwargs.items()):
        return False
    positions = batchable(sample)
    for i, (a, b) in enumerate(zip(sample.args, other.args, strict=True)):
        if not (_compatible(a, b) if i in positions else _same(a, b)):
            return False
    return not all(_same(sample.args[i], other.args[i]) for i in positions)


def check_batch_entries(mode: object) -> None:
    """``ValueError`` unless ``mode`` is one of :data:`BATCH_ENTRIES`."""
    if mode not in BATCH_ENTRIES:
        raise ValueError(
            f"batch_entries must be one of {', '.join(map(repr, BATCH_ENTRIES))}, got {mode!r}"
        )


def batch_entries(sample: SampleInput, samples: Sequence[SampleInput], mode: str) -> Entries:
    """How to build ``sample``'s batch entries under ``mode`` (one of :data:`BATCH_ENTRIES`),
    given all the samples of the op (where ``"samples"`` and ``"auto"`` find partners)."""
    check_batch_entries(mode)
    if mode in ("variants", "permute"):
        return Entries(mode)
    group = (sample, *(s for s in samples if s is not sample and _partner(sample, s)))
    if len(group) > 1:
        return Entries("samples", group)
    return Entries("variants" if mode == "auto" else "permute")


#: Each non-zero batch entry of a floating tensor is scaled by a per-entry factor in
#: [_SCALE_LOW, _SCALE_HIGH) times a per-element jitter in (1 - _JITTER, 1].
_SCALE_LOW, _SCALE_HIGH, _JITTER = 0.5, 0.9, 0.2


def _shrink(value: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``value`` times positive factors below 1: signs, 0, inf and nan kept; nonzero stays."""
    scale = _SCALE_LOW + (_SCALE_HIGH - _SCALE_LOW) * torch.rand((), generator=generator)
    jitter = 1 - _JITTER * torch.rand(value.shape, generator=generator)
    wide = torch.promote_types(value.dtype, torch.float32)
    real = wide.to_real() if wide.is_complex else wide
    factor = (scale * jitter).to(device=value.device, dtype=real)
    shrunk = (value.to(wide) * factor).to(value.dtype)
    return torch.where((shrunk == 0) & (value != 0), value, shrunk)


def _variant(value: torch.Tensor, position: int, key: tuple[int, ...], mode: str) -> torch.Tensor:
    """The sample's tensor for batch entry ``key`` (``key`` all 0: as is)."""
    value = value.detach()
    if not any(key) or value.numel() == 0:
        return value.clone()
    generator = torch.Generator().manual_seed(zlib.crc32(repr((position, key)).encode()))
    if value.numel() > 1:
        perm = torch.randperm(value.numel(), generator=generator).to(value.device)
        value = value.reshape(-1)[perm].reshape(value.shape)
    if mode == "variants" and (value.is_floating_point() or value.is_complex()):
        return _shrink(value, generator)
    return value.clone()


def _entry_key(case: VmapCase, position: int, index: Sequence[int]) -> tuple[int, ...]:
    """The batch entry of an argument: its indices at the levels where it is batched."""
    return tuple(i for lvl, i in zip(case.levels, index, strict=True) if lvl[position] is not None)


def _flat(case: VmapCase, position: int, key: tuple[int, ...]) -> int:
    """The entry ``key`` as one number, counting the levels where ``position`` is batched."""
    sizes = [s for lvl, s in zip(case.levels, case.sizes, strict=True) if lvl[position] is not None]
    flat = 0
    for i, size in zip(key, sizes, strict=True):
        flat = flat * size + i
    return flat


def _copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    return [None if t is None else t.detach().clone() for t in value]


def _value_at(sample: SampleInput, case: VmapCase, position: int, index: Sequence[int]) -> Any:
    key = _entry_key(case, position, index)
    group = case.entries.group
    if case.entries.mode == "samples" and group:
        return _copy(group[_flat(case, position, key) % len(group)].args[position])
    value = sample.args[position]
    mode = case.entries.mode
    if isinstance(value, torch.Tensor):
        return _variant(value, position, key, mode)
    return [
        None if t is None else _variant(t, position * 1000 + k, key, mode)
        for k, t in enumerate(value)
    ]


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
    return [
        None if ts[0] is None else torch.stack(list(ts), dim) for ts in zip(*items, strict=True)
    ]


def _batched(case: VmapCase, p: int, value_at: Callable[[tuple[int, ...]], Any]) -> Any:
    """Argument ``p`` stacked as ``case`` says, from each entry's value ``value_at(index)``."""

    def build(depth: int, index: tuple[int, ...]) -> Any:
        if depth == case.depth:
            return value_at(index)
        dim = case.levels[depth][p]
        if dim is None:
            return build(depth + 1, (*index, 0))
        return _stack([build(depth + 1, (*index, i)) for i in range(case.sizes[depth])], dim)

    return build(0, ())


def batched_sample(sample: SampleInput, case: VmapCase) -> SampleInput:
    """The sample with every batchable argument stacked as ``case`` says (innermost first)."""
    args = list(sample.args)
    for p in batchable(sample):
        if all(lvl[p] is None for lvl in case.levels):
            continue
        args[p] = _batched(case, p, lambda index, p=p: _value_at(sample, case, p, index))  # type: ignore[misc]
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
    return expected_call(fn, sample, case)[0]


def expected_call(
    fn: Callable[..., Any], sample: SampleInput, case: VmapCase, written: Sequence[int] = ()
) -> tuple[Any, dict[int, Any]]:
    """What ``vmap`` should give: ``fn`` on every entry, stacked level by level; and for each
    position in ``written`` (arguments the op writes to, batched at every level) that argument
    after the calls, each entry's slice as the entry's call left it, stacked as
    :func:`batched_sample` stacks it (so vmap's in-place writes can be compared)."""
    results = {}
    after: dict[tuple[int, ...], tuple[Any, ...]] = {}
    for index in itertools.product(*(range(s) for s in case.sizes)):
        e = entry(sample, case, index)
        results[index] = fn(*e.args, **e.kwargs)
        after[index] = e.args
    args = {p: _batched(case, p, lambda index, p=p: after[index][p]) for p in written}  # type: ignore[misc]
    return _gather(case, results), args


def _gather(case: VmapCase, results: dict[tuple[int, ...], Any]) -> Any:
    """Per-entry outputs (by entry index) stacked level by level, outermost first."""

    def gather(depth: int, index: tuple[int, ...]) -> Any:
        if depth == case.depth:
            return results[index]
        return stack_outputs([gather(depth + 1, (*index, i)) for i in range(case.sizes[depth])])

    return gather(0, ())


def vmapped(
    fn: Callable[..., Any],
    case: VmapCase,
    kwargs: dict[str, Any],
    randomness: str,
    out_dims: Any = 0,
) -> Callable[..., Any]:
    """``vmap(vmap(...fn...))`` with the case's in_dims (``kwargs`` bound, unbatched; keyword
    arguments given to the call are passed on unbatched too, as vmap does) and ``out_dims`` at
    every level (None for an output that is a plain value: ``Target.output_batch_dims``)."""

    def call(*args: Any, **more: Any) -> Any:
        return fn(*args, **kwargs, **more)

    def run(*args: Any, **more: Any) -> Any:
        wrapped: Callable[..., Any] = call
        for dims in reversed(case.levels):
            in_dims = tuple(_in_dim(d, a) for d, a in zip(dims, args, strict=False))
            wrapped = torch.vmap(wrapped, in_dims=in_dims, out_dims=out_dims, randomness=randomness)
        return wrapped(*args, **more)

    return run


def _in_dim(dim: InDim, value: Any) -> Any:
    """``torch.vmap``'s in_dim for an argument batched at ``dim``: per element for a list with
    Nones (a ``Tensor?[]``: vmap refuses an int in_dim for a None)."""
    if dim is None or not isinstance(value, (list, tuple)) or all(v is not None for v in value):
        return dim
    return [None if v is None else dim for v in value]
