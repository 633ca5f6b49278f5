"""opreg_kernels._private: the one package that touches torch and Triton internals.

(Whether its ``INTERNALS`` resolve is checked by ``tests/test_private_boundaries.py``.)"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from opreg_kernels import _private
from opreg_kernels._private.launch import _direct_cuda_launch


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


def _launcher(cuda_launcher: type, seen: list[tuple[Any, ...]], pdl: bool = True) -> Any:
    """A ``CudaLauncher`` (its ``__init__``, which compiles, skipped) whose C launcher records
    what it gets: the attributes each Triton release's ``__init__`` sets, for a kernel without
    scratch memory."""
    launcher: Any = object.__new__(cuda_launcher)
    launcher.launch = lambda *args: seen.append(args)
    launcher.num_ctas = 1
    launcher.global_scratch_size = launcher.profile_scratch_size = 0
    launcher.global_scratch_align = launcher.profile_scratch_align = 1
    launcher.launch_cooperative_grid, launcher.launch_pdl = False, pdl
    # Set by Triton 3.8+'s __init__ (3.6's __call__ does not read them).
    launcher.arg_annotations, launcher.kernel_signature = ("annotations",), b"signature"
    launcher.gsan_enabled = False
    return launcher


def test_direct_cuda_launch_passes_what_tritons_cuda_launcher_passes() -> None:
    # A CudaLauncher without scratch memory is skipped: its C launcher gets what its own
    # __call__ would pass it (checked against Triton's __call__ itself, on a stand-in launcher;
    # from Triton 3.8 on __call__ reads the active driver: a stand-in one is lent).
    driver = pytest.importorskip("triton.backends.nvidia.driver")
    seen: list[tuple[Any, ...]] = []
    launcher = _launcher(driver.CudaLauncher, seen)
    compiled = SimpleNamespace(run=launcher, function="fn", packed_metadata="meta")
    give_back = _private.lend_triton_driver(SimpleNamespace())
    try:
        _private.compiled_kernel_launcher(compiled)(7, 2, 3, 99, "x", "y")
        launcher(7, 2, 3, 99, "fn", "meta", None, None, None, "x", "y")  # Triton's own call
    finally:
        give_back()
    assert len(seen) == 2 and seen[0] == seen[1]
    # ... and the first call was the direct one (a call through run would match trivially).
    assert _direct_cuda_launch(launcher, "fn", "meta") is not None
    launcher.global_scratch_size = 16  # needs scratch memory: Triton's __call__ allocates it
    assert _direct_cuda_launch(launcher, "fn", "meta") is None


# Stand-ins for the two tested launcher layouts' CudaLauncher: what each release's __init__
# sets that tells the layouts apart, and what its __call__ passes the C launcher for a kernel
# without scratch memory (Triton 3.6, and Triton 3.8/3.9, without allocation and GSan).


def _init_36(self: Any, src: Any, metadata: Any) -> None:
    self.launch = self.global_scratch_size = self.profile_scratch_size = None
    self.launch_cooperative_grid = self.launch_pdl = None


def _call_36(
    self: Any, gridX: int, gridY: int, gridZ: int, stream: int, function: Any, *args: Any
) -> None:
    self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid,
                self.launch_pdl, None, None, *args)  # fmt: skip


def _init_38(self: Any, src: Any, metadata: Any) -> None:
    _init_36(self, src, metadata)
    self.gsan_enabled = False
    self.arg_annotations = self.kernel_signature = None


def _call_38(
    self: Any, gridX: int, gridY: int, gridZ: int, stream: int, function: Any,
    kernel_metadata: Any, launch_metadata: Any, launch_enter_hook: Any, launch_exit_hook: Any,
    *args: Any,
) -> None:  # fmt: skip
    assert not self.gsan_enabled
    self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid,
                self.launch_pdl, kernel_metadata, launch_metadata, launch_enter_hook,
                launch_exit_hook, None, None, self.arg_annotations, self.kernel_signature,
                args)  # fmt: skip


_SHAPES = {"3.6": (_init_36, _call_36), "3.8+": (_init_38, _call_38)}


@pytest.fixture
def triton_as(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str], Any]]:
    """``triton_as(version, shape)``: make the running Triton report ``version`` and its
    ``CudaLauncher`` have the ``__init__``/``__call__`` of ``shape`` (a tested layout's);
    returns the launcher class. opreg decides the layout anew (once per process otherwise)."""
    triton = pytest.importorskip("triton")
    driver = pytest.importorskip("triton.backends.nvidia.driver")

    def become(version: str, shape: str) -> Any:
        init, call = _SHAPES[shape]
        monkeypatch.setattr(triton, "__version__", version)
        monkeypatch.setattr(driver.CudaLauncher, "__init__", init)
        monkeypatch.setattr(driver.CudaLauncher, "__call__", call)
        _private.cuda_launch_layout.cache_clear()
        return driver.CudaLauncher

    _private.cuda_launch_layout.cache_clear()
    yield become
    _private.cuda_launch_layout.cache_clear()  # monkeypatch restores Triton after this


@pytest.mark.parametrize(
    ("version", "shape", "direct"),
    [
        ("3.6.0", "3.6", True),
        ("3.8.0", "3.8+", True),
        ("3.9.0", "3.8+", True),
        ("3.9.1+git", "3.8+", True),
        # A layout the release does not have (a patched Triton), or a release whose layout was
        # never read (3.7, 3.10, 4.0): CompiledKernel.run, never a guessed layout.
        ("3.9.0", "3.6", False),
        ("3.6.0", "3.8+", False),
        ("3.7.0", "3.6", False),
        ("3.7.0", "3.8+", False),
        ("3.10.0", "3.8+", False),
        ("4.0.0", "3.8+", False),
    ],
)
def test_direct_cuda_launch_takes_a_layout_only_where_release_and_launcher_agree(
    triton_as: Callable[[str, str], Any], version: str, shape: str, direct: bool
) -> None:
    cuda_launcher = triton_as(version, shape)
    seen: list[tuple[Any, ...]] = []
    launcher = _launcher(cuda_launcher, seen)
    compiled = SimpleNamespace(run=launcher, function="fn", packed_metadata="meta")
    _private.compiled_kernel_launcher(compiled)(7, 2, 3, 99, "x", "y")
    launcher(7, 2, 3, 99, "fn", "meta", None, None, None, "x", "y")  # the launcher's own call
    assert len(seen) == 2
    assert seen[0] == seen[1]
    assert (_direct_cuda_launch(launcher, "fn", "meta") is not None) is direct
    assert _private.cuda_launch_layout() == (shape if direct else None)


def test_direct_cuda_launch_leaves_instrumented_and_scratch_kernels_to_run(
    triton_as: Callable[[str, str], Any],
) -> None:
    launcher = _launcher(triton_as("3.9.0", "3.8+"), [])
    assert _direct_cuda_launch(launcher, "fn", "meta") is not None
    launcher.gsan_enabled = True  # GSan adds arguments of its own to each launch
    assert _direct_cuda_launch(launcher, "fn", "meta") is None
    launcher.gsan_enabled = False
    launcher.profile_scratch_size = 8
    assert _direct_cuda_launch(launcher, "fn", "meta") is None
    del launcher.arg_annotations  # a launcher of another shape than its class's
    launcher.profile_scratch_size = 0
    assert _direct_cuda_launch(launcher, "fn", "meta") is None
    assert _direct_cuda_launch(lambda *args: None, "fn", "meta") is None  # not CUDA


def test_launcher_shape_reads_call_parameters_and_init_attributes() -> None:
    class Like36:
        __init__ = _init_36
        __call__ = _call_36

    class Like38:
        __init__ = _init_38
        __call__ = _call_38

    class Mixed:  # 3.8's __call__, 3.6's attributes
        __init__ = _init_36
        __call__ = _call_38

    class NoCall:
        __init__ = _init_38

    assert _private.launcher_shape(Like36) == "3.6"
    assert _private.launcher_shape(Like38) == "3.8+"
    assert _private.launcher_shape(Mixed) is None
    assert _private.launcher_shape(NoCall) is None


def test_compiled_kernel_launcher_calls_run_in_tritons_argument_order() -> None:
    pytest.importorskip("triton")  # the launcher asks Triton's NVIDIA backend first
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
