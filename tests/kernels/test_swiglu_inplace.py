"""examples/triton_swiglu.py: a Liger-style SwiGLU whose Triton backward writes the gradients
into the saved inputs, as an opreg op (the backward calls a mutating op) and as the
hand-written ``torch.autograd.Function`` around the same kernels that benchmarks/bench_swiglu.py
times it against. On CPU the kernels run in Triton's interpreter (``triton_device`` "cpu"); on
a CUDA machine compiled (``triton_device`` "cuda")."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from opreg_core import unregister
from opreg_testing import check_op, check_vmap, interpreter_enabled

pytestmark = pytest.mark.needs_triton


@pytest.fixture(scope="module")
def example() -> Iterator[Any]:
    """The example module, imported once (it registers its two ops at import, unregistered
    after this file's tests)."""
    pytest.importorskip("triton")
    path = Path(__file__).resolve().parents[2] / "examples" / "triton_swiglu.py"
    spec = importlib.util.spec_from_file_location("triton_swiglu_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # In sys.modules, as an imported module is: Dynamo (compiled autograd) imports the module
    # of the functions it traces.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    for op in (module.swiglu, module.swiglu_backward_):
        unregister(op.qualname)
    del sys.modules[spec.name]


def _reference_grads(
    a: torch.Tensor, b: torch.Tensor, g: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """silu(a) * b and its gradients, by PyTorch's autograd in float64."""
    a64, b64 = a.double().requires_grad_(), b.double().requires_grad_()
    out = torch.nn.functional.silu(a64) * b64
    da, db = torch.autograd.grad(out, (a64, b64), g.double())
    return out.detach(), da, db


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(4, 64), (3, 1000), (5000,)], ids=str)
def test_op_and_function_equal_pytorch(
    example: Any, triton_device: torch.device, dtype: torch.dtype, shape: tuple[int, ...]
) -> None:
    """Forward and both gradients, through the Triton kernels; the gradients are the saved
    buffers themselves (written in place, no gradient buffer allocated)."""
    a0 = torch.randn(shape, device=triton_device, dtype=dtype)
    b0 = torch.randn(shape, device=triton_device, dtype=dtype)
    g = torch.randn(shape, device=triton_device, dtype=dtype)
    expected, da, db = _reference_grads(a0, b0, g)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
    for fn in (example.swiglu, example.SwiGLUFunction.apply):
        a, b = a0.clone().requires_grad_(), b0.clone().requires_grad_()
        out = fn(a, b)
        assert out.dtype == dtype and out.is_contiguous()
        torch.testing.assert_close(out, expected.to(dtype), **tol)
        ga, gb = torch.autograd.grad(out, (a, b), g)
        torch.testing.assert_close(ga, da.to(dtype), **tol)
        torch.testing.assert_close(gb, db.to(dtype), **tol)
        assert ga.data_ptr() == a.data_ptr() and gb.data_ptr() == b.data_ptr()


def test_gradients_flow_through_activations(example: Any, triton_device: torch.device) -> None:
    """The training pattern: a and b are activations (here halves of one projection), the
    backward overwrites them, and the gradient reaches the leaf."""
    x = torch.randn(16, 200, device=triton_device)
    expected = torch.func.grad(lambda x: _swiglu_ref(*(2 * x).chunk(2, 1)).sum())(x)
    for fn in (example.swiglu, example.SwiGLUFunction.apply):
        leaf = x.clone().requires_grad_()
        gate, up = (2 * leaf).chunk(2, dim=1)
        fn(gate.contiguous(), up.contiguous()).sum().backward()
        torch.testing.assert_close(leaf.grad, expected)


def test_compiled_autograd_runs_the_in_place_backward(
    example: Any, triton_device: torch.device
) -> None:
    """The training step with its backward compiled (compiled autograd): the graph recorded
    through the op compiles, its backward's write through the mutating op included, and the
    gradients equal PyTorch's, before and after the op's Function settles."""
    x = torch.randn(16, 200, device=triton_device)
    expected = torch.func.grad(lambda x: _swiglu_ref(*(2 * x).chunk(2, 1)).sum())(x)
    graphs: list[Any] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    for _ in range(3):
        leaf = x.clone().requires_grad_()
        gate, up = (2 * leaf).chunk(2, dim=1)
        out = example.swiglu(gate.contiguous(), up.contiguous())
        with torch._dynamo.compiled_autograd._enable(torch.compile(backend=backend)):
            out.sum().backward()
        torch.testing.assert_close(leaf.grad, expected)
    assert graphs, "the backward was not compiled"
    assert any("swiglu_backward_" in str(gm.graph) for gm in graphs)


def _swiglu_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(a) * b


def test_strided_saved_inputs_get_their_gradients(
    example: Any, triton_device: torch.device
) -> None:
    """Non-contiguous a and b: the launcher writes the gradients back into their memory."""
    a = torch.randn(8, 40, device=triton_device).t().requires_grad_()
    b = torch.randn(40, 8, device=triton_device).requires_grad_()
    g = torch.randn(40, 8, device=triton_device)
    _, da, db = _reference_grads(a.detach(), b.detach(), g)
    for fn in (example.swiglu, example.SwiGLUFunction.apply):
        ac, bc = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
        ga, gb = torch.autograd.grad(fn(ac, bc), (ac, bc), g)
        torch.testing.assert_close(ga, da.float())
        torch.testing.assert_close(gb, db.float())


def test_the_op_declares_its_write_and_the_function_does_not(
    example: Any, triton_device: torch.device
) -> None:
    """opreg's mutating op bumps the buffers' version counters: a second backward through the
    graph fails instead of reading gradients where activations were. The hand-written
    Function's kernel writes through pointers: its second backward silently returns wrong
    gradients (what the declaration buys)."""
    a0 = torch.randn(4, 64, device=triton_device)
    b0 = torch.randn(4, 64, device=triton_device)
    g = torch.randn(4, 64, device=triton_device)
    a, b = a0.clone().requires_grad_(), b0.clone().requires_grad_()
    out = example.swiglu(a, b)
    version = a._version
    torch.autograd.grad(out, (a, b), g, retain_graph=True)
    assert a._version > version
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(out, (a, b), g)
    a, b = a0.clone().requires_grad_(), b0.clone().requires_grad_()
    out = example.SwiGLUFunction.apply(a, b)
    first = [t.clone() for t in torch.autograd.grad(out, (a, b), g, retain_graph=True)]
    second = torch.autograd.grad(out, (a, b), g)
    assert not torch.allclose(first[0], second[0])


@pytest.mark.parametrize("device", ["cpu", "triton-cpu", "cuda"])
def test_the_op_passes_check_op(example: Any, device: str) -> None:
    """Every check on the fallback and on the Triton kernels (the interpreter on CPU, compiled
    on CUDA): the autograd check finds the in-place backward, checks it against finite
    differences on fresh inputs and reports it once differentiable."""
    if device == "triton-cpu" and not interpreter_enabled():
        pytest.skip("Triton on CPU needs the interpreter (this run compiles for the GPU)")
    if device == "cuda" and (interpreter_enabled() or not torch.cuda.is_available()):
        pytest.skip("needs a CUDA device with compiled (not interpreted) Triton kernels")
    # The example is loaded from its file, not imported by a module name that a process
    # loading an exported program could import: the export check's importability part is off.
    options = {"compile": {"backend": "aot_eager"}, "export": {"importable": False}}
    report = check_op(example.swiglu, device=device, options=options)
    report.raise_for_failures()
    assert report.checked
    autograd = next(r for r in report.results if r.check == "autograd")
    assert autograd.info["consumes_saved_inputs"] == ["a", "b"]
    assert autograd.info["once_differentiable"]


def test_bad_inputs_name_the_op(example: Any, triton_device: torch.device) -> None:
    a = torch.randn(4, 64, device=triton_device)
    for fn in (example.swiglu, example.SwiGLUFunction.apply):
        with pytest.raises(ValueError, match=r"swiglu_example::swiglu: a and b must have one"):
            fn(a, torch.randn(4, 32, device=triton_device))
        with pytest.raises(ValueError, match=r"swiglu_example::swiglu: .*float64"):
            fn(a, a.double())


def test_the_benchmark_check_passes(example: Any, triton_device: torch.device) -> None:
    """benchmarks/bench_swiglu.py's own correctness check, before it times anything."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_swiglu.py"
    spec = importlib.util.spec_from_file_location("bench_swiglu", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))  # bench_swiglu imports bench_core from its folder
    try:
        spec.loader.exec_module(bench)
    finally:
        sys.path.remove(str(path.parent))
    bench.check(example, triton_device.type)
    steps = bench.contenders(example)
    a = torch.randn(4, 64, device=triton_device, dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn_like(a, requires_grad=True)
    g = torch.randn_like(a)
    for name in ("Function", "opreg"):
        ga, gb = steps[name](a, b, g)
        assert ga.data_ptr() == a.data_ptr() and gb.data_ptr() == b.data_ptr(), name


def test_the_example_runs() -> None:
    """examples/triton_swiglu.py as a script: on CUDA compiled, else under the interpreter (the
    plugin set TRITON_INTERPRET=1 for this run, and the script inherits it)."""
    pytest.importorskip("triton")
    example = Path(__file__).resolve().parents[2] / "examples" / "triton_swiglu.py"
    proc = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    device = "cpu" if interpreter_enabled() else "cuda"
    for name in ("opreg op", "Function"):
        for dtype in ("torch.float32", "torch.bfloat16"):
            assert f"{name}, {dtype}: forward and backward equal PyTorch on {device}" in proc.stdout


@pytest.mark.parametrize("device", ["cpu", "triton-cpu"])
def test_the_in_place_backward_passes_the_vmap_check(example: Any, device: str) -> None:
    """The mutating op under vmap (no vmap_fn: opreg's per-sample loop writes each entry's
    slice in place), its written arguments compared with the op on each entry, at depths 1 to
    3, in_dims 0, -1 and middle, with strided batched inputs; on the fallback and on the Triton
    kernels (the interpreter)."""
    if device == "triton-cpu" and not interpreter_enabled():
        pytest.skip("Triton on CPU needs the interpreter (this run compiles for the GPU)")
    result = check_vmap(example.swiglu_backward_, device=device)
    assert result.passed, result
    assert result.info["batching"] == "opreg per-sample loop"
    assert result.info["cases"] > 0
