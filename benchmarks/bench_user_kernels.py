"""Host cost of a *user's* Triton op: opreg's own cost over the user's launcher, and what
``opreg_kernels.fast_launch`` gains (issue #13, part 3). Needs CUDA.

    python benchmarks/bench_user_kernels.py [--calls 1000] [--repeats 41] [--json out.json]

Three user ops, as a user writes them (tiny inputs, so the host is the limit):

- ``add``: a plain ``@triton.jit`` kernel, op registered ``differentiable=False``;
- ``rms_norm``: examples/triton_rmsnorm.py's kernels (an autotuned forward with heuristics)
  and pattern (the backward is another Triton op), ``w`` requires grad;
- ``softmax``: a plain kernel per row, backward in PyTorch.

Each op exists twice: its launcher calls ``kernel[grid](...)`` ("plain") or
``fast_launch(kernel)[grid](...)`` ("fast"). Rows: the launcher called directly, the op, for
``add`` the same launcher as the CUDA kernel of a bare ``torch.library`` op (what the
dispatcher's crossing into any Python kernel costs, without opreg), and for the differentiable
ops a bare ``torch.autograd.Function`` around the plain launcher (what recording for autograd
costs without opreg), in grad mode and under ``torch.inference_mode``.
Ratios, all in this run: ``op / launcher`` of the same flavour (opreg's own cost; target
<= 1.15) and ``vs plain launcher`` (the user's original ``kernel[grid]`` launcher; target for
the fast op <= 1.0). The shipped ``fused_add`` launcher (hand-keyed fast launch) is compared
with the same kernel through ``fast_launch``. Every row is timed once per round, ``--calls``
calls each (the GPU synchronised between rows), for ``--repeats`` rounds; a row's figure is its
median over the rounds and a ratio the median of the ratios within a round, so that the
host's drift over seconds (up to 30 % between rows timed apart on the H200 hosts) cancels.
The last lines compare the two targets of issue #21 with this run's ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

from bench_kernels import host_us_rounds, median_ratio  # this folder's timer (run as

# python benchmarks/bench_user_kernels.py)
from opreg_kernels import fast_launch, register_triton_op

Row = dict[str, Any]


@triton.jit  # type: ignore[untyped-decorator]
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def _example() -> Any:
    """examples/triton_rmsnorm.py, whose kernels (wrapped in ``fast_launch``) the rms_norm op
    here launches: ``.kernel`` is the plain autotuned kernel."""
    path = Path(__file__).resolve().parents[1] / "examples" / "triton_rmsnorm.py"
    spec = importlib.util.spec_from_file_location("triton_rmsnorm_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_EXAMPLE = _example()
_rms_fwd = _EXAMPLE._rms_norm_fwd.kernel
_rms_bwd = _EXAMPLE._rms_norm_bwd.kernel


@triton.jit  # type: ignore[untyped-decorator]
def _softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    row = tl.program_id(0).to(tl.int64) * n_cols
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)


def build(flavour: str) -> dict[str, Any]:
    """The three user ops and their launchers, launching ``kernel[grid]`` or through
    ``fast_launch`` (``flavour`` "plain" or "fast")."""
    wrap: Callable[[Any], Any] = fast_launch if flavour == "fast" else (lambda kernel: kernel)
    add_k, fwd_k, bwd_k, soft_k = (
        wrap(k) for k in (_add_kernel, _rms_fwd, _rms_bwd, _softmax_kernel)
    )
    ns = f"bench_user_{flavour}"

    def add_launcher(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        n = x.numel()
        add_k[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out

    def add_ref(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y

    add = register_triton_op(
        name=f"{ns}::add", fake_fn=lambda x, y: torch.empty_like(x), triton_fn=add_launcher,
        differentiable=False,
    )(add_ref)  # fmt: skip

    def bwd_launcher(
        g: torch.Tensor, x: torch.Tensor, w: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        g2, x2 = g.contiguous().view(-1, x.shape[-1]), x.contiguous().view(-1, x.shape[-1])
        dx = torch.empty_like(x2)
        dw_rows = torch.empty(x2.shape, dtype=torch.float32, device=x.device)
        bwd_k[(x2.shape[0],)](g2, x2, w.contiguous(), dx, dw_rows, x2.shape[1], eps)
        return dx.view(x.shape), dw_rows.sum(0).to(w.dtype)

    rms_bwd = register_triton_op(
        name=f"{ns}::rms_norm_backward",
        fake_fn=lambda g, x, w, eps: (x.new_empty(x.shape), w.new_empty(w.shape)),
        triton_fn=bwd_launcher,
    )(_EXAMPLE.rms_norm_backward.fallback)  # its PyTorch fallback

    def rms_launcher(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        x2 = x.contiguous().view(-1, x.shape[-1])
        y = torch.empty_like(x2)
        fwd_k[(x2.shape[0],)](x2, w.contiguous(), y, x2.shape[1], eps)
        return y.view(x.shape)

    def rms_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        x, w, eps = inputs
        ctx.save_for_backward(x, w)
        ctx.eps = eps

    def rms_backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        x, w = ctx.saved_tensors
        dx, dw = rms_bwd(g, x, w, ctx.eps)
        return dx, dw, None

    rms = register_triton_op(
        name=f"{ns}::rms_norm", fake_fn=lambda x, w, eps: x.new_empty(x.shape),
        triton_fn=rms_launcher, setup_context=rms_setup, backward=rms_backward,
    )(_EXAMPLE.rms_norm.fallback)  # fmt: skip

    def soft_launcher(x: torch.Tensor) -> torch.Tensor:
        x2 = x.contiguous().view(-1, x.shape[-1])
        y = torch.empty_like(x2)
        soft_k[(x2.shape[0],)](x2, y, x2.shape[1], BLOCK=triton.next_power_of_2(x2.shape[1]))
        return y.view(x.shape)

    def soft_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(output)

    def soft_backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return y * (g - (g * y).sum(-1, keepdim=True))

    def soft_ref(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, -1)

    soft = register_triton_op(
        name=f"{ns}::softmax", fake_fn=lambda x: x.new_empty(x.shape), triton_fn=soft_launcher,
        setup_context=soft_setup, backward=soft_backward,
    )(soft_ref)  # fmt: skip
    return {
        "add": (add, add_launcher), "rms_norm": (rms, rms_launcher),
        "softmax": (soft, soft_launcher),
    }  # fmt: skip


_LIBRARIES: list[Any] = []


def torch_library_op(qualname: str, launcher: Callable[..., Any]) -> Any:
    """An op ``(Tensor x, Tensor y) -> Tensor`` whose CUDA kernel is ``launcher``, registered
    with ``torch.library`` alone: what any Python kernel costs the dispatcher, without opreg."""
    namespace, name = qualname.split("::")
    lib = torch.library.Library(namespace, "FRAGMENT")
    lib.define(f"{name}(Tensor x, Tensor y) -> Tensor")
    lib.impl(name, launcher, "CUDA")
    _LIBRARIES.append(lib)  # the registration lives as long as its Library
    return getattr(getattr(torch.ops, namespace), name).default


def autograd_function(launcher: Callable[..., Any], setup: Callable[..., Any]) -> Any:
    """A plain ``torch.autograd.Function`` around a launcher: recording without opreg."""

    class Recorded(torch.autograd.Function):
        @staticmethod
        def forward(*args: Any) -> Any:
            return launcher(*args)

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
            setup(ctx, inputs, output)

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            raise NotImplementedError

    return Recorded.apply


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--json")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs CUDA")
    plain, fast = build("plain"), build("fast")
    x = torch.randn(16, device="cuda")
    xr = torch.randn(4, 64, device="cuda")
    w = torch.randn(64, device="cuda", requires_grad=True)
    wi = w.detach()
    eps = 1e-6
    # Correctness first: both flavours equal PyTorch, forward and backward.
    for ops in (plain, fast):
        torch.testing.assert_close(ops["add"][0](x, x), 2 * x)
        out = ops["rms_norm"][0](xr, w, eps)
        torch.testing.assert_close(out, torch.nn.functional.rms_norm(xr, (64,), wi, eps))
        (gw,) = torch.autograd.grad(out.sum(), w)
        wr = wi.clone().requires_grad_()
        (gr,) = torch.autograd.grad(torch.nn.functional.rms_norm(xr, (64,), wr, eps).sum(), wr)
        torch.testing.assert_close(gw, gr, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(ops["softmax"][0](xr), torch.softmax(xr, -1))

    def rms_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(inputs[0], inputs[1])

    def soft_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(output)

    xs = xr.detach().requires_grad_()
    cases: list[tuple[str, str, str, Callable[[], Any]]] = []
    for op_name, call_args, grad_args in (
        ("add", (x, x), None),
        ("rms_norm", (xr, w, eps), (xr, wi, eps)),
        ("softmax", (xs,), (xr,)),
    ):
        for mode in ("grad", "inference") if grad_args is not None else ("-",):
            a = call_args if mode != "inference" else grad_args
            for flavour, ops in (("plain", plain), ("fast", fast)):
                op, launcher = ops[op_name]
                cases.append(
                    (op_name, mode, f"{flavour} launcher", lambda fn=launcher, a=a: fn(*a))
                )
                cases.append((op_name, mode, f"{flavour} op", lambda o=op, a=a: o(*a)))
                if op_name == "add":  # the dispatcher's own cost: torch.library, no opreg
                    bare = torch_library_op(f"bench_user_bare::add_{flavour}", launcher)
                    cases.append(
                        (op_name, mode, f"{flavour} torch.library op", lambda o=bare, a=a: o(*a))
                    )
            if mode == "grad":
                setup = rms_setup if op_name == "rms_norm" else soft_setup
                fn = autograd_function(plain[op_name][1], setup)
                cases.append(
                    (op_name, mode, "autograd.Function(plain launcher)", lambda f=fn, a=a: f(*a))
                )
    # The shipped fused_add: its hand-keyed fast launch vs the same kernel through fast_launch.
    from opreg_kernels.ops.fused_add import triton_kernels as shipped

    generic = fast_launch(shipped._add_kernel)

    def shipped_generic(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(a)
        n = a.numel()
        generic[(triton.cdiv(n, shipped.DEFAULT_BLOCK),)](
            a, b, out, n, WIDE=False, BLOCK=shipped.DEFAULT_BLOCK, EVICT=shipped.DEFAULT_EVICT,
            num_warps=shipped.DEFAULT_NUM_WARPS,
        )  # fmt: skip
        return out

    def shipped_plain(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(a)
        n = a.numel()
        shipped._add_kernel[(triton.cdiv(n, shipped.DEFAULT_BLOCK),)](
            a, b, out, n, WIDE=False, BLOCK=shipped.DEFAULT_BLOCK, EVICT=shipped.DEFAULT_EVICT,
            num_warps=shipped.DEFAULT_NUM_WARPS,
        )  # fmt: skip
        return out

    torch.testing.assert_close(shipped_generic(x, x), shipped.launch(x, x))
    cases += [
        ("fused_add (shipped)", "-", "plain launcher", lambda: shipped_plain(x, x)),
        ("fused_add (shipped)", "-", "hand-keyed launcher", lambda: shipped.launch(x, x)),
        ("fused_add (shipped)", "-", "fast launcher", lambda: shipped_generic(x, x)),
    ]
    samples = host_us_rounds(
        [fn for _, _, _, fn in cases], args.calls, args.repeats,
        [torch.inference_mode if mode == "inference" else contextlib.nullcontext
         for _, mode, _, _ in cases],
    )  # fmt: skip
    by = {(op, mode, how): times for (op, mode, how, _), times in zip(cases, samples, strict=True)}
    rows: list[Row] = []
    for (op_name, mode, how, _), times in zip(cases, samples, strict=True):
        plain_launcher = by.get((op_name, mode, "plain launcher"))
        own = by.get((op_name, mode, f"{how.split()[0]} launcher"))
        rows.append(
            {
                "op": op_name, "mode": mode, "call": how, "us": statistics.median(times),
                "op / its launcher": (
                    median_ratio(times, own) if how.endswith(" op") and own else None
                ),
                "vs plain launcher": (
                    median_ratio(times, plain_launcher) if plain_launcher else None
                ),
            }
        )  # fmt: skip
    print("\n| op | mode | call | us/call | op / its launcher | vs plain launcher |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        ratio = "" if r["op / its launcher"] is None else f"{r['op / its launcher']:.2f}"
        print(
            f"| {r['op']} | {r['mode']} | {r['call']} | {r['us']:.1f} | {ratio} | "
            f"{r['vs plain launcher']:.2f} |"
        )
    print(
        "\n## issue #21's targets, this run (the user's op vs the user's kernel[grid] launcher)\n"
    )
    for r in rows:
        if r["mode"] == "grad" or not r["call"].endswith(" op"):
            continue  # recording for autograd costs more than a launch (docs/performance.md)
        ratio = r["vs plain launcher"]
        if "torch.library" in r["call"]:
            print(f"- {r['op']} ({r['mode']}): {r['call']} / plain launcher = {ratio:.3f}")
            continue
        target = 1.0 if r["call"] == "fast op" else 1.15
        verdict = "met" if ratio <= target else "MISSED"
        print(
            f"- {r['op']} ({r['mode']}): {r['call']} / plain launcher = {ratio:.3f} "
            f"(target <= {target:.2f}): {verdict}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"calls": args.calls, "repeats": args.repeats, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
