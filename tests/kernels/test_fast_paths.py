"""``opreg_kernels.fast_paths()`` and the Triton version gates behind it.

The fast launches are taken only on a Triton release inside ``TESTED_TRITON`` (else every
launch is Triton's own ``kernel[grid](...)``), and the C launcher is called directly only in a
tested launcher layout (else ``CompiledKernel.run``). CUDA is stood in for here: the tests
pretend compiled kernels launch on CUDA (no interpreter, a CUDA build, a device), and Triton's
launches are recorded instead of run.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import opreg_kernels
from opreg_core import FastPath
from opreg_kernels import _compiled_launch, _private
from opreg_kernels._versions import LAUNCHER_LAYOUTS, triton_release

LAUNCH, BINDER = "fast CUDA launch", "fast_launch binder"


@pytest.fixture
def on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend this process launches compiled Triton kernels on a CUDA device."""
    monkeypatch.setattr(_compiled_launch, "_HAS_CUDA", True)
    monkeypatch.setattr(_compiled_launch, "triton_interpreted", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


@pytest.fixture
def triton_version(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """Make the running Triton report another version (opreg's gates decide anew)."""
    triton = pytest.importorskip("triton")

    def become(version: str) -> None:
        monkeypatch.setattr(triton, "__version__", version)
        _private.cuda_launch_layout.cache_clear()

    _private.cuda_launch_layout.cache_clear()
    yield become
    _private.cuda_launch_layout.cache_clear()  # monkeypatch restores Triton after this


def test_fast_paths_is_public_and_the_tested_range_declared_once() -> None:
    assert "fast_paths" in opreg_kernels.__all__
    assert "TESTED_TRITON" in opreg_kernels.__all__
    assert opreg_kernels.TESTED_TRITON == ((3, 6), (3, 9))
    paths = opreg_kernels.fast_paths()
    assert [path.name for path in paths] == [LAUNCH, BINDER]
    assert all(isinstance(path, FastPath) for path in paths)


def test_fast_paths_here_say_why_they_are_not_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a CUDA device (here pretended where one is present), neither path is taken,
    and each says why."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for path in opreg_kernels.fast_paths():
        assert not path.taken
        assert any(
            why in path.reason
            for why in (
                "interpreter",
                "no CUDA",
                "Triton not installed",
                "Triton disabled",
                "is untested",
            )
        ), path


@pytest.mark.usefixtures("on_cuda")
def test_fast_paths_on_a_tested_triton_name_its_launcher_layout() -> None:
    triton = pytest.importorskip("triton")
    found = triton_release()
    if found not in LAUNCHER_LAYOUTS:
        pytest.skip("this Triton has no tested launcher layout")
    layout = LAUNCHER_LAYOUTS[found]
    version = triton.__version__
    assert opreg_kernels.fast_paths() == (
        FastPath(LAUNCH, True, f"Triton {version}: the {layout} launcher layout"),
        FastPath(BINDER, True, f"Triton {version}: Triton's own specialisation (its binder)"),
    )


@pytest.mark.usefixtures("on_cuda")
@pytest.mark.parametrize("version", ["3.10.0", "3.5.2", "4.0.0", "2.3.1"])
def test_fast_paths_on_an_untested_triton_are_tritons_own_launch(
    triton_version: Callable[[str], None], version: str
) -> None:
    triton_version(version)
    why = f"Triton {version} is untested (tested: 3.6\N{EN DASH}3.9): Triton's own launch"
    assert opreg_kernels.fast_paths() == (
        FastPath(LAUNCH, False, why),
        FastPath(BINDER, False, why),
    )


@pytest.mark.usefixtures("on_cuda")
def test_fast_paths_on_a_tested_release_without_a_tested_layout(
    triton_version: Callable[[str], None],
) -> None:
    triton_version("3.7.0")
    launch, binder = opreg_kernels.fast_paths()
    assert launch == FastPath(
        LAUNCH,
        False,
        "Triton 3.7.0: no tested launcher layout (tested: 3.6, 3.8, 3.9): CompiledKernel.run",
    )
    assert binder.taken


@pytest.mark.usefixtures("on_cuda", "triton_version")
def test_fast_paths_with_a_launcher_of_another_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = pytest.importorskip("triton.backends.nvidia.driver")
    found = triton_release()
    if found not in LAUNCHER_LAYOUTS:
        pytest.skip("this Triton has no tested launcher layout")

    def call(self: Any, grid: Any, stream: int, *args: Any) -> None:
        """A launcher of a layout nobody read."""

    monkeypatch.setattr(driver.CudaLauncher, "__call__", call)
    launch, _ = opreg_kernels.fast_paths()
    assert not launch.taken
    assert f"lacks the {LAUNCHER_LAYOUTS[found]} layout's shape (unknown)" in launch.reason
    assert launch.reason.endswith(": CompiledKernel.run")


def test_fast_paths_without_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_compiled_launch, "has_triton", lambda: False)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "triton" else find_spec(name)
    )
    absent = "Triton not installed"
    assert opreg_kernels.fast_paths() == (
        FastPath(LAUNCH, False, absent),
        FastPath(BINDER, False, absent),
    )
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    monkeypatch.setenv("OPREG_DISABLE_TRITON", "1")
    assert opreg_kernels.fast_paths()[0].reason == "Triton disabled by OPREG_DISABLE_TRITON"
    monkeypatch.delenv("OPREG_DISABLE_TRITON")
    assert opreg_kernels.fast_paths()[1].reason == "Triton failed to import"


# -- the gates in the launchers themselves ---------------------------------------------------


class _Launches:
    """Stand-ins for a compiled ``@triton.jit`` kernel's launches on CUDA: Triton's own launch
    (``kernel[grid](...)``, recorded, returns a compiled kernel) and its binder."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from triton.runtime import JITFunction

        from . import fast_kernels

        self.triton: list[tuple[Any, ...]] = []  # launches through Triton's own path
        self.run: list[tuple[Any, ...]] = []  # launches of the compiled kernel's run
        self.binds = 0
        self.kernel = JITFunction(fast_kernels.scale_kernel.fn)
        self.compiled = SimpleNamespace(
            run=lambda *args: self.run.append(args), function="fn", packed_metadata="meta"
        )

        def triton_launch(*args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
            self.triton.append(args)
            return self.compiled

        def binder(*args: Any, **kwargs: Any) -> Any:
            self.binds += 1
            names = ("x_ptr", "out_ptr", "n", "BLOCK")
            return dict(zip(names, (*args, *kwargs.values()), strict=True)), ["spec"], {}

        monkeypatch.setattr(self.kernel, "run", triton_launch)
        monkeypatch.setattr(_compiled_launch, "triton_binder", lambda jit, device: binder)
        monkeypatch.setattr(_compiled_launch, "_current_device", lambda: 0)
        monkeypatch.setattr(_compiled_launch, "_raw_stream", lambda device: 99)


@pytest.mark.usefixtures("on_cuda")
@pytest.mark.parametrize(("version", "fast"), [("3.9.0", True), ("3.6.0", True), ("3.10.0", False)])
def test_fast_launch_takes_tritons_own_launch_on_an_untested_triton(
    monkeypatch: pytest.MonkeyPatch, triton_version: Callable[[str], None], version: str,
    fast: bool,
) -> None:  # fmt: skip
    triton_version(version)
    launches = _Launches(monkeypatch)
    fast_kernel = opreg_kernels.fast_launch(launches.kernel)
    x, out = torch.ones(8), torch.empty(8)
    for _ in range(3):
        assert fast_kernel[(1,)](x, out, 8, BLOCK=8) is launches.compiled
    if fast:  # the first launch compiles through Triton, the others launch the compiled kernel
        assert len(launches.triton) == 1 and fast_kernel.fast_calls == 2
        assert launches.run == [(1, 1, 1, 99, "fn", "meta", None, None, None, x, out, 8, 8)] * 2
    else:  # never bound, never cached: Triton's kernel[grid](...) every time
        assert len(launches.triton) == 3 and fast_kernel.fast_calls == 0
        assert launches.binds == 0 and launches.run == []


@pytest.mark.usefixtures("on_cuda")
@pytest.mark.parametrize(("version", "fast"), [("3.8.0", True), ("3.10.0", False)])
def test_shipped_launches_take_tritons_own_launch_on_an_untested_triton(
    monkeypatch: pytest.MonkeyPatch, triton_version: Callable[[str], None], version: str,
    fast: bool,
) -> None:  # fmt: skip
    triton_version(version)
    launches = _Launches(monkeypatch)
    launch = _compiled_launch.FastLaunch(launches.kernel)
    x, out = torch.ones(8), torch.empty(8)
    for _ in range(3):
        launch("key", 1, 0, (x, out, 8), 4, {"BLOCK": 8})
    assert len(launches.triton) == (1 if fast else 3)
    assert len(launches.run) == (2 if fast else 0)
