"""Autotuned and heuristic kernels as launchers, and Triton in backwards (issue 13, part 4).

Under Triton's interpreter (CPU, as CI runs) every config of an autotuned kernel runs once,
the configs must agree, and the first one serves the launch; Triton's driver is lent only for
the opreg launch. A launch failure during a CUDA graph capture says to warm up (simulated
here; the real capture is in test_gpu_autotune.py). A backward that calls a launcher directly
works with ``.backward()`` and is refused, naming the op, under ``torch.func``; the backward
registered as its own Triton op works everywhere.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import torch

from opreg_core import SampleInput
from opreg_kernels import TritonKernelError, _dispatch_kernel, register_triton_op
from opreg_kernels._derivative_guard import DirectLaunchInDerivativeError
from opreg_testing import CheckFailure, check_autograd

triton = pytest.importorskip("triton")
sys.path.insert(0, str(Path(__file__).parent))
try:
    import autotune_kernels as kernels
finally:
    sys.path.remove(str(Path(__file__).parent))

pytestmark = [
    pytest.mark.needs_triton,
    pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning"),
]


def configs(*blocks: int, **extra: Any) -> list[Any]:
    return [triton.Config({"BLOCK": b, **extra}) for b in blocks]


def scale_op(ns: str, launcher: Callable[..., Any], name: str = "scale") -> Any:
    def scale(x: torch.Tensor) -> torch.Tensor:
        return (2 * x).contiguous()

    return register_triton_op(
        scale,
        name=f"{ns}::{name}",
        fake_fn=lambda x: torch.empty_like(x),
        triton_fn=launcher,
        triton_device_types="cpu",
    )


class ConfigRuns:
    """Configs whose pre_hook records which BLOCK ran, in order."""

    def __init__(self, *blocks: int, **extra: Any) -> None:
        self.ran: list[int] = []
        self.configs = [
            triton.Config({"BLOCK": b, **extra}, pre_hook=self._hook(b)) for b in blocks
        ]

    def _hook(self, block: int) -> Callable[[dict[str, Any]], None]:
        return lambda args: self.ran.append(block)


# -- 1. autotune and heuristics under the interpreter ------------------------------------------


def test_every_config_runs_once_and_the_first_serves_the_launch(
    ns: str, opreg_triton_cpu: Any
) -> None:
    runs = ConfigRuns(32, 64, 256)
    kernel = triton.autotune(configs=runs.configs, key=["n"])(kernels.scale_kernel)
    op = scale_op(ns, kernels.scale_with(kernel))
    x = torch.randn(300)
    assert torch.equal(op(x), 2 * x)
    assert runs.ran == [32, 64, 256, 32]  # tuning (each once), then the launch (the first)
    assert kernel.best_config.kwargs["BLOCK"] == 32
    assert torch.equal(op(x), 2 * x)  # the same key: tuned already, one launch
    assert runs.ran[4:] == [32]
    assert torch.equal(op(torch.ones(7)), torch.full((7,), 2.0))  # a new key: tuned again
    assert runs.ran[5:] == [32, 64, 256, 32]


def test_a_heuristics_kernel_and_heuristics_under_autotune(ns: str, opreg_triton_cpu: Any) -> None:
    by_size = triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["n"])})
    single = by_size(kernels.scale_kernel)

    def launch(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        single[(1,)](x, out, x.numel())
        return out

    x = torch.randn(100)
    assert torch.equal(scale_op(ns, launch)(x), 2 * x)
    both = triton.autotune(configs=[triton.Config({}, num_warps=w) for w in (2, 4)], key=["n"])(
        by_size(kernels.scale_kernel)
    )

    def launch_both(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        both[(1,)](x, out, x.numel())
        return out

    assert torch.equal(scale_op(ns, launch_both, "scale2")(x), 2 * x)


@pytest.mark.parametrize(
    ("bug", "detail"),
    [(1, r"300 of 300 elements differ, the first at index \(0,\)"), (2, r"44 of 300 elements")],
    ids=["wrong-values", "unwritten-block"],
)
def test_configs_that_disagree_fail_naming_op_kernel_configs_and_argument(
    ns: str, opreg_triton_cpu: Any, bug: int, detail: str
) -> None:
    good, bad = triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128, "BUG": bug})
    kernel = triton.autotune(configs=[good, bad], key=["n"])(kernels.scale_kernel)
    op = scale_op(ns, kernels.scale_with(kernel))
    pattern = (
        rf"{ns}::scale: .* on device 'cpu' \(AutotuneConfigMismatch: autotuned kernel "
        rf"scale_kernel: config \[BLOCK: 128, BUG: {bug}.*\] and config \[BLOCK: 64.*\] disagree "
        rf"on argument 'out_ptr' under Triton's interpreter \({detail}"
    )
    with pytest.raises(TritonKernelError, match=pattern):
        op(torch.randn(300))


def test_in_place_kernel_needs_restore_value_and_gets_it_right_with_it(
    ns: str, opreg_triton_cpu: Any
) -> None:
    def add_into_op(name: str, **tuning: Any) -> Any:
        kernel = triton.autotune(configs=configs(32, 128), key=["n"], **tuning)(
            kernels.add_into_kernel
        )

        def launch(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            out = y.clone()
            kernel[kernels.blocks(x.numel())](x, out, x.numel())
            return out

        def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x + y

        return register_triton_op(
            add, name=f"{ns}::{name}", fake_fn=add, triton_fn=launch, triton_device_types="cpu"
        )

    x, y = torch.randn(200), torch.randn(200)
    # Without restore_value each config adds x again (on a GPU: hundreds of times).
    with pytest.raises(TritonKernelError, match=r"disagree on argument 'y_ptr'.*restore_value"):
        add_into_op("unrestored")(x, y)
    assert torch.equal(add_into_op("restored", restore_value=["y_ptr"])(x, y), x + y)


def test_accumulating_kernel_with_reset_to_zero(ns: str, opreg_triton_cpu: Any) -> None:
    kernel = triton.autotune(configs=configs(16, 64, 256), key=["n"], reset_to_zero=["total_ptr"])(
        kernels.sum_kernel
    )

    def launch(x: torch.Tensor) -> torch.Tensor:
        total = torch.zeros((), dtype=x.dtype)
        kernel[kernels.blocks(x.numel())](x, total, x.numel())
        return total

    def total(x: torch.Tensor) -> torch.Tensor:
        return x.sum()

    op = register_triton_op(
        total, name=f"{ns}::total", fake_fn=total, triton_fn=launch, triton_device_types="cpu"
    )
    x = torch.randn(1000, dtype=torch.float64)
    torch.testing.assert_close(op(x), x.sum())


def test_the_driver_is_lent_only_for_the_opreg_launch(ns: str, opreg_triton_cpu: Any) -> None:
    """Outside an opreg launch, an autotuned kernel tunes as Triton does (here: no GPU)."""
    kernel = triton.autotune(configs=configs(32, 64), key=["n"])(kernels.scale_kernel)
    direct = kernels.scale_with(kernel)
    op = scale_op(ns, direct)
    x = torch.randn(100)
    assert torch.equal(op(x), 2 * x)
    assert torch.equal(direct(x), 2 * x)  # this key is tuned: no benchmark needed
    # A new key: the same autotuner tunes again, outside opreg, with Triton's own driver.
    with pytest.raises(RuntimeError, match="0 active drivers"):
        direct(torch.randn(50))
    fresh = triton.autotune(configs=configs(32, 64), key=["n"])(kernels.scale_kernel)
    with pytest.raises(RuntimeError, match="0 active drivers"):
        kernels.scale_with(fresh)(x)
    assert torch.equal(op(torch.randn(50).abs()).sign(), torch.ones(50))  # and inside it again


def test_nested_opreg_launches_share_one_lending(ns: str, opreg_triton_cpu: Any) -> None:
    kernel = triton.autotune(configs=configs(32, 64), key=["n"])(kernels.scale_kernel)
    inner = scale_op(ns, kernels.scale_with(kernel), "inner")

    def launch_outer(x: torch.Tensor) -> torch.Tensor:
        return cast(torch.Tensor, inner(inner(x)))  # an op whose launcher calls another op

    def quadruple(x: torch.Tensor) -> torch.Tensor:
        return 4 * x

    outer = register_triton_op(
        quadruple,
        name=f"{ns}::outer",
        fake_fn=lambda x: torch.empty_like(x),
        triton_fn=launch_outer,
        triton_device_types="cpu",
    )
    x = torch.randn(100)
    assert torch.equal(outer(x), 4 * x)
    fresh = triton.autotune(configs=configs(32, 64), key=["n"])(kernels.scale_kernel)
    with pytest.raises(RuntimeError, match="0 active drivers"):  # given back afterwards
        kernels.scale_with(fresh)(x)


# -- 2. a failure during a CUDA graph capture (simulated; the real one in test_gpu_autotune) ---


def failing_launcher(x: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("CUDA error: operation not permitted when stream is capturing")


@pytest.mark.parametrize("capturing", [True, False])
def test_a_failure_while_capturing_says_to_warm_up(
    ns: str, triton_state: Any, monkeypatch: pytest.MonkeyPatch, capturing: bool
) -> None:
    triton_state(True)
    seen: list[tuple[str, int]] = []

    def stream_capturing(device_type: str, index: int) -> bool:
        seen.append((device_type, index))
        return capturing

    monkeypatch.setattr(_dispatch_kernel, "stream_capturing", stream_capturing)
    op = scale_op(ns, failing_launcher)
    with pytest.raises(TritonKernelError) as caught:
        op(torch.ones(3))
    message = str(caught.value)
    assert message.startswith(f"opreg: {ns}::scale: the Triton kernel failed")
    assert ("Warm up first: call the op once" in message) is capturing
    assert ("while a CUDA graph was being captured" in message) is capturing
    assert seen == [("cpu", -1)]
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_stream_capturing_is_false_without_cuda() -> None:
    assert not _dispatch_kernel.stream_capturing("cpu", -1)
    if not torch.cuda.is_available():  # a CPU build: torch.cuda's query raises, read as False
        assert not _dispatch_kernel.stream_capturing("cuda", 0)


# -- 3. Triton in a backward ---------------------------------------------------------------


def _mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    kernel = kernels.scale_kernel  # out = 2 * x, then * y in torch: enough to launch Triton
    x = x.contiguous()
    out = torch.empty_like(x)
    kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
    return out * y / 2


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(inputs[0])


def square_op(ns: str, backward: Callable[..., Any], jvp: Callable[..., Any] | None = None) -> Any:
    def square(x: torch.Tensor) -> torch.Tensor:
        return (x * x).contiguous()

    return register_triton_op(
        square,
        name=f"{ns}::square",
        fake_fn=lambda x: torch.empty_like(x),
        triton_fn=lambda x: _mul(x, x),
        triton_device_types="cpu",
        setup_context=_setup,
        backward=backward,
        jvp=jvp,
    )


def direct_backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
    (x,) = ctx.saved_tensors
    return _mul(g, 2 * x)  # the launcher, called directly


def test_a_backward_calling_a_launcher_works_with_dot_backward(
    ns: str, opreg_triton_cpu: Any
) -> None:
    op = square_op(ns, direct_backward)
    # the guard runs inside; the op shows it, wrapping what was given
    assert inspect.unwrap(op.backward) is direct_backward
    x = torch.randn(50, requires_grad=True)
    op(x).sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach())


@pytest.mark.parametrize(
    "transform",
    [
        lambda op, x: torch.func.grad(lambda x: op(x).sum())(x),
        lambda op, x: torch.func.jacrev(op)(x),
        lambda op, x: torch.vmap(torch.func.grad(lambda x: op(x).sum()))(x.view(5, 10)),
        lambda op, x: torch.compile(lambda x: op(x).sum(), backend="aot_eager")(
            x.clone().requires_grad_()
        ).backward(),
    ],
    ids=["grad", "jacrev", "vmap-grad", "compile"],
)
def test_a_backward_calling_a_launcher_is_refused_under_transforms(
    ns: str, opreg_triton_cpu: Any, transform: Callable[[Any, torch.Tensor], Any]
) -> None:
    op = square_op(ns, direct_backward)
    pattern = (
        rf"opreg: {ns}::square: the backward failed inside Triton .* launches a Triton kernel "
        r"directly.* Register the backward's computation as its own op with register_triton_op"
    )
    with pytest.raises(Exception, match=pattern) as caught:
        transform(op, torch.randn(50))
    # compile wraps it in its own error (as inner_exception); the others raise it as it is
    error = getattr(caught.value, "inner_exception", caught.value)
    assert isinstance(error, DirectLaunchInDerivativeError)


def test_a_jvp_calling_a_launcher_is_refused_under_transforms(
    ns: str, opreg_triton_cpu: Any
) -> None:
    def direct_jvp(ctx: Any, x_t: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return _mul(x_t, 2 * x)

    op = square_op(ns, direct_backward, jvp=direct_jvp)
    x, t = torch.randn(20), torch.randn(20)
    with torch.autograd.forward_ad.dual_level():  # plain dual tensors: the launcher can read them
        dual = torch.autograd.forward_ad.make_dual(x, t)  # type: ignore[no-untyped-call]
        tangent = torch.autograd.forward_ad.unpack_dual(op(dual)).tangent  # type: ignore[no-untyped-call]
    torch.testing.assert_close(tangent, 2 * x * t)
    # torch.func.jvp alone: the jvp runs below its level, on plain tensors (nothing else can
    # differentiate or batch them), so the launch reads them and the tangent is right
    torch.testing.assert_close(torch.func.jvp(op, (x,), (t,))[1], 2 * x * t)
    # a transform around it hands the launcher wrappers: refused, never a lost derivative
    with pytest.raises(DirectLaunchInDerivativeError, match=rf"{ns}::square: the jvp failed"):
        torch.func.grad(lambda a: torch.func.jvp(op, (a,), (t,))[1].sum())(x)
    with pytest.raises(DirectLaunchInDerivativeError, match=rf"{ns}::square: the jvp failed"):
        torch.func.jacfwd(torch.func.jacfwd(lambda a: op(a).sum()))(x)


def test_other_backward_errors_pass_through_unchanged(ns: str, opreg_triton_cpu: Any) -> None:
    def broken(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        raise ZeroDivisionError("the backward's own bug")

    op = square_op(ns, broken)
    with pytest.raises(ZeroDivisionError, match="the backward's own bug"):
        torch.func.grad(lambda x: op(x).sum())(torch.randn(4))


@pytest.mark.parametrize(
    ("module", "refused"), [("triton.runtime.fake", True), ("triton_user", False)]
)
def test_only_errors_from_tritons_own_frames_are_refused(
    ns: str, opreg_triton_cpu: Any, module: str, refused: bool
) -> None:
    namespace: dict[str, Any] = {"__name__": module}
    exec("def launch(g):\n    raise RuntimeError('no storage')\n", namespace)

    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return cast(torch.Tensor, namespace["launch"](g))

    op = square_op(ns, backward)
    expected = DirectLaunchInDerivativeError if refused else RuntimeError
    with pytest.raises(expected) as caught:
        torch.func.grad(lambda x: op(x).sum())(torch.randn(4))
    assert isinstance(caught.value, DirectLaunchInDerivativeError) is refused


def test_the_backward_as_its_own_triton_op_works_everywhere(ns: str, opreg_triton_cpu: Any) -> None:
    def mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x * y).contiguous()

    mul_op = register_triton_op(
        mul,
        name=f"{ns}::mul",
        fake_fn=lambda x, y: torch.empty_like(x),
        triton_fn=_mul,
        triton_device_types="cpu",
        setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs),
        backward=lambda ctx, g: (g * ctx.saved_tensors[1], g * ctx.saved_tensors[0]),
    )

    def through_op(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return mul_op(g, 2 * x)

    op = square_op(ns, through_op)
    x = torch.randn(50)
    want = 2 * x
    torch.testing.assert_close(torch.func.grad(lambda x: op(x).sum())(x), want)
    torch.testing.assert_close(torch.func.jacrev(op)(x[:5]), torch.diag(want[:5]))
    per_row = torch.vmap(torch.func.grad(lambda x: op(x).sum()))(x.view(5, 10))
    torch.testing.assert_close(per_row, want.view(5, 10))
    xr = x.clone().requires_grad_()
    torch.compile(lambda x: op(x).sum(), backend="aot_eager", fullgraph=True)(xr).backward()
    torch.testing.assert_close(xr.grad, want)
    # second order too: mul_op's backward is differentiable
    torch.testing.assert_close(
        torch.func.grad(lambda x: torch.func.grad(lambda x: op(x).sum())(x).sum())(x),
        torch.full_like(x, 2.0),
    )


def test_opreg_testing_autograd_check_still_names_the_direct_form(
    ns: str, opreg_triton_cpu: Any
) -> None:
    op = square_op(ns, direct_backward)
    with pytest.raises(CheckFailure, match="launches a Triton kernel directly"):
        check_autograd(op, [SampleInput((torch.randn(6),))], gradgrad=False)


# -- the example --------------------------------------------------------------------------


def test_the_rmsnorm_example_runs_under_the_interpreter() -> None:
    """examples/triton_rmsnorm.py (the pattern of docs/triton.md) on CPU, as CI runs it."""
    example = Path(__file__).resolve().parents[2] / "examples" / "triton_rmsnorm.py"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rms_norm on cpu: forward, grad, compile" in proc.stdout
