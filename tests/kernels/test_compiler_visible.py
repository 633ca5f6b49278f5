"""``register_triton_op(compiler_visible=True)``: the compiler sees the Triton kernel where it
runs, and nothing else changes.

On this CPU machine the op stays opaque (CPU is no Triton device, or Triton is interpreted), so
compiled results equal eager ones; every check still passes. Where Triton compiles, the graph
holds the kernel itself: shown here in a fresh process without the interpreter, with "cpu" as
the op's Triton device type (the graph is traced, never run: no GPU driver here). The CUDA
runs (the generated code launching the kernel, the results) are in test_aot_inductor.py and
benchmarks/bench_visible.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from torch._dynamo.testing import AotEagerAndRecordGraphs

from opreg_core import unregister
from opreg_kernels import TritonKernelError, fused_add, register_triton_op, triton_kernel_info
from opreg_testing import check_op, interpreter_enabled

HERE = Path(__file__).parent


@pytest.fixture
def kernels() -> Iterator[ModuleType]:
    """tests/kernels/visible_kernels.py (imports Triton)."""
    pytest.importorskip("triton")
    sys.path.insert(0, str(HERE))
    try:
        import visible_kernels
    finally:
        sys.path.remove(str(HERE))
    yield visible_kernels


def _graph_code(backend: AotEagerAndRecordGraphs) -> str:
    return "\n".join(g.code for g in backend.fw_graphs)


def _model(op: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """The op between Inductor-fusable pointwise ops."""

    def model(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(op(x * 3 + 1)) * 2

    return model


def test_option_must_be_a_bool(ns: str, kernels: ModuleType) -> None:
    with pytest.raises(TypeError, match=rf"{ns}::bad: compiler_visible must be True or False"):
        kernels.register_double(f"{ns}::bad", compiler_visible="yes")


def test_option_is_recorded(ns: str, kernels: ModuleType) -> None:
    visible = kernels.register_double(f"{ns}::visible")
    opaque = kernels.register_double(f"{ns}::opaque", compiler_visible=False)
    assert triton_kernel_info(visible).compiler_visible
    assert not triton_kernel_info(opaque).compiler_visible
    assert triton_kernel_info(fused_add).compiler_visible  # the shipped op uses the mode
    assert "compiler_visible" in repr(triton_kernel_info(visible))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_cpu_compiled_equals_eager_and_keeps_the_op(
    ns: str, kernels: ModuleType, backend: str
) -> None:
    """CPU is no Triton device of the op: compiled runs the fallback, like eager (the flaw of
    torch.library.triton_op, which traces the Triton body for CPU tensors too, is absent)."""
    op = kernels.register_double(f"{ns}::double")
    model = _model(op)
    x = torch.randn(33)
    recorder = AotEagerAndRecordGraphs()
    compiled = torch.compile(model, backend=recorder if backend == "aot_eager" else backend)
    if backend == "aot_eager":
        torch.testing.assert_close(compiled(x), model(x), rtol=0, atol=0)
    else:  # Inductor's fused sin may differ from eager's in the last bit
        torch.testing.assert_close(compiled(x), model(x))
    if backend == "aot_eager":
        code = _graph_code(recorder)
        assert f"torch.ops.{ns}.double.default" in code
        assert "triton_kernel_wrapper" not in code


def test_interpreted_triton_device_keeps_the_op(
    ns: str, kernels: ModuleType, opreg_triton_cpu: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CPU as a Triton device under the interpreter: eager and compiled both run the launcher
    (wrap_triton cannot trace an interpreted kernel, so the op stays opaque)."""
    calls: list[bool] = []
    from torch._library.triton import is_wrap_triton_enabled

    def launch(x: torch.Tensor) -> torch.Tensor:
        calls.append(is_wrap_triton_enabled())
        return kernels.launch(x)  # type: ignore[no-any-return]

    op = kernels.register_double(f"{ns}::double", triton_fn=launch, triton_device_types="cpu")
    model = _model(op)
    x = torch.randn(300)
    eager = model(x)
    assert calls == [False]  # eager launches with wrap_triton's dispatch off
    assert is_wrap_triton_enabled()  # and restores it
    recorder = AotEagerAndRecordGraphs()
    torch.testing.assert_close(torch.compile(model, backend=recorder)(x), eager, rtol=0, atol=0)
    assert calls[-1] is False and len(calls) >= 2  # the compiled graph ran the launcher too
    assert f"torch.ops.{ns}.double.default" in _graph_code(recorder)


def test_launcher_that_does_not_import_is_a_kernel_error(
    ns: str, kernels: ModuleType, opreg_triton_cpu: Any
) -> None:
    """A launcher named by a string still imports on the first launch, and fails as before."""
    op = kernels.register_double(
        f"{ns}::double", triton_fn="no_such_module_for_opreg:launch", triton_device_types="cpu"
    )
    with pytest.raises(TritonKernelError, match=rf"{ns}::double: the Triton kernel failed"):
        op(torch.ones(3))


@pytest.mark.parametrize("device", ["cpu", "triton-cpu"])
def test_every_check_passes(ns: str, kernels: ModuleType, device: str) -> None:
    """fake, vmap, compile, autograd, kernel and opcheck on the visible op (fallback on CPU, and
    the Triton kernel through the interpreter)."""
    if device == "triton-cpu" and not interpreter_enabled():
        pytest.skip("Triton on CPU needs the interpreter (this run compiles for the GPU)")
    op = kernels.register_double(f"{ns}::double")
    report = check_op(op, device=device, options={"compile": {"backend": "aot_eager"}})
    report.raise_for_failures()
    assert report.checked


def test_vmap_and_grad_in_eager(ns: str, kernels: ModuleType, opreg_triton_cpu: Any) -> None:
    op = kernels.register_double(f"{ns}::double", triton_device_types="cpu")
    x = torch.randn(4, 6)
    torch.testing.assert_close(torch.vmap(op)(x), x * 2)
    torch.testing.assert_close(torch.func.grad(lambda t: op(t).sum())(x), torch.full_like(x, 2))


def test_export_keeps_the_op(ns: str, kernels: ModuleType) -> None:
    op = kernels.register_double(f"{ns}::double")

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return _model(op)(x)

    x = torch.randn(8)
    program = torch.export.export(Model(), (x,))
    targets = [str(node.target) for node in program.graph.nodes]
    assert f"{ns}.double.default" in targets
    torch.testing.assert_close(program.module()(x), Model()(x), rtol=0, atol=0)


def test_reregistration_and_unregister(ns: str, kernels: ModuleType) -> None:
    """The decomposition rule is registered once per name and follows the op registered now."""
    name = f"{ns}::double"
    kernels.register_double(name)
    unregister(name)
    kernels.register_double(name)  # visible again: no "rule already registered" error
    unregister(name)
    op = kernels.register_double(name, compiler_visible=False)
    x = torch.randn(5)
    recorder = AotEagerAndRecordGraphs()
    compiled = torch.compile(_model(op), backend=recorder)
    torch.testing.assert_close(compiled(x), _model(op)(x), rtol=0, atol=0)
    assert f"torch.ops.{ns}.double.default" in _graph_code(recorder)


# Traces (never runs) compiled graphs where Triton compiles instead of interpreting: "cpu" is
# the op's Triton device type, so the decomposition rule applies on CPU tensors. A compiled
# graph that holds a Triton kernel cannot run here (no GPU driver); that failure is expected.
_TRACE = r"""
import json, sys
import torch
from torch._dynamo.testing import AotEagerAndRecordGraphs
sys.path.insert(0, sys.argv[1])
import visible_kernels as vk
from opreg_core import unregister
from opreg_kernels import _availability

def trace(fn, *args, dynamic=None):
    torch._dynamo.reset()
    rec = AotEagerAndRecordGraphs()
    try:
        torch.compile(fn, backend=rec, dynamic=dynamic)(*args)
        ran = "ran"
    except Exception as exc:  # a graph with a Triton kernel cannot run without a GPU driver
        ran = f"{type(exc).__name__}: {exc}"
    return {"fw": "\n".join(g.code for g in rec.fw_graphs),
            "bw": "\n".join(g.code for g in rec.bw_graphs), "ran": ran}

out = {}
op = vk.register_double("vis::double", triton_device_types="cpu")
x = torch.randn(40)
out["plain"] = trace(lambda t: torch.sin(op(t * 3)) + 1, x)
out["vmap"] = trace(torch.vmap(op), torch.randn(3, 5))
out["grad"] = trace(lambda t: op(t).sum(), x.clone().requires_grad_())

class Model(torch.nn.Module):
    def forward(self, t):
        return op(t) + 1
program = torch.export.export(Model(), (x,))
out["export"] = [str(n.target) for n in program.graph.nodes]

bare = vk.register_double("vis::bare", triton_fn=vk.launch_bare, triton_device_types="cpu")
out["bare"] = trace(lambda t: bare(t) + 1, x)

no_vmap = vk.register_double("vis::no_vmap", triton_vmap_fn=None, triton_device_types="cpu")
out["vmap_without_triton_vmap_fn"] = trace(torch.vmap(no_vmap), torch.randn(3, 5))

from opreg_kernels import philox_uniform, register_triton_op
uniform = register_triton_op(
    philox_uniform.fallback, name="vis::uniform", fake_fn=philox_uniform.fake_fn,
    triton_fn="opreg_kernels.ops.philox.triton_kernels:launch_uniform", differentiable=False,
    compiler_visible=True, triton_device_types="cpu",
)
seeds = torch.arange(6)
out["philox"] = trace(lambda s: uniform(s, 10, 7) * 2 - 1, seeds)
out["philox_dynamic"] = trace(lambda s, c: uniform(s, 10, c), seeds, 2**33 + 5, dynamic=True)

unregister("vis::double")
op = vk.register_double("vis::double", compiler_visible=False, triton_device_types="cpu")
out["reregistered_opaque"] = trace(lambda t: op(t) + 1, x)

unregister("vis::double")
op = vk.register_double("vis::double", triton_device_types="cpu")
_availability._available = False  # as with OPREG_DISABLE_TRITON=1
out["triton_off"] = trace(lambda t: op(t) + 1, x)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def traced() -> dict[str, Any]:
    """The graphs of _TRACE, from a fresh process without Triton's interpreter."""
    pytest.importorskip("triton")
    env = {
        k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "OPREG_DISABLE_TRITON")
    }
    proc = subprocess.run(
        [sys.executable, "-c", _TRACE, str(HERE)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_graph_holds_the_kernel_where_triton_compiles(traced: dict[str, Any]) -> None:
    code = traced["plain"]["fw"]
    assert "triton_kernel_wrapper_functional" in code
    assert "vis.double" not in code
    assert "aten.sin" in code  # the pointwise ops around it stay Inductor's


def test_batched_op_is_visible_with_triton_vmap_fn(traced: dict[str, Any]) -> None:
    assert "triton_kernel_wrapper_functional" in traced["vmap"]["fw"]
    assert "double__opreg_batched" not in traced["vmap"]["fw"]
    # without triton_vmap_fn the batched op stays opaque (it runs vmap_fn)
    without = traced["vmap_without_triton_vmap_fn"]["fw"]
    assert "vis.no_vmap" in without and "triton_kernel_wrapper" not in without


def test_autograd_traces_the_kernel_forward_and_the_backward(traced: dict[str, Any]) -> None:
    assert "triton_kernel_wrapper_functional" in traced["grad"]["fw"]
    assert "vis.double" not in traced["grad"]["fw"]


def test_export_keeps_the_visible_op(traced: dict[str, Any]) -> None:
    assert "vis.double.default" in traced["export"]
    assert not any("triton_kernel_wrapper" in target for target in traced["export"])


def test_launcher_without_wrap_triton_is_refused(traced: dict[str, Any]) -> None:
    """A bare ``kernel[grid](...)`` launcher: a compile error that names the op and the fix,
    never a graph that silently computes something else."""
    ran = traced["bare"]["ran"]
    assert "vis::bare: compiler_visible=True, but the Triton launcher failed" in ran
    assert "torch.library.wrap_triton(kernel)[grid](...)" in ran
    assert traced["bare"]["fw"] == ""


def test_shipped_philox_launcher_traces_into_the_kernel(traced: dict[str, Any]) -> None:
    """The philox launchers' wrap_triton branch (a visible twin of philox_uniform), with a
    symbolic counter under dynamic shapes (one graph for every counter)."""
    assert "triton_kernel_wrapper_functional" in traced["philox"]["fw"]
    assert "vis.uniform" not in traced["philox"]["fw"]
    dynamic = traced["philox_dynamic"]["fw"]
    assert "triton_kernel_wrapper_functional" in dynamic and "& 4294967295" in dynamic


def test_opaque_again_after_reregistration_or_without_triton(traced: dict[str, Any]) -> None:
    for case in ("reregistered_opaque", "triton_off"):
        code = traced[case]["fw"]
        assert "vis.double.default" in code and "triton_kernel_wrapper" not in code, case


# -- CUDA: the generated code launches the kernels (run by benchmarks/gpu/verify_visible.sh) --

needs_compiled_cuda = pytest.mark.skipif(
    not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"),
    reason="needs a CUDA device with compiled (not interpreted) Triton kernels",
)


def _generated_code(fn: Callable[..., Any], *args: Any) -> tuple[Any, str]:
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    out, codes = run_and_get_code(torch.compile(fn), *args)
    # without comments: they name the source ops of each node, decomposed ones included
    lines = (line for code in codes for line in code.splitlines())
    return out, "\n".join(line for line in lines if not line.lstrip().startswith("#"))


@needs_compiled_cuda
def test_cuda_generated_code_launches_the_kernels(ns: str, kernels: ModuleType) -> None:
    """Inductor's code calls the user's and fused_add's Triton kernels itself (no opreg op),
    and an opaque twin stays an extern call of the op; results equal eager."""
    visible = kernels.register_double(f"{ns}::double")
    opaque = kernels.register_double(f"{ns}::opaque", compiler_visible=False)
    x, y = torch.randn(5000, device="cuda"), torch.randn(5000, device="cuda")

    def model(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(fused_add(visible(torch.relu(x * 2 + 1)), y)) * 3

    out, code = _generated_code(model, x, y)
    torch.testing.assert_close(out, model(x, y))
    assert "_double_kernel" in code and "_add_kernel" in code
    assert f"torch.ops.{ns}.double" not in code and "torch.ops.opreg.fused_add" not in code
    out, code = _generated_code(lambda t: opaque(t * 2) + 1, x)
    torch.testing.assert_close(out, x * 4 + 1)
    assert f"torch.ops.{ns}.opaque.default" in code and "_double_kernel" not in code


@needs_compiled_cuda
def test_cuda_compiled_vmap_grad_and_checks(ns: str, kernels: ModuleType) -> None:
    op = kernels.register_double(f"{ns}::double")
    x = torch.randn(4, 300, device="cuda")
    torch.testing.assert_close(torch.compile(torch.vmap(op))(x), x * 2)
    leaf = x.clone().requires_grad_()
    torch.compile(lambda t: (op(t) * t).sum())(leaf).backward()
    assert leaf.grad is not None
    torch.testing.assert_close(leaf.grad, 4 * x)
    torch._dynamo.reset()
    check_op(op, device="cuda").raise_for_failures()
    check_op(fused_add, device="cuda").raise_for_failures()


@needs_compiled_cuda
def test_cuda_mutating_visible_op(ns: str, kernels: ModuleType) -> None:
    """An op that mutates its input, visible: compiled results and the mutation equal eager's."""
    op = kernels.register_double_in_place(f"{ns}::double_")

    def model(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        op(y)
        return y * 3

    x = torch.randn(1000, device="cuda")
    out, code = _generated_code(model, x)
    torch.testing.assert_close(out, (x + 1) * 6)
    assert "_double_in_place_kernel" in code and f"torch.ops.{ns}.double_" not in code
    z = x.clone()
    torch._dynamo.reset()
    torch.compile(op)(z)  # the argument itself is mutated
    torch.testing.assert_close(z, x * 2)


@needs_compiled_cuda
def test_cuda_launcher_without_wrap_triton_is_refused(ns: str, kernels: ModuleType) -> None:
    bare = kernels.register_double(f"{ns}::bare", triton_fn=kernels.launch_bare)
    x = torch.randn(300, device="cuda")
    torch.testing.assert_close(bare(x), x * 2)  # eager is fine
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"compiler_visible=True, but the Triton launcher failed"):
        torch.compile(lambda t: bare(t) + 1)(x)


@needs_compiled_cuda
def test_cuda_visible_philox_twins_match_the_shipped_ops(ns: str) -> None:
    """philox_uniform / philox_normal registered compiler-visible (the launchers' wrap_triton
    branch): compiled results are bit-identical to the shipped ops in eager, for several
    counters (a symbolic counter after the first change)."""
    from opreg_kernels import philox_normal, philox_uniform

    kernels = "opreg_kernels.ops.philox.triton_kernels"
    seeds = torch.tensor([0, 1, -1, 2**40 + 7, 2**63 - 1], device="cuda").repeat(50)
    for shipped, launcher in ((philox_uniform, "launch_uniform"), (philox_normal, "launch_normal")):
        twin = register_triton_op(
            shipped.fallback,
            name=f"{ns}::{launcher}",
            fake_fn=shipped.fake_fn,
            triton_fn=f"{kernels}:{launcher}",
            differentiable=False,
            compiler_visible=True,
        )
        torch._dynamo.reset()
        compiled = torch.compile(lambda s, c, op=twin: op(s, 37, c) * 2 - 1)
        for counter in (0, 5, 2**32 - 2, 2**40 + 3):
            want = shipped(seeds, 37, counter) * 2 - 1
            assert torch.equal(compiled(seeds, counter), want), (launcher, counter)
        _, code = _generated_code(lambda s, op=twin: op(s, 37, 0) * 2 - 1, seeds)
        assert "_philox_" in code and f"torch.ops.{ns}.{launcher}" not in code
