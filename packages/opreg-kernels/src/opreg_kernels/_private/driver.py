"""Triton: its active driver and benchmarker, for autotuning under the interpreter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Triton internals used here; checked only where Triton imports.
INTERNALS: tuple[str, ...] = (
    "triton.runtime.driver.driver",
    "triton.runtime.driver.DriverConfig._active",
    "triton.runtime.driver.DriverConfig.set_active",
    "triton.runtime.driver.DriverConfig.default",
    "triton.runtime.autotuner.Autotuner._bench.kernel_call.self",
    "triton.runtime.autotuner.Autotuner._bench.kernel_call.config",
    "triton.runtime.autotuner.Autotuner._bench.kernel_call.full_nargs",
    "triton.runtime.autotuner.Autotuner.base_fn",
    "triton.backends.driver.DriverBase.get_benchmarker",
)


# Why: ``@triton.autotune`` times each config with ``driver.active.get_benchmarker()``, and
# under the interpreter on a machine without a GPU no driver is active ("0 active drivers").
# For the length of one opreg launch under the interpreter, a stand-in driver is lent to
# Triton (``DriverConfig.set_active``, the previous value read from ``_active``), whose
# benchmarker runs every config once and compares their results; comparing needs the
# arguments and config of each benchmark call, which Triton keeps only in the closure of
# the ``kernel_call`` function that ``Autotuner._bench`` builds (``self``, ``config``,
# ``full_nargs``). Checked on Triton 3.6, 3.8, 3.9 (the same ``DriverConfig`` and ``_bench``
# in each); a driver registry without ``_active``/``set_active`` gets no stand-in (Triton's
# own behaviour), a ``kernel_call`` of another shape runs without comparing. Public
# replacement: a benchmarker knob, or a ``do_bench`` that receives the config and
# arguments.


def lend_triton_driver(stand_in: Any) -> Callable[[], None]:
    """Make ``stand_in`` Triton's active driver; returns the function that undoes it (a
    Triton whose driver registry has another shape gets nothing lent: Triton's behaviour)."""
    from triton.runtime.driver import driver

    if not hasattr(driver, "_active") or not callable(getattr(driver, "set_active", None)):
        return lambda: None
    previous = driver._active

    def give_back() -> None:
        driver._active = previous

    driver.set_active(stand_in)
    return give_back


def triton_default_driver() -> Any:
    """Triton's own active driver (raises Triton's RuntimeError where none is active)."""
    from triton.runtime.driver import driver

    return driver.default


def autotune_benchmark_call(kernel_call: Any) -> tuple[Any, Any, dict[str, Any]] | None:
    """(autotuner, config, arguments by name) of one ``Autotuner._bench`` call, or None."""
    code = getattr(kernel_call, "__code__", None)
    cells = getattr(kernel_call, "__closure__", None)
    if code is None or cells is None:
        return None
    found = {name: cell.cell_contents for name, cell in zip(code.co_freevars, cells, strict=True)}
    nargs = found.get("full_nargs")
    if "self" not in found or "config" not in found or not isinstance(nargs, dict):
        return None
    return found["self"], found["config"], nargs


# Why: outside an opreg launch the stand-in driver's benchmarker does what Triton would do,
# through the active driver's own ``get_benchmarker()`` (a method of Triton's backend
# drivers); an error names the autotuned kernel by the Python function below the autotuner,
# ``Autotuner.base_fn`` (Triton's own messages use it). Checked on Triton 3.6, 3.8, 3.9.
# Public replacement: the benchmarker knob or config-aware ``do_bench`` above; a public name
# of an autotuned kernel.


def triton_benchmarker() -> Callable[..., Any]:
    """Triton's own benchmarker, the active driver's (raises Triton's RuntimeError where no
    driver is active)."""
    benchmarker: Callable[..., Any] = triton_default_driver().get_benchmarker()
    return benchmarker


def autotuner_base_fn(autotuner: Any) -> Any:
    """The Python function below an autotuner (``Autotuner.base_fn``), or None."""
    return getattr(autotuner, "base_fn", None)
