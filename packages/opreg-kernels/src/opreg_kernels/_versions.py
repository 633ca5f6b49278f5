"""Which Triton releases opreg-kernels was tested on, and which launcher layout each has.

The fast launches (``fast_launch``, the shipped ops' cached launches) rely on Triton
internals whose shape may change in any release. They are taken only on a Triton release
inside :data:`TESTED_TRITON`; on any other, every launch is Triton's own ``kernel[grid](...)``.
The direct call of the CUDA C launcher is taken only on a release listed in
:data:`LAUNCHER_LAYOUTS`, whose argument layout was read from that release's source; on the
other releases of the tested range the compiled kernel's own ``run`` launches.
``opreg_kernels.fast_paths()`` says which of them this process takes.

Importing this module imports no Triton: the functions that read Triton's version import it.
"""

from __future__ import annotations

import re

__all__ = [
    "LAUNCHER_LAYOUTS",
    "TESTED_TRITON",
    "release",
    "tested_layouts_text",
    "tested_text",
    "triton_release",
    "triton_tested",
    "triton_version",
]

#: The oldest and newest Triton releases (major, minor) that CI tests; inclusive.
TESTED_TRITON: tuple[tuple[int, int], tuple[int, int]] = ((3, 6), (3, 9))

#: The Triton releases whose ``CudaLauncher`` opreg calls the C launcher of directly, each
#: with the name of its argument layout (``_private/launch.py`` says what each layout passes).
LAUNCHER_LAYOUTS: dict[tuple[int, int], str] = {(3, 6): "3.6", (3, 8): "3.8+", (3, 9): "3.8+"}


def release(version: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a version string such as ``"3.9.0+git1234"``, or None."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else None


def triton_version() -> str:
    """The version of the installed Triton (imports Triton: call only where it imports)."""
    import triton

    return str(triton.__version__)


def triton_release() -> tuple[int, int] | None:
    """``(major, minor)`` of the installed Triton (imports Triton)."""
    return release(triton_version())


def triton_tested() -> bool:
    """Whether the installed Triton is a release inside :data:`TESTED_TRITON` (imports it)."""
    found = triton_release()
    return found is not None and TESTED_TRITON[0] <= found <= TESTED_TRITON[1]


def tested_text() -> str:
    """The tested range for messages: its two ends joined by an en dash (as ``3.6``, ``3.9``)."""
    (a, b), (c, d) = TESTED_TRITON
    return f"{a}.{b}\N{EN DASH}{c}.{d}"


def tested_layouts_text() -> str:
    """``"3.6, 3.8, 3.9"``: the releases with a tested launcher layout, for messages."""
    return ", ".join(f"{major}.{minor}" for major, minor in sorted(LAUNCHER_LAYOUTS))
