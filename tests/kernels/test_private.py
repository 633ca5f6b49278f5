"""opreg_kernels._private: the one module that touches torch and Triton internals."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest

from opreg_kernels import _private


def test_every_internal_resolves_here() -> None:
    assert _private.missing_internals() == []


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("torch._C._dispatch_key_for_device", True),
        ("torch._C._opreg_no_such_function", False),
        ("opreg_no_such_module.attr", False),
        ("triton.compiler.CompiledKernel.run", True),
        ("triton.compiler.CompiledKernel.packed_metadata", True),  # set by __init__
        ("triton.compiler.CompiledKernel.opreg_no_such_attribute", False),
        ("triton.knobs.runtime.launch_enter_hook.calls", True),
    ],
)
def test_the_check_finds_what_is_missing(name: str, expected: bool) -> None:
    if name.startswith("triton"):
        pytest.importorskip("triton")
    assert _private._resolves(name) is expected


def test_launch_hooks_idle_only_without_registered_hooks() -> None:
    def chain(*calls: Any) -> SimpleNamespace:
        return SimpleNamespace(calls=list(calls))

    assert _private.launch_hooks_idle(
        SimpleNamespace(launch_enter_hook=chain(), launch_exit_hook=chain())
    )
    assert _private.launch_hooks_idle(
        SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
    )
    busy = SimpleNamespace(launch_enter_hook=chain(print), launch_exit_hook=chain())
    assert not _private.launch_hooks_idle(busy)
    # A hook that is not a chain (an older Triton's plain callable): never idle.
    assert not _private.launch_hooks_idle(
        SimpleNamespace(launch_enter_hook=print, launch_exit_hook=None)
    )


def test_direct_cuda_launch_passes_what_tritons_cuda_launcher_passes() -> None:
    # A CudaLauncher without scratch memory is skipped: its C launcher gets what its own
    # __call__ would pass it (checked against Triton's __call__ itself, on a stand-in launcher).
    driver = pytest.importorskip("triton.backends.nvidia.driver")
    seen: list[tuple[Any, ...]] = []
    launcher = object.__new__(driver.CudaLauncher)
    launcher.launch = lambda *args: seen.append(args)
    launcher.num_ctas = 1
    launcher.global_scratch_size = launcher.profile_scratch_size = 0
    launcher.global_scratch_align = launcher.profile_scratch_align = 1
    launcher.launch_cooperative_grid, launcher.launch_pdl = False, True
    compiled = SimpleNamespace(run=launcher, function="fn", packed_metadata="meta")
    _private.compiled_kernel_launcher(compiled)(7, 2, 3, 99, "x", "y")
    launcher(7, 2, 3, 99, "fn", "meta", None, None, None, "x", "y")  # Triton's own call
    assert len(seen) == 2 and seen[0] == seen[1]
    launcher.global_scratch_size = 16  # needs scratch memory: Triton's __call__ allocates it
    assert _private._direct_cuda_launch(launcher) is None


def test_compiled_kernel_launcher_calls_run_in_tritons_argument_order() -> None:
    seen: list[tuple[Any, ...]] = []
    compiled = SimpleNamespace(
        run=lambda *args: seen.append(args), function="fn", packed_metadata="meta"
    )
    _private.compiled_kernel_launcher(compiled)(7, 2, 3, 99, "x", "y")
    assert seen == [(7, 2, 3, 99, "fn", "meta", None, None, None, "x", "y")]
    with pytest.raises(AttributeError):
        _private.compiled_kernel_launcher(SimpleNamespace(run=print))


# -- what a launch that skips Triton's run() must do as run() does ----------------------------


def _jit_kernel() -> Any:
    triton = pytest.importorskip("triton")
    from . import fast_kernels

    return fast_kernels.row_sum_kernel, triton


def test_heuristics_options_are_what_heuristics_run_passes_on() -> None:
    kernel, triton = _jit_kernel()
    layer = triton.heuristics(
        {
            "BLOCK": lambda a: triton.next_power_of_2(a["n_cols"]),
            "STEP": lambda a: a["BLOCK"] * 2 + a["extra"],  # sees the value before it
        }
    )(kernel)
    seen: list[dict[str, Any]] = []
    layer.fn = SimpleNamespace(run=lambda *args, **kwargs: seen.append(kwargs))
    args = ("x", "out", 37)
    given = {"extra": 1}
    layer.run(*args, **dict(given))  # Triton's own computation of the same values
    assert _private.heuristics_options(layer, args, given) == seen[0]
    assert seen[0] == {"extra": 1, "BLOCK": 64, "STEP": 129}
    assert given == {"extra": 1}  # a new dict: the launch's own keyword arguments stay


def test_autotuner_best_config_and_base_fn_are_tritons() -> None:
    kernel, triton = _jit_kernel()
    configs = [triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})]
    tuner = triton.autotune(configs=configs, key=["n_cols"])(kernel)
    _private.set_autotuner_best_config(tuner, configs[1])
    assert tuner.best_config is configs[1]
    assert _private.autotuner_base_fn(tuner) is kernel.fn  # the Python function below it
    assert _private.autotuner_base_fn(SimpleNamespace()) is None


def test_triton_benchmarker_is_the_active_drivers() -> None:
    pytest.importorskip("triton")
    try:
        expected = _private.triton_default_driver().get_benchmarker()
    except RuntimeError as error:  # no active driver (the interpreter without a GPU)
        with pytest.raises(RuntimeError, match=re.escape(str(error))):
            _private.triton_benchmarker()
    else:
        assert _private.triton_benchmarker() is expected
