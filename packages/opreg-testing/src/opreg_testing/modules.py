"""What ``opreg check`` and ``opreg bench`` share: the one-line usage error, and loading the
modules a command line names (a dotted name or a path) with the ops they register."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class UsageError(Exception):
    """Bad command-line input: reported in one line, exit status 2."""


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def module_name(arg: str) -> str:
    """The module to import for a MODULE argument: a dotted name as given, or a file path's.

    A path (ending in ``.py`` or holding a path separator) names a module file or a package
    folder; the folder above its outermost package goes to the front of ``sys.path``.
    """
    if not (arg.endswith(".py") or "/" in arg or os.sep in arg):
        return arg
    path = Path(arg)
    if not path.exists():
        raise UsageError(f"no such file or folder: {arg!r} (MODULE is a module name or a path)")
    path = path.resolve()
    if path.is_dir():
        if not (path / "__init__.py").is_file():
            raise UsageError(f"{arg!r} is a folder without __init__.py, not a package")
        parts, folder = [path.name], path.parent
    elif path.suffix == ".py":
        parts, folder = ([] if path.name == "__init__.py" else [path.stem]), path.parent
    else:
        raise UsageError(f"{arg!r} is not a Python file (.py) or a package folder")
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return ".".join(parts)


def import_ops(modules: Sequence[str], keyword: str | None) -> list[Any]:
    from .selection import ops_in

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: modules of the current project
    ops: list[Any] = []
    for arg in modules:
        name = module_name(arg)
        try:
            found = ops_in(name)
        except Exception as exc:  # the module's own error, at import: one line, no traceback
            raise UsageError(f"importing {name!r} failed: {_first_line(exc)}") from None
        if not found:
            raise UsageError(f"module {name!r} registered no opreg op")
        ops.extend(op for op in found if op not in ops)
    if keyword is not None:
        ops = [op for op in ops if keyword in op.qualname]
        if not ops:
            raise UsageError(f"no op name contains {keyword!r}")
    return ops
