"""``fast_launch``: a user's kernel launched through its compiled kernel, as Triton would launch it.

On CUDA every case launches through the fast path after its first call and must use the very
compiled kernel that ``kernel[grid](...)`` picks for the same arguments (Triton's own cache
returns it: the same object means the same specialisation), with the same results, for
arguments whose specialisation differs: dtypes, aligned and unaligned views, sizes that are 1,
multiples of 16 or neither, int32/int64 integers, None, constexprs, defaults and keywords,
autotuned and heuristic kernels, several kernels in one launcher. Under the interpreter (CPU)
the fast path is off and every launch is Triton's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.needs_triton

triton = pytest.importorskip("triton")

from opreg_kernels import FastKernel, fast_launch, register_triton_op  # noqa: E402
from opreg_testing import interpreter_enabled  # noqa: E402

from . import fast_kernels as k  # noqa: E402

BLOCK = 128


@pytest.fixture
def cuda() -> torch.device:
    if interpreter_enabled() or not torch.cuda.is_available():
        pytest.skip("the fast path needs a CUDA device with compiled (not interpreted) kernels")
    return torch.device("cuda")


def _grid(n: int) -> tuple[int]:
    return (triton.cdiv(max(n, 1), BLOCK),)


def _same_launch(fast: FastKernel, grid: Any, *args: Any, **kwargs: Any) -> Any:
    """Launch through ``fast`` twice (the second time on the fast path) and check that the
    compiled kernel it used is the one Triton's own launch picks for these arguments."""
    fast[grid](*args, **kwargs)  # the first launch of a specialisation compiles through Triton
    before = fast.fast_calls
    compiled = fast[grid](*args, **kwargs)
    assert fast.fast_calls == before + 1, "the second launch did not take the fast path"
    expected = fast.kernel[grid](*args, **kwargs)
    assert compiled is expected, "the fast path launched another specialisation than Triton"
    return compiled


# -- CUDA: the fast path --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("n", [1, 16, 37, 4096])
@pytest.mark.parametrize("offset", [0, 1])
def test_pointer_and_size_specialisations(
    cuda: torch.device, dtype: torch.dtype, n: int, offset: int
) -> None:
    # offset 1: unaligned views of one buffer; n: the constant 1, multiples of 16, odd sizes.
    fast = fast_launch(k.axpy_kernel)
    x = torch.randn(n + offset, device=cuda, dtype=dtype)[offset:]
    y = torch.randn(n + offset, device=cuda, dtype=dtype)[offset:]
    out = torch.empty(n + offset, device=cuda, dtype=dtype)[offset:]
    _same_launch(fast, _grid(n), x, y, out, n, 0.5)
    torch.testing.assert_close(out, 0.5 * x + y)


def test_specialisations_change_within_one_wrapper(cuda: torch.device) -> None:
    # One FastKernel sees every variant in turn: a key coarser than Triton's would reuse a
    # compiled kernel of another variant (and fail the identity check).
    fast = fast_launch(k.axpy_kernel)
    buf = torch.randn(4 * 4096 + 1, device=cuda)
    seen = set()
    for n, off, alpha, block in [
        (4096, 0, 2.0, None), (4096, 1, 2.0, None), (4095, 0, 2.0, None), (1, 0, 2.0, None),
        (4096, 0, 3.0, None), (4096, 0, 2.0, 64), (4096, 1, 2.0, 64), (16, 0, 1.0, None),
    ]:  # fmt: skip
        x, y = buf[off : off + n], buf[4096 + off : 4096 + off + n]
        out = torch.empty(n + off, device=cuda)[off:]
        kwargs = {} if block is None else {"BLOCK": block}
        grid = (triton.cdiv(n, block or BLOCK),)
        seen.add(id(_same_launch(fast, grid, x, y, out, n, alpha, **kwargs)))
        torch.testing.assert_close(out, alpha * x + y)
    assert len(seen) >= 4  # alignment, size classes and BLOCK gave distinct compilations


@pytest.mark.parametrize("base", [0, 1, 7, 16, 2**31 - 1, 2**31, 2**33 + 5, -(2**31) - 3])
def test_integer_width_and_value_specialisations(cuda: torch.device, base: int) -> None:
    fast = fast_launch(k.offset_kernel)
    out = torch.empty(300, device=cuda, dtype=torch.int64)
    _same_launch(fast, _grid(300), out, 300, base, BLOCK=BLOCK)
    expected = torch.fmod(base + torch.arange(300, dtype=torch.int64), 1009)  # C's remainder
    assert torch.equal(out.cpu(), expected)


def test_int_width_switches_reuse_nothing_wrong(cuda: torch.device) -> None:
    fast = fast_launch(k.offset_kernel)
    out = torch.empty(64, device=cuda, dtype=torch.int64)
    for base in (5, 2**40 + 3, 5, 1, 2**40 + 3, 1):
        fast[_grid(64)](out, 64, base, BLOCK=BLOCK)
        assert torch.equal(out.cpu(), torch.fmod(base + torch.arange(64), 1009)), base
    assert fast.fast_calls == 3  # the repeats


def test_none_argument_and_keywords(cuda: torch.device) -> None:
    fast = fast_launch(k.bias_kernel)
    x = torch.randn(100, device=cuda)
    bias = torch.randn(100, device=cuda)
    out = torch.empty_like(x)
    _same_launch(fast, _grid(100), x, None, out, 100, BLOCK=BLOCK)
    torch.testing.assert_close(out, x)
    _same_launch(fast, _grid(100), x, bias, out, 100, BLOCK=BLOCK)
    torch.testing.assert_close(out, x + bias)
    _same_launch(fast, _grid(100), x_ptr=x, bias_ptr=bias, out_ptr=out, n=100, BLOCK=BLOCK)
    torch.testing.assert_close(out, x + bias)
    _same_launch(fast, _grid(100), x, None, out, 100, BLOCK=BLOCK, num_warps=2)


def test_grid_function_gets_the_arguments_by_name(cuda: torch.device) -> None:
    fast = fast_launch(k.axpy_kernel)
    x = torch.randn(1000, device=cuda)
    out = torch.empty_like(x)
    seen: list[dict[str, Any]] = []

    def grid(meta: dict[str, Any]) -> tuple[int, int, int]:
        seen.append(dict(meta))
        return (triton.cdiv(meta["n"], meta["BLOCK"]), 1, 1)

    _same_launch(fast, grid, x, x, out, 1000, 1.5, BLOCK=256)
    torch.testing.assert_close(out, 2.5 * x)
    assert seen[1]["BLOCK"] == 256 and seen[1]["n"] == 1000 and seen[1]["x_ptr"] is x


def _row_sum_autotuned() -> Any:
    configs = [triton.Config({}, num_warps=w) for w in (1, 2, 4)]
    heuristic = triton.heuristics({"BLOCK": lambda a: triton.next_power_of_2(a["n_cols"])})
    return triton.autotune(configs=configs, key=["n_cols"])(heuristic(k.row_sum_kernel))


@pytest.mark.parametrize("cols", [5, 64, 300])
def test_autotuned_kernel_with_heuristics(cuda: torch.device, cols: int) -> None:
    kernel = _row_sum_autotuned()
    fast = fast_launch(kernel)
    x = torch.randn(8, cols, device=cuda)
    out = torch.empty(8, device=cuda)
    _same_launch(fast, (8,), x, out, cols)
    torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-5)
    assert kernel.best_config is kernel.cache[(cols, "torch.float32", "torch.float32")]


def test_autotuned_key_change_tunes_through_triton(cuda: torch.device) -> None:
    kernel = _row_sum_autotuned()
    fast = fast_launch(kernel)
    for cols in (8, 200, 8, 200, 33):
        x = torch.randn(4, cols, device=cuda)
        out = torch.empty(4, device=cuda)
        fast[(4,)](x, out, cols)
        torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-5)
    assert len(kernel.cache) == 3
    assert fast.fast_calls == 2  # the second 8 and the second 200


def test_several_kernels_in_one_op(cuda: torch.device, ns: str) -> None:
    scale, axpy = fast_launch(k.scale_kernel), fast_launch(k.axpy_kernel)

    def launcher(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        n = x.numel()
        doubled = torch.empty_like(x)
        scale[_grid(n)](x, doubled, n, BLOCK=BLOCK)
        out = torch.empty_like(x)
        axpy[_grid(n)](doubled, y, out, n, 3.0)
        return out

    @register_triton_op(
        name=f"{ns}::six_x_plus_y", fake_fn=lambda x, y: torch.empty_like(x),
        triton_fn=launcher, differentiable=False,
    )  # fmt: skip
    def op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return 6 * x + y

    for n in (10, 4096, 10, 4096):
        x, y = torch.randn(n, device=cuda), torch.randn(n, device=cuda)
        torch.testing.assert_close(op(x, y), 6 * x + y)
    assert scale.fast_calls == 2 and axpy.fast_calls == 2


def test_launch_hooks_take_tritons_path(cuda: torch.device) -> None:
    fast = fast_launch(k.scale_kernel)
    x = torch.randn(64, device=cuda)
    out = torch.empty_like(x)
    fast[_grid(64)](x, out, 64, BLOCK=BLOCK)
    calls: list[Any] = []
    runtime = triton.knobs.runtime
    previous = runtime.launch_enter_hook
    runtime.launch_enter_hook = lambda metadata: calls.append(metadata)
    try:
        fast[_grid(64)](x, out, 64, BLOCK=BLOCK)
    finally:
        runtime.launch_enter_hook = previous
    assert calls and fast.fast_calls == 0  # the hook saw the launch: Triton's path


def test_failing_fast_launch_raises_tritons_error(cuda: torch.device) -> None:
    fast = fast_launch(k.scale_kernel)
    x = torch.randn(64, device=cuda)
    out = torch.empty_like(x)
    fast[_grid(64)](x, out, 64, BLOCK=BLOCK)  # cached for (fp32, aligned) pointers
    with pytest.raises(ValueError, match="cpu tensor"):  # same specialisation, a CPU pointer
        fast[_grid(64)](x, torch.empty(64), 64, BLOCK=BLOCK)
    assert fast.fast_calls == 0


def _double_op(name: str, **options: Any) -> tuple[Any, FastKernel]:
    """A ``2 * x`` Triton op whose launcher launches ``scale_kernel`` through ``fast_launch``."""
    fast = fast_launch(k.scale_kernel)

    def launcher(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        fast[_grid(x.numel())](x, out, x.numel(), BLOCK=BLOCK)
        return out

    def double(x: torch.Tensor) -> torch.Tensor:
        return 2 * x

    op = register_triton_op(
        double, name=name, fake_fn=torch.empty_like, triton_fn=launcher, differentiable=False,
        **options,
    )  # fmt: skip
    return op, fast


def test_compiler_visible_op_with_fast_launcher(cuda: torch.device, ns: str) -> None:
    op, _ = _double_op(f"{ns}::double", compiler_visible=True)

    x = torch.randn(1000, device=cuda)
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: op(t + 1) * 3, backend="inductor", fullgraph=True)
    from torch._inductor.utils import run_and_get_code

    result, codes = run_and_get_code(compiled, x)
    torch.testing.assert_close(result, (2 * (x + 1)) * 3)
    assert "scale_kernel" in "\n".join(codes)  # the kernel itself, not an opaque op call


def test_two_gpus_each_get_their_own_compiled_kernel(cuda: torch.device, ns: str) -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    op, fast = _double_op(f"{ns}::double_on")

    torch.cuda.set_device(0)
    for _ in range(3):  # alternate devices while cuda:0 stays current: the guard switches
        for index in (1, 0):
            x = torch.randn(1000, device=f"cuda:{index}")
            torch.testing.assert_close(op(x), 2 * x)
    assert torch.cuda.current_device() == 0
    assert fast.fast_calls == 4  # two compilations (one per device), then fast launches


# -- everywhere: the wrapper itself ---------------------------------------------------------


def test_wraps_only_triton_kernels() -> None:
    with pytest.raises(TypeError, match=r"fast_launch\(\) takes a @triton.jit kernel"):
        fast_launch(lambda x: x)
    fast = fast_launch(k.scale_kernel)
    assert fast_launch(fast) is fast and fast.kernel is k.scale_kernel


@pytest.fixture
def interpreted() -> Iterator[None]:
    if not interpreter_enabled():
        pytest.skip("runs under Triton's interpreter (CPU)")
    yield


def test_interpreter_takes_tritons_path(interpreted: None, ns: str) -> None:
    fast = fast_launch(k.axpy_kernel)
    x, y = torch.randn(37), torch.randn(37)
    out = torch.empty(37)
    for _ in range(2):
        fast[_grid(37)](x, y, out, 37, 2.0)
        torch.testing.assert_close(out, 2.0 * x + y)
    assert fast.fast_calls == 0


def test_interpreted_op_with_fast_launcher(
    interpreted: None, ns: str, opreg_triton_cpu: Any
) -> None:
    tuned = fast_launch(_row_sum_autotuned())

    def launcher(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(x.shape[0], dtype=x.dtype)
        tuned[(x.shape[0],)](x, out, x.shape[1])
        return out

    @register_triton_op(
        name=f"{ns}::row_sum", fake_fn=lambda x: x.new_empty(x.shape[0]),
        triton_fn=launcher, differentiable=False,
    )  # fmt: skip
    def op(x: torch.Tensor) -> torch.Tensor:
        return x.sum(1)

    x = torch.randn(4, 50)
    torch.testing.assert_close(op(x), x.sum(1), rtol=1e-5, atol=1e-5)
    assert tuned.kernel.cache  # the op ran the autotuned kernel, through the interpreter
    assert tuned.fast_calls == 0


# -- everywhere: the fast path's own logic, on a stand-in compiled kernel --------------------
# Triton's interpreter (CPU) turns the fast path off, so these tests give FastKernel a stand-in
# for what only CUDA has: a "compiled" kernel, its binder and its direct launcher. The stand-in
# computes ``out = 2 * x`` on either path, so results are checked too.


class _StandIn:
    """``kernel[grid](x, out, n, BLOCK=...)`` through "Triton's path": writes ``2 * x`` into
    ``out`` and returns the compiled kernel of the call's specialisation."""

    def __init__(self) -> None:
        self.triton_calls = 0
        self.compiled: dict[Any, object] = {}
        self.launches: list[tuple[Any, ...]] = []

    @staticmethod
    def binder(
        x: torch.Tensor, out: torch.Tensor, n: int, BLOCK: int, **options: Any
    ) -> tuple[dict[str, Any], list[Any], dict[str, Any]]:
        spec = [(str(t.dtype), t.data_ptr() % 16 == 0) for t in (x, out)]
        return {"x": x, "out": out, "n": n, "BLOCK": BLOCK}, [*spec, n == 1, BLOCK], options

    def __getitem__(self, grid: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> object:
            self.triton_calls += 1
            bound, spec, _ = self.binder(*args, **kwargs)
            bound["out"].copy_(2 * bound["x"])
            return self.compiled.setdefault(tuple(spec), object())

        return run

    def launcher(self, compiled: object) -> Any:
        def launch(*args: Any) -> None:  # grid x/y/z, stream, then the bound arguments
            self.launches.append((compiled, *args))
            x, out = args[4], args[5]
            out.copy_(2 * x)

        return launch


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> _StandIn:
    from opreg_kernels import _compiled_launch as launch

    kernel = _StandIn()
    monkeypatch.setattr(launch, "triton_kernel_layers", lambda k: ((), k, k is kernel))
    monkeypatch.setattr(launch, "triton_binder", lambda jit, device: jit.binder)
    monkeypatch.setattr(launch, "compiled_kernel_launcher", kernel.launcher)
    monkeypatch.setattr(launch, "triton_interpreted", lambda: False)
    monkeypatch.setattr(launch, "_HAS_CUDA", True)
    monkeypatch.setattr(launch, "_current_device", lambda: 0)
    monkeypatch.setattr(launch, "_raw_stream", lambda device: 1000 + device)
    return kernel


def _no_wrap_triton(kernel: Any) -> Any:
    raise AssertionError("a plain-tensor launch went through torch.library.wrap_triton")


def test_fast_path_after_tritons_first_launch(
    stand_in: _StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.library, "wrap_triton", _no_wrap_triton)
    fast = fast_launch(stand_in)
    x = torch.randn(40)
    for _ in range(3):
        out = torch.empty_like(x)
        fast[(2,)](x, out, 40, BLOCK=32)
        torch.testing.assert_close(out, 2 * x)
    assert (stand_in.triton_calls, fast.fast_calls) == (1, 2)
    compiled = stand_in.compiled[(("torch.float32", True),) * 2 + (False, 32)]
    launch = stand_in.launches[-1]
    assert launch[:5] == (compiled, 2, 1, 1, 1000)  # grid (2, 1, 1) on device 0's stream
    assert launch[5] is x and launch[6] is out and launch[7:] == (40, 32)
    # Another specialisation (dtype, alignment, n == 1) goes through Triton first, once each.
    xd, xu, x1 = torch.randn(40, dtype=torch.float64), torch.randn(41)[1:], torch.randn(1)
    for a, n in ((xd, 40), (xd, 40), (xu, 40), (xu, 40), (x1, 1), (x1, 1)):
        out = torch.empty_like(a)
        fast[(1,)](a, out, n, BLOCK=32)
        torch.testing.assert_close(out, 2 * a)
    assert (stand_in.triton_calls, fast.fast_calls) == (4, 5)
    fast.run((1,), (x, torch.empty_like(x), 40), {"BLOCK": 32})  # run(): the same launch
    assert fast.fast_calls == 6


def test_fast_path_inside_an_op(
    stand_in: _StandIn, monkeypatch: pytest.MonkeyPatch, ns: str
) -> None:
    # The dispatcher's Python kernel hands the launcher plain tensors: the launch is fast,
    # never mistaken for a traced one (wrap_triton), as it is when called directly.
    monkeypatch.setattr(torch.library, "wrap_triton", _no_wrap_triton)
    fast = fast_launch(stand_in)

    def launcher(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        fast[(1,)](x, out, x.numel(), BLOCK=64)
        return out

    def double(x: torch.Tensor) -> torch.Tensor:
        return 2 * x

    op = register_triton_op(
        double, name=f"{ns}::double_fast", fake_fn=torch.empty_like, triton_fn=launcher,
        differentiable=False, triton_device_types="cpu",
    )  # fmt: skip
    x = torch.randn(50)
    for _ in range(4):
        torch.testing.assert_close(op(x), 2 * x)
    assert (stand_in.triton_calls, fast.fast_calls) == (1, 3)
    with torch.inference_mode():
        torch.testing.assert_close(op(x), 2 * x)
    xg = x.clone().requires_grad_()  # below autograd (differentiable=False): still plain
    torch.testing.assert_close(op(xg), 2 * x)
    assert (stand_in.triton_calls, fast.fast_calls) == (1, 5)


def test_tensor_subclass_launches_through_wrap_triton(
    stand_in: _StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrapped: list[Any] = []

    def wrap_triton(kernel: Any) -> Any:
        wrapped.append(kernel)
        return kernel

    monkeypatch.setattr(torch.library, "wrap_triton", wrap_triton)

    class Traced(torch.Tensor):
        pass

    fast = fast_launch(stand_in)
    x = torch.randn(8)
    fast[(1,)](x, torch.empty_like(x), 8, BLOCK=8)  # compiled for plain tensors
    for args, kwargs in (
        ((x.as_subclass(Traced), torch.empty_like(x), 8), {"BLOCK": 8}),
        ((x,), {"out": torch.empty_like(x).as_subclass(Traced), "n": 8, "BLOCK": 8}),
    ):
        fast[(1,)](*args, **kwargs)
    assert wrapped == [stand_in, stand_in] and fast.fast_calls == 0


def test_launch_hook_takes_tritons_path(stand_in: _StandIn) -> None:
    from triton import knobs

    fast = fast_launch(stand_in)
    x = torch.randn(8)
    fast[(1,)](x, torch.empty_like(x), 8, BLOCK=8)
    knobs.runtime.launch_enter_hook.add(print)
    try:
        fast[(1,)](x, torch.empty_like(x), 8, BLOCK=8)
    finally:
        knobs.runtime.launch_enter_hook.remove(print)
    assert (stand_in.triton_calls, fast.fast_calls) == (2, 0)
    fast[(1,)](x, torch.empty_like(x), 8, BLOCK=8)
    assert (stand_in.triton_calls, fast.fast_calls) == (2, 1)
