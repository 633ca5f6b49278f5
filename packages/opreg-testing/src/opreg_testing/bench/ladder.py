"""The size ladder: which sizes a row is timed at, parsed from ``--sizes``, and their labels.

A size is a number of elements: that of the largest input tensor of the op's sample at that
size. Imports no torch.
"""

from __future__ import annotations

import re

#: Default ladders per device type: 4K to 256M elements on CUDA (fp32: 16 KiB to 1 GiB per
#: tensor), 1K to 4M on the CPU.
DEFAULT_LADDERS: dict[str, tuple[int, ...]] = {
    "cuda": (2**12, 2**16, 2**20, 2**24, 2**28),
    "cpu": (2**10, 2**14, 2**18, 2**22),
}
#: ``--quick``: two sizes per device type, fewer rounds.
QUICK_LADDERS: dict[str, tuple[int, ...]] = {
    "cuda": (2**16, 2**24),
    "cpu": (2**10, 2**14),
}
#: At most this many sizes: torch.compile keeps at most 8 specialisations of a function.
MAX_SIZES = 8
#: Elements of the inputs on which host time per call is measured.
HOST_SIZE = 16

_SUFFIX = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}
_NUMBER = re.compile(r"^(?:(?P<base>\d+)\^(?P<exp>\d+)|(?P<n>\d+)(?P<suffix>[kmg]?))$")


def parse_size(text: str) -> int:
    """``4096``, ``4K``, ``16M``, ``1G`` (powers of 1024) or ``2^20``; ``ValueError`` else."""
    match = _NUMBER.match(text.strip().lower())
    if match is None:
        raise ValueError(f"bad size {text.strip()!r}: use e.g. 4096, 64K, 16M or 2^20")
    if match["base"] is not None:
        value = int(int(match["base"]) ** int(match["exp"]))
    else:
        value = int(match["n"]) * _SUFFIX[match["suffix"]]
    if value < 1:
        raise ValueError(f"bad size {text.strip()!r}: a size is at least 1 element")
    return value


def parse_sizes(text: str) -> tuple[int, ...]:
    """A comma-separated ladder (``1K,1M,2^24``), ascending, without repeats."""
    sizes = sorted({parse_size(part) for part in text.split(",") if part.strip()})
    if not sizes:
        raise ValueError("--sizes names no size")
    if len(sizes) > MAX_SIZES:
        raise ValueError(
            f"at most {MAX_SIZES} sizes (torch.compile keeps {MAX_SIZES} per function)"
        )
    return tuple(sizes)


def default_ladder(device_type: str, quick: bool = False) -> tuple[int, ...]:
    ladders = QUICK_LADDERS if quick else DEFAULT_LADDERS
    return ladders.get(device_type, ladders["cuda"])


def size_label(size: int) -> str:
    """``2^20`` for a power of two, else ``1000000``; with the binary unit: ``2^20 (1M)``."""
    if size & (size - 1) == 0 and size >= 2:
        exp = size.bit_length() - 1
        unit = next(
            (
                f"{size >> shift}{u}"
                for shift, u in ((30, "G"), (20, "M"), (10, "K"))
                if exp >= shift
            ),
            str(size),
        )
        return f"2^{exp} ({unit})"
    return str(size)


def format_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


__all__ = [
    "DEFAULT_LADDERS",
    "HOST_SIZE",
    "MAX_SIZES",
    "QUICK_LADDERS",
    "default_ladder",
    "format_bytes",
    "parse_size",
    "parse_sizes",
    "size_label",
]
