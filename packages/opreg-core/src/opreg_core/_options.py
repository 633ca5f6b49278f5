"""The options of ``register_vmap_op`` and their validation: errors name the op and the problem."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypedDict

from ._op import SampleInputs
from ._sharding import ShardingSpec


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


def check_option_names(options: Mapping[str, object], caller: str = "register_vmap_op") -> None:
    """Refuse a keyword that is not an option, as Python does, with the nearest option named."""
    for key in options:
        if key not in DEFAULTS:
            close = difflib.get_close_matches(key, DEFAULTS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"{caller}() got an unexpected keyword argument {key!r}{hint}")


@dataclass(frozen=True)
class Options:
    """Everything passed to ``register_vmap_op`` besides ``fn``."""

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
    differentiable: bool
    jvp: Callable[..., Any] | None
    sample_inputs: SampleInputs | None
    sharding: ShardingSpec | None


def check_callable(qualname: str, label: str, value: object, required: bool = False) -> None:
    if value is None and not required:
        return
    if not callable(value):
        got = "missing" if value is None else f"a {type(value).__name__}"
        raise TypeError(f"opreg: {qualname}: {label} must be a callable, got {got}")


def as_names(qualname: str, label: str, value: str | Sequence[str]) -> tuple[str, ...]:
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, (tuple, list)) or not all(isinstance(v, str) for v in items):
        raise TypeError(f"opreg: {qualname}: {label} must be a string or a sequence of strings")
    return tuple(items)


def normalize_out_dims(qualname: str, value: object, num_returns: int) -> tuple[int | None, ...]:
    def valid(d: object) -> bool:
        return d is None or (isinstance(d, int) and not isinstance(d, bool))

    if valid(value):
        return (value,) * num_returns  # type: ignore[return-value]
    if not isinstance(value, (tuple, list)) or not all(map(valid, value)):
        raise TypeError(f"opreg: {qualname}: vmap_out_dims must be an int, None or a tuple of them")
    if len(value) != num_returns:
        raise ValueError(
            f"opreg: {qualname}: vmap_out_dims has {len(value)} entries but the op returns "
            f"{num_returns} outputs"
        )
    return tuple(value)


def validate(fn: Callable[..., Any], qualname: str, o: Options) -> None:
    """Check the options that don't need the schema; errors name the op."""
    check_callable(qualname, "fake_fn", o.fake_fn, required=True)
    for label in (
        "vmap_fn",
        "fake_vmap_fn",
        "vmap_wrap_inputs",
        "backward",
        "setup_context",
        "jvp",
    ):
        check_callable(qualname, label, getattr(o, label))
    check_callable(qualname, "sample_inputs", o.sample_inputs)
    if o.vmap_fn is not None and o.fake_vmap_fn is None:
        raise TypeError(f"opreg: {qualname}: vmap_fn needs fake_vmap_fn (the batched op's fake)")
    if o.vmap_fn is None:
        for label in ("fake_vmap_fn", "vmap_wrap_inputs"):
            if getattr(o, label) is not None:
                raise ValueError(f"opreg: {qualname}: {label} is given but vmap_fn is not")
    level = o.max_vmap_level
    if level is not None and (not isinstance(level, int) or isinstance(level, bool)):
        raise TypeError(f"opreg: {qualname}: max_vmap_level must be a positive int or None")
    if level is not None and level < 1:
        raise ValueError(f"opreg: {qualname}: max_vmap_level must be at least 1, got {level}")
    if not isinstance(o.differentiable, bool):
        raise TypeError(f"opreg: {qualname}: differentiable must be a bool")
    if o.setup_context is not None and o.backward is None and o.jvp is None:
        raise ValueError(
            f"opreg: {qualname}: setup_context is given but backward is not (nor jvp): it "
            "fills the ctx that they receive"
        )
    for label in ("backward", "jvp"):
        if getattr(o, label) is not None and not o.differentiable:
            raise ValueError(
                f"opreg: {qualname}: {label} is given but differentiable=False declares that no "
                "gradient flows through the op"
            )


def check_mutates_args(fn: Callable[..., Any], qualname: str, mutated: tuple[str, ...]) -> None:
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
