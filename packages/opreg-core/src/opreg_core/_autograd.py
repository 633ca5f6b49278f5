"""Autograd kernels: the user's backward for the op, a derived backward for its batched op.

The kernel on the ``Autograd`` key applies a *single-level* autograd Function. Under
``torch.func`` transforms the inputs that reach this kernel are already the grad level's
wrapper tensors, so recording on them is exactly what PyTorch's own ATen autograd kernels do;
this is why ``torch.func.grad``, ``jacrev``, ``grad(vmap)`` and ``vmap(grad)`` work, where
``torch.library.register_autograd`` (which goes through ``custom_function_call``) raises.

Without a backward the Function's backward raises, so a gradient through the op is an error,
never silently zero. A list argument or a ``Tensor[]`` output is spread into its elements for
the Function (autograd tracks no tensor inside a list); the user's ``setup_context`` and
``backward`` see them regrouped (a list of gradients for a list input, one list of output
gradients for a list output).

The batched op's backward is ``vmap`` of the user's ``setup_context`` + ``backward`` over the
batch, so users write the backward once.

A backward may return, for an input that the op broadcasts, a gradient of the broadcast shape:
it is summed to the input's shape as autograd does (``sum_to_size``). The derived batched
backward does this per sample, so the sum never runs over the batch; a gradient that cannot
be summed to its input's shape is an error naming the op, the argument and both shapes.

Forward mode: with a user ``jvp`` the same Function gets a ``jvp`` staticmethod, and the kernel
applies it when a tangent passes through the call (``torch.func.jvp``/``jacfwd`` at the top of
functorch's stack, or a dual tensor). Each forward-mode level reaches the kernel with its own
wrapper tensors, so one Function per level composes with ``grad``, ``jacrev`` and ``vmap`` as
the backward does. The batched op's jvp is ``vmap`` of the user's ``setup_context`` + ``jvp``.
Tangents arrive input-shaped; an output tangent must have its output's shape (an error naming
the op and both shapes otherwise, never a silently broadcast tangent). Without a ``jvp`` the
kernel raises when a tangent would pass: a lost tangent would be silently zero. A jvp rule
(the user's or the derived one) runs where ``torch.func`` transforms can start, one level below
the jvp level being processed (``call_jvp_rule``), so rules may use ``torch.func.jvp``/``vmap``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from ._aliasing import passed_kernel
from ._batching import UNBATCHED
from ._errors import NotDifferentiableError
from ._private import (
    AFTER_AUTOGRAD_KEYSET,
    AutoDispatchBelowAutograd,
    apply_function,
    call_jvp_rule,
    enable_single_level_autograd_function,
    entry_point,
    forward_mode_ad_active,
    function_class,
    grad_modes,
    redispatch_boxed,
    set_backward,
    tangent_flags,
    transform_grad_modes,
)
from ._signature import Signature

SetupContext = Callable[[Any, tuple[Any, ...], Any], None]
Backward = Callable[..., Any]
Jvp = Callable[..., Any]


class DerivedContext:
    """A stand-in for autograd's ``ctx`` when the user's backward (or jvp) runs under ``vmap``.

    ``saved_tensors`` is what ``save_for_backward`` saved; in a jvp (``for_jvp``) it is what
    ``save_for_forward`` saved if anything, as autograd's ``ctx`` gives it to a jvp.
    """

    def __init__(self, needs_input_grad: tuple[bool, ...], for_jvp: bool = False) -> None:
        self.needs_input_grad = needs_input_grad
        self._for_jvp = for_jvp
        self._saved: tuple[Any, ...] = ()
        self.saved_for_forward: tuple[Any, ...] | None = None

    @property
    def saved_tensors(self) -> tuple[Any, ...]:
        if self._for_jvp and self.saved_for_forward is not None:
            return self.saved_for_forward
        return self._saved

    def save_for_backward(self, *tensors: Any) -> None:
        self._saved = tensors

    def save_for_forward(self, *tensors: Any) -> None:
        self.saved_for_forward = tensors

    def mark_non_differentiable(self, *args: Any) -> None:
        """Accepted for compatibility: the batched op's own Function does the marking."""

    def set_materialize_grads(self, value: bool) -> None:
        """Accepted for compatibility: gradients reaching the derived backward are dense."""


def requires_grad(value: Any) -> bool:
    """Whether an argument (a tensor, or a list of them) requires grad."""
    if isinstance(value, torch.Tensor):
        return value.requires_grad
    if isinstance(value, (list, tuple)):
        return any(isinstance(v, torch.Tensor) and v.requires_grad for v in value)
    return False


def flatten_inputs(full: Sequence[Any]) -> tuple[tuple[int, ...], list[Any]]:
    """Spread lists into separate values, so autograd sees every tensor in a list input (or
    output) as its own.

    The spec has one entry per argument: -1 for a plain value, else the list's length. Every
    list is spread, whatever it holds (``Tensor?[]`` of Nones, an empty ``Tensor[]``, an
    ``int[]``): which tensor arguments are spread then depends on the schema only, never on
    values, and a backward's list of gradients always meets a list input.
    """
    spec: list[int] = []
    flat: list[Any] = []
    for value in full:
        if isinstance(value, (list, tuple)):
            spec.append(len(value))
            flat.extend(value)
        else:
            spec.append(-1)
            flat.append(value)
    return tuple(spec), flat


def _spread(n: int, value: Any) -> Sequence[Any]:
    """One argument's flat values under spec entry ``n`` (see :func:`flatten_inputs`)."""
    return (value,) if n < 0 else value


def unflatten_inputs(spec: tuple[int, ...], flat: Sequence[Any]) -> tuple[Any, ...]:
    out: list[Any] = []
    i = 0
    for n in spec:
        if n < 0:
            out.append(flat[i])
            i += 1
        else:
            out.append(list(flat[i : i + n]))
            i += n
    return tuple(out)


def flatten_grads(spec: tuple[int, ...], grads: Sequence[Any]) -> list[Any]:
    flat: list[Any] = []
    for n, g in zip(spec, grads, strict=True):
        if n < 0:
            flat.append(g)
        else:
            flat.extend([None] * n if g is None else g)
    return flat


def _normalize(qualname: str, values: Any, count: int, what: str) -> tuple[Any, ...]:
    """A user backward's gradients (``what="gradients"``, one per input) or jvp's tangents
    (``what="tangents"``, one per output) as a tuple of ``count``, or a clear error."""
    result = values if isinstance(values, tuple) else (values,)
    if len(result) != count:
        fn, per, none = (
            ("backward", "input", "inputs that get no gradient")
            if what == "gradients"
            else ("jvp", "output", "an output that gets no tangent")
        )
        raise RuntimeError(
            f"opreg: {qualname}: {fn} returned {len(result)} {what}, expected one per {per} "
            f"({count}; use None for {none})"
        )
    return result


def _empty_ctx_error(qualname: str, rule: str, exc: Exception) -> RuntimeError:
    """The error for a user ``backward``/``jvp`` (``rule``) that failed reading a ``ctx`` that
    no ``setup_context`` filled."""
    return RuntimeError(
        f"opreg: {qualname}: {rule} raised {type(exc).__name__}: {exc}. The op was registered "
        "without setup_context, so ctx holds no saved tensors or attributes; pass "
        f"setup_context=... to save what {rule} needs."
    )


def _is_expandable(shape: Sequence[int], to: Sequence[int]) -> bool:
    """Whether ``shape`` broadcasts to ``to``: autograd's test before it sums a gradient."""
    extra = len(to) - len(shape)
    if extra < 0:
        return False
    tail = tuple(to[extra:])
    return tail == tuple(shape) or all(s in (t, 1) for s, t in zip(shape, tail, strict=True))


def _flat_input_name(names: Sequence[str], spec: tuple[int, ...], index: int) -> str:
    """The schema name of flat input ``index`` (``xs[1]`` for an element of a list input)."""
    start = 0
    for name, n in zip(names, spec, strict=True):
        if n < 0:
            if index == start:
                return name
            start += 1
        else:
            if index < start + n:
                return f"{name}[{index - start}]"
            start += n
    return f"input {index}"


def run_backward(
    qualname: str,
    backward: Backward,
    ctx: Any,
    grads: Sequence[Any],
    user_backward: bool,
    setup_context: SetupContext | None,
) -> Any:
    """``backward(ctx, *grads)``; where it fails as reading an empty ``ctx`` fails (a missing
    attribute, unpacking no saved tensors) while the user's backward has no
    ``setup_context``, an error saying so. Other errors are the backward's own and pass
    through unchanged."""
    try:
        return backward(ctx, *grads)
    except (AttributeError, IndexError, ValueError) as exc:
        if not user_backward or setup_context is not None:
            raise
        raise _empty_ctx_error(qualname, "backward", exc) from exc


def check_grad_shape(
    qualname: str,
    names: Sequence[str],
    spec: tuple[int, ...],
    index: int,
    grad: torch.Tensor,
    shape: Sequence[int],
) -> None:
    """Raise unless autograd can sum ``grad`` (for flat input ``index``) to the input's
    ``shape``: over leading extra dims and dims where the input has size 1."""
    if not _is_expandable(shape, grad.shape):
        raise RuntimeError(
            f"opreg: {qualname}: backward returned a gradient of shape {tuple(grad.shape)} for "
            f"argument '{_flat_input_name(names, spec, index)}' of shape {tuple(shape)}; a "
            "gradient must have its input's shape or a shape the input broadcasts to (it is "
            "then summed over the broadcast dims)"
        )


def output_shapes(outputs: Sequence[Any]) -> list[torch.Size | None]:
    """Each output's shape (None for a non-tensor), for :func:`check_tangents`."""
    return [o.shape if isinstance(o, torch.Tensor) else None for o in outputs]


def check_tangents(
    qualname: str, tangents: Sequence[Any], shapes: Sequence[torch.Size | None]
) -> None:
    """Raise unless every output tangent is None or a tensor of its output's shape."""
    for i, (t, shape) in enumerate(zip(tangents, shapes, strict=True)):
        if t is None:
            continue
        if shape is None:
            raise RuntimeError(
                f"opreg: {qualname}: jvp returned a tangent for output {i}, which is not a "
                "tensor; return None for it"
            )
        if not isinstance(t, torch.Tensor):
            raise RuntimeError(
                f"opreg: {qualname}: jvp returned a {type(t).__name__} as the tangent of output "
                f"{i}; return a tensor of the output's shape, or None"
            )
        if t.shape != shape:
            raise RuntimeError(
                f"opreg: {qualname}: jvp returned a tangent of shape {tuple(t.shape)} for output "
                f"{i} of shape {tuple(shape)}; an output tangent must have its output's shape "
                "(the tangent of an input the op broadcasts has the input's shape: expand it, "
                "e.g. x_t.expand(out.shape))"
            )


def non_differentiable_backward(qualname: str) -> Backward:
    def backward(ctx: Any, *grads: Any) -> Any:
        raise NotDifferentiableError(
            f"opreg: {qualname} was registered without a backward, so it cannot be "
            "differentiated. Pass backward=... (and setup_context=...) to register_vmap_op, or "
            "differentiable=False if its outputs are not differentiable by nature.",
            qualname,
        )

    return backward


def unflatten_tangents(spec: tuple[int, ...], flat: Sequence[Any]) -> tuple[Any, ...]:
    """Tangents per declared input: a list input's is a list (None if no element has one)."""
    out = unflatten_inputs(spec, flat)
    return tuple(None if isinstance(t, list) and all(e is None for e in t) else t for t in out)


class AutogradKernel(NamedTuple):
    """An operator's ``Autograd`` kernel, and how the direct call records a call itself."""

    kernel: Callable[..., Any]  #: registered with ``with_keyset=True``
    #: how the direct call records a call; None where the op's outputs need flattening (a
    #: list output)
    record: DirectRecord | None


def make_autograd_kernel(
    qualname: str,
    overload: Any,
    signature: Signature,
    setup_context: SetupContext | None,
    backward: Backward,
    *,
    user_backward: bool = False,
    jvp: Jvp | None = None,
    user_jvp: bool = False,
    fast: bool = True,
) -> AutogradKernel:
    """The ``Autograd`` kernel (``with_keyset=True``) of one operator, and its direct record.

    ``fast``: the Function's graph node calls its backward itself (``function_class``; on a
    tested torch only, see ``_versions``).

    ``jvp``: the forward-mode rule (``jvp(ctx, *input_tangents)``, one tangent per declared
    input, a list of them for a list input); None: forward mode through the op raises.
    ``user_jvp``: it is the user's (an error without ``setup_context`` then says so).

    ``user_backward``: ``backward`` is the user's; if it fails while no ``setup_context`` was
    given, the error says that ``ctx`` holds nothing saved, and a gradient whose shape cannot
    be summed to its input's is an error naming the op and argument (autograd sums the rest).
    The forward records input shapes for that check only then: a derived backward reduces
    per sample itself, and without a backward there is nothing to check.
    """
    names = signature.names
    count = len(names)
    single_output = signature.num_returns == 1
    call = entry_point(overload)
    tensor = torch.Tensor

    # Without list arguments the flat inputs are the arguments themselves (no flattening per
    # call); without keyword-only ones too, forward passes them on as they are.
    plain = not signature.list_args
    plain_spec = (-1,) * count
    positional_only = plain and not signature.kwarg_only
    # A list output is spread into its tensors too (autograd tracks no tensor inside a list):
    # forward returns them flat and puts the outputs' spec in the call's meta (a third entry).
    returns_list = signature.returns_list

    def forward(meta: tuple[Any, ...], *flat: Any) -> Any:
        spec, modes = meta[0], meta[1]
        if positional_only:
            args: tuple[Any, ...] = flat
            kwargs: dict[str, Any] = {}
        else:
            args, kwargs = signature.split(flat if plain else unflatten_inputs(spec, flat))
        if modes is None:
            with AutoDispatchBelowAutograd():
                out = call(*args, **kwargs)
        else:
            # Autograd runs forward with gradients and tangents off; under torch.func the call
            # goes on to the outer levels, which must differentiate it as the kernel found
            # them (jacrev(jacrev(op)), jacfwd(jacrev(op)) would silently lose the op's term).
            with grad_modes(modes), AutoDispatchBelowAutograd():
                out = call(*args, **kwargs)
        if not returns_list:
            return out
        out_spec, flat_out = flatten_inputs((out,) if single_output else out)
        meta[2].append(out_spec)
        return tuple(flat_out)

    def outputs_of(meta: tuple[Any, ...], flat: Any) -> Any:
        """The op's outputs from the Function's (the list outputs regrouped)."""
        outs = unflatten_inputs(meta[2][0], flat)
        return outs[0] if single_output else outs

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        spec = inputs[0][0]
        ctx.opreg_spec = spec
        if returns_list:
            ctx.opreg_out_spec = inputs[0][2][0]
            output = outputs_of(inputs[0], output)
        needs = ctx.needs_input_grad  # per flat input; entry 0: the spec's
        if not user_backward:
            ctx.opreg_needs = needs  # for a derived backward
        else:
            # Shapes of the inputs that need a gradient (None for the others), for backward's
            # check. One list comprehension: this runs on every call that records.
            ctx.opreg_shapes = [x.shape if n else None for x, n in zip(inputs, needs, strict=False)]
        # One flag per declared input (a list input needs a gradient if any element does).
        if plain:
            ctx.needs_input_grad = needs[1:]
        else:
            ctx.needs_input_grad = tuple(
                any(n) if isinstance(n, list) else n for n in unflatten_inputs(spec, needs[1:])
            )
        if setup_context is not None:
            setup_context(ctx, inputs[1:] if plain else unflatten_inputs(spec, inputs[1:]), output)
        if jvp is not None:
            ctx.opreg_tangents = tangent_flags(inputs)
            ctx.opreg_out_shapes = output_shapes((output,) if single_output else tuple(output))
            # The jvp runs before autograd saves what setup_context saved for the backward:
            # hand the same tensors to the jvp (as save_for_forward), unless it saved its own.
            to_save = ctx.to_save
            if to_save is not None and ctx.saved_for_forward is None:
                ctx.save_for_forward(*to_save)

    def backward_wrapper(ctx: Any, *grads: Any) -> Any:
        spec = ctx.opreg_spec
        if returns_list:  # one gradient per declared output, a list for a list output
            grads = unflatten_inputs(ctx.opreg_out_spec, grads)
        grads_in = run_backward(qualname, backward, ctx, grads, user_backward, setup_context)
        flat = flatten_grads(spec, _normalize(qualname, grads_in, count, "gradients"))
        # (A count of gradients other than the inputs' is autograd's to report.)
        if user_backward and len(flat) == len(shapes := ctx.opreg_shapes) - 1:
            for i, g in enumerate(flat, 1):
                if isinstance(g, tensor) and g.shape != shapes[i] and shapes[i] is not None:
                    check_grad_shape(qualname, names, spec, i - 1, g, shapes[i])  # autograd sums
        return (None, *flat)

    def jvp_wrapper(ctx: Any, *flat_tangents: Any) -> Any:
        flags = ctx.opreg_tangents
        if flags is not None:  # None, not the zeros autograd made up, for no tangent
            flat_tangents = tuple(
                t if f else None for t, f in zip(flat_tangents, flags, strict=True)
            )
        tangents = unflatten_tangents(ctx.opreg_spec, flat_tangents[1:])
        assert jvp is not None  # the Function has no jvp otherwise
        try:
            result = call_jvp_rule(jvp, ctx, *tangents)
        except (AttributeError, IndexError, ValueError) as exc:
            if not user_jvp or setup_context is not None:
                raise
            raise _empty_ctx_error(qualname, "jvp", exc) from exc
        shapes = ctx.opreg_out_shapes
        result = _normalize(qualname, result, len(shapes), "tangents")
        check_tangents(qualname, result, shapes)
        return result[0] if single_output else result

    methods: dict[str, Any] = {
        "forward": staticmethod(forward),
        "setup_context": staticmethod(setup),
        "backward": staticmethod(backward_wrapper),
    }
    if jvp is not None:
        methods["jvp"] = staticmethod(jvp_wrapper)
    function = function_class(
        f"{qualname.replace('::', '_')}_Function", methods, node_calls_backward=fast
    )
    record_direct = (
        DirectRecord(qualname, signature, setup_context, backward, user_backward)
        if not returns_list
        else None
    )
    redispatch = redispatch_boxed(overload)
    grad_enabled = torch.is_grad_enabled

    def record(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Apply the Function (records the call for autograd / forward mode)."""
        full = signature.full_args(args, kwargs)
        spec, flat = (plain_spec, full) if plain else flatten_inputs(full)
        modes = transform_grad_modes()
        meta: tuple[Any, ...] = (spec, modes, []) if returns_list else (spec, modes)
        if modes is None:  # no torch.func level: single-level Functions need no permission
            out = apply_function(function, meta, *flat)
        else:
            with enable_single_level_autograd_function():
                out = apply_function(function, meta, *flat)
        return outputs_of(meta, out) if returns_list else out

    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if forward_mode_ad_active(args, kwargs):
            if jvp is not None:
                return record(args, kwargs)
            raise NotDifferentiableError(
                f"opreg: {qualname}: forward-mode AD (torch.func.jvp, jacfwd, hessian, dual "
                "tensors) through this op needs a jvp: the op was registered without one, and "
                "its tangent would be lost. Pass jvp=... (with setup_context=...) to "
                "register_vmap_op, use reverse mode (torch.func.grad, vjp, jacrev), or "
                "differentiable=False if no gradient flows.",
                qualname,
                "forward",
            )
        if grad_enabled():
            needs_grad = False
            for a in args:
                if isinstance(a, tensor):
                    if a.requires_grad:
                        needs_grad = True
                        break
                elif isinstance(a, (list, tuple)) and requires_grad(a):
                    needs_grad = True
                    break
            if needs_grad or (kwargs and any(map(requires_grad, kwargs.values()))):
                return record(args, kwargs)
        return redispatch(keyset & AFTER_AUTOGRAD_KEYSET, *args, **kwargs)

    return AutogradKernel(kernel, record_direct)


class DirectRecord:
    """How the direct call (``_call_path``) records a call of a differentiable op: the op's
    Function for a call outside every ``torch.func`` level, one per
    device kernel (``function_for``; ``applies`` caches them), whose forward runs the kernel
    and the op's ``setup_context`` in one Python frame, as a hand-written
    ``forward(ctx, ...)`` does. It records what the op's Function records, and its backward
    is the same: the user's, with the same checks of its gradients, except that the check of
    their shapes (a clearer error than autograd's own, which still follows a wrong shape) runs
    until one backward has passed it, on at most the first ``SHAPE_RECORDS`` forwards, not on
    every call: recording the inputs' shapes costs a tenth of the call."""

    def __init__(
        self,
        qualname: str,
        signature: Signature,
        setup_context: SetupContext | None,
        backward: Backward,
        user_backward: bool,
    ) -> None:
        self.qualname = qualname
        self.names = signature.names
        self.setup_context = setup_context
        self.backward = backward
        self.user_backward = user_backward
        self.num_returns = signature.num_returns
        self.npos = len(signature.positional)
        #: keyword-only argument names: the kernel gets them by name (the Function, and so
        #: ``forward``, gets every argument positionally, in declaration order)
        self.keywords = signature.kwarg_only
        self.tensor_positions = signature.tensor_positions
        #: positions of the list arguments (``Tensor[]``, ``Tensor?[]``): autograd gets every
        #: element as an input of its own, after the declared arguments (``_list_rules``)
        self.list_slots = signature.list_positions
        #: device kernel -> ``apply`` of its Function
        self.applies: dict[Callable[..., Any], Callable[..., Any]] = {}

    #: At most this many forwards of each Function record the inputs' shapes for the
    #: gradients' check: after them, or once one backward has passed the check, a wrong shape
    #: is reported by autograd's own check (an error still, naming the Function).
    SHAPE_RECORDS = 32

    def function_for(self, kernel: Callable[..., Any]) -> Callable[..., Any]:
        """``apply`` of the Function whose forward runs ``kernel`` (made once per kernel).

        Its first forwards run ``kernel`` as given (its first call checks the outputs for
        aliasing, ``_aliasing``) and record the shapes. Once a backward has passed the shapes'
        check, or the next forward after ``SHAPE_RECORDS`` recording ones, the Function
        settles: its ``forward`` is swapped for one that calls what the kernel runs
        (``passed_kernel``) and records nothing, its ``backward`` for one that checks no
        shapes. Without a user backward it settles after its first forward.

        ``apply`` takes every argument in declaration order, then (with list arguments) the
        elements of each list, so that autograd sees them; ``setup_context`` and the backward
        see the declared arguments, and ``ctx.needs_input_grad`` has one flag per declared
        argument (a list's: any element needs a gradient), as through the dispatcher; the
        shapes' check names a list's element (``xs[1]``)."""
        qualname, names, backward = self.qualname, self.names, self.backward
        setup_context, user_backward = self.setup_context, self.user_backward
        count = len(names)
        plain_spec = (-1,) * count
        positions = self.tensor_positions
        multiple = self.num_returns > 1
        tensor = torch.Tensor
        npos, keywords = self.npos, self.keywords
        registered = kernel  # the key of ``applies``: the kernel the direct call looks up
        run = passed_kernel(kernel)
        if keywords:
            kernel, run = _by_name(kernel, npos, keywords), _by_name(run, npos, keywords)
        if self.list_slots:  # the kernel's lists are its own (setup_context gets others)
            kernel, run = _own_lists(kernel, self.list_slots), _own_lists(run, self.list_slots)
        left = [self.SHAPE_RECORDS if user_backward else 0]  # recording forwards left
        passed = [False]  # a call of ``kernel`` has returned (its aliasing check passed)

        def settle() -> None:
            """From now on: forwards call the kernel itself and record nothing, and backwards
            check no shapes (a wrong one is autograd's error)."""
            left[0] = 0
            function.forward = staticmethod(flat_forward(plain_forward))
            set_backward(function, flat_backward(plain_backward))

        if self.list_slots:

            def shapes_of(args: tuple[Any, ...]) -> Any:
                """The spec and each flat input's shape (None where no gradient is wanted),
                the list elements spread as the dispatcher's Function spreads them."""
                spec, flat = flatten_inputs(args)
                return spec, [
                    x.shape if isinstance(x, tensor) and x.requires_grad else None for x in flat
                ]

            def check_shapes(grads: tuple[Any, ...], recorded: Any) -> None:
                spec, shapes = recorded
                flat = flatten_grads(spec, grads)
                for i, (g, shape) in enumerate(zip(flat, shapes, strict=False)):
                    if isinstance(g, tensor) and shape is not None and g.shape != shape:
                        check_grad_shape(qualname, names, spec, i, g, shape)

        else:

            def shapes_of(args: tuple[Any, ...]) -> Any:
                return [None if args[i] is None else args[i].shape for i in positions]

            def check_shapes(grads: tuple[Any, ...], recorded: Any) -> None:
                for shape, i in zip(recorded, positions, strict=True):
                    g = grads[i]
                    if isinstance(g, tensor) and shape is not None and g.shape != shape:
                        check_grad_shape(qualname, names, plain_spec, i, g, shape)

        def first_forward(ctx: Any, *args: Any) -> Any:
            if left[0] <= 0 and passed[0]:  # the recording forwards are over
                settle()
                return plain_forward(ctx, *args)
            out = kernel(*args)
            passed[0] = True
            if multiple and type(out) is list:  # the dispatcher would hand autograd a tuple
                out = tuple(out)
            if left[0] > 0:  # the tensor inputs' shapes, for the gradients' check
                ctx.opreg_shapes = shapes_of(args)
                left[0] -= 1
            elif not user_backward:  # nothing to check: settle at once
                settle()
            if setup_context is not None:
                setup_context(ctx, args, out)
            return out

        def plain_forward(ctx: Any, *args: Any) -> Any:
            out = run(*args)
            if multiple and type(out) is list:
                out = tuple(out)
            if setup_context is not None:
                setup_context(ctx, args, out)
            return out

        def direct_backward(ctx: Any, *grads: Any) -> Any:
            grads_in = run_backward(qualname, backward, ctx, grads, user_backward, setup_context)
            flat = _normalize(qualname, grads_in, count, "gradients")
            shapes = getattr(ctx, "opreg_shapes", None)
            if shapes is not None:
                check_shapes(flat, shapes)
                settle()
            return flat

        def plain_backward(ctx: Any, *grads: Any) -> Any:
            grads_in = run_backward(qualname, backward, ctx, grads, user_backward, setup_context)
            if type(grads_in) is tuple and len(grads_in) == count:
                return grads_in
            return _normalize(qualname, grads_in, count, "gradients")

        flat_forward, flat_backward = _list_rules(self.list_slots, count)
        methods = {
            "forward": staticmethod(flat_forward(first_forward)),
            "backward": staticmethod(flat_backward(direct_backward)),
        }
        name = f"{qualname.replace('::', '_')}_Function"
        # (Only the direct call records through these, and only on a tested torch.)
        function: Any = function_class(name, methods, node_calls_backward=True)
        apply: Callable[..., Any] = function.apply
        self.applies[registered] = apply
        return apply


Rule = Callable[..., Any]


def _list_rules(
    slots: tuple[int, ...], count: int
) -> tuple[Callable[[Rule], Rule], Callable[[Rule], Rule]]:
    """How a direct Function's forward and backward meet autograd's inputs
    (:meth:`DirectRecord.function_for`): as they are without list arguments. With them
    (``slots``: their positions among the ``count`` declared arguments), autograd gets the
    declared arguments, then every list's elements: a forward that hands the rule the declared
    ones (each list a new one: what the rule does to it stays there, as through the
    dispatcher) with one ``ctx.needs_input_grad`` flag each (a list's: any element's), and a
    backward that gives each element its gradient (and the lists themselves none)."""
    if not slots:
        return _same, _same

    def list_forward(forward: Rule) -> Rule:
        def forward_spread(ctx: Any, *values: Any) -> Any:
            flags = ctx.needs_input_grad
            needs = [*flags[:count]]
            declared = [*values[:count]]
            lengths = []
            start = count
            for i in slots:
                end = start + len(values[i])
                needs[i] = True in flags[start:end]
                declared[i] = [*values[start:end]]  # a list of its own, as the dispatcher's
                lengths.append(end - start)
                start = end
            ctx.needs_input_grad = tuple(needs)
            ctx.opreg_lengths = lengths
            return forward(ctx, *declared)

        return forward_spread

    def list_backward(backward: Rule) -> Rule:
        def backward_spread(ctx: Any, *grads: Any) -> Any:
            declared = list(backward(ctx, *grads))
            for i, n in zip(slots, ctx.opreg_lengths, strict=True):
                g = declared[i]
                declared[i] = None
                declared += [None] * n if g is None else g
            return tuple(declared)

        return backward_spread

    return list_forward, list_backward


def _same(rule: Rule) -> Rule:
    return rule


def _own_lists(kernel: Callable[..., Any], slots: tuple[int, ...]) -> Callable[..., Any]:
    """``kernel`` called with a new list at each of ``slots`` (declared positions): the
    dispatcher hands each kernel lists of its own, so that one changing its list (``pop``)
    changes nothing its caller or ``setup_context`` holds."""

    def call(*args: Any) -> Any:
        own = [*args]
        for i in slots:
            own[i] = [*own[i]]
        return kernel(*own)

    return call


def _by_name(
    kernel: Callable[..., Any], npos: int, keywords: tuple[str, ...]
) -> Callable[..., Any]:
    """``kernel`` called with all arguments in declaration order: the keyword-only ones (the
    last ``len(keywords)``) passed by name, as the dispatcher passes them."""

    def call(*full: Any) -> Any:
        return kernel(*full[:npos], **dict(zip(keywords, full[npos:], strict=True)))

    return call


def derive_batched_backward(
    qualname: str,
    names: Sequence[str],
    out_dims: Sequence[int | None],
    setup_context: SetupContext | None,
    backward: Backward,
) -> tuple[SetupContext, Backward]:
    """``setup_context`` and ``backward`` of the batched op, derived from the user's by vmap.

    The batched op's inputs carry the batch at dim 0 and its outputs at ``out_dims``; the
    derived backward replays the user's ``setup_context`` and ``backward`` per sample under
    ``torch.vmap`` (so they see single samples) and returns gradients batched at dim 0. A
    per-sample gradient of a broadcast shape is summed to its input's per-sample shape inside
    the vmap, as autograd does for the op itself; summed outside, it would mix the batch in.
    ``names``: the op's argument names in declaration order, for errors.
    """
    single_output = len(out_dims) == 1

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        outputs = (output,) if single_output else tuple(output)
        # Spread as the batched op's kernel spread them (its setup set the spec).
        spec = ctx.opreg_spec
        flat = [v for n, value in zip(spec, inputs, strict=True) for v in _spread(n, value)]
        out_spec, out_values = flatten_inputs(outputs)  # list outputs spread too
        saved = [x for x in (*flat, *out_values) if isinstance(x, torch.Tensor)]
        ctx.save_for_backward(*saved)
        ctx.opreg_derived = (
            spec,
            [x if not isinstance(x, torch.Tensor) else None for x in flat],
            [x if not isinstance(x, torch.Tensor) else None for x in out_values],
            [isinstance(x, torch.Tensor) for x in flat],
            [isinstance(x, torch.Tensor) for x in out_values],
            out_spec,
            [getattr(x, UNBATCHED, False) is True for x in flat],
        )

    def derived_backward(ctx: Any, *grads: Any) -> Any:
        spec, flat_in, inputs, input_dims, outputs, _ = saved_values(ctx)
        needs = tuple(ctx.needs_input_grad)
        grad_dims = tuple(_dims_where(g, d) for g, d in zip(grads, out_dims, strict=True))
        output_dims = tuple(_dims_where(o, d) for o, d in zip(outputs, out_dims, strict=True))
        # Per-sample shapes of the flat inputs that need a gradient (the batch is dim 0);
        # ctx.opreg_needs is set by the batched op's kernel (make_autograd_kernel's setup).
        sample_shapes = [
            x.shape[1:] if need else None
            for x, need in zip(flat_in, ctx.opreg_needs[1:], strict=True)
        ]
        # vmap cannot return None: keep the tensors, remember where they were.
        present: list[bool] = []

        def per_sample(ins: tuple[Any, ...], outs: tuple[Any, ...], gs: tuple[Any, ...]) -> Any:
            sample_ctx = DerivedContext(needs)
            if setup_context is not None:
                setup_context(sample_ctx, ins, outs[0] if single_output else outs)
            result = _normalize(qualname, backward(sample_ctx, *gs), len(ins), "gradients")
            flat = flatten_grads(spec, result)
            for i, (g, shape) in enumerate(zip(flat, sample_shapes, strict=False)):
                if shape is not None and isinstance(g, torch.Tensor) and g.shape != shape:
                    check_grad_shape(qualname, names, spec, i, g, shape)
                    flat[i] = g.sum_to_size(shape)
            present[:] = [isinstance(r, torch.Tensor) for r in flat]
            return tuple(r for r in flat if isinstance(r, torch.Tensor))

        batched = torch.vmap(per_sample, in_dims=(input_dims, output_dims, grad_dims))(
            inputs, outputs, grads
        )
        it = iter(batched)
        flat_grads = [next(it) if p else None for p in present]
        return unflatten_inputs(spec, flat_grads)

    return setup, derived_backward


def _dims_where(value: Any, d: int | None) -> Any:
    """vmap in_dims of an output (or its gradient) batched at ``d``: ``d`` for a tensor, one
    entry per element for a list (None for a non-tensor), None for anything else."""
    if isinstance(value, torch.Tensor):
        return d
    if isinstance(value, (list, tuple)):
        return [d if isinstance(v, torch.Tensor) else None for v in value]
    return None


def saved_values(
    ctx: Any,
) -> tuple[tuple[int, ...], list[Any], tuple[Any, ...], tuple[Any, ...], tuple[Any, ...], Any]:
    """The batched op's inputs and outputs as its derived ``setup_context`` saved them:
    ``(spec, flat inputs, inputs, their vmap in_dims, outputs, which outputs are tensors)``.

    An input that is an unbatched argument expanded to the batch (marked ``UNBATCHED`` by the
    batching rule) is given unbatched (in_dim None), as its first entry: a rule written for
    one sample may need it as the sample it is (contiguous, e.g. ``group_norm``'s backward;
    of the sample's rank, e.g. ``channels_last``), which the expanded copy, batched, is not.
    Its gradient still comes back batched from the vmap, one per entry (autograd sums them
    through the expand); where a derivative flows back through the first entry (a backward
    that is differentiated itself), the expand sums it the same way: nothing reads the
    expanded argument's entries apart."""
    spec, in_other, out_other, in_is_t, out_is_t, out_spec, unbatched = ctx.opreg_derived
    saved = iter(ctx.saved_tensors)
    flat_in = [next(saved) if t else o for t, o in zip(in_is_t, in_other, strict=True)]
    flat_out = [next(saved) if t else o for t, o in zip(out_is_t, out_other, strict=True)]
    outputs = unflatten_inputs(out_spec, flat_out)
    if any(unbatched):
        samples = [x.select(0, 0) if u else x for x, u in zip(flat_in, unbatched, strict=True)]
        inputs = unflatten_inputs(spec, samples)
        dims = [0 if t and not u else None for t, u in zip(in_is_t, unbatched, strict=True)]
        input_dims = unflatten_inputs(spec, dims)
    else:
        inputs = unflatten_inputs(spec, flat_in)
        input_dims = unflatten_inputs(spec, [0 if t else None for t in in_is_t])
    return spec, flat_in, inputs, input_dims, outputs, out_is_t


def _tangent_dims(tangent: Any) -> Any:
    """vmap in_dims of a declared input's tangent: batched at 0 where it is a tensor."""
    if isinstance(tangent, list):
        return [0 if isinstance(t, torch.Tensor) else None for t in tangent]
    return 0 if isinstance(tangent, torch.Tensor) else None


def _sample_tangent(tangent: Any, input_dim: Any) -> tuple[Any, Any]:
    """A declared input's tangent for the per-sample replay, and its vmap in_dim: batched at 0,
    except that the tangent of an input replayed unbatched (``input_dim`` None, see
    :func:`saved_values`) that is itself the same for every entry (stride 0 on the batch: the
    expand's tangent) is replayed unbatched too, as its first entry."""
    if isinstance(tangent, torch.Tensor):
        if input_dim is None and tangent.dim() > 0 and tangent.stride(0) == 0:
            return tangent.select(0, 0), None
        return tangent, 0
    if isinstance(tangent, list) and isinstance(input_dim, list):
        pairs = [_sample_tangent(t, d) for t, d in zip(tangent, input_dim, strict=True)]
        return [t for t, _ in pairs], [d for _, d in pairs]
    return tangent, _tangent_dims(tangent)


def derive_batched_jvp(
    qualname: str, out_dims: Sequence[int | None], setup_context: SetupContext | None, jvp: Jvp
) -> Jvp:
    """The batched op's ``jvp``, derived from the user's by vmap (the batched op's
    ``setup_context`` is :func:`derive_batched_backward`'s).

    Replays the user's ``setup_context`` and ``jvp`` per sample under ``torch.vmap``; each
    per-sample tangent must have its per-sample output's shape, and the batched tangents come
    back batched where the outputs are (``out_dims``).
    """
    single_output = len(out_dims) == 1

    def derived_jvp(ctx: Any, *tangents: Any) -> Any:
        _, _, inputs, input_dims, outputs, out_is_t = saved_values(ctx)
        needs = tuple(ctx.needs_input_grad)
        output_dims = tuple(d if t else None for t, d in zip(out_is_t, out_dims, strict=True))
        present: list[bool] = []

        def per_sample(ins: tuple[Any, ...], outs: tuple[Any, ...], ts: tuple[Any, ...]) -> Any:
            sample_ctx = DerivedContext(needs, for_jvp=True)
            if setup_context is not None:
                setup_context(sample_ctx, ins, outs[0] if single_output else outs)
            result = _normalize(qualname, jvp(sample_ctx, *ts), len(outs), "tangents")
            check_tangents(qualname, result, output_shapes(outs))
            present[:] = [isinstance(t, torch.Tensor) for t in result]
            return tuple(t for t in result if isinstance(t, torch.Tensor))

        def batched_jvp(inputs: Any, outputs: Any, tangents: Any) -> tuple[Any, ...]:
            pairs = [_sample_tangent(t, d) for t, d in zip(tangents, input_dims, strict=True)]
            tangents = tuple(t for t, _ in pairs)
            tangent_dims = tuple(d for _, d in pairs)
            batched = torch.vmap(per_sample, in_dims=(input_dims, output_dims, tangent_dims))(
                inputs, outputs, tangents
            )
            it = iter(batched)
            result: list[Any] = []
            for i, p in enumerate(present):
                if not p:
                    result.append(None)
                    continue
                d = out_dims[i]
                if d is None:
                    raise RuntimeError(
                        f"opreg: {qualname}: output {i} has vmap_out_dims None (the same for "
                        "every batch entry), so the batched op cannot carry a tangent per entry "
                        "for it; give the output a batch dim in vmap_out_dims to use "
                        "forward-mode AD under vmap"
                    )
                t = next(it)
                result.append(t if d == 0 else t.movedim(0, d))
            return tuple(result)

        # (The kernel runs this below the jvp level's dispatch, where torch.vmap can start.)
        return batched_jvp(inputs, outputs, tangents)

    return derived_jvp
