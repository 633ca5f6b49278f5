"""vmap support: Python kernels on the ``FuncTorchBatched`` key of an op and of its batched op.

Every opreg op with a ``vmap_fn`` gets ONE companion operator, the *batched op*, with the op's
signature and the meaning "every tensor argument has a leading batch dimension". Its
implementation is the user's ``vmap_fn``.

- The op's rule (innermost vmap level) unwraps the level's batch dims, moves them to dim 0
  (arguments unbatched at that level are expanded, without a copy), calls the batched op and
  re-wraps the outputs at ``vmap_out_dims``.
- The batched op's rule (each further level) moves the level's batch dim to 0, flattens it
  into the existing leading batch dim, calls the batched op again, and unflattens the outputs.

So any nesting depth runs the user's ``vmap_fn`` once, on the product of the batch sizes, and
PyTorch's per-sample fallback never runs (unless ``max_vmap_level`` caps the depth: levels past
the cap are computed by a per-sample loop, as PyTorch's fallback would).

Calls made while ``FuncTorchBatched`` is excluded go down to the next vmap level (functorch's
dynamic-layer keys pop the level), the same lowering that ``torch.library.register_vmap`` uses.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from ._private import (
    CVmapInterpreterPtr,
    RandomnessType,
    call_one_level_down,
    current_vmap_level,
    peek_interpreter_stack,
)
from ._private import add_batch_dim as _add_batch_dim
from ._private import unwrap_batched as _unwrap_batched

_RANDOMNESS = {
    RandomnessType.Error: "error",
    RandomnessType.Same: "same",
    RandomnessType.Different: "different",
}

InDim = int | None | list[int | None]
OutDims = tuple[int | None, ...]


class VmapInfo(NamedTuple):
    """What a ``vmap_wrap_inputs`` function learns about the vmap level being handled."""

    batch_size: int
    randomness: str


@dataclass
class VmapStats:
    """How often each batching path ran for one op (the testing tools read these)."""

    fast: int = 0  #: calls of the op's rule that ran ``vmap_fn`` (innermost level)
    nested: int = 0  #: further levels folded into the same ``vmap_fn`` call
    loop: int = 0  #: levels past ``max_vmap_level``, computed by a per-sample loop

    def reset(self) -> None:
        self.fast = self.nested = self.loop = 0


def _unwrap(value: Any, level: int) -> tuple[Any, InDim]:
    """Strip the batch dim of ``level`` from a tensor or a list of tensors."""
    if isinstance(value, torch.Tensor):
        return _unwrap_batched(value, level)
    if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
        pairs = [
            _unwrap_batched(v, level) if isinstance(v, torch.Tensor) else (v, None) for v in value
        ]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    return value, None


def _front(t: torch.Tensor, dim: int | None, batch: int) -> torch.Tensor:
    if dim is None:
        return t.expand(batch, *t.shape)
    return t if dim == 0 else t.movedim(dim, 0)


def _front_value(value: Any, dim: InDim, batch: int) -> Any:
    if isinstance(value, torch.Tensor):
        assert not isinstance(dim, list)
        return _front(value, dim, batch)
    if isinstance(dim, list):
        return [
            _front(v, d, batch) if isinstance(v, torch.Tensor) else v
            for v, d in zip(value, dim, strict=True)
        ]
    return value


def default_wrap_inputs(info: VmapInfo, in_dims: Sequence[InDim], *args: Any) -> tuple[Any, ...]:
    """Move every batch dim to position 0 and expand unbatched tensors to the batch (no copy)."""
    return tuple(_front_value(a, d, info.batch_size) for a, d in zip(args, in_dims, strict=True))


def _flatten_level(value: Any, dim: InDim, batch: int) -> tuple[Any, int | None]:
    """Fold this level's batch dim into the leading batch dim of a batched-op argument."""
    if isinstance(value, torch.Tensor):
        assert not isinstance(dim, list)
        t = _front(value, dim, batch)
        return t.flatten(0, 1), t.shape[1]
    if isinstance(dim, list):
        inner = None
        out = []
        for v, d in zip(value, dim, strict=True):
            if isinstance(v, torch.Tensor):
                t = _front(v, d, batch)
                inner = t.shape[1]
                out.append(t.flatten(0, 1))
            else:
                out.append(v)
        return out, inner
    return value, None


def _select(value: Any, dim: InDim, index: int) -> Any:
    if isinstance(value, torch.Tensor):
        return value if dim is None else value.select(dim, index)  # type: ignore[arg-type]
    if isinstance(dim, list):
        return [v if d is None else v.select(d, index) for v, d in zip(value, dim, strict=True)]
    return value


def _unwrap_all(
    args: tuple[Any, ...], kwargs: dict[str, Any], level: int
) -> tuple[list[Any], list[InDim], dict[str, tuple[Any, InDim]], int]:
    """Unwrap every argument at ``level``; the batch size is 0 when nothing is batched there."""
    values: list[Any] = []
    dims: list[InDim] = []
    batch = 0
    for a in args:
        if isinstance(a, torch.Tensor):
            t, d = _unwrap_batched(a, level)
            if d is not None and not batch:
                batch = t.shape[d]
            values.append(t)
            dims.append(d)
        else:
            v, dim = _unwrap(a, level)
            batch = batch or _batch_size(v, dim)
            values.append(v)
            dims.append(dim)
    kw: dict[str, tuple[Any, InDim]] = {}
    for key, a in kwargs.items():
        v, dim = kw[key] = _unwrap(a, level)
        batch = batch or _batch_size(v, dim)
    return values, dims, kw, batch


def _batch_size(value: Any, dim: InDim) -> int:
    """Size of the mapped dim of an unwrapped value (0 if it is not batched)."""
    if isinstance(dim, list):
        return next((t.shape[e] for t, e in zip(value, dim, strict=True) if e is not None), 0)
    return 0 if dim is None else int(value.shape[dim])


class BatchingRules:
    """The two ``FuncTorchBatched`` kernels of one op, sharing its settings and stats."""

    def __init__(
        self,
        qualname: str,
        op: Callable[..., Any],
        batched_op: Callable[..., Any],
        out_dims: OutDims,
        wrap_inputs: Callable[..., Any] | None = None,
        max_level: int | None = None,
    ) -> None:
        self.qualname = qualname
        self.op = op
        self.batched_op = batched_op
        self.out_dims = out_dims
        self.wrap_inputs = wrap_inputs
        self.max_level = max_level
        self.stats = VmapStats()
        self.single_tensor = len(out_dims) == 1
        self._depth = threading.local()

    # -- outputs ------------------------------------------------------------------------------
    def _check_outputs(self, out: Any, expected: int) -> tuple[Any, ...]:
        n = len(self.out_dims)
        if n == 0:
            return ()
        outs = (out,) if n == 1 else out
        if n != 1 and (not isinstance(outs, (tuple, list)) or len(outs) != n):
            got = len(outs) if isinstance(outs, (tuple, list)) else 1
            raise RuntimeError(
                f"opreg: {self.qualname}: vmap_fn returned {got} outputs, the op declares {n}"
            )
        for i, (o, d) in enumerate(zip(outs, self.out_dims, strict=True)):
            if d is None:
                continue
            for t in o if isinstance(o, (list, tuple)) else (o,):
                if not isinstance(t, torch.Tensor):
                    raise RuntimeError(
                        f"opreg: {self.qualname}: output {i} of vmap_fn is a "
                        f"{type(t).__name__}, but vmap_out_dims gives it batch dim {d}; "
                        "use None for non-tensor outputs"
                    )
                if not -t.dim() <= d < t.dim() or t.shape[d] != expected:
                    size = t.shape[d] if -t.dim() <= d < t.dim() else "no such dim"
                    raise RuntimeError(
                        f"opreg: {self.qualname}: output {i} of vmap_fn has shape "
                        f"{tuple(t.shape)}: its batch dim {d} (vmap_out_dims) should have size "
                        f"{expected} (the batch size), got {size}"
                    )
        return tuple(outs)

    def _rewrap(
        self, outs: tuple[Any, ...], fn: Callable[[torch.Tensor, int], torch.Tensor]
    ) -> Any:
        if not self.out_dims:
            return None
        result = []
        for o, d in zip(outs, self.out_dims, strict=True):
            if d is None:
                result.append(o)
            elif isinstance(o, torch.Tensor):
                result.append(fn(o, d % o.dim()))
            else:
                result.append([fn(t, d % t.dim()) for t in o])
        return result[0] if len(result) == 1 else tuple(result)

    # -- depth cap ------------------------------------------------------------------------------
    def _enter(self, depth: int) -> int:
        previous: int = getattr(self._depth, "value", 0)
        self._depth.value = depth
        return previous

    # -- kernels ------------------------------------------------------------------------------
    def op_rule(self, *args: Any, **kwargs: Any) -> Any:
        """Kernel of the op on ``FuncTorchBatched``: the innermost vmap level."""
        level = current_vmap_level()
        values, in_dims, kw, batch = _unwrap_all(args, kwargs, level)
        if not batch:
            return call_one_level_down(self.op, args, kwargs)
        new_kwargs = {k: _front_value(v, d, batch) for k, (v, d) in kw.items()}
        if self.wrap_inputs is None:
            new_args: Sequence[Any] = [
                _front_value(v, d, batch) for v, d in zip(values, in_dims, strict=True)
            ]
        else:
            interpreter = CVmapInterpreterPtr(peek_interpreter_stack())
            info = VmapInfo(batch, _RANDOMNESS[interpreter.randomness()])
            new_args = self.wrap_inputs(info, tuple(in_dims), *values)
            if not isinstance(new_args, (tuple, list)):
                raise TypeError(
                    f"opreg: {self.qualname}: vmap_wrap_inputs must return a tuple of arguments, "
                    f"got {type(new_args).__name__}"
                )
        self.stats.fast += 1
        if self.max_level is None:
            out = call_one_level_down(self.batched_op, new_args, new_kwargs)
        else:
            previous = self._enter(1)
            try:
                out = call_one_level_down(self.batched_op, new_args, new_kwargs)
            finally:
                self._depth.value = previous
        if self.single_tensor and isinstance(out, torch.Tensor):
            d = self.out_dims[0]
            if d is not None and -out.dim() <= d < out.dim() and out.shape[d] == batch:
                return _add_batch_dim(out, d % out.dim(), level)
        outs = self._check_outputs(out, batch)
        return self._rewrap(outs, lambda t, d: _add_batch_dim(t, d, level))

    def batched_rule(self, *args: Any, **kwargs: Any) -> Any:
        """Kernel of the batched op on ``FuncTorchBatched``: every vmap level past the first."""
        level = current_vmap_level()
        values, dims, kw, batch = _unwrap_all(args, kwargs, level)
        if not batch:
            return call_one_level_down(self.batched_op, args, kwargs)
        depth = getattr(self._depth, "value", 0) + 1
        if self.max_level is not None and depth > self.max_level:
            return self._loop(list(zip(values, dims, strict=True)), kw, level, batch)
        inner: int | None = None
        new_args = []
        for value, dim in zip(values, dims, strict=True):
            flat, size = _flatten_level(value, dim, batch)
            inner = size if size is not None else inner
            new_args.append(flat)
        new_kwargs = {}
        for key, (value, dim) in kw.items():
            new_kwargs[key], size = _flatten_level(value, dim, batch)
            inner = size if size is not None else inner
        assert inner is not None  # some argument is batched at this level
        self.stats.nested += 1
        previous = self._enter(depth)
        try:
            out = call_one_level_down(self.batched_op, new_args, new_kwargs)
        finally:
            self._depth.value = previous
        outs = self._check_outputs(out, batch * inner)
        sizes = (batch, inner)
        return self._rewrap(
            outs, lambda t, d: _add_batch_dim(torch.unflatten(t, d, sizes), d, level)
        )

    def loop_rule(self, *args: Any, **kwargs: Any) -> Any:
        """Kernel for ops without ``vmap_fn`` whose outputs PyTorch's own per-sample fallback
        cannot stack (lists of tensors): the same per-sample loop, written here."""
        level = current_vmap_level()
        values, dims, kw, batch = _unwrap_all(args, kwargs, level)
        if not batch:
            return call_one_level_down(self.op, args, kwargs)
        return self._loop(list(zip(values, dims, strict=True)), kw, level, batch)

    def _loop(
        self,
        unwrapped: list[tuple[Any, InDim]],
        kw_unwrapped: dict[str, tuple[Any, InDim]],
        level: int,
        batch: int,
    ) -> Any:
        """A per-sample loop over this level, for levels past ``max_vmap_level``."""
        self.stats.loop += 1
        results = []
        for i in range(batch):
            args_i = [_select(v, d, i) for v, d in unwrapped]
            kwargs_i = {k: _select(v, d, i) for k, (v, d) in kw_unwrapped.items()}
            out = call_one_level_down(self.batched_op, args_i, kwargs_i)
            results.append((out,) if len(self.out_dims) == 1 else tuple(out or ()))
        if not self.out_dims:
            return None
        stacked = []
        for outputs in zip(*results, strict=True):
            first = outputs[0]
            if isinstance(first, torch.Tensor):
                stacked.append(_add_batch_dim(torch.stack(outputs), 0, level))
            elif isinstance(first, (list, tuple)):
                stacked.append(
                    [_add_batch_dim(torch.stack(ts), 0, level) for ts in zip(*outputs, strict=True)]  # type: ignore[arg-type]
                )
            else:
                stacked.append(first)
        return stacked[0] if len(stacked) == 1 else tuple(stacked)
