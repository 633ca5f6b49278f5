"""Autotuned Triton kernels under Triton's interpreter: every config runs once, and they agree.

``@triton.autotune`` times each config with the active driver's benchmarker, which needs a
GPU: under the interpreter (``TRITON_INTERPRET=1``, CPU tensors, as CI runs) no driver is
active and the first launch of an autotuned kernel fails ("0 active drivers"). Timings would
mean nothing there anyway, so while an opreg op's launcher runs under the interpreter, the
dispatcher kernel runs it through :func:`interpreted_launch`, which lends Triton a stand-in
driver for that launch (and only for it: the previous driver is put back afterwards). Its
benchmarker, for each tuning of an autotuned kernel (a new value of the autotuner's ``key``):

- runs every config (after ``prune_configs_by``) once, with the autotuner's own hooks
  (``reset_to_zero``, ``restore_value``, ``pre_hook``/``post_hook``), as a GPU tuning does;
- compares every tensor argument after each config with the same argument after the first
  config: floating results within ``torch.testing.assert_close``'s default tolerances of their
  dtype, others exactly. Before each later config, the elements that the first config changed
  are overwritten (NaN, or a value different from the first config's) so that a config that
  leaves some of them unwritten is caught;
- reports equal timings, so that the first config is chosen and serves the launch.

A disagreement raises :class:`AutotuneConfigMismatch` naming the kernel, both configs and the
argument (the dispatcher kernel turns it into a ``TritonKernelError`` naming the op). An
in-place kernel without ``restore_value`` (which a GPU tuning would corrupt, running each
config many times) fails this way too. Arguments restored by ``restore_value`` are not
compared (their content after each config is the restored one).

On a GPU without the interpreter none of this runs: Triton tunes as usual. The stand-in
delegates everything else to Triton's own driver; a benchmark outside an opreg launch (the
autotuner keeps the benchmarker it got) runs Triton's own benchmarker, as if opreg were absent.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

import torch

from ._private import (
    autotune_benchmark_call,
    autotuner_base_fn,
    lend_triton_driver,
    triton_benchmarker,
    triton_default_driver,
)

__all__ = ["AutotuneConfigMismatch", "interpreted_launch"]

#: ``torch.testing.assert_close``'s default (rtol, atol) per floating dtype.
_TOLERANCES = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}
_NO_TIME = [0.0, 0.0, 0.0]  # the (median, 20th, 80th percentile) the autotuner asks for


class AutotuneConfigMismatch(RuntimeError):
    """Two configs of an autotuned kernel gave different results under the interpreter."""


class _Tuning:
    """One tuning of one autotuned kernel: the first config's results and what it changed."""

    def __init__(self, config: Any, results: dict[str, torch.Tensor], changed: dict[str, Any]):
        self.config = config
        self.results = results
        self.changed = changed  #: per argument, the mask of elements the first config changed
        self.seen = {config}


#: The tunings of the current opreg launch (None: no opreg launch under way in this context).
_tunings: contextvars.ContextVar[dict[Any, _Tuning] | None] = contextvars.ContextVar(
    "opreg_interpreter_tunings", default=None
)


def _tensors(arguments: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in arguments.items() if isinstance(v, torch.Tensor)}


def _changed(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    differs = before != after
    if before.is_floating_point() or before.is_complex():
        differs &= ~(before.isnan() & after.isnan())
    return differs


def _overwrite(tensor: torch.Tensor, mask: torch.Tensor, first: torch.Tensor) -> None:
    """Give the masked elements a value that differs from the first config's result."""
    if tensor.is_floating_point() or tensor.is_complex():
        tensor.masked_fill_(mask, float("nan"))
    elif tensor.dtype == torch.bool:
        tensor.copy_(torch.where(mask, ~first, tensor))
    else:
        tensor.copy_(torch.where(mask, first ^ 1, tensor))


def _mismatch(got: torch.Tensor, want: torch.Tensor) -> str | None:
    """What differs between two results of one argument (None: they agree)."""
    if got.shape != want.shape:  # pragma: no cover - the same tensor, snapshotted twice
        return f"shape {tuple(got.shape)} vs {tuple(want.shape)}"
    tolerance = _TOLERANCES.get(got.dtype)
    if tolerance is None:
        bad = got != want
    else:
        rtol, atol = tolerance
        bad = ~torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    count = int(bad.sum())
    if count == 0:
        return None
    where = tuple(int(i) for i in bad.nonzero()[0])
    return (
        f"{count} of {bad.numel()} elements differ, the first at index {where}: "
        f"{got[where].item()!r} vs {want[where].item()!r}"
    )


def _kernel_name(autotuner: Any) -> str:
    base = autotuner_base_fn(autotuner)
    return str(getattr(base, "__name__", None) or type(autotuner).__name__)


def _config_text(config: Any) -> str:
    return f"[{config}]"


def _run_and_compare(kernel_call: Callable[[], Any], tunings: dict[Any, _Tuning]) -> None:
    """Run one config's benchmark call once; compare it with the first config of its tuning."""
    found = autotune_benchmark_call(kernel_call)
    if found is None:  # a Triton that builds the call differently: run it, compare nothing
        kernel_call()
        return
    autotuner, config, arguments = found
    tensors = _tensors(arguments)
    key = (id(autotuner), tuple((name, id(t)) for name, t in tensors.items()))
    tuning = tunings.get(key)
    if tuning is None or config in tuning.seen:  # the first config of a new tuning
        before = {name: t.clone() for name, t in tensors.items()}
        kernel_call()
        results = {name: t.clone() for name, t in tensors.items()}
        changed = {name: _changed(before[name], results[name]) for name in tensors}
        tunings[key] = _Tuning(config, results, changed)
        return
    tuning.seen.add(config)
    for name, tensor in tensors.items():
        _overwrite(tensor, tuning.changed[name], tuning.results[name])
    kernel_call()
    for name, tensor in tensors.items():
        problem = _mismatch(tensor, tuning.results[name])
        if problem is not None:
            raise AutotuneConfigMismatch(
                f"autotuned kernel {_kernel_name(autotuner)}: config {_config_text(config)} "
                f"and config {_config_text(tuning.config)} disagree on argument {name!r} "
                f"under Triton's interpreter ({problem}); every config must compute the same "
                "result (an in-place argument needs restore_value=[...], an accumulated one "
                "reset_to_zero=[...])"
            )


def _benchmark(kernel_call: Callable[[], Any], quantiles: Any = None, **options: Any) -> Any:
    """The stand-in driver's benchmarker (see the module docstring)."""
    tunings = _tunings.get()
    if tunings is None:  # outside an opreg launch: what Triton itself would do
        own = triton_benchmarker()
        return own(kernel_call, quantiles=quantiles, **options)
    _run_and_compare(kernel_call, tunings)
    return list(_NO_TIME)


class _StandInDriver:
    """Triton's active driver for the length of an opreg launch under the interpreter."""

    def get_benchmarker(self) -> Callable[..., Any]:
        return _benchmark

    def __getattr__(self, name: str) -> Any:
        return getattr(triton_default_driver(), name)


_STAND_IN = _StandInDriver()
_lock = threading.Lock()
_lent = 0  # launches under way that lent the stand-in (any thread)
_give_back: Callable[[], None] | None = None


def _lend() -> None:
    global _lent, _give_back
    with _lock:
        if _lent == 0:
            _give_back = lend_triton_driver(_STAND_IN)
        _lent += 1


def _return() -> None:
    global _lent, _give_back
    with _lock:
        _lent -= 1
        if _lent == 0 and _give_back is not None:
            _give_back()
            _give_back = None


def interpreted_launch(launch: Callable[..., Any]) -> Callable[..., Any]:
    """``launch`` run with autotuning made possible under the interpreter (module docstring)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        token = _tunings.set({}) if _tunings.get() is None else None
        _lend()
        try:
            return launch(*args, **kwargs)
        finally:
            _return()
            if token is not None:
                _tunings.reset(token)

    return run
