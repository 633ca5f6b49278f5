"""``autocast`` on ``register_triton_op``: the Triton launcher receives the cast inputs, on the
CPU (Triton's interpreter) and on CUDA (compiled kernels; ``benchmarks/gpu/run_gpu.sh tests``
runs the CUDA cases, CUDA graphs included).

The op is an RMSNorm-like row op (``autocast_kernels``): its results under autocast are
compared with the same PyTorch ops on the inputs cast as the rule says, and, for the plain
ops that ATen lists (``mm`` in lower precision, ``softmax`` in float32 on CUDA), with those
ops under the same region."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from opreg_kernels import register_triton_op

pytestmark = pytest.mark.needs_triton

BF16 = torch.bfloat16
EPS = 1e-6


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """The fallback (and the reference): float32 inside, stored in ``x``'s dtype."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def _rms_norm_batched(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return _rms_norm(x, w.unsqueeze(-2) if x.dim() > w.dim() else w, eps)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, w, eps = inputs
    ctx.save_for_backward(x, w)
    ctx.eps = eps


def _backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
    x, w = ctx.saved_tensors
    with torch.enable_grad():
        xd, wd = x.detach().requires_grad_(), w.detach().requires_grad_()
        gx, gw = torch.autograd.grad(_rms_norm(xd, wd, ctx.eps), (xd, wd), g)
    return gx, gw, None


def register_rms_norm(ns: str, autocast: Any = "lower_precision", **options: Any) -> Any:
    return register_triton_op(
        _rms_norm,
        name=f"{ns}::rms_norm",
        fake_fn=lambda x, w, eps: torch.empty_like(x),
        vmap_fn=_rms_norm_batched,
        fake_vmap_fn=lambda x, w, eps: torch.empty_like(x),
        triton_fn="tests.kernels.autocast_kernels:launch",
        triton_vmap_fn="tests.kernels.autocast_kernels:launch",
        backward=_backward,
        setup_context=_setup,
        autocast=autocast,
        **options,
    )


@pytest.fixture
def launched() -> list[tuple[torch.dtype, torch.dtype]]:
    from tests.kernels import autocast_kernels

    autocast_kernels.LAUNCHED.clear()
    return autocast_kernels.LAUNCHED


def _inputs(device: torch.device, rows: tuple[int, ...] = (4,)) -> tuple[torch.Tensor, ...]:
    return torch.randn(*rows, 33, device=device), torch.randn(33, device=device)


def _region(device: torch.device, dtype: torch.dtype = BF16, enabled: bool = True) -> Any:
    return torch.autocast(device.type, dtype=dtype, enabled=enabled)


def _close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected, rtol=2e-2, atol=2e-2)


def test_the_launcher_sees_the_region_dtype(
    ns: str, triton_device: torch.device, launched: list[Any]
) -> None:
    op = register_rms_norm(ns)
    x, w = _inputs(triton_device)
    with _region(triton_device):
        out = op(x, w, EPS)
        assert launched[0] == (BF16, BF16)
        _close(out, _rms_norm(x.to(BF16), w.to(BF16), EPS))
        with _region(triton_device, enabled=False):
            assert op(x, w, EPS).dtype == torch.float32
            assert launched[0] == (torch.float32, torch.float32)
    assert op(x, w, EPS).dtype == torch.float32  # outside: as given
    assert launched[0] == (torch.float32, torch.float32)


def test_float32_upcasts_what_the_launcher_sees(
    ns: str, triton_device: torch.device, launched: list[Any]
) -> None:
    op = register_rms_norm(ns, autocast="float32")
    x, w = (t.to(BF16) for t in _inputs(triton_device))
    with _region(triton_device):
        out = op(x, w, EPS)
    assert launched[0] == (torch.float32, torch.float32)
    _close(out, _rms_norm(x.float(), w.float(), EPS))


def test_gradients_come_back_in_the_input_dtype(
    ns: str, triton_device: torch.device, launched: list[Any]
) -> None:
    op = register_rms_norm(ns)
    x, w = (t.requires_grad_() for t in _inputs(triton_device))
    xr, wr = (t.detach().clone().requires_grad_() for t in (x, w))
    g = torch.randn(4, 33, device=triton_device)
    with _region(triton_device):
        op(x, w, EPS).backward(g)
    _rms_norm(xr.to(BF16), wr.to(BF16), EPS).backward(g.to(BF16))
    for a, e in ((x, xr), (w, wr)):
        assert a.grad is not None and e.grad is not None
        assert a.grad.dtype == torch.float32
        _close(a.grad, e.grad)


@pytest.mark.parametrize("depth", [1, 2])
def test_vmap_runs_the_batched_launcher_on_cast_inputs(
    ns: str, triton_device: torch.device, launched: list[Any], depth: int
) -> None:
    op = register_rms_norm(ns)
    x = torch.randn(2, 3, 4, 33, device=triton_device)
    w = torch.randn(2, 3, 33, device=triton_device)
    if depth == 1:
        x, w = x[0], w[0]
    f = op
    for _ in range(depth):
        f = torch.vmap(f, in_dims=(0, 0, None))
    with _region(triton_device):
        out = f(x, w, EPS)
    assert launched[0] == (BF16, BF16)
    _close(
        out,
        _rms_norm_batched(
            x.to(BF16).flatten(0, depth - 1), w.to(BF16).flatten(0, depth - 1), EPS
        ).reshape(out.shape),
    )


@pytest.mark.parametrize("where", ["outside", "inside"])
def test_compile_fullgraph(ns: str, triton_device: torch.device, where: str) -> None:
    op = register_rms_norm(ns)
    x, w = _inputs(triton_device)

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if where == "inside":
            with torch.autocast(triton_device.type, dtype=BF16):
                return op(a, b, EPS)
        return op(a, b, EPS)

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    with _region(triton_device, enabled=where == "outside"):
        out = compiled(x, w)
    _close(out, _rms_norm(x.to(BF16), w.to(BF16), EPS))


def test_non_differentiable_op(ns: str, triton_device: torch.device, launched: list[Any]) -> None:
    op = register_triton_op(
        lambda x, w, eps: _rms_norm(x, w, eps),
        name=f"{ns}::rms_norm_nd",
        fake_fn=lambda x, w, eps: torch.empty_like(x),
        schema="(Tensor x, Tensor w, float eps) -> Tensor",
        triton_fn="tests.kernels.autocast_kernels:launch",
        differentiable=False,
        autocast={triton_device.type: torch.float16},
    )
    x, w = (t.requires_grad_() for t in _inputs(triton_device))
    with _region(triton_device):
        out = op(x, w, EPS)
    assert launched[0] == (torch.float16, torch.float16) and not out.requires_grad
    _close(out, _rms_norm(x.detach().half(), w.detach().half(), EPS))


# -- CUDA only: ATen's CUDA lists, CUDA graphs ---------------------------------------------------

needs_cuda_kernels = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 8,
    reason="needs a CUDA device with bf16 (run by benchmarks/gpu/run_gpu.sh tests)",
)


@needs_cuda_kernels
@pytest.mark.parametrize("dtype", [torch.float16, BF16])
def test_cuda_matches_aten_lists(ns: str, dtype: torch.dtype) -> None:
    """``"lower_precision"`` as ``torch.mm`` and ``"float32"`` as ``torch.softmax`` (both
    listed by ATen's CUDA autocast) under ``torch.autocast("cuda")``."""
    from opreg_core import register_vmap_op

    mm = register_vmap_op(
        lambda x, w: torch.mm(x, w),
        name=f"{ns}::mm",
        schema="(Tensor x, Tensor w) -> Tensor",
        fake_fn=lambda x, w: x.new_empty(x.shape[0], w.shape[1]),
        autocast="lower_precision",
    )
    softmax = register_vmap_op(
        lambda x: torch.softmax(x, -1),
        name=f"{ns}::softmax",
        schema="(Tensor x) -> Tensor",
        fake_fn=torch.empty_like,
        autocast="float32",
    )
    x, w = torch.randn(64, 32, device="cuda"), torch.randn(32, 16, device="cuda")
    with torch.autocast("cuda", dtype=dtype):
        a, b = mm(x, w), torch.mm(x, w)
        c, d = softmax(x.to(dtype)), torch.softmax(x.to(dtype), -1)
    assert (a.dtype, c.dtype) == (b.dtype, d.dtype) == (dtype, torch.float32)
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(c, d)


@needs_cuda_kernels
def test_cuda_graph_replays_the_cast(ns: str, launched: list[Any]) -> None:
    """Captured under autocast, the graph holds the cast and the Triton kernel in bf16; a
    replay on new float32 inputs gives what eager gives."""
    if torch.version.hip is not None:
        pytest.skip("CUDA graphs are tested on NVIDIA devices")
    op = register_rms_norm(ns)
    device = torch.device("cuda")
    x, w = _inputs(device, (256,))
    with _region(device):
        op(x, w, EPS)  # compile the kernel outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = op(x, w, EPS)
    assert launched[0] == (BF16, BF16) and out.dtype == BF16
    x.copy_(torch.randn_like(x))
    w.copy_(torch.randn_like(w))
    graph.replay()
    torch.cuda.synchronize()
    _close(out, _rms_norm(x.to(BF16), w.to(BF16), EPS))
