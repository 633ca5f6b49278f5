"""The checks' names, in the order ``check_op`` runs them: their one declaration.

Each name is also the module ``opreg_testing.checks.<name>`` that declares the check (its
:class:`~opreg_testing.checks.Check`, body and options). This module imports nothing, so that
``opreg --help`` can list the checks without importing torch; :mod:`opreg_testing.checks`
builds :data:`~opreg_testing.checks.CHECKS` from it.
"""

from __future__ import annotations

#: Every check, in run order. Adding a check: its module ``checks/<name>.py``, its name here,
#: and its ``check_<name>`` function in ``opreg_testing``'s table of public names.
CHECK_NAMES: tuple[str, ...] = (
    "fake",
    "vmap",
    "compile",
    "export",
    "autograd",
    "kernel",
    "opcheck",
    "autocast",
)

__all__ = ["CHECK_NAMES"]
