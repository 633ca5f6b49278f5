"""Keyword options declared once, as the fields of a ``TypedDict``.

The ``TypedDict`` gives type checkers each keyword's name and type (``**options:
Unpack[...]``); ``Annotated`` metadata on a field says the rest: its default
(:class:`Default`, else None) and whatever the code resolving it needs. Everything else is
read from it here: :func:`option_values` refuses an undeclared keyword and fills in the
defaults, so a new keyword is one field (and its docstring) in the declaration.
"""

from __future__ import annotations

import difflib
import functools
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Default:
    """The value of an option that is not given, as metadata of its field in an options
    ``TypedDict``: ``compiler_visible: Annotated[bool, Default(False)]``. An option without one
    defaults to None."""

    value: object


@functools.cache
def option_metadata(declaration: type) -> Mapping[str, tuple[object, ...]]:
    """Each keyword of the options ``TypedDict`` ``declaration`` (its bases' first, in
    declaration order) with the ``Annotated`` metadata of its type (empty without any).

    The annotations are read as evaluated when the class was made, not evaluated again (the
    types may name what exists only for type checkers): the declaring module must not use
    ``from __future__ import annotations``, which would hide the metadata in strings.
    """
    metadata: dict[str, tuple[object, ...]] = {}
    for name, hint in declaration.__annotations__.items():
        if isinstance(hint, (str, typing.ForwardRef)):
            raise TypeError(
                f"opreg: {declaration.__qualname__}.{name}: the annotation is a string, which "
                "hides its Annotated metadata (the default...): declare the options in a module "
                "without 'from __future__ import annotations'"
            )
        metadata[name] = getattr(hint, "__metadata__", ())
    return metadata


@functools.cache
def _defaults(declaration: type) -> Mapping[str, object]:
    defaults: dict[str, object] = {}
    for name, metadata in option_metadata(declaration).items():
        given = [m.value for m in metadata if isinstance(m, Default)]
        defaults[name] = given[0] if given else None
    return defaults


def option_values(declaration: type, options: Mapping[str, object], caller: str) -> dict[str, Any]:
    """Every keyword of the options ``TypedDict`` ``declaration``, with its value in
    ``options`` or else its default. A keyword of ``options`` that is not declared raises
    ``TypeError`` as Python does for a call of ``caller``, naming the nearest keyword."""
    defaults = _defaults(declaration)
    for key in options:
        if key not in defaults:
            close = difflib.get_close_matches(key, defaults, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"{caller}() got an unexpected keyword argument {key!r}{hint}")
    return {**defaults, **options}
