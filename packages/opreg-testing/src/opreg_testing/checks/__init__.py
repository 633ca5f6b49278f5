"""The checks, one module each; :data:`CHECKS` maps a check's name to its declaration.

The names and their run order are declared once, in :mod:`opreg_testing.check_names`; the
check called ``<name>`` is the :class:`Check` of that name declared by the module
``opreg_testing.checks.<name>``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..check_names import CHECK_NAMES
from ._harness import Check, CheckContext


def _declared(name: str) -> Check[Any]:
    """The :class:`Check` called ``name``, declared by the module ``checks.<name>``."""
    module = importlib.import_module(f"{__name__}.{name}")
    found = [v for v in vars(module).values() if isinstance(v, Check) and v.name == name]
    if len(found) != 1:
        raise ImportError(
            f"opreg: {module.__name__} must declare one Check named {name!r}, found {len(found)}"
        )
    return found[0]


#: Every check by name, in the order ``check_op`` runs them: its body and its options.
CHECKS: Mapping[str, Check[Any]] = MappingProxyType({name: _declared(name) for name in CHECK_NAMES})

#: The names of all checks, in run order (:data:`opreg_testing.check_names.CHECK_NAMES`).
ALL_CHECKS: tuple[str, ...] = CHECK_NAMES

__all__ = ["ALL_CHECKS", "CHECKS", "Check", "CheckContext"]
