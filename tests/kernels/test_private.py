"""opreg_kernels._private: the one module that touches torch and Triton internals."""

from __future__ import annotations

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
