"""Comparing op outputs: a per-dtype tolerance table and the first mismatch of two results.

Integer and boolean outputs (indices, counts, random bits) are compared exactly; floating
outputs with ``|actual - expected| <= atol + rtol * |expected|`` (NaN equals NaN). Results
may be tensors or (nested) tuples/lists of them, plus plain Python values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch


@dataclass(frozen=True)
class Tolerance:
    """Allowed difference: ``|actual - expected| <= atol + rtol * |expected|``."""

    rtol: float
    atol: float

    def __post_init__(self) -> None:
        if self.rtol < 0 or self.atol < 0:
            raise ValueError(
                f"tolerances must be non-negative, got rtol={self.rtol}, atol={self.atol}"
            )

    @property
    def exact(self) -> bool:
        return self.rtol == 0 and self.atol == 0

    def __str__(self) -> str:
        return "exact" if self.exact else f"rtol={self.rtol:g}, atol={self.atol:g}"


#: Exact comparison (integer, boolean and random-bits outputs).
EXACT = Tolerance(0.0, 0.0)

#: Default tolerance per floating dtype (those of ``torch.testing.assert_close``); every other
#: dtype is compared exactly.
TOLERANCES: Mapping[torch.dtype, Tolerance] = MappingProxyType(
    {
        torch.float16: Tolerance(1e-3, 1e-5),
        torch.bfloat16: Tolerance(1.6e-2, 1e-5),
        torch.float32: Tolerance(1.3e-6, 1e-5),
        torch.float64: Tolerance(1e-7, 1e-7),
        torch.complex32: Tolerance(1e-3, 1e-5),
        torch.complex64: Tolerance(1.3e-6, 1e-5),
        torch.complex128: Tolerance(1e-7, 1e-7),
        **{
            dtype: Tolerance(0.125, 1e-2)
            for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
            if isinstance(dtype := getattr(torch, name, None), torch.dtype)
        },
    }
)

#: What a caller may pass as ``tolerance``: one for all dtypes, or a per-dtype table that
#: overrides :data:`TOLERANCES`.
ToleranceSpec = Tolerance | Mapping[torch.dtype, Tolerance] | None


def tolerance_for(dtype: torch.dtype, spec: ToleranceSpec = None) -> Tolerance:
    """The tolerance for comparing values of ``dtype`` (``spec`` overrides the table)."""
    if isinstance(spec, Tolerance):
        return spec if (dtype.is_floating_point or dtype.is_complex) else EXACT
    if spec is not None and dtype in spec:
        return spec[dtype]
    return TOLERANCES.get(dtype, EXACT)


def check_tolerance_spec(spec: object) -> ToleranceSpec:
    """Validate a ``tolerance`` argument, raising ``TypeError`` for anything else."""
    if spec is None or isinstance(spec, Tolerance):
        return spec
    if isinstance(spec, Mapping) and all(
        isinstance(k, torch.dtype) and isinstance(v, Tolerance) for k, v in spec.items()
    ):
        return spec
    raise TypeError(
        "tolerance must be a Tolerance, a mapping from torch.dtype to Tolerance, or None; "
        f"got {type(spec).__name__}"
    )


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.7g}"
    if isinstance(value, complex):
        return f"({value.real:.7g}{value.imag:+.7g}j)"
    if isinstance(value, tuple):
        return "(" + ", ".join(map(_fmt, value)) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


@dataclass(frozen=True)
class Mismatch:
    """The first difference between an expected and an actual result."""

    where: str  #: e.g. ``"output 0"``, ``"output 1[2]"``
    kind: str  #: ``"value"``, ``"shape"``, ``"dtype"``, ``"device"``, ``"stride"``, ``"type"``, ...
    expected: Any
    actual: Any
    index: tuple[int, ...] | None = None  #: element index, for ``kind == "value"``
    tolerance: Tolerance | None = None
    count: int = 0  #: how many elements differ
    total: int = 0  #: how many elements were compared

    def __str__(self) -> str:
        if self.kind != "value":
            return f"{self.where}: {self.kind} {_fmt(self.actual)}, expected {_fmt(self.expected)}"
        where = self.where if self.index is None else f"{self.where} at index {_fmt(self.index)}"
        text = f"{where}: expected {_fmt(self.expected)}, actual {_fmt(self.actual)}"
        if self.tolerance is not None:
            text += f", tolerance {self.tolerance}"
        if self.total:
            text += f" ({self.count} of {self.total} elements differ)"
        return text


def compare_tensors(
    expected: torch.Tensor, actual: torch.Tensor, where: str, tolerance: ToleranceSpec = None
) -> Mismatch | None:
    """The first difference of two tensors: metadata first, then values."""
    if actual.dtype != expected.dtype:
        return Mismatch(where, "dtype", expected.dtype, actual.dtype)
    if actual.shape != expected.shape:
        return Mismatch(where, "shape", tuple(expected.shape), tuple(actual.shape))
    if actual.device != expected.device:
        return Mismatch(where, "device", str(expected.device), str(actual.device))
    tol = tolerance_for(expected.dtype, tolerance)
    e = expected.detach().cpu()
    a = actual.detach().cpu()
    if e.dtype.is_floating_point or e.dtype.is_complex:
        wide = torch.complex128 if e.dtype.is_complex else torch.float64
        e, a = e.to(wide), a.to(wide)
        ok = torch.isclose(a, e, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
    else:
        ok = a == e
    if bool(ok.all()):
        return None
    bad = (~ok).nonzero()
    index = tuple(int(i) for i in bad[0])
    return Mismatch(
        where,
        "value",
        expected.detach().cpu()[index].item(),
        actual.detach().cpu()[index].item(),
        index=index,
        tolerance=tol,
        count=int(bad.shape[0]),
        total=e.numel(),
    )


def compare(
    expected: Any, actual: Any, *, tolerance: ToleranceSpec = None, where: str = "output"
) -> Mismatch | None:
    """The first difference between two op results (tensors, sequences of them, plain values).

    A single output is named ``"output"``, the items of a tuple ``"output 0"``, ``"output 1"``...
    """
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            return Mismatch(where, "type", "Tensor", type(actual).__name__)
        return compare_tensors(expected, actual, where, tolerance)
    if isinstance(expected, (tuple, list)):
        if not isinstance(actual, (tuple, list)):
            return Mismatch(where, "type", type(expected).__name__, type(actual).__name__)
        if len(actual) != len(expected):
            return Mismatch(where, "length", len(expected), len(actual))
        top = where == "output"
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            found = compare(
                e, a, tolerance=tolerance, where=f"output {i}" if top else f"{where}[{i}]"
            )
            if found is not None:
                return found
        return None
    if isinstance(actual, torch.Tensor):
        return Mismatch(where, "type", type(expected).__name__, "Tensor")
    if isinstance(expected, float) and isinstance(actual, float):
        tol = tolerance_for(torch.float64, tolerance)
        if expected != expected and actual != actual:  # both NaN
            return None
        if abs(actual - expected) <= tol.atol + tol.rtol * abs(expected):
            return None
        return Mismatch(where, "value", expected, actual, tolerance=tol)
    if expected != actual:
        return Mismatch(where, "value", expected, actual)
    return None
