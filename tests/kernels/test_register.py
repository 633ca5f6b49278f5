"""register_triton_op: options, device-type bookkeeping, the kernel wrapper's behaviour.

The launchers here are plain Python functions (no Triton needed): the wrapper only
checks whether Triton is available, which the ``triton_state`` fixture forces.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import opreg_core
import opreg_kernels
from opreg_core import VmapOpOptions
from opreg_kernels import (
    TritonKernelError,
    TritonOpOptions,
    _availability,
    _dispatch_kernel,
    register_triton_op,
    triton_kernel_info,
)


class Recorder:
    """A launcher that records its calls and doubles its input (the fallback adds it to itself)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append((x,))
        return x * 2


def make_op(ns: str, launcher: Any, name: str = "double", **options: Any) -> Any:
    def double(x: torch.Tensor) -> torch.Tensor:
        return x + x

    return register_triton_op(
        double,
        name=f"{ns}::{name}",
        fake_fn=lambda x: torch.empty_like(x),
        triton_fn=launcher,
        **options,
    )


def test_launcher_serves_its_device_types_and_the_fallback_the_rest(
    ns: str, triton_state: Any
) -> None:
    triton_state(True)
    recorder = Recorder()
    op = make_op(ns, recorder, triton_device_types="cpu")
    x = torch.arange(4.0)
    assert torch.equal(op(x), x * 2)
    assert len(recorder.calls) == 1
    assert op(x.to("meta")).device.type == "meta"  # the fake; no launch
    info = triton_kernel_info(op)
    assert info.device_types == frozenset({"cpu"}) == info.requested_device_types
    assert op.kernel_device_types == frozenset({"cpu"})
    assert not info.has_batched_kernel and info.skipped_device_types == frozenset()


def test_default_device_types_come_from_the_global_set(
    ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_availability, "_device_types", frozenset({"cuda"}))
    opreg_kernels.register_triton_device_type("cpu")
    op = make_op(ns, Recorder())
    assert triton_kernel_info(op).device_types == frozenset({"cuda", "cpu"})
    _availability._device_types = frozenset({"cuda"})
    later = make_op(ns, Recorder(), name="later")
    assert triton_kernel_info(later).device_types == frozenset({"cuda"})
    assert triton_kernel_info(op).device_types == frozenset({"cuda", "cpu"})  # unchanged


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("CPU", {"cpu"}),
        ([" cuda ", "cpu"], {"cuda", "cpu"}),
        (("cpu",), {"cpu"}),
        ({"cpu"}, {"cpu"}),
        ([], set()),
    ],
)
def test_triton_device_types_forms(ns: str, value: Any, expected: set[str]) -> None:
    op = make_op(ns, Recorder(), triton_device_types=value)
    assert triton_kernel_info(op).device_types == frozenset(expected)


@pytest.mark.parametrize("value", [3, b"cuda", ["cuda", 1], {"cuda": 1}, 1.5, [None]])
def test_bad_triton_device_types_raise_type_error_naming_the_op(ns: str, value: Any) -> None:
    with pytest.raises(TypeError, match=f"{ns}::double.*triton_device_types"):
        make_op(ns, Recorder(), triton_device_types=value)
    assert f"{ns}::double" not in {op.qualname for op in opreg_core.registered_ops()}


def test_empty_device_type_name_is_an_error(ns: str) -> None:
    with pytest.raises(ValueError, match=f"{ns}::double.*empty"):
        make_op(ns, Recorder(), triton_device_types=["cuda", " "])


def test_unknown_device_types_are_skipped_and_reported(ns: str, triton_state: Any) -> None:
    triton_state(True)
    op = make_op(ns, Recorder(), triton_device_types=["npu", "cpu", "no_such_device"])
    info = triton_kernel_info(op)
    assert info.device_types == frozenset({"cpu"})
    assert info.skipped_device_types == frozenset({"npu", "no_such_device"})
    assert info.requested_device_types == frozenset({"npu", "cpu", "no_such_device"})
    assert torch.equal(op(torch.ones(2)), torch.full((2,), 2.0))


@pytest.mark.parametrize(
    "launcher", [None, 3, "no_colon", "module:", ":attr", "m:not an identifier"]
)
def test_bad_launchers_raise_type_error_naming_the_op(ns: str, launcher: Any) -> None:
    with pytest.raises(TypeError, match=f"{ns}::double.*triton_fn"):
        make_op(ns, launcher)


def test_triton_vmap_fn_needs_vmap_fn(ns: str) -> None:
    with pytest.raises(ValueError, match=f"{ns}::double.*triton_vmap_fn.*vmap_fn"):
        make_op(ns, Recorder(), triton_vmap_fn=Recorder())
    with pytest.raises(TypeError, match=f"{ns}::double.*triton_vmap_fn"):
        make_op(ns, Recorder(), triton_vmap_fn=42, vmap_fn=lambda x: x, fake_vmap_fn=lambda x: x)


def test_core_errors_still_name_the_op(ns: str) -> None:
    with pytest.raises(TypeError, match=f"{ns}::double.*fake_vmap_fn"):
        make_op(ns, Recorder(), vmap_fn=lambda x: x + x)


def test_string_launcher_is_imported_on_the_first_launch(
    ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, triton_state: Any
) -> None:
    triton_state(True)
    module = tmp_path / "opreg_test_lazy_launcher.py"
    module.write_text("def launch(x):\n    return x * 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "opreg_test_lazy_launcher", raising=False)
    op = make_op(ns, "opreg_test_lazy_launcher:launch", triton_device_types="cpu")
    assert "opreg_test_lazy_launcher" not in sys.modules
    assert torch.equal(op(torch.ones(3)), torch.full((3,), 2.0))
    assert "opreg_test_lazy_launcher" in sys.modules


def test_unimportable_launcher_raises_kernel_error(ns: str, triton_state: Any) -> None:
    triton_state(True)
    op = make_op(ns, "opreg_no_such_module:launch", triton_device_types="cpu")
    with pytest.raises(
        TritonKernelError, match=f"^opreg: {ns}::double: .*'cpu'.*OPREG_DISABLE_TRITON=1"
    ) as info:
        op(torch.ones(2))
    assert isinstance(info.value.__cause__, ModuleNotFoundError)
    assert info.value.op_name == f"{ns}::double" and info.value.device == "cpu"


def test_fallback_serves_every_call_when_triton_is_unavailable(ns: str, triton_state: Any) -> None:
    triton_state(False)
    recorder = Recorder()
    op = make_op(ns, recorder, triton_device_types="cpu")
    assert torch.equal(op(torch.ones(2)), torch.full((2,), 2.0))
    assert recorder.calls == []
    unimportable = make_op(
        ns, "opreg_no_such_module:launch", name="other", triton_device_types="cpu"
    )
    assert torch.equal(unimportable(torch.ones(2)), torch.full((2,), 2.0))  # never imported


def test_launch_failures_become_kernel_errors_but_input_errors_pass(
    ns: str, triton_state: Any
) -> None:
    triton_state(True)
    failure: list[BaseException] = []

    def launcher(x: torch.Tensor) -> torch.Tensor:
        raise failure[0]

    op = make_op(ns, launcher, triton_device_types="cpu")
    failure[:] = [RuntimeError("CUDA error: an illegal memory access\nmore detail")]
    with pytest.raises(
        TritonKernelError, match=r"double.*'cpu'.*RuntimeError: CUDA error: an illegal"
    ) as info:
        op(torch.ones(2))
    assert info.value.__cause__ is failure[0] and "more detail" not in str(info.value)
    failure[:] = [ValueError("x must be positive")]
    with pytest.raises(ValueError, match="x must be positive"):
        op(torch.ones(2))
    failure[:] = [torch.OutOfMemoryError("out of memory")]
    with pytest.raises(torch.OutOfMemoryError):
        op(torch.ones(2))
    failure[:] = [KeyError("compiler bug")]
    with pytest.raises(TritonKernelError):
        op(torch.ones(2))


def test_value_errors_from_inside_triton_are_kernel_errors(ns: str, triton_state: Any) -> None:
    triton_state(True)
    # A frame whose module is named "triton..." raising ValueError, as Triton's launcher does
    # for an inaccessible pointer.
    namespace: dict[str, Any] = {"__name__": "triton.runtime.fake"}
    exec("def launch(x):\n    raise ValueError('Pointer argument cannot be accessed')\n", namespace)
    op = make_op(ns, namespace["launch"], triton_device_types="cpu")
    with pytest.raises(TritonKernelError, match="Pointer argument"):
        op(torch.ones(2))


def test_add_and_remove_device_types(ns: str, triton_state: Any) -> None:
    triton_state(True)
    recorder = Recorder()
    op = make_op(ns, recorder, triton_device_types=[])
    info = triton_kernel_info(op)
    assert info.device_types == frozenset()
    assert info.add_device_type(" CPU ") is True
    op(torch.ones(1))
    assert len(recorder.calls) == 1
    assert info.add_device_type("no_such_device") is False
    assert info.skipped_device_types == frozenset({"no_such_device"})
    assert info.remove_device_type("cpu") is True and info.remove_device_type("cpu") is False
    assert torch.equal(op(torch.ones(1)), torch.full((1,), 2.0))
    assert len(recorder.calls) == 1  # the fallback again
    assert info.device_types == frozenset() and op.kernel_device_types == frozenset()
    with pytest.raises(TypeError, match="device type must be a str"):
        info.add_device_type(None)  # type: ignore[arg-type]


def test_batched_launcher_serves_vmap_at_any_depth(ns: str, triton_state: Any) -> None:
    triton_state(True)
    main, batched = Recorder(), Recorder()
    op = make_op(
        ns,
        main,
        triton_device_types="cpu",
        vmap_fn=lambda x: x + x,
        fake_vmap_fn=lambda x: torch.empty_like(x),
        triton_vmap_fn=batched,
    )
    assert triton_kernel_info(op).has_batched_kernel
    x = torch.arange(24.0).reshape(2, 3, 4)
    assert torch.equal(torch.vmap(op)(x[0]), x[0] * 2)
    assert torch.equal(torch.vmap(torch.vmap(op, in_dims=1))(x), (x * 2).transpose(1, 2))
    assert len(batched.calls) == 2 and main.calls == []
    assert batched.calls[1][0].shape == (8, 3)  # two levels flattened into one batch dim


def test_vmap_without_batched_launcher_runs_vmap_fn(ns: str, triton_state: Any) -> None:
    triton_state(True)
    main = Recorder()
    op = make_op(
        ns, main, triton_device_types="cpu", vmap_fn=lambda x: x * 2, fake_vmap_fn=lambda x: x
    )
    assert torch.equal(torch.vmap(op)(torch.ones(3, 2)), torch.full((3, 2), 2.0))
    assert main.calls == [] and not triton_kernel_info(op).has_batched_kernel


def test_reregistration_replaces_the_kernels(ns: str, triton_state: Any) -> None:
    triton_state(True)
    first, second = Recorder(), Recorder()
    old = make_op(ns, first, triton_device_types="cpu")
    new = make_op(ns, second, triton_device_types="cpu")
    new(torch.ones(1))
    old(torch.ones(1))  # old handles call the new definition
    assert first.calls == [] and len(second.calls) == 2
    assert triton_kernel_info(f"{ns}::double").launcher is second


def test_triton_kernel_info_of_other_ops_is_an_error(ns: str) -> None:
    with pytest.raises(ValueError, match=f"^opreg: {ns}::missing: has no Triton kernels"):
        triton_kernel_info(f"{ns}::missing")
    with pytest.raises(ValueError, match="not registered by register_triton_op"):
        triton_kernel_info(torch.ops.aten.add.Tensor)  # type: ignore[arg-type]


def test_usable_as_plain_call_and_keeps_the_docstring(ns: str) -> None:
    def triple(x: torch.Tensor) -> torch.Tensor:
        """Three times x."""
        return x * 3

    op = register_triton_op(triple, name=f"{ns}::triple", fake_fn=lambda x: x, triton_fn=Recorder())
    assert isinstance(op, torch._ops.OpOverload)
    assert op.__doc__ == "Three times x."
    assert torch.equal(op(torch.ones(2)), torch.full((2,), 3.0))


def test_jvp_is_passed_through(ns: str) -> None:
    def double_jvp(ctx: Any, x_t: torch.Tensor) -> torch.Tensor:
        return 2 * x_t

    op = make_op(ns, Recorder(), jvp=double_jvp)
    assert op.has_jvp and inspect.unwrap(op.jvp) is double_jvp
    x, t = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(torch.func.jvp(op, (x,), (t,))[1], 2 * t)
    with pytest.raises(TypeError, match=f"{ns}::double: jvp must be a callable"):
        make_op(ns, Recorder(), jvp="nope")


class FakeDeviceModule:
    """Stands in for torch.cuda: records device switches."""

    def __init__(self) -> None:
        self.current = 0
        self.log: list[int] = []

    def current_device(self) -> int:
        return self.current

    def set_device(self, index: int) -> None:
        self.log.append(index)
        self.current = index


def test_device_guard_switches_to_the_tensors_device_and_back(
    ns: str, triton_state: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    triton_state(True)
    device_module = FakeDeviceModule()
    monkeypatch.setattr(
        _dispatch_kernel,
        "_device_switch",
        lambda device_type: _dispatch_kernel._DeviceSwitch(
            device_module.current_device, device_module.set_device
        ),
    )
    seen: list[int] = []
    index = [1]
    monkeypatch.setattr(torch.Tensor, "get_device", lambda self: index[0])

    def launcher(x: torch.Tensor) -> torch.Tensor:
        seen.append(device_module.current)
        if x.numel() == 0:
            raise RuntimeError("launch failed")
        return x * 2

    op = make_op(ns, launcher, triton_device_types="cpu")
    assert torch.equal(op(torch.ones(2)), torch.full((2,), 2.0))
    assert seen == [1] and device_module.log == [1, 0] and device_module.current == 0
    with pytest.raises(TritonKernelError, match="'cpu:1'"):
        op(torch.ones(0))
    assert device_module.log == [1, 0, 1, 0] and device_module.current == 0  # restored on error
    index[0] = 0
    op(torch.ones(2))
    assert seen[-1] == 0 and device_module.log == [1, 0, 1, 0]  # already current: no switch


def test_cuda_device_guard_only_with_several_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    # With one visible GPU the tensors' device is always the current one: no guard per call.
    monkeypatch.setattr(_dispatch_kernel, "cuda_current_device", lambda: 0)
    monkeypatch.setattr(_dispatch_kernel, "cuda_set_device", lambda index: None)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert _dispatch_kernel._device_switch("cuda") is None
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    switch = _dispatch_kernel._device_switch("cuda")
    assert switch is not None and switch.current_device() == 0


def test_missing_fake_fn_or_triton_fn_names_the_op(ns: str) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x

    with pytest.raises(
        TypeError, match=f"opreg: {ns}::f: triton_fn must be a callable .* got None"
    ):
        register_triton_op(name=f"{ns}::f", fake_fn=f)(f)
    with pytest.raises(TypeError, match=f"opreg: {ns}::f: fake_fn must be a callable, got missing"):
        register_triton_op(name=f"{ns}::f", triton_fn=f)(f)


def test_unregister_drops_the_triton_info(ns: str, triton_state: Any) -> None:
    triton_state(True)
    op = make_op(ns, Recorder(), triton_device_types="cpu")
    assert triton_kernel_info(op).device_types == frozenset({"cpu"})
    opreg_core.unregister(op.qualname)
    for handle in (op, op.qualname):
        with pytest.raises(
            ValueError, match=rf"^opreg: {ns}::double: has no Triton kernels \(not registered by"
        ):
            triton_kernel_info(handle)
    assert op.extensions == {}


def test_a_plain_op_reregistered_under_the_name_has_no_triton_info(
    ns: str, triton_state: Any
) -> None:
    triton_state(True)
    recorder = Recorder()
    old = make_op(ns, recorder, triton_device_types="cpu")

    def double(x: torch.Tensor) -> torch.Tensor:
        return x + x

    plain = opreg_core.register_vmap_op(
        double, name=f"{ns}::double", fake_fn=lambda x: torch.empty_like(x)
    )
    for handle in (plain, old, f"{ns}::double"):
        with pytest.raises(ValueError, match="not registered by register_triton_op"):
            triton_kernel_info(handle)
    # The plain op took the name over from another definition: the Triton op's handle raises
    # rather than run it, and the plain op runs its fallback, no Triton kernel left on cpu.
    with pytest.raises(RuntimeError, match=f"opreg: {ns}::double: this handle's op"):
        old(torch.ones(2))
    assert torch.equal(plain(torch.ones(2)), torch.full((2,), 2.0))
    assert recorder.calls == []


@pytest.mark.parametrize("decorator", [True, False])
def test_unknown_keywords_are_refused_naming_register_triton_op(ns: str, decorator: bool) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x

    options: dict[str, Any] = {"name": f"{ns}::f", "fake_fn": f, "triton_fn": f}
    message = (
        r"register_triton_op\(\) got an unexpected keyword argument 'triton_fnn'; "
        r"did you mean 'triton_fn'\?"
    )
    # mypy refuses these calls too (TritonOpOptions): the ignores are the point of the test.
    with pytest.raises(TypeError, match=message):
        if decorator:
            register_triton_op(**options, triton_fnn=f)  # type: ignore[call-overload]
        else:
            register_triton_op(f, **options, triton_fnn=f)  # type: ignore[call-overload]
    with pytest.raises(
        TypeError, match=r"register_triton_op\(\) .* 'fake_fnn'; did you mean 'fake_fn'\?"
    ):
        register_triton_op(f, **options, fake_fnn=f)  # type: ignore[call-overload]
    assert f"{ns}::f" not in {op.qualname for op in opreg_core.registered_ops()}


def test_triton_op_options_extend_the_core_options() -> None:
    core = VmapOpOptions.__optional_keys__ | VmapOpOptions.__required_keys__
    extra = {"triton_fn", "triton_device_types", "triton_vmap_fn", "compiler_visible"}
    assert TritonOpOptions.__optional_keys__ == core | extra
    assert TritonOpOptions.__required_keys__ == frozenset()
