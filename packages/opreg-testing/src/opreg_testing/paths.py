"""Which of opreg's fast paths this process takes, and why: the versions line of ``opreg check``.

opreg takes its fast paths (the direct call, the vmap short path, the fast CUDA launch) only
on the torch and Triton releases CI tests; any other release gets the public paths. A check
run says which, so that a green report on an untested release says what it proved.
"""

from __future__ import annotations

from typing import Any


def fast_paths() -> list[Any]:
    """Every fast path of opreg-core, and of opreg-kernels where it is installed
    (``opreg_core.FastPath`` tuples)."""
    import opreg_core

    from .interpreter import import_kernels

    found: list[Any] = list(opreg_core.fast_paths())
    if import_kernels():  # else opreg-testing without the [kernels] extra
        import opreg_kernels

        found.extend(opreg_kernels.fast_paths())
    return found


def paths_lines() -> list[str]:
    """The header lines: the versions, and each fast path taken or not, with its reason."""
    import torch

    lines = [f"Fast paths on torch {torch.__version__}{_triton_version()}:"]
    for path in fast_paths():
        state = "on" if path.taken else "off"
        lines.append(f"  {path.name}: {state} ({path.reason})")
    return lines


def paths_summary() -> str:
    """One line for the pytest header: every fast path on, or those that are off and why."""
    by_reason: dict[str, list[str]] = {}
    for path in fast_paths():
        if not path.taken:
            by_reason.setdefault(path.reason, []).append(path.name)
    if not by_reason:
        return "every fast path on"
    return "fast paths off: " + "; ".join(
        f"{', '.join(names)} ({reason})" for reason, names in by_reason.items()
    )


def paths_data() -> list[dict[str, Any]]:
    """The fast paths for ``--json``: name, taken, reason."""
    return [path._asdict() for path in fast_paths()]


def _triton_version() -> str:
    """``", Triton X.Y.Z"`` where Triton imports, else ``""``."""
    from .interpreter import triton_installed, triton_problem

    if not triton_installed() or triton_problem() is not None:
        return ""
    import triton

    return f", Triton {triton.__version__}"
