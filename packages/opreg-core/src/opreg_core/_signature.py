"""The operator's schema and what the kernels need to know about its arguments and returns."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ._private import parse_schema


@dataclass(frozen=True)
class Signature:
    """Argument layout of an op, read once from its schema so kernels don't parse per call."""

    schema: str  #: the schema without the name, e.g. ``"(Tensor x) -> Tensor"``
    positional: tuple[str, ...]
    kwarg_only: tuple[str, ...]
    defaults: Mapping[str, Any]  #: argument name -> default, for arguments that have one
    num_returns: int
    mutated: tuple[str, ...]
    returns_list: bool  #: some output is a list of tensors
    list_args: bool  #: some argument is a list (of tensors, maybe): inputs need flattening

    @property
    def names(self) -> tuple[str, ...]:
        return self.positional + self.kwarg_only

    def full_args(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
        """All arguments in declaration order, with the defaults the dispatcher dropped put back."""
        if len(args) == len(self.positional) and not self.kwarg_only:
            return args
        out = list(args)
        for name in self.positional[len(args) :]:
            out.append(kwargs[name] if name in kwargs else self.defaults[name])
        for name in self.kwarg_only:
            out.append(kwargs[name] if name in kwargs else self.defaults[name])
        return tuple(out)

    def split(self, full: tuple[Any, ...]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Inverse of :meth:`full_args`: positional args and kwarg-only kwargs."""
        npos = len(self.positional)
        return full[:npos], dict(zip(self.kwarg_only, full[npos:], strict=True))


def infer_schema(
    op_name: str, fn: Callable[..., Any], schema: str | None, mutates_args: Sequence[str]
) -> str:
    """The schema string (without name) from ``schema`` or from ``fn``'s annotations."""
    if schema is not None:
        if not isinstance(schema, str):
            raise TypeError(
                f"opreg: {op_name}: schema must be a string, got {type(schema).__name__}"
            )
        return schema
    try:
        return torch.library.infer_schema(fn, mutates_args=tuple(mutates_args))
    except (ValueError, TypeError) as exc:
        raise type(exc)(
            f"opreg: {op_name}: cannot build a schema from the annotations of "
            f"{getattr(fn, '__qualname__', fn)!r}: {exc} "
            "(annotate every parameter and the return with supported types, or pass schema=...)"
        ) from exc


def parse_signature(qualname: str, schema: str) -> Signature:
    """Parse ``schema`` and collect the argument layout; errors name the op."""
    try:
        parsed = parse_schema(f"{qualname}{schema}")
    except RuntimeError as exc:
        raise ValueError(f"opreg: {qualname}: invalid schema {schema!r}: {exc}") from exc
    positional: list[str] = []
    kwarg_only: list[str] = []
    defaults: dict[str, Any] = {}
    mutated: list[str] = []
    for arg in parsed.arguments:
        (kwarg_only if arg.kwarg_only else positional).append(arg.name)
        if arg.has_default_value():
            defaults[arg.name] = arg.default_value
        if arg.alias_info is not None and arg.alias_info.is_write:
            mutated.append(arg.name)
    return Signature(
        schema=schema,
        positional=tuple(positional),
        kwarg_only=tuple(kwarg_only),
        defaults=defaults,
        num_returns=len(parsed.returns),
        mutated=tuple(mutated),
        returns_list=any(isinstance(r.type, torch.ListType) for r in parsed.returns),
        list_args=any(isinstance(a.type, torch.ListType) for a in parsed.arguments),
    )
