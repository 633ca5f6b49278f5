"""One OpInfo sample as an opreg op: a fixed-signature wrapper of the native op and the generic
rules an author writes for an op built from torch calls.

The wrapper takes the sample's tensors (every tensor leaf of ``input``, ``args`` and
``kwargs``, in order) and its plain ``bool``/``int``/``float``/``str`` leaves as schema
arguments; every other leaf (``None``, dtypes, slices, ...) is closed over. Floating tensors
are the differentiable arguments. Outputs are the tensor leaves of the native result, as one
tensor or a tuple; an output that aliases an input (a view) or another output is cloned, since
an operator may not return an alias of its input.

The rules (:func:`rules`):

- fake: the wrapper itself, which runs the native op on fake/meta tensors;
- ``vmap_fn``/``fake_vmap_fn``: ``torch.vmap`` of the wrapper over the leading dim;
- backward: ``torch.func.vjp`` of the wrapper at the saved inputs;
- jvp: ``torch.func.jvp`` of the wrapper at the saved inputs, where the native op supports
  forward AD (OpInfo's ``supports_forward_ad``, or ``torch.func.jvp`` of it works on the
  sample); without it no jvp, so opreg raises its clear error in forward mode, as the native
  op raises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from opreg_core import SampleInput, VmapOp, register_vmap_op

#: Python leaf types that become schema arguments, with their schema type (bool before int).
SCALAR_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "bool"),
    (int, "int"),
    (float, "float"),
    (str, "str"),
)

#: The dtypes a sweep runs an op in, in order of preference.
DTYPES = (torch.float64, torch.float32, torch.int64, torch.int32, torch.bool)


class NotExpressible(Exception):
    """The sample cannot be written as an opreg op (the message says why)."""


def pick_dtype(opinfo: Any) -> torch.dtype | None:
    """The dtype to sweep ``opinfo`` in on CPU (float64 first), None for complex-only ops."""
    supported = opinfo.supported_dtypes("cpu")
    return next((d for d in DTYPES if d in supported), None)


def _schema_type(leaf: Any) -> str | None:
    if isinstance(leaf, torch.Tensor):
        return "Tensor"
    for kind, name in SCALAR_TYPES:
        if type(leaf) is kind:
            return name
    return None


def is_float(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype.is_floating_point


def _storages(tensors: Sequence[torch.Tensor]) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors if t.untyped_storage().nbytes()}


@dataclass
class OpCase:
    """One OpInfo op at one sample, as a fixed-signature function of its schema arguments."""

    name: str  #: the OpInfo name (with variant)
    sample_index: int
    dtype: torch.dtype
    args: tuple[Any, ...]  #: the schema arguments, in order
    schema: str
    fallback: Callable[..., Any]  #: the native op as a function of ``args``
    tensor_pos: tuple[int, ...]
    diff_pos: tuple[int, ...]  #: floating tensor arguments
    num_outputs: int
    float_outputs: tuple[int, ...]
    supports_autograd: bool
    supports_forward_ad: bool
    supports_gradgrad: bool
    #: OpInfo skips its non-contiguous-samples test: the result depends on memory layout
    layout_dependent: bool
    out_shapes: tuple[torch.Size, ...]  #: of each output, on the sample
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.name}[{self.sample_index}]"

    @property
    def differentiable(self) -> bool:
        return self.supports_autograd and bool(self.diff_pos) and bool(self.float_outputs)

    def outputs(self, out: Any) -> tuple[torch.Tensor, ...]:
        """The op's result as a tuple of its outputs."""
        return (out,) if self.num_outputs == 1 else tuple(out)


#: The aten ops that allocate without writing (the memory holds whatever was there).
_EMPTY_OPS = frozenset(
    ("empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided")
)


class _WatchAllocations(TorchDispatchMode):
    """Records the storages that an empty-family op allocated and no later op wrote."""

    def __init__(self) -> None:
        super().__init__()
        self.unwritten: set[int] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        schema = func._schema
        if schema.name.split("::")[-1] in _EMPTY_OPS:
            self.unwritten.update(
                o.untyped_storage().data_ptr()
                for o in pytree.tree_leaves(out)
                if isinstance(o, torch.Tensor)
            )
        elif schema.is_mutable:
            written = [a for a, d in zip(args, schema.arguments, strict=False) if d.is_write]
            for t in (*written, *kwargs.values()):
                if isinstance(t, torch.Tensor):
                    self.unwritten.discard(t.untyped_storage().data_ptr())
        return out


def _returns_uninitialized(call: Callable[..., Any], args: tuple[Any, ...]) -> bool:
    """Whether the op returns memory that it allocated and never wrote (new_empty_strided):
    comparing two calls alone finds that only when the freed memory happens to differ."""
    watch = _WatchAllocations()
    try:
        with torch.no_grad(), watch:
            out = call(*args)
    except Exception:  # the watched call is evidence only when it runs
        return False
    return any(
        o.numel() and o.untyped_storage().data_ptr() in watch.unwritten
        for o in _opaque_leaves(out)
        if isinstance(o, torch.Tensor)
    )


def _opaque_leaves(value: Any) -> list[Any]:
    leaves, _ = pytree.tree_flatten(value)
    return leaves


def build_case(opinfo: Any, sample: Any, index: int, dtype: torch.dtype) -> OpCase:
    """The :class:`OpCase` of ``opinfo`` at ``sample``; raises :class:`NotExpressible`."""
    name = opinfo.name + (f".{opinfo.variant_test_name}" if opinfo.variant_test_name else "")
    leaves, spec = pytree.tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    slots: list[int] = []  # leaf index of each schema argument
    types: list[str] = []
    for i, leaf in enumerate(leaves):
        kind = _schema_type(leaf)
        if isinstance(leaf, torch.Tensor) and leaf.layout != torch.strided:
            raise NotExpressible(
                f"a {leaf.layout} tensor argument (opreg ops take strided tensors)"
            )
        if isinstance(leaf, torch.Tensor) and (leaf.is_complex() or leaf.dtype.is_complex):
            raise NotExpressible("a complex tensor argument (the sweep runs real dtypes)")
        if kind is not None:
            slots.append(i)
            types.append(kind)
    if not any(t == "Tensor" for t in types):
        raise NotExpressible("no tensor argument (an op is dispatched on its tensors)")
    args = tuple(
        leaves[i].detach() if isinstance(leaves[i], torch.Tensor) else leaves[i] for i in slots
    )
    process = sample.output_process_fn_grad
    native = opinfo.op
    wrapper = opinfo.gradcheck_wrapper  # e.g. symmetrizes a Hermitian input: part of the op

    def call(*a: Any) -> Any:
        full = list(leaves)
        for i, v in zip(slots, a, strict=True):
            full[i] = v
        inp, pargs, kwargs = pytree.tree_unflatten(full, spec)
        return process(wrapper(native, inp, *pargs, **kwargs))

    before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    with torch.no_grad():
        out = call(*args)
        again = call(*args)
    written = [
        f"a{i}"
        for i, (a, b) in enumerate(zip(args, before, strict=True))
        if isinstance(a, torch.Tensor) and not torch.equal(a.nan_to_num(0.5), b.nan_to_num(0.5))
    ]
    if written:
        raise NotExpressible(
            f"the native op writes to its argument(s) {', '.join(written)} (e.g. running "
            "statistics): opreg refuses a backward or jvp for an op that mutates its arguments"
        )
    out_leaves = _opaque_leaves(out)
    bad = [type(o).__name__ for o in out_leaves if not isinstance(o, torch.Tensor)]
    if not out_leaves or bad:
        got = ", ".join(bad) if bad else "nothing"
        raise NotExpressible(f"returns {got} (an operator returns tensors)")
    if any(o.layout != torch.strided for o in out_leaves):
        raise NotExpressible("returns a non-strided tensor")
    if any(o.dtype.is_complex for o in out_leaves):
        raise NotExpressible("returns a complex tensor (the sweep runs real dtypes)")
    again_leaves = _opaque_leaves(again)
    if (
        _returns_uninitialized(call, args)
        or len(again_leaves) != len(out_leaves)
        or any(
            a.shape != b.shape or not torch.equal(a.nan_to_num(0.5), b.nan_to_num(0.5))
            for a, b in zip(out_leaves, again_leaves, strict=True)
        )
    ):
        raise NotExpressible(
            "nondeterministic: two calls on the same inputs differ, or it returns memory it "
            "never wrote (random or uninitialized output), so no two ways of running it can be "
            "compared"
        )
    inputs = [a for a in args if isinstance(a, torch.Tensor)]
    in_storages = _storages(inputs)
    aliased: list[bool] = []
    seen: set[int] = set()
    for o in out_leaves:
        ptr = o.untyped_storage().data_ptr() if o.untyped_storage().nbytes() else None
        aliased.append(ptr is not None and (ptr in in_storages or ptr in seen))
        if ptr is not None:
            seen.add(ptr)
    n_out = len(out_leaves)

    def fallback(*a: Any) -> Any:
        outs = [
            o.clone() if c else o for o, c in zip(_opaque_leaves(call(*a)), aliased, strict=True)
        ]
        return outs[0] if n_out == 1 else tuple(outs)

    params = ", ".join(f"{t} a{i}" for i, t in enumerate(types))
    ret = "Tensor" if n_out == 1 else "(" + ", ".join(["Tensor"] * n_out) + ")"
    notes = [f"output {k} aliases an input: cloned" for k, c in enumerate(aliased) if c]
    return OpCase(
        name=name,
        sample_index=index,
        dtype=dtype,
        args=args,
        schema=f"({params}) -> {ret}",
        fallback=fallback,
        tensor_pos=tuple(i for i, t in enumerate(types) if t == "Tensor"),
        diff_pos=_differentiable(call, args, opinfo.supports_autograd, notes),
        num_outputs=n_out,
        float_outputs=tuple(k for k, o in enumerate(out_leaves) if o.dtype.is_floating_point),
        supports_autograd=bool(opinfo.supports_autograd),
        supports_forward_ad=bool(opinfo.supports_forward_ad)
        or _forward_ad_ok(call, args, opinfo.supports_autograd),
        supports_gradgrad=bool(opinfo.supports_gradgrad),
        layout_dependent=any(
            getattr(d, "test_name", None) == "test_noncontiguous_samples"
            for d in (*opinfo.skips, *opinfo.decorators)
        ),
        out_shapes=tuple(o.shape for o in out_leaves),
        notes=notes,
    )


def _differentiable(
    call: Callable[..., Any], args: tuple[Any, ...], autograd: bool, notes: list[str]
) -> tuple[int, ...]:
    """The floating tensor arguments that the native op differentiates: all of them, unless
    it refuses some (batch_norm's running statistics), which are then left out."""
    floats = tuple(i for i, a in enumerate(args) if is_float(a))
    if not autograd or _grad_ok(call, args, floats):
        return floats
    kept = tuple(i for i in floats if _grad_ok(call, args, (i,)))
    notes.extend(f"a{i}: the native op does not differentiate it" for i in floats if i not in kept)
    return kept


def _forward_ad_ok(call: Callable[..., Any], args: tuple[Any, ...], autograd: bool) -> bool:
    """Whether ``torch.func.jvp`` of the native op works on the sample (OpInfo's
    ``supports_forward_ad`` is False for some ops whose forward AD works on a sample, e.g.
    linear_cross_entropy's chunked variant): an author writes a jvp where forward AD works."""
    floats = tuple(i for i, a in enumerate(args) if is_float(a))
    if not autograd or not floats:
        return False

    def fn(*diff: torch.Tensor) -> Any:
        a = list(args)
        for i, t in zip(floats, diff, strict=True):
            a[i] = t
        return tuple(o for o in _opaque_leaves(call(*a)) if o.dtype.is_floating_point)

    primals = tuple(args[i] for i in floats)
    try:
        torch.func.jvp(fn, primals, tuple(torch.ones_like(p) for p in primals))
    except Exception:  # the native op's forward AD raises: no jvp, as OpInfo says
        return False
    return True


def _grad_ok(call: Callable[..., Any], args: tuple[Any, ...], positions: tuple[int, ...]) -> bool:
    leaves = [a.detach().requires_grad_() if i in positions else a for i, a in enumerate(args)]
    try:
        with torch.enable_grad():
            call(*leaves)
    except RuntimeError as exc:
        return "not differentiable" not in str(exc)
    return True


# -- the rules --------------------------------------------------------------------------------


def with_diff(case: OpCase, full: Sequence[Any]) -> Callable[..., tuple[torch.Tensor, ...]]:
    """The op's floating outputs as a function of its differentiable arguments, the other
    arguments fixed at ``full``."""

    def fn(*diff: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = list(full)
        for i, t in zip(case.diff_pos, diff, strict=True):
            a[i] = t
        outs = case.outputs(case.fallback(*a))
        return tuple(outs[k] for k in case.float_outputs)

    return fn


def _saved_inputs(case: OpCase, ctx: Any) -> list[Any]:
    full: list[Any] = list(ctx.opinfo_scalars)
    for i, t in zip(case.tensor_pos, ctx.saved_tensors, strict=True):
        full[i] = t
    return full


def setup_context(case: OpCase) -> Callable[..., None]:
    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(*(inputs[i] for i in case.tensor_pos))
        ctx.opinfo_scalars = tuple(None if isinstance(v, torch.Tensor) else v for v in inputs)

    return setup


def vjp_backward(case: OpCase, scale: float = 1.0) -> Callable[..., Any]:
    """The backward: ``torch.func.vjp`` of the op at the saved inputs (``scale`` != 1: a
    mutant with a dropped factor)."""

    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        full = _saved_inputs(case, ctx)
        outs, vjp_fn = torch.func.vjp(with_diff(case, full), *(full[i] for i in case.diff_pos))
        cot = tuple(
            torch.zeros_like(o) if grads[k] is None else grads[k]
            for o, k in zip(outs, case.float_outputs, strict=True)
        )
        diff_grads = vjp_fn(cot)
        result: list[Any] = [None] * len(full)
        for i, g in zip(case.diff_pos, diff_grads, strict=True):
            result[i] = g * scale if scale != 1.0 else g
        return tuple(result)

    return backward


def func_jvp(case: OpCase) -> Callable[..., Any]:
    """The jvp: ``torch.func.jvp`` of the op at the saved inputs."""

    def jvp(ctx: Any, *tangents: Any) -> Any:
        full = _saved_inputs(case, ctx)
        primals = tuple(full[i] for i in case.diff_pos)
        tans = tuple(
            torch.zeros_like(p) if tangents[i] is None else tangents[i]
            for p, i in zip(primals, case.diff_pos, strict=True)
        )
        _, out_tangents = torch.func.jvp(with_diff(case, full), primals, tans)
        result: list[Any] = [None] * case.num_outputs
        for k, t in zip(case.float_outputs, out_tangents, strict=True):
            result[k] = t
        return result[0] if case.num_outputs == 1 else tuple(result)

    return jvp


def vmap_rule(case: OpCase) -> Callable[..., Any]:
    """``torch.vmap`` of the op over the leading dim of every tensor argument. An argument
    that arrives expanded to the batch (stride 0: unbatched at this level) is made contiguous
    first, as docs/writing-an-op.md tells a rule that needs contiguous inputs to do (torch's
    own vmap of e.g. group_norm refuses a stride-0 input)."""
    in_dims = tuple(0 if i in case.tensor_pos else None for i in range(len(case.args)))
    batched = torch.vmap(case.fallback, in_dims=in_dims)

    def rule(*args: Any) -> Any:
        return batched(
            *(
                a.contiguous()
                if isinstance(a, torch.Tensor) and a.dim() > 0 and a.stride(0) == 0
                else a
                for a in args
            )
        )

    return rule


def contiguous_vmap_rule(case: OpCase) -> Callable[..., Any]:
    """:func:`vmap_rule` with contiguous outputs, the layout :func:`fake_vmap_rule` predicts."""
    batched = vmap_rule(case)

    def rule(*args: Any) -> Any:
        out = batched(*args)
        if case.num_outputs == 1:
            return out.contiguous()
        return tuple(o.contiguous() for o in out)

    return rule


def fake_vmap_rule(case: OpCase) -> Callable[..., Any]:
    """The batched fake: the op's fake on the first batch entry, as a contiguous ``(B, ...)``
    output (``torch.vmap`` cannot run inside a fake kernel: see test_torch_limits.py)."""

    def fake(*args: Any) -> Any:
        size = args[case.tensor_pos[0]].shape[0]
        one = case.fallback(*(a[0] if isinstance(a, torch.Tensor) else a for a in args))
        outs = [o.new_empty((size, *o.shape)) for o in case.outputs(one)]
        return outs[0] if case.num_outputs == 1 else tuple(outs)

    return fake


def rules(case: OpCase) -> dict[str, Any]:
    """``register_vmap_op`` keywords with the generic rules of ``case``."""
    options: dict[str, Any] = {
        "schema": case.schema,
        "fake_fn": case.fallback,
        "vmap_fn": contiguous_vmap_rule(case),
        "fake_vmap_fn": fake_vmap_rule(case),
        "sample_inputs": lambda device: [SampleInput(case.args)],
    }
    if not case.differentiable:
        options["differentiable"] = False
        return options
    options["setup_context"] = setup_context(case)
    options["backward"] = vjp_backward(case)
    if case.supports_forward_ad:  # an author writes no jvp for an op without forward AD
        options["jvp"] = func_jvp(case)
    return options


def register(case: OpCase, qualname: str, **overrides: Any) -> VmapOp[Any, Any]:
    """Register ``case`` under ``qualname`` with its generic rules (``overrides`` replace some:
    the mutants)."""
    return register_vmap_op(case.fallback, name=qualname, **{**rules(case), **overrides})


def register_twin(case: OpCase, qualname: str) -> Any:
    """The same op and rules as a ``torch.library.custom_op`` (no forward AD there): the
    baseline that tells a torch limit from an opreg problem. Remove it with
    :func:`destroy_twin`."""
    twin = torch.library.custom_op(qualname, case.fallback, mutates_args=(), schema=case.schema)
    twin.register_fake(case.fallback)

    def batched(info: Any, in_dims: tuple[int | None, ...], *args: Any) -> Any:
        out = torch.vmap(case.fallback, in_dims=in_dims)(*args)
        return out, 0 if case.num_outputs == 1 else (0,) * case.num_outputs

    twin.register_vmap(batched)
    if case.differentiable:
        twin.register_autograd(vjp_backward(case), setup_context=setup_context(case))
    return twin


def destroy_twin(twin: Any) -> None:
    """Remove a :func:`register_twin` op from the dispatcher (torch keeps no public way)."""
    from torch._library.custom_ops import OPDEF_TO_LIB

    OPDEF_TO_LIB.pop(twin._qualname, None)
    twin._lib._destroy()
