"""The options of ``register_vmap_op``: their declaration (``VmapOpOptions``: each keyword's
name, type, default and meaning, in one place) and :func:`resolve`, which validates them all
and builds the :class:`OpSpec` the registration works from. Errors name the op and the
problem."""

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Final, TypedDict, cast

from ._autocast import AutocastRule, AutocastTarget, resolve_autocast
from ._declaration import Default, option_metadata, option_values
from ._devices import dispatch_key_for
from ._naming import default_name, split_name
from ._samples import SampleInputs
from ._sharding import ShardingSpec, sharding_rule
from ._signature import Signature, infer_schema, parse_signature


class IsCallable:
    """Metadata of a ``VmapOpOptions`` field: its value must be a callable (or None, unless
    ``required``); ``resolve`` refuses anything else, naming the op and the option."""

    __slots__ = ("required",)

    def __init__(self, required: bool = False) -> None:
        self.required = required


class VmapOpOptions(TypedDict, total=False):
    """The keywords of ``register_vmap_op`` (every argument but ``fn``), for typing wrappers.

    This class is where each keyword is declared, once: its name, its type, its default
    (``Default(...)`` in its annotation; None without one) and its meaning (the docstring
    under it). The checks of names, the defaults, the op's attributes and the checks of
    callables are read from it. ``fake_fn`` is required (a ``TypeError`` without it).

    Packages built on opreg-core extend it (``class MyOptions(VmapOpOptions, total=False)``) and
    forward ``**options`` to ``register_vmap_op`` without listing the keywords again. The op
    carries each option (but ``name``) as an attribute of the same name, checked and
    normalised: ``vmap_out_dims`` one entry per output, ``mutates_args`` and ``device_types``
    tuples, ``schema`` the op's schema.
    """

    fake_fn: Annotated[Callable[..., Any] | None, IsCallable(required=True)]
    """Required; computes output metadata (shapes, dtypes) for ``torch.compile``."""
    vmap_fn: Annotated[Callable[..., Any] | None, IsCallable()]
    """The batched implementation, written for ONE leading batch dim: every tensor argument
    has its batch dim at 0 (unbatched ones are expanded to the batch without a copy), each
    tensor of a ``Tensor[]``/``Tensor?[]`` too; an optional tensor given None arrives as None;
    non-tensor arguments (``list[int]`` included) pass through unbatched. Nested vmap at any
    depth calls it once. The argument and return types accepted are listed in
    ``opreg_core._signature`` (others are refused here)."""
    fake_vmap_fn: Annotated[Callable[..., Any] | None, IsCallable()]
    """Required with ``vmap_fn``; the batched op's fake."""
    vmap_wrap_inputs: Annotated[Callable[..., Any] | None, IsCallable()]
    """``(info, in_dims, *args) -> args`` replaces the default input handling at the innermost
    level (``in_dims`` has one entry per positional argument: an int or None, or a list of them
    for a list of tensors)."""
    vmap_out_dims: Annotated[int | Sequence[int | None] | None, Default(0)]
    """Where ``vmap_fn``'s outputs carry the batch dim (int, None, or a tuple per output)."""
    max_vmap_level: int | None
    """The deepest vmap nesting handled by ``vmap_fn``; deeper levels run a per-sample loop.
    ``None`` (default): unlimited."""
    name: str | None
    """``"namespace::opname"``; default ``<fn.__module__>::<fn.__name__>`` with non-identifier
    characters replaced by ``_`` (see ``opreg_core._naming``). The op has it as ``qualname``."""
    mutates_args: Annotated[str | Sequence[str], Default(())]
    """As in ``torch.library.custom_op``."""
    device_types: str | Sequence[str] | None
    """As in ``torch.library.custom_op``: where the fallback (and ``vmap_fn``) is registered."""
    schema: str | None
    """As in ``torch.library.custom_op``."""
    backward: Annotated[Callable[..., Any] | None, IsCallable()]
    """Autograd, with ``setup_context``: see that option."""
    setup_context: Annotated[Callable[..., Any] | None, IsCallable()]
    """Autograd, as in ``torch.library.register_autograd``, except that ``setup_context``
    receives all inputs in declaration order (kwarg-only ones last). Works under
    ``.backward()``, ``torch.func.grad``/``jacrev``/``vjp`` and with vmap; the batched op's
    backward is derived from this one."""
    jvp: Annotated[Callable[..., Any] | None, IsCallable()]
    """Forward-mode AD: ``jvp(ctx, *input_tangents) -> output tangent(s)``, with the ``ctx``
    filled by ``setup_context`` (its ``saved_tensors`` included) and one tangent per input in
    declaration order (None for non-tensor inputs and inputs without a tangent; a list for a
    list of tensors). Return one tangent per output, of the output's shape (None for no
    tangent). Works under ``torch.func.jvp``/``jacfwd``/``hessian``, dual tensors
    (``torch.autograd.forward_ad``) and their compositions with ``vmap``, ``grad`` and
    ``jacrev``; the batched op's jvp is derived from this one. Without it forward mode through
    the op raises. ``backward`` and ``jvp`` may use ``torch.func`` themselves
    (``torch.func.vjp``/``jvp`` of the function, vmap)."""
    differentiable: Annotated[bool, Default(True)]
    """``False`` declares the outputs non-differentiable by nature (random numbers, indices):
    no gradient flows, and calls take the cheapest dispatch path."""
    sample_inputs: Annotated[SampleInputs | None, IsCallable()]
    """``(device) -> Iterable[SampleInput]`` used by the opreg-testing checks."""
    sharding: ShardingSpec | None
    """How the op runs on ``DTensor`` arguments: ``"elementwise"``, ``"rowwise"``,
    ``"replicate"``, a ``ShardingRule`` or a ``register_sharding``-style function (see
    ``opreg_core.register_sharding_rule``). None: no rule (DTensor refuses the op). The op has
    the resolved ``ShardingRule`` (or None)."""
    autocast: AutocastRule | None
    """How the op casts its inputs in an autocast region (``torch.autocast``), as ATen ops
    do: ``"lower_precision"`` casts them to the region's dtype (ATen's ``lower_precision_fp``:
    matmul, conv), ``"float32"`` to float32 (ATen's ``fp32``: softmax, norms, losses), on every
    device type with autocast; a mapping gives each device type its own, a policy or a
    floating dtype (``{"cuda": torch.bfloat16, "cpu": "float32"}``: the ``cast_inputs`` of
    ``torch.library.register_autocast``). Only tensors that are floating point, on the region's
    device type and not float64 are cast (differentiably: gradients come back in the input's
    dtype). Not for ops that mutate their arguments (a cast input is a copy). None
    (default): no rule, the op runs on its inputs as given. The op has it as ``{device type:
    dtype or "lower_precision"}`` (see ``opreg_core._autocast`` and ``docs/autocast.md``)."""


#: The options that must be callables (``IsCallable``), in declaration order, each with
#: whether it is required.
_CALLABLES: Final = tuple(
    (label, meta.required)
    for label, metadata in option_metadata(VmapOpOptions).items()
    for meta in metadata
    if isinstance(meta, IsCallable)
)


class OpSpec:
    """One op's registration, resolved and validated: what the kernels are built from.

    ``options`` holds every option of :class:`VmapOpOptions` but ``name`` (``qualname`` is its
    resolved form), checked, with its default where not given, and normalised where
    ``resolve`` says so; read one as ``spec.options["vmap_fn"]`` (typed by the declaration).
    The fields after it are the normalised options whose consumers need their narrow type.
    A plain slotted class (a dataclass costs about 0.5 ms of import); treat it as read-only.
    """

    __slots__ = (
        "autocast_rule", "dispatch_keys", "fn", "module", "namespace", "opname", "options",
        "out_dims", "qualname", "signature",
    )  # fmt: skip

    def __init__(
        self,
        *,
        fn: Callable[..., Any],
        qualname: str,
        namespace: str,
        opname: str,
        dispatch_keys: tuple[str, ...],
        signature: Signature,
        options: VmapOpOptions,
        module: str,
        out_dims: tuple[int | None, ...],
        autocast_rule: Mapping[str, AutocastTarget] | None,
    ) -> None:
        self.fn = fn
        self.qualname = qualname
        self.namespace = namespace
        self.opname = opname
        #: where the fallback and ``vmap_fn`` are registered
        self.dispatch_keys = dispatch_keys
        self.signature = signature
        self.options = options
        #: ``fn.__module__`` at registration: where the op was defined (the registry groups
        #: by it).
        self.module = module
        self.out_dims = out_dims  #: ``vmap_out_dims``, one entry per output
        #: ``autocast`` resolved: ``{device type: dtype or "lower_precision"}``, or None.
        self.autocast_rule = autocast_rule

    @property
    def num_returns(self) -> int:
        return self.signature.num_returns


def check_option_names(options: Mapping[str, object]) -> None:
    """Refuse a keyword that is not an option, as Python does, with the nearest option named."""
    option_values(VmapOpOptions, options, "register_vmap_op")


def resolve(fn: object, options: Mapping[str, Any]) -> OpSpec:
    """Apply the defaults to ``options`` (keywords of ``register_vmap_op``), check everything
    that can be checked before registering, and return the resolved registration."""
    o = option_values(VmapOpOptions, options, "register_vmap_op")
    if not callable(fn):
        raise TypeError(f"opreg: register_vmap_op expects a function, got {type(fn).__name__}")
    qualname = default_name(fn) if o["name"] is None else o["name"]
    namespace, opname = split_name(qualname)
    _check_functions(qualname, o)
    mutated = as_names(qualname, "mutates_args", o["mutates_args"])
    check_mutates_args(fn, qualname, mutated)
    device_types = (
        None if o["device_types"] is None else as_names(qualname, "device_types", o["device_types"])
    )
    try:
        keys = (
            ("CompositeExplicitAutograd",)
            if device_types is None
            else tuple(dispatch_key_for(d) for d in device_types)
        )
    except ValueError as exc:
        raise ValueError(f"opreg: {qualname}: device_types: {exc}") from exc
    signature = parse_signature(qualname, infer_schema(qualname, fn, o["schema"], mutated))
    if o["schema"] is not None and set(mutated) != set(signature.mutated):
        raise ValueError(
            f"opreg: {qualname}: mutates_args {list(mutated)} disagrees with the schema, which "
            f"marks {list(signature.mutated)} as mutated"
        )
    out_dims = normalize_out_dims(
        qualname, o["vmap_out_dims"], signature.num_returns, signature.tensor_returns
    )
    if o["sharding"] is not None:
        sharding_rule(o["sharding"], qualname)  # refuse a bad rule before registering anything
    _check_derivatives(qualname, o, signature)
    autocast = resolve_autocast(qualname, o["autocast"])
    if autocast is not None and signature.mutated:
        raise ValueError(
            f"opreg: {qualname}: autocast is not supported for ops that mutate their arguments "
            "(a cast input is a copy, which would receive the write; ATen lists no in-place op "
            "for autocast either)"
        )
    del o["name"]  # resolved into qualname, namespace and opname
    # The normalised options; every other one is kept as given (once checked).
    o.update(
        vmap_out_dims=out_dims,
        mutates_args=mutated,
        device_types=device_types,
        schema=signature.schema,
        autocast=autocast,
    )
    return OpSpec(
        fn=fn,
        qualname=qualname,
        namespace=namespace,
        opname=opname,
        dispatch_keys=keys,
        signature=signature,
        options=cast(VmapOpOptions, o),
        module=getattr(fn, "__module__", None) or "",
        out_dims=out_dims,
        autocast_rule=autocast,
    )


def _check_functions(qualname: str, o: Mapping[str, Any]) -> None:
    """The options that don't need the schema: callables, and which ones go together."""
    for label, required in _CALLABLES:
        check_callable(qualname, label, o[label], required)
    if o["vmap_fn"] is not None and o["fake_vmap_fn"] is None:
        raise TypeError(f"opreg: {qualname}: vmap_fn needs fake_vmap_fn (the batched op's fake)")
    if o["vmap_fn"] is None:
        for label in ("fake_vmap_fn", "vmap_wrap_inputs"):
            if o[label] is not None:
                raise ValueError(f"opreg: {qualname}: {label} is given but vmap_fn is not")
    level = o["max_vmap_level"]
    if level is not None and (not isinstance(level, int) or isinstance(level, bool)):
        raise TypeError(f"opreg: {qualname}: max_vmap_level must be a positive int or None")
    if level is not None and level < 1:
        raise ValueError(f"opreg: {qualname}: max_vmap_level must be at least 1, got {level}")
    if not isinstance(o["differentiable"], bool):
        raise TypeError(f"opreg: {qualname}: differentiable must be a bool")
    if o["setup_context"] is not None and o["backward"] is None and o["jvp"] is None:
        raise ValueError(
            f"opreg: {qualname}: setup_context is given but backward is not (nor jvp): it "
            "fills the ctx that they receive"
        )
    for label in ("backward", "jvp"):
        if o[label] is not None and not o["differentiable"]:
            raise ValueError(
                f"opreg: {qualname}: {label} is given but differentiable=False declares that no "
                "gradient flows through the op"
            )


def _check_derivatives(qualname: str, o: Mapping[str, Any], signature: Signature) -> None:
    """The derivative options that the schema rules out."""
    if o["jvp"] is not None and signature.returns_list:
        raise ValueError(
            f"opreg: {qualname}: jvp is not supported for ops that return a list of tensors "
            "(autograd tracks no tangent on a list output); return a tuple of tensors instead"
        )
    for label in ("backward", "jvp"):
        if signature.mutated and o[label] is not None:
            raise ValueError(
                f"opreg: {qualname}: {label} is not supported for ops that mutate their arguments"
            )


def check_callable(qualname: str, label: str, value: object, required: bool = False) -> None:
    """Refuse a non-callable ``value`` (or a missing one, when ``required``) for ``label``."""
    if value is None and not required:
        return
    if not callable(value):
        got = "missing" if value is None else f"a {type(value).__name__}"
        raise TypeError(f"opreg: {qualname}: {label} must be a callable, got {got}")


def as_names(qualname: str, label: str, value: str | Sequence[str]) -> tuple[str, ...]:
    """A string or a sequence of strings as a tuple of them; TypeError for anything else."""
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, (tuple, list)) or not all(isinstance(v, str) for v in items):
        raise TypeError(f"opreg: {qualname}: {label} must be a string or a sequence of strings")
    return tuple(items)


def normalize_out_dims(
    qualname: str, value: object, num_returns: int, tensor_returns: Sequence[bool] = ()
) -> tuple[int | None, ...]:
    """``vmap_out_dims`` as one batch dim (or None) per output. One value for all applies to
    the tensor outputs (``tensor_returns``, one flag per output; empty: all); a plain output
    (an ``int``, ``float``...) gets None, as vmap cannot batch it."""

    def valid(d: object) -> bool:
        return d is None or (isinstance(d, int) and not isinstance(d, bool))

    if valid(value):
        flags = tensor_returns or (True,) * num_returns
        return tuple(value if t else None for t in flags)  # type: ignore[misc]
    if not isinstance(value, (tuple, list)) or not all(map(valid, value)):
        raise TypeError(f"opreg: {qualname}: vmap_out_dims must be an int, None or a tuple of them")
    if len(value) != num_returns:
        raise ValueError(
            f"opreg: {qualname}: vmap_out_dims has {len(value)} entries but the op returns "
            f"{num_returns} outputs"
        )
    return tuple(value)


def check_mutates_args(fn: Callable[..., Any], qualname: str, mutated: tuple[str, ...]) -> None:
    """Refuse a ``mutates_args`` entry that is not a parameter of ``fn`` (when it has a
    signature to read)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return
    for arg in mutated:
        if arg not in params:
            raise ValueError(
                f"opreg: {qualname}: mutates_args names {arg!r}, which is not a parameter of "
                f"{getattr(fn, '__qualname__', fn)!r} (parameters: {', '.join(params)})"
            )
