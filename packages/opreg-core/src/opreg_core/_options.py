"""The options of ``register_vmap_op``: their names and types (``VmapOpOptions``), their
defaults, and :func:`resolve`, which validates them all and builds the :class:`OpSpec` the
registration works from. Errors name the op and the problem."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypedDict

from ._devices import dispatch_key_for
from ._naming import default_name, split_name
from ._samples import SampleInputs
from ._sharding import ShardingSpec, sharding_rule
from ._signature import Signature, infer_schema, parse_signature


class VmapOpOptions(TypedDict, total=False):
    """The keywords of ``register_vmap_op`` (every argument but ``fn``), for typing wrappers.

    Packages built on opreg-core extend it (``class MyOptions(VmapOpOptions, total=False)``) and
    forward ``**options`` to ``register_vmap_op`` without listing the keywords again. Defaults:
    ``vmap_out_dims=0``, ``mutates_args=()``, ``differentiable=True``, every other ``None``;
    ``fake_fn`` is required (a ``TypeError`` without it). See ``register_vmap_op`` for what
    each means.
    """

    fake_fn: Callable[..., Any] | None
    vmap_fn: Callable[..., Any] | None
    fake_vmap_fn: Callable[..., Any] | None
    vmap_wrap_inputs: Callable[..., Any] | None
    vmap_out_dims: int | Sequence[int | None] | None
    max_vmap_level: int | None
    name: str | None
    mutates_args: str | Sequence[str]
    device_types: str | Sequence[str] | None
    schema: str | None
    backward: Callable[..., Any] | None
    setup_context: Callable[..., Any] | None
    jvp: Callable[..., Any] | None
    differentiable: bool
    sample_inputs: SampleInputs | None
    sharding: ShardingSpec | None


#: The value of each option that is not given.
DEFAULTS: Final[Mapping[str, object]] = {
    **dict.fromkeys(VmapOpOptions.__annotations__),
    "vmap_out_dims": 0,
    "mutates_args": (),
    "differentiable": True,
}

#: The options that the op keeps as given (once checked).
_AS_GIVEN = (
    "fake_fn",
    "vmap_fn",
    "fake_vmap_fn",
    "vmap_wrap_inputs",
    "max_vmap_level",
    "backward",
    "setup_context",
    "jvp",
    "differentiable",
    "sample_inputs",
    "sharding",
)

#: The options that must be callables (or None), in the order they are checked.
_CALLABLES = (
    "vmap_fn",
    "fake_vmap_fn",
    "vmap_wrap_inputs",
    "backward",
    "setup_context",
    "jvp",
    "sample_inputs",
)


def check_option_names(options: Mapping[str, object], caller: str = "register_vmap_op") -> None:
    """Refuse a keyword that is not an option, as Python does, with the nearest option named."""
    for key in options:
        if key not in DEFAULTS:
            close = difflib.get_close_matches(key, DEFAULTS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"{caller}() got an unexpected keyword argument {key!r}{hint}")


@dataclass(frozen=True)
class OpSpec:
    """One op's registration, resolved and validated: what the kernels are built from."""

    fn: Callable[..., Any]
    qualname: str
    namespace: str
    opname: str
    fake_fn: Callable[..., Any]
    vmap_fn: Callable[..., Any] | None
    fake_vmap_fn: Callable[..., Any] | None  #: set whenever ``vmap_fn`` is
    vmap_wrap_inputs: Callable[..., Any] | None
    out_dims: tuple[int | None, ...]  #: one per output
    max_vmap_level: int | None
    mutated: tuple[str, ...]
    device_types: tuple[str, ...] | None
    dispatch_keys: tuple[str, ...]  #: where the fallback and ``vmap_fn`` are registered
    signature: Signature
    backward: Callable[..., Any] | None
    setup_context: Callable[..., Any] | None
    jvp: Callable[..., Any] | None
    differentiable: bool
    sample_inputs: SampleInputs | None
    sharding: ShardingSpec | None  #: checked by :func:`sharding_rule`

    @property
    def num_returns(self) -> int:
        return self.signature.num_returns


def resolve(fn: object, options: Mapping[str, Any]) -> OpSpec:
    """Apply the defaults to ``options`` (keywords of ``register_vmap_op``), check everything
    that can be checked before registering, and return the resolved registration."""
    check_option_names(options)
    o = {**DEFAULTS, **options}
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
    return OpSpec(
        fn=fn,
        qualname=qualname,
        namespace=namespace,
        opname=opname,
        out_dims=out_dims,
        mutated=mutated,
        device_types=device_types,
        dispatch_keys=keys,
        signature=signature,
        **{label: o[label] for label in _AS_GIVEN},
    )


def _check_functions(qualname: str, o: Mapping[str, Any]) -> None:
    """The options that don't need the schema: callables, and which ones go together."""
    check_callable(qualname, "fake_fn", o["fake_fn"], required=True)
    for label in _CALLABLES:
        check_callable(qualname, label, o[label])
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
