"""A griffe extension for the API reference: Sphinx roles in docstrings become inline code.

The packages' docstrings name other objects with Sphinx roles (``:func:`check_op```,
``:class:`~opreg_kernels.TritonKernelError```); mkdocstrings renders Markdown, where those
would show as raw text. Each role becomes the inline code of its target (the last dotted
part when the target starts with ``~``). Loaded from mkdocs.yml.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj|const):`(~?)([^`]+)`")


def _code(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


class SphinxRolesAsCode(griffe.Extension):
    """Rewrite Sphinx cross-reference roles in every docstring as inline code."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        _rewrite(obj)

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        _rewrite(pkg)  # a top-level package gets no on_object call


def _rewrite(obj: griffe.Object) -> None:
    if obj.docstring is not None:
        obj.docstring.value = _ROLE.sub(_code, obj.docstring.value)
