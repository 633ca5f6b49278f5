"""vmap support: Python kernels on the ``FuncTorchBatched`` key of an op and of its batched op.

Every opreg op with a ``vmap_fn`` gets ONE companion operator, the *batched op*, with the op's
signature and the meaning "every tensor argument has a leading batch dimension". Its
implementation is the user's ``vmap_fn``. (A differentiable op that mutates nothing also gets
the batched op's twin without an autograd kernel, a short path described below; it has no
batching rule, being called only below the last vmap level.)

- The op's rule (innermost vmap level) unwraps the level's batch dims, moves them to dim 0
  (arguments unbatched at that level are expanded, without a copy), calls the batched op and
  re-wraps the outputs at ``vmap_out_dims``. Where the batched op's autograd kernel may record
  the call, the expanded arguments are marked (``UNBATCHED``): its derived backward and jvp
  replay them unbatched, as the sample they are.
- The batched op's rule (each further level) moves the level's batch dim to 0, flattens it
  into the existing leading batch dim, calls the batched op again, and unflattens the outputs.

So any nesting depth runs the user's ``vmap_fn`` once, on the product of the batch sizes, and
PyTorch's per-sample fallback never runs (unless ``max_vmap_level`` caps the depth: levels past
the cap are computed by a per-sample loop, as PyTorch's fallback would).

Two short paths, same results with fewer Python kernel crossings (each measured alone in
``benchmarks/probes/profile_vmap.py``), taken only where their preconditions hold, else the
path above:

- The fold (several vmap levels): where every functorch level is a vmap level (known from
  every level batching some argument: only a vmap level batches tensors) and nothing
  below them needs the dispatcher (no input needs a gradient; no forward-mode AD, inference
  mode, dispatch or function mode, tensor subclass, meta tensor, jit tracing or
  ``register_kernel`` kernel, autocast region for an op with an autocast rule; one
  ``vmap_fn`` for every device; nothing mutated; one output,
  default input wrapping, no ``max_vmap_level``), the op's rule unwraps every level at once
  and calls ``vmap_fn`` itself, once, on the folded batch, with the levels popped and the
  dispatch state that functorch gives an operation below them (``_fold_levels``).
  The op's call in Python (``_call_path``, row 4) does the same before the dispatcher is
  entered at all, one level included (:meth:`BatchingRules.vmap_fold`): there no level is
  being processed, so popping the levels is all it takes to reach that state, and the trip
  into the op's batching kernel and out again is saved (``bench_core``: ``vmap(op)`` at
  batch 64 from 1.39x to 1.23x ``vmap`` of the plain function on the 2-core VM).
  ``OPREG_VMAP_SHORT_PATH=0`` (or :data:`short_path_enabled` = False) turns both off.
- The last level (the only functorch level left) calls a twin of the batched op without an
  autograd kernel where that kernel would only redispatch (no input needs a gradient, no
  forward-mode AD, mode, subclass or device kernel): the dispatcher pops the level exactly as
  before, one Python crossing fewer (``_last_level_op``). ``OPREG_VMAP_NOGRAD_OP=0`` (or
  :data:`nograd_op_enabled` = False) turns it off.

Where the op's level is the only functorch level, the op's rule does the work of the general
path in one pass over the arguments for the common case (positional tensor and scalar
arguments, one output, default input wrapping, no ``max_vmap_level``: ``_only_level``). A
Python call of ``vmap_fn`` below the level there (the fold of one level) was measured no
cheaper than the dispatcher's call of the twin, so the last level always dispatches.

These short paths (and the one pass) are speed paths built on torch internals: an op
registered on a torch release outside the tested range (``_versions``) takes none of them
(``fast=False``): every call takes the general path above, with the same results.

Calls made while ``FuncTorchBatched`` is excluded go down to the next vmap level (functorch's
dynamic-layer keys pop the level), the same lowering that ``torch.library.register_vmap`` uses.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from ._options import OpSpec
from ._private import (
    VmapLevelKeys,
    any_autocast_enabled,
    call_below_vmap_levels,
    call_one_level_down,
    current_vmap_level,
    dispatch_modes_active,
    dynamic_layer_depth,
    forward_ad_level,
    function_modes_active,
    jit_tracing,
    pop_layer,
    push_layer,
    vmap_randomness,
)
from ._private import add_batch_dim as _add_batch_dim
from ._private import unwrap_batched as _unwrap_batched

#: Whether the short path may be taken at all (see the module docstring); tests and benchmarks
#: switch it to compare both paths.
short_path_enabled: bool = os.environ.get("OPREG_VMAP_SHORT_PATH", "1") != "0"
#: Whether the last vmap level may call the batched op's twin without an autograd kernel.
nograd_op_enabled: bool = os.environ.get("OPREG_VMAP_NOGRAD_OP", "1") != "0"

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
    loop: int = 0  #: levels computed by a per-sample loop (past ``max_vmap_level``, or no vmap_fn)

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


#: Marks an argument of the batched op that is an unbatched argument expanded to the batch
#: (the same for every batch entry, and made here, so no one reads its gradient per entry): the
#: batched op's derived backward and jvp replay it unbatched (``_autograd.saved_values``), as
#: a rule written for one sample expects it (contiguous, of the sample's rank).
UNBATCHED = "opreg_unbatched"


def _is_marked(value: Any) -> bool:
    return getattr(value, UNBATCHED, False) is True


def _mark_unbatched(
    args: Sequence[Any], dims: Sequence[InDim], sources: Sequence[Any] | None = None
) -> None:
    """Mark (see :data:`UNBATCHED`) each tensor of ``args`` (the batched op's arguments) whose
    dim is None: expanded by this level; at a further level (``sources``: the arguments as
    unwrapped there, before the fold), only where its source was marked by the level below,
    so that it is the same for every entry of the folded batch."""
    for i, d in enumerate(dims):
        if isinstance(d, list):
            for j, e in enumerate(d):
                if (
                    e is None
                    and isinstance(args[i][j], torch.Tensor)  # a None element stays None
                    and (sources is None or _is_marked(sources[i][j]))
                ):
                    setattr(args[i][j], UNBATCHED, True)
        elif (
            d is None
            and isinstance(args[i], torch.Tensor)
            and (sources is None or _is_marked(sources[i]))
        ):
            setattr(args[i], UNBATCHED, True)


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


def _fold_one_written(
    t: torch.Tensor, dim: int | None, batch: int, copies: list[tuple[torch.Tensor, torch.Tensor]]
) -> tuple[torch.Tensor, int]:
    t = _front(t, dim, batch)
    shape = (t.shape[0] * t.shape[1], *t.shape[2:])
    try:
        flat = t.view(shape)  # a view: the batched op's writes land in the caller's tensor
    except (RuntimeError, ValueError):  # no view merges the dims (fake tensors: ValueError):
        # a copy, written back after the call
        flat = t.reshape(shape)
        copies.append((t, flat))
    return flat, t.shape[1]


def _fold_written(
    value: Any, dim: InDim, batch: int, copies: list[tuple[torch.Tensor, torch.Tensor]]
) -> tuple[Any, int | None]:
    """``_flatten_level`` for an argument the op writes to: a view where the dims merge, else
    a copy recorded in ``copies`` as (the argument with the batch dims in front, the copy)."""
    if isinstance(value, torch.Tensor):
        assert not isinstance(dim, list)
        return _fold_one_written(value, dim, batch, copies)
    if isinstance(dim, list):
        inner = None
        out = []
        for v, d in zip(value, dim, strict=True):
            if isinstance(v, torch.Tensor):
                flat, inner = _fold_one_written(v, d, batch, copies)
                out.append(flat)
            else:
                out.append(v)
        return out, inner
    return value, None


def _stack(outputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The entries' outputs stacked, viewed as the batch of the first entry's shape, as
    PyTorch's per-sample fallback does: traced (``torch.compile``), that shape is the fake's,
    so a fake that lies about it fails there, not only in the fake check."""
    return torch.stack(outputs).view(len(outputs), *outputs[0].shape)


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


def _scan_level(
    args: tuple[Any, ...], level: int
) -> tuple[list[Any], list[tuple[int, int | None]], int, bool] | None:
    """One pass over positional arguments at one vmap ``level``: the unwrapped values, the
    (position, batch dim) of those whose batch dim is not 0 (None: not batched there), the
    batch size, and whether every tensor is plain (a ``torch.Tensor``, not meta, needing no
    gradient in grad mode). None for a list argument or where nothing is batched there."""
    grad = torch.is_grad_enabled()
    plain = True
    batch = 0
    values: list[Any] = []
    moves: list[tuple[int, int | None]] = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            t, d = _unwrap_batched(a, level)
            if plain and (type(t) is not torch.Tensor or t.is_meta or (grad and t.requires_grad)):
                plain = False
            if d != 0:
                moves.append((i, d))
                if d is not None and not batch:
                    batch = t.shape[d]
            elif not batch:
                batch = t.shape[0]
            values.append(t)
        elif isinstance(a, (list, tuple)):
            return None
        else:
            values.append(a)
    return (values, moves, batch, plain) if batch else None


#: The position map of an argument whose every level has its batch dim at 0 (see
#: ``_fold_levels``): the dims lie in front, outermost level first.
_FRONT: dict[int, int] = {}


def _positions(levels: Sequence[int], dims: Sequence[int | None]) -> dict[int, int]:
    """Where each level's batch dim lies in the unwrapped tensor (level -> dim), from the dim
    each level had as it was unwrapped (``dims``, innermost level first)."""
    pos: dict[int, int] = {}
    for lvl, d in zip(reversed(levels), dims, strict=True):
        if d is not None:
            pos = {k: p + (p >= d) for k, p in pos.items()}
            pos[lvl] = d
    return pos


def _batch_size(value: Any, dim: InDim) -> int:
    """Size of the mapped dim of an unwrapped value (0 if it is not batched)."""
    if isinstance(dim, list):
        return next((t.shape[e] for t, e in zip(value, dim, strict=True) if e is not None), 0)
    return 0 if dim is None else int(value.shape[dim])


class _Folded:
    """The vmap levels a fold unwraps (outermost first), their batch sizes and the size of the
    batch they fold into."""

    __slots__ = ("levels", "sizes", "total")

    def __init__(self, levels: Sequence[int], sizes: tuple[int, ...]) -> None:
        self.levels = levels
        self.sizes = sizes
        total = 1
        for size in sizes:
            total *= size
        self.total = total


def _wrap_levels(t: torch.Tensor, d: int, folded: _Folded) -> torch.Tensor:
    """Wrap ``t``, whose folded batch dim is ``d``, into the ``folded`` levels."""
    if len(folded.sizes) > 1:
        t = torch.unflatten(t, d, folded.sizes)
    for lvl in folded.levels:
        t = _add_batch_dim(t, d, lvl)
    return t


class BatchingRules:
    """The two ``FuncTorchBatched`` kernels of one op, sharing its settings and stats."""

    def __init__(
        self,
        spec: OpSpec,
        op: Callable[..., Any],
        batched_op: Callable[..., Any],
        *,
        direct: Callable[..., Any] | None = None,
        level_keys: VmapLevelKeys | None = None,
        nograd_op: Callable[..., Any] | None = None,
        fast: bool = True,
    ) -> None:
        """The rules of the op of ``spec``: ``op`` and ``batched_op`` are their operators'
        entry points (``op`` twice without ``vmap_fn``: opreg's per-sample loop); the options
        they read come from ``spec``. ``direct``: the batched op's one kernel, which the fold
        may call without the dispatcher (with the ``level_keys`` of a vmap level);
        ``nograd_op``: the batched op's twin without autograd; ``fast``: a tested torch."""
        o, signature = spec.options, spec.signature
        batched = o["vmap_fn"] is not None
        qualname, out_dims = spec.qualname, spec.out_dims
        wrap_inputs = o["vmap_wrap_inputs"]
        max_level = o["max_vmap_level"] if batched else None
        derived_autograd = batched and o["differentiable"]
        autocast = batched and spec.autocast_rule is not None
        mutated = [
            (signature.positional.index(m) if m in signature.positional else m, m)
            for m in signature.mutated
        ]
        kernels: dict[Any, Any] | None = None
        self.qualname = qualname
        #: The arguments the op writes to (``mutates_args``): (position or keyword, name).
        self.mutated = tuple(mutated)
        self.op = op
        self.batched_op = batched_op
        self.out_dims = out_dims
        self.wrap_inputs = wrap_inputs
        self.max_level = max_level
        self.stats = VmapStats()
        self.single_tensor = len(out_dims) == 1
        self._depth = threading.local()
        #: The batched op's only kernel (the registered ``vmap_fn``), which the fold of every
        #: level calls without the dispatcher; None: always dispatch.
        self.direct = direct if level_keys is not None and fast else None
        #: The batched op's twin without an autograd kernel (see ``_last_level_op``), or None.
        self.nograd_op = nograd_op if fast else None
        #: What a vmap level adds to the dispatch state (to restore the state below it).
        self.level_keys = level_keys
        #: The op's ``register_kernel`` kernels: while there is any, always dispatch.
        self.kernels: dict[Any, Any] = {} if kernels is None else kernels
        #: The fold of every level applies: one output, default input wrapping, no depth cap.
        self.plain = self.single_tensor and wrap_inputs is None and max_level is None
        #: The one-pass rule of the only level (``_only_level``) applies.
        self.one_pass = self.plain and fast and not self.mutated
        #: The batched op has a derived autograd kernel: where it may record, the expanded
        #: unbatched arguments are marked for it (``_mark_unbatched``).
        self.derived_autograd = derived_autograd
        #: The op has an autocast rule: in an autocast region the fold (a call of ``vmap_fn``
        #: without the dispatcher) is not taken, so that the batched op's rule casts.
        self.autocast = autocast
        #: The op's call may fold the vmap levels itself (:meth:`vmap_fold`): the fold
        #: applies to the op, its arguments are all positional, and the probe saw that popping
        #: the levels at the caller's gives the state below them.
        self.caller_fold = (
            self.plain
            and self.direct is not None
            and not signature.kwarg_only
            and level_keys is not None
            and level_keys.popped_is_below
        )

    # -- short paths ---------------------------------------------------------------------------
    def _nothing_else_in_play(self) -> bool:
        """No device kernel, dispatch or function mode, forward-mode AD, inference mode or jit
        tracing: nothing that must see the batched op, or its autograd kernel, dispatched."""
        return not (
            self.kernels
            or dispatch_modes_active()
            or function_modes_active()
            or forward_ad_level() >= 0
            or torch.is_inference_mode_enabled()
            or jit_tracing()
        )

    def _last_level_op(self, args: Sequence[Any], kwargs: dict[str, Any]) -> Callable[..., Any]:
        """The operator that the last vmap level calls: the batched op, or its twin without an
        autograd kernel where that kernel would only redispatch (the only functorch level is
        this vmap level, no input needs a gradient, nothing else is in play, every tensor is a
        plain one); the dispatcher still pops the level and restores the caller's state."""
        if (
            self.nograd_op is None
            or not nograd_op_enabled
            or dynamic_layer_depth() != 1
            or not self._nothing_else_in_play()
        ):
            return self.batched_op
        grad = torch.is_grad_enabled()
        for value in (*args, *kwargs.values()) if kwargs else args:
            for t in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(t, torch.Tensor) and (
                    type(t) is not torch.Tensor or (grad and t.requires_grad)
                ):
                    return self.batched_op
        return self.nograd_op

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
        if self.one_pass and not kwargs and dynamic_layer_depth() == 1:
            out = self._only_level(args, level)
            if out is not None:
                return out
        values, in_dims, kw, batch = _unwrap_all(args, kwargs, level)
        if not batch:
            return call_one_level_down(self.op, args, kwargs)
        if self.mutated:
            self._check_mutated(values, in_dims, kw)
        if self.plain and not kw and self.direct is not None and dynamic_layer_depth() != 1:
            folded = self._fold_levels(args, level)
            if folded is not None:
                return folded
        new_args, new_kwargs = self._front_all(values, in_dims, kw, batch)
        op = self._last_level_op(new_args, new_kwargs)
        if op is not self.nograd_op and self.derived_autograd and self.wrap_inputs is None:
            _mark_unbatched(new_args, in_dims)
            _mark_unbatched([new_kwargs[k] for k in kw], [d for _, d in kw.values()])
        if self.max_level is None:
            out = call_one_level_down(op, new_args, new_kwargs)
        else:
            previous = self._enter(1)
            try:
                out = call_one_level_down(op, new_args, new_kwargs)
            finally:
                self._depth.value = previous
        return self._wrap_one_level(out, level, batch)

    def _only_level(self, args: tuple[Any, ...], level: int) -> Any:
        """The op's rule when its level is the only functorch level, for the common case
        (positional tensor and scalar arguments, one output, default input wrapping): what the
        general path does, in one pass over the arguments. None where it does not apply (a
        list argument, nothing batched at this level): the caller takes the general path."""
        scan = _scan_level(args, level)
        if scan is None:
            return None
        values, moves, batch, plain = scan
        for i, d in moves:
            values[i] = _front(values[i], d, batch)
        self.stats.fast += 1
        if (
            plain  # else the autograd kernel has work to do
            and self.nograd_op is not None
            and nograd_op_enabled
            and self._nothing_else_in_play()
        ):
            op = self.nograd_op
        else:
            op = self.batched_op
            if self.derived_autograd:
                _mark_unbatched([values[i] for i, _ in moves], [d for _, d in moves])
        return self._wrap_one_level(call_one_level_down(op, values, {}), level, batch)

    def _wrap_one_level(self, out: Any, level: int, batch: int) -> Any:
        """The batched op's output (batched at ``vmap_out_dims``) wrapped into ``level``."""
        if self.single_tensor and isinstance(out, torch.Tensor):
            d, dims = self.out_dims[0], out.dim()
            if d is not None and -dims <= d < dims and out.shape[d] == batch:
                return _add_batch_dim(out, d % dims, level)
        outs = self._check_outputs(out, batch)
        return self._rewrap(outs, lambda t, d: _add_batch_dim(t, d, level))

    def _fold_levels(self, args: tuple[Any, ...], level: int) -> Any:
        """The short path of the innermost level under further vmap levels: when every
        functorch level is a vmap level and nothing else is in play, unwrap every level at
        once, run ``vmap_fn`` on their folded batch (outermost first, as ``batched_rule``
        folds them) with the levels popped, and wrap the output back into every level. None
        where it does not apply (the caller dispatches)."""
        if not short_path_enabled or not self._nothing_else_in_play():
            return None
        if self.autocast and any_autocast_enabled():
            return None
        # functorch numbers its levels 1, 2, ... up the stack, this one on top. Every level
        # must be a vmap level: checked below without asking each interpreter, as a tensor
        # batched at a level was batched by a vmap at that level, and the fold requires every
        # level to batch some argument.
        n = dynamic_layer_depth()
        if level != n:
            return None
        assert self.level_keys is not None  # self.direct is None without it
        below = self.level_keys.state_below()
        if below is None:
            return None
        return self._fold(args, n, below)

    def vmap_fold(self, args: tuple[Any, ...]) -> Any:
        """The fold of every vmap level, from the op's call in Python (``_call_path``, whose
        table has checked that no mode, forward-mode AD, profiler, jit tracing or autocast
        rule is in play): the same short path as :meth:`_fold_levels`, without the
        dispatcher's trip into the op's batching kernel and out of it again. None where it
        does not apply (the caller dispatches)."""
        if not short_path_enabled or self.kernels or torch.is_inference_mode_enabled():
            return None
        n = dynamic_layer_depth()
        if n != 1:
            return self._fold(args, n, None)
        # One level, in one pass over the arguments (as ``_only_level``): ``vmap_fn`` runs
        # with the level popped (what ``call_below_vmap_levels`` does, inline: two frames cost
        # here what a view does), after the batch dims are moved to the front there (a view
        # made at the caller's level would go through the level: several times dearer).
        scan = _scan_level(args, 1)
        if scan is None or not scan[3]:
            return None
        values, moves, batch, _ = scan
        direct = self.direct
        assert direct is not None  # caller_fold requires it
        self.stats.fast += 1
        layer = pop_layer()
        try:
            for i, d in moves:  # (``_front``, inline)
                t = values[i]
                values[i] = t.expand(batch, *t.shape) if d is None else t.movedim(d, 0)
            out = direct(*values)
        finally:
            push_layer(layer)
        return self._wrap_one_level(out, 1, batch)

    def _fold(self, args: tuple[Any, ...], n: int, below: tuple[Any, Any] | None) -> Any:
        """Unwrap the ``n`` vmap levels (1..n) of ``args``, call ``vmap_fn`` on their folded
        batch below them (in the state ``below``, see ``call_below_vmap_levels``) and wrap
        its output back; None where some argument or level does not allow it."""
        levels = range(1, n + 1)
        grad = torch.is_grad_enabled()
        sizes = [0] * n  # each level's batch size, outermost first
        prepared: list[tuple[Any, dict[int, int] | None]] = []
        for a in args:
            if isinstance(a, torch.Tensor):
                t, dims = a, []
                for i in range(n - 1, -1, -1):  # innermost level first
                    t, d = _unwrap_batched(t, levels[i])
                    dims.append(d)
                    if d is not None:
                        sizes[i] = t.shape[d]
                if type(t) is not torch.Tensor or t.is_meta or (grad and t.requires_grad):
                    return None
                # Every level's batch dim at 0: they lie in front, outermost first (the common
                # case, flattened as they are); otherwise where each level's dim lies.
                if dims.count(0) == n:
                    prepared.append((t, _FRONT))
                elif dims.count(None) == n:  # no level batches it: expanded (``_positions``)
                    prepared.append((t, {}))
                else:
                    prepared.append((t, _positions(levels, dims)))
            elif isinstance(a, (list, tuple)):
                return None  # lists of tensors: the dispatcher path handles them
            else:
                prepared.append((a, None))
        if 0 in sizes:
            return None  # a level batches no argument (or is no vmap level): dispatch
        self.stats.fast += 1
        self.stats.nested += n - 1
        folded = _Folded(levels, tuple(sizes))
        out, d = call_below_vmap_levels(n, below, self._fold_and_call, prepared, folded)
        if d is not None:
            for lvl in levels:
                out = _add_batch_dim(out, d, lvl)
            return out
        outs = self._check_outputs(out, folded.total)
        return self._rewrap(outs, lambda t, e: _wrap_levels(t, e, folded))

    def _fold_and_call(
        self, prepared: list[tuple[Any, dict[int, int] | None]], folded: _Folded
    ) -> tuple[Any, int | None]:
        """``vmap_fn`` on unwrapped arguments, the batch dims of the ``folded`` levels,
        outermost first, moved to the front in order (missing ones expanded, no copy) and
        folded into one; returns its output and, for a tensor output batched as declared, the
        position ``d`` of the output's batch dims, unflattened there (else ``d`` is None and
        the caller checks the output)."""
        levels, sizes, total = folded.levels, folded.sizes, folded.total
        n = len(sizes)
        args = []
        for v, pos in prepared:
            if pos is None:
                args.append(v)
            elif pos is _FRONT:
                args.append(v if n == 1 else v.flatten(0, n - 1))
            elif not pos:
                args.append(v.expand(total, *v.shape))  # no level batches it
            else:
                present = [pos[lvl] for lvl in levels if lvl in pos]
                front = list(range(len(present)))
                t = v if present == front else v.movedim(present, front)
                if len(present) < n:
                    for i, lvl in enumerate(levels):
                        if lvl not in pos:
                            t = t.unsqueeze(i)
                    t = t.expand(*sizes, *t.shape[n:])
                args.append(t.reshape(total, *t.shape[n:]))
        assert self.direct is not None  # _fold_levels checked it
        out = self.direct(*args)
        d = self.out_dims[0]
        if isinstance(out, torch.Tensor) and d is not None and -out.dim() <= d < out.dim():
            d %= out.dim()
            shape = out.shape
            if shape[d] == total:  # unflattened here, where no level is in the way
                return (out if n == 1 else out.view(*shape[:d], *sizes, *shape[d + 1 :])), d
        return out, None

    def _front_all(
        self, values: list[Any], in_dims: list[InDim], kw: dict[str, tuple[Any, InDim]], batch: int
    ) -> tuple[Sequence[Any], dict[str, Any]]:
        """The batched op's arguments at the innermost level: batch dims moved to 0 (or as
        ``vmap_wrap_inputs`` puts them)."""
        new_kwargs = {k: _front_value(v, d, batch) for k, (v, d) in kw.items()}
        if self.wrap_inputs is None:
            new_args: Sequence[Any] = [
                _front_value(v, d, batch) for v, d in zip(values, in_dims, strict=True)
            ]
        else:
            info = VmapInfo(batch, vmap_randomness())
            new_args = self.wrap_inputs(info, tuple(in_dims), *values)
            if not isinstance(new_args, (tuple, list)):
                raise TypeError(
                    f"opreg: {self.qualname}: vmap_wrap_inputs must return a tuple of arguments, "
                    f"got {type(new_args).__name__}"
                )
        self.stats.fast += 1
        return new_args, new_kwargs

    def batched_rule(self, *args: Any, **kwargs: Any) -> Any:
        """Kernel of the batched op on ``FuncTorchBatched``: every vmap level past the first."""
        level = current_vmap_level()
        values, dims, kw, batch = _unwrap_all(args, kwargs, level)
        if not batch:
            return call_one_level_down(self.batched_op, args, kwargs)
        if self.mutated:
            self._check_mutated(values, dims, kw)
        depth = getattr(self._depth, "value", 0) + 1
        if self.max_level is not None and depth > self.max_level:
            return self._loop(list(zip(values, dims, strict=True)), kw, level, batch)
        new_args, new_kwargs, inner, copies = self._flatten_all(values, dims, kw, batch)
        op = self._last_level_op(new_args, new_kwargs)
        if op is not self.nograd_op and self.derived_autograd:
            _mark_unbatched(new_args, dims, values)
            kw_dims = [d for _, d in kw.values()]
            _mark_unbatched([new_kwargs[k] for k in kw], kw_dims, [v for v, _ in kw.values()])
        previous = self._enter(depth)
        try:
            out = call_one_level_down(op, new_args, new_kwargs)
        finally:
            self._depth.value = previous
        for front, flat in copies:  # a folded copy of a written argument: write it back
            front.copy_(flat.view(front.shape))
        outs = self._check_outputs(out, batch * inner)
        sizes = (batch, inner)
        return self._rewrap(
            outs, lambda t, d: _add_batch_dim(torch.unflatten(t, d, sizes), d, level)
        )

    def _flatten_all(
        self, values: list[Any], dims: list[InDim], kw: dict[str, tuple[Any, InDim]], batch: int
    ) -> tuple[list[Any], dict[str, Any], int, list[tuple[torch.Tensor, torch.Tensor]]]:
        """The batched op's arguments at a further level: its batch dim folded into dim 0.
        Also the (argument, folded copy) pairs of written arguments whose fold is no view, to
        copy back after the call (see ``_fold_written``)."""
        inner: int | None = None
        written = {m for m, _ in self.mutated}
        copies: list[tuple[torch.Tensor, torch.Tensor]] = []
        new_args = []
        for i, (value, dim) in enumerate(zip(values, dims, strict=True)):
            if i in written:
                flat, size = _fold_written(value, dim, batch, copies)
            else:
                flat, size = _flatten_level(value, dim, batch)
            inner = size if size is not None else inner
            new_args.append(flat)
        new_kwargs = {}
        for key, (value, dim) in kw.items():
            if key in written:
                new_kwargs[key], size = _fold_written(value, dim, batch, copies)
            else:
                new_kwargs[key], size = _flatten_level(value, dim, batch)
            inner = size if size is not None else inner
        assert inner is not None  # some argument is batched at this level
        self.stats.nested += 1
        return new_args, new_kwargs, inner, copies

    def _check_mutated(
        self, values: Sequence[Any], dims: Sequence[InDim], kw: dict[str, tuple[Any, InDim]]
    ) -> None:
        """A written argument must be batched at a level that batches some argument: its
        entries would all be one tensor (as torch's in-place ops refuse, "vmap: inplace
        arithmetic ... is not possible")."""
        for where, name in self.mutated:
            if isinstance(where, int):
                if where >= len(dims):
                    continue
                value, dim = values[where], dims[where]
            elif where in kw:
                value, dim = kw[where]
            else:
                continue
            if isinstance(dim, list):
                unbatched = any(
                    isinstance(v, torch.Tensor) and d is None
                    for v, d in zip(value, dim, strict=True)
                )
            else:
                unbatched = dim is None and isinstance(value, torch.Tensor)
            if unbatched:
                raise RuntimeError(
                    f"opreg: {self.qualname}: vmap cannot write to argument '{name}' "
                    "(mutates_args): it is not batched while other arguments are, so every "
                    f"batch entry would write the same tensor; batch '{name}' too (e.g. pass "
                    f"x.expand(B, ...).clone() with in_dims 0) or call the op outside vmap"
                )

    def loop_rule(self, *args: Any, **kwargs: Any) -> Any:
        """Kernel for ops without ``vmap_fn``: the per-sample loop PyTorch's own fallback runs,
        written here, which also stacks what that fallback cannot (lists of tensors, plain
        values), runs ops that write to their arguments (each entry's slice is a view, so its
        write lands in the batched tensor; the fallback refuses them) and warns of nothing
        (torch 2.15's fallback warns of a "performance drop" on every call). As in that
        fallback, each entry runs below the level, so random ops in the op draw one entry
        after another whatever vmap's ``randomness``."""
        level = current_vmap_level()
        values, dims, kw, batch = _unwrap_all(args, kwargs, level)
        if not batch:
            return call_one_level_down(self.op, args, kwargs)
        if self.mutated:
            self._check_mutated(values, dims, kw)
        return self._loop(list(zip(values, dims, strict=True)), kw, level, batch)

    def _entries(
        self,
        unwrapped: list[tuple[Any, InDim]],
        kw_unwrapped: dict[str, tuple[Any, InDim]],
        batch: int,
    ) -> list[tuple[Any, ...]]:
        """The op on each batch entry (called below the level): its outputs, as a tuple."""
        op, single = self.batched_op, len(self.out_dims) == 1
        results = []
        for i in range(batch):
            args_i = [_select(v, d, i) for v, d in unwrapped]
            if kw_unwrapped:
                out = op(*args_i, **{k: _select(v, d, i) for k, (v, d) in kw_unwrapped.items()})
            else:
                out = op(*args_i)
            results.append((out,) if single else tuple(out or ()))
        return results

    def _loop(
        self,
        unwrapped: list[tuple[Any, InDim]],
        kw_unwrapped: dict[str, tuple[Any, InDim]],
        level: int,
        batch: int,
    ) -> Any:
        """A per-sample loop over this level: an op without ``vmap_fn`` (``loop_rule``), or a
        level past ``max_vmap_level``."""
        self.stats.loop += 1
        # Every entry's call below the level, under one switch to the level below.
        results = call_one_level_down(self._entries, (unwrapped, kw_unwrapped, batch), {})
        if not self.out_dims:
            return None
        stacked = []
        for outputs in zip(*results, strict=True):
            first = outputs[0]
            if isinstance(first, torch.Tensor):
                stacked.append(_add_batch_dim(_stack(outputs), 0, level))
            elif isinstance(first, (list, tuple)):
                stacked.append(
                    [_add_batch_dim(_stack(ts), 0, level) for ts in zip(*outputs, strict=True)]  # type: ignore[arg-type]
                )
            else:
                if any(o != first for o in outputs[1:]):
                    raise RuntimeError(
                        f"opreg: {self.qualname}: a per-sample loop under vmap got different "
                        f"values of a non-tensor output across the batch ({list(outputs)}); "
                        "vmap can only return a plain value that is the same for every entry"
                    )
                stacked.append(first)
        return stacked[0] if len(stacked) == 1 else tuple(stacked)
