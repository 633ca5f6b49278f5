"""Which torch releases opreg was tested on, and the fast paths that depend on it.

opreg reaches into torch internals for speed (the direct call, the vmap short path) and for
behaviour that torch offers no public way to get. The speed paths are taken only on a torch
release inside :data:`TESTED_TORCH`, the range CI runs (``hatch.toml``'s matrix): on any
other release an op takes the dispatcher's public route, never a fast path built on an
assumption nobody checked. :func:`fast_paths` says which paths this process takes and why;
``opreg check`` prints it in its header.

The decision is read when an op is registered (:func:`speed_paths_allowed`), so an op keeps
the paths it was built with. Tests flip :data:`TORCH_TESTED` (and :data:`TORCH_VERSION`, for
the reasons' text) before registering an op; there is deliberately no switch that forces the
fast paths on for an untested torch.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import torch

from . import _batching

TESTED_TORCH: tuple[tuple[int, int], tuple[int, int]] = ((2, 11), (2, 15))
"""The oldest and newest torch releases, ``(major, minor)``, that CI tests (inclusive): on any
other release opreg's fast paths are off and every op takes the dispatcher's public route."""


class FastPath(NamedTuple):
    """One fast path of opreg and whether this process takes it.

    ``name`` names the path ("direct call", "fast CUDA launch", ...), ``taken`` says whether
    it is taken, and ``reason`` why (or, when it is not, which public path runs instead).
    """

    name: str
    taken: bool
    reason: str


def release(version: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a version string such as ``"2.15.0+cu132"``, or None."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else None


def in_range(version: str, tested: tuple[tuple[int, int], tuple[int, int]]) -> bool:
    """Whether ``version``'s (major, minor) lies in the inclusive range ``tested``."""
    found = release(version)
    return found is not None and tested[0] <= found <= tested[1]


def range_text(tested: tuple[tuple[int, int], tuple[int, int]]) -> str:
    """``"2.11-2.15"``, with an en dash as prose writes a range, for a tested range."""
    (a, b), (c, d) = tested
    return f"{a}.{b}\N{EN DASH}{c}.{d}"


#: The torch release of this process, as :func:`fast_paths` names it.
TORCH_VERSION: str = torch.__version__
#: Whether this process's torch is a release CI tests (read once, at import).
TORCH_TESTED: bool = in_range(TORCH_VERSION, TESTED_TORCH)


def speed_paths_allowed() -> bool:
    """Whether an op registered now may take the fast paths built on torch internals: this
    torch is a release CI tests. Read once per registration."""
    return TORCH_TESTED


#: The fast paths, each with what runs instead where it is not taken. Every one gives the
#: results of the route it replaces (the tests compare them); each saves Python frames or
#: dispatcher work on a call.
_PATHS: tuple[tuple[str, str, str | None], ...] = (
    # (name, the public route taken instead, the module flag that can turn it off)
    ("direct call", "the dispatcher's route (the operator's entry point)", None),
    ("vmap short path", "one dispatch of the batched op per vmap level", "short_path_enabled"),
    ("vmap no-grad twin", "the batched op with its autograd kernel", "nograd_op_enabled"),
    ("vmap one-level pass", "the general batching rule", None),
    ("backward node call", "autograd's BackwardCFunction.apply", None),
    ("fake registration", "torch.library.register_fake, which inspects its caller", None),
)

#: Which environment variable turns off a path that a module flag controls.
_SWITCHES = {
    "short_path_enabled": "OPREG_VMAP_SHORT_PATH=0",
    "nograd_op_enabled": "OPREG_VMAP_NOGRAD_OP=0",
}


def fast_paths() -> tuple[FastPath, ...]:
    """Every fast path of opreg-core, whether ops registered now take it, and why.

    On a torch release outside :data:`TESTED_TORCH` none is taken: each op takes the public
    route named in the reason. (opreg-kernels' Triton launch paths are its own.)"""
    where = range_text(TESTED_TORCH)
    paths = []
    for name, instead, flag in _PATHS:
        if not TORCH_TESTED:
            reason = f"torch {TORCH_VERSION} is untested (tested: {where}): {instead}"
            paths.append(FastPath(name, False, reason))
        elif flag is not None and not getattr(_batching, flag):
            reason = f"switched off ({_SWITCHES[flag]}): {instead}"
            paths.append(FastPath(name, False, reason))
        else:
            paths.append(FastPath(name, True, f"torch {TORCH_VERSION} is tested ({where})"))
    return tuple(paths)
