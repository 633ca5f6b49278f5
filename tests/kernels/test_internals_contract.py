"""What opreg-kernels relies on of each torch and Triton internal in ``_private.INTERNALS``.

``tests/test_private_boundaries.py`` checks that every internal still resolves; these tests
check that each still behaves as ``opreg_kernels._private`` assumes (the argument layout of a
launcher, the shape of a binder's answer, the key of an autotuner's cache, ...), so that a
torch or Triton release that changes one fails a test named after it. They run on CPU
(Triton kernels through its interpreter; the CUDA launcher through a stand-in C launcher and a
stand-in driver) on every torch and Triton release CI tests; the CUDA-only ones skip without
a CUDA device.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from tests.test_private_boundaries import INTERNAL_ATTRIBUTES, resolves

from opreg_kernels import _private
from opreg_kernels._private.launch import _direct_cuda_launch
from opreg_kernels._versions import LAUNCHER_LAYOUTS, triton_release
from opreg_testing import interpreter_enabled

#: Tests that run Triton kernels on CPU tensors, through Triton's interpreter (the GPU run
#: compiles them instead: the CUDA tests of tests/kernels cover the same internals there).
needs_interpreter = pytest.mark.skipif(
    not interpreter_enabled(), reason="runs Triton kernels on CPU tensors (the interpreter)"
)
needs_cuda_device = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (CUDA-only internals)"
)


def _triton() -> Any:
    return pytest.importorskip("triton")


@pytest.fixture
def lent_driver() -> Iterator[SimpleNamespace]:
    """A stand-in for Triton's active driver (none is active without a GPU), lent for the test:
    a CUDA target (sm_90) for binders, which read it; nothing else."""
    _triton()
    from triton.backends.compiler import GPUTarget

    stand_in = SimpleNamespace(get_current_target=lambda: GPUTarget("cuda", 90, 32))
    give_back = _private.lend_triton_driver(stand_in)
    try:
        yield stand_in
    finally:
        give_back()


def _compiled_jit() -> Any:
    """A compiled-mode ``@triton.jit`` function of ``scale_kernel(x_ptr, out_ptr, n, BLOCK)``
    (``triton.jit`` gives interpreted ones here); never compiled nor launched by these tests."""
    from triton.runtime import JITFunction

    from . import fast_kernels

    return JITFunction(fast_kernels.scale_kernel.fn)


# -- Triton: the CUDA launcher (``CudaLauncher.__call__``, ``.launch``, scratch, attributes) ----


def test_cuda_launcher_has_the_shape_of_this_releases_layout() -> None:
    """The running release's ``CudaLauncher`` has the shape of the layout opreg calls it in,
    and the internals only that layout uses resolve (and are guarded outside ``_private``)."""
    _triton()
    found = triton_release()
    assert found is not None
    expected = LAUNCHER_LAYOUTS.get(found)
    if expected is None:
        assert _private.cuda_launch_layout() is None  # an untested layout: never called
        return
    assert _private.cuda_launcher_shape() == expected
    assert _private.cuda_launch_layout() == expected
    missing = [name for name in _private.LAYOUT_INTERNALS[expected] if not resolves(name)]
    assert not missing, f"the {expected} launcher layout lacks {missing}"
    for names in _private.LAYOUT_INTERNALS.values():
        for name in names:
            assert name.rsplit(".", 1)[1] in INTERNAL_ATTRIBUTES, name


def _stand_in_launcher(cooperative: bool, pdl: bool) -> tuple[Any, list[tuple[Any, ...]]]:
    """A real ``CudaLauncher`` (its ``__init__``, which compiles, skipped) whose C launcher
    records what it is given: the attributes each release's ``__init__`` sets, for a kernel
    without scratch memory."""
    driver = pytest.importorskip("triton.backends.nvidia.driver")
    seen: list[tuple[Any, ...]] = []
    launcher: Any = object.__new__(driver.CudaLauncher)
    launcher.launch = lambda *args: seen.append(args)
    launcher.num_ctas = 1
    launcher.global_scratch_size = launcher.profile_scratch_size = 0
    launcher.global_scratch_align = launcher.profile_scratch_align = 1
    launcher.launch_cooperative_grid, launcher.launch_pdl = cooperative, pdl
    # Set by Triton 3.8+'s __init__ (unused by 3.6's __call__).
    launcher.arg_annotations, launcher.kernel_signature = ("annotations",), b"signature"
    launcher.gsan_enabled = False
    return launcher, seen


@pytest.mark.parametrize("args", [(), ("x",), ("x", 3, None)])
@pytest.mark.parametrize(("cooperative", "pdl"), [(False, False), (True, False), (False, True)])
def test_the_c_launcher_gets_from_the_direct_launch_what_cuda_launcher_call_passes(
    lent_driver: SimpleNamespace, cooperative: bool, pdl: bool, args: tuple[Any, ...]
) -> None:
    """``compiled_kernel_launcher`` calls the C launcher directly with what Triton's own
    ``CudaLauncher.__call__`` passes it for the same launch (3.8+ reads the active driver:
    the stand-in one here)."""
    launcher, seen = _stand_in_launcher(cooperative, pdl)
    compiled = SimpleNamespace(run=launcher, function="fn", packed_metadata="meta")
    if _private.cuda_launch_layout() is None:
        pytest.skip("this Triton has no tested launcher layout: CompiledKernel.run launches")
    assert _direct_cuda_launch(launcher, "fn", "meta") is not None  # taken directly
    _private.compiled_kernel_launcher(compiled)(7, 2, 3, 99, *args)
    launcher(7, 2, 3, 99, "fn", "meta", None, None, None, *args)  # Triton's own call
    assert len(seen) == 2
    assert seen[0] == seen[1]


def test_compiled_kernel_run_takes_the_launch_arguments_in_tritons_order() -> None:
    """``CompiledKernel[grid](*args)`` calls ``run`` with grid x/y/z, stream, ``function``,
    ``packed_metadata``, launch metadata, the two launch hooks and the arguments: the order in
    which ``compiled_kernel_launcher`` calls ``run`` where it does not call the C launcher."""
    _triton()
    from triton import knobs
    from triton.compiler import CompiledKernel

    seen: list[tuple[Any, ...]] = []
    compiled = object.__new__(CompiledKernel)
    compiled.module = object()  # loaded: _init_handles has nothing to do
    compiled._run = lambda *args: seen.append(args)
    compiled.function, compiled.packed_metadata = "fn", "meta"
    compiled.launch_metadata = lambda grid, stream, *args: "launch metadata"
    try:
        compiled[(7, 2, 3)]("x", "y", stream=99)  # Triton's own launch of a compiled kernel
    finally:
        compiled.module = None  # nothing to unload when it is collected
    hooks = (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook)
    assert seen == [(7, 2, 3, 99, "fn", "meta", "launch metadata", *hooks, "x", "y")]
    ours = _private.compiled_kernel_launcher(SimpleNamespace(run=compiled.run, function="fn",
                                                             packed_metadata="meta"))  # fmt: skip
    ours(7, 2, 3, 99, "x", "y")
    assert seen[1] == (7, 2, 3, 99, "fn", "meta", None, None, None, "x", "y")


# -- Triton: the binder (``JITFunction.device_caches``, ``pre_run_hooks``) ----------------------


def test_binder_returns_bound_arguments_specialisation_and_options(
    lent_driver: SimpleNamespace,
) -> None:
    """``device_caches[device][4]`` binds a launch's arguments: all of them by name in signature
    order, one specialisation entry per parameter (pointer alignment, 1, multiples of 16
    distinguished), and the other keyword arguments as options."""
    kernel = _compiled_jit()
    binder = _private.triton_binder(kernel, 0)
    assert binder is not None
    x = torch.zeros(64)
    out = torch.zeros(64)
    bound, specialization, options = binder(x, out, 32, BLOCK=64, num_warps=4)
    assert list(bound) == ["x_ptr", "out_ptr", "n", "BLOCK"]
    assert bound["x_ptr"] is x and bound["out_ptr"] is out
    assert bound["n"] == 32 and bound["BLOCK"] == 64
    assert len(specialization) == 4
    assert options == {"num_warps": 4}

    def spec(x: torch.Tensor, n: int) -> tuple[Any, ...]:
        return tuple(binder(x, out, n, BLOCK=64)[1])

    assert spec(x, 32) != spec(x[1:], 32)  # 16-byte alignment of a pointer
    assert spec(x, 32) != spec(x, 33) != spec(x, 1)  # divisibility by 16, equality to 1
    assert spec(x, 32) == spec(torch.zeros(64), 48)  # same dtype, alignment and divisibility
    assert spec(x, 32) != spec(x.double(), 32)  # the pointer's dtype
    assert spec(x, 32) != spec(x, 2**40)  # the integer's width


def test_binder_is_left_to_triton_while_a_pre_run_hook_is_registered(
    lent_driver: SimpleNamespace,
) -> None:
    kernel = _compiled_jit()
    assert kernel.pre_run_hooks == []
    kernel.pre_run_hooks.append(lambda *args, **kwargs: None)  # what add_pre_run_hook does
    assert _private.triton_binder(kernel, 0) is None


# -- Triton: autotune and heuristics layers --------------------------------------------------


@needs_interpreter
def test_kernel_layers_unwrap_autotune_and_heuristics_down_to_the_jit_function() -> None:
    triton = _triton()
    from . import autotune_kernels

    jit = autotune_kernels.scale_kernel
    heuristics = triton.heuristics({"BUG": lambda args: 0})(jit)
    tuner = triton.autotune(configs=[triton.Config({"BLOCK": 32})], key=["n"])(heuristics)
    found = _private.triton_kernel_layers(tuner)
    assert found is not None
    layers, inner, compiled = found
    assert layers == ((True, tuner), (False, heuristics))
    assert inner is jit
    assert compiled is False  # the interpreter's function, not a compiled JITFunction
    found = _private.triton_kernel_layers(_compiled_jit())
    assert found is not None and found[2] is True  # a compiled one
    assert _private.triton_kernel_layers(print) is None


@needs_interpreter
def test_autotuner_cache_is_keyed_as_autotuner_config_computes() -> None:
    """A real tuning under the interpreter (a benchmarker that times each config by its BLOCK,
    read from the benchmark call's closure): the config ``Autotuner.run`` cached and launched
    with is the one ``autotuner_config`` finds, for positional and keyword arguments; a key
    never tuned gives None; ``best_config``, ``base_fn`` are the autotuner's."""
    triton = _triton()
    from . import autotune_kernels

    timings = {32: 3.0, 64: 1.0, 128: 2.0}
    benchmarked: list[Any] = []

    def bench(kernel_call: Callable[[], Any], quantiles: Any = None, **_: Any) -> list[float]:
        found = _private.autotune_benchmark_call(kernel_call)
        assert found is not None, "Autotuner._bench's kernel_call lost self/config/full_nargs"
        autotuner, config, nargs = found
        assert autotuner is tuner and set(nargs) >= {"x_ptr", "out_ptr", "n"}
        benchmarked.append(config)
        kernel_call()
        return [timings[config.kwargs["BLOCK"]]] * 3

    configs = [triton.Config({"BLOCK": block}) for block in timings]
    tuner = triton.autotune(configs=configs, key=["n"], do_bench=bench)(
        autotune_kernels.scale_kernel
    )
    x = torch.arange(100, dtype=torch.float32)
    out = torch.empty_like(x)
    assert _private.autotuner_config(tuner, (x, out, 100), {}) is None  # not tuned yet
    tuner[autotune_kernels.blocks(100)](x, out, 100)
    torch.testing.assert_close(out, 2 * x)
    assert benchmarked == configs
    chosen = configs[1]  # BLOCK 64: the fastest
    assert tuner.best_config is chosen
    assert list(tuner.cache.values()) == [chosen]
    assert _private.autotuner_config(tuner, (x, out, 100), {}) is chosen
    assert _private.autotuner_config(tuner, (x, out), {"n": 100}) is chosen
    assert _private.autotuner_config(tuner, (x, out, 101), {}) is None  # another key
    assert _private.autotuner_config(tuner, (x.double(), out, 100), {}) is None  # a dtype
    _private.set_autotuner_best_config(tuner, configs[2])
    assert tuner.best_config is configs[2]
    assert _private.autotuner_base_fn(tuner) is autotune_kernels.scale_kernel.fn


@needs_interpreter
def test_heuristics_values_are_computed_in_order_from_the_arguments_by_name() -> None:
    """``Heuristics.values`` maps each meta-parameter to its function, in declaration order;
    ``arg_names`` names the arguments; each value sees those and the values before it, as
    ``Heuristics.run`` passes them on to the kernel."""
    triton = _triton()
    from . import autotune_kernels

    values = {
        "BLOCK": lambda a: triton.next_power_of_2(a["n"]),
        "BUG": lambda a: 0 if a["BLOCK"] >= a["n"] else 1,
    }
    layer = triton.heuristics(values)(autotune_kernels.scale_kernel)
    assert list(layer.values) == ["BLOCK", "BUG"]
    assert layer.arg_names == ["x_ptr", "out_ptr", "n", "BLOCK", "BUG"]
    x = torch.arange(37, dtype=torch.float32)
    out = torch.empty_like(x)
    layer[(1,)](x, out, 37)  # BLOCK 64 covers all 37 elements, BUG 0: out = 2 * x
    torch.testing.assert_close(out, 2 * x)
    assert _private.heuristics_options(layer, (x, out, 37), {}) == {"BLOCK": 64, "BUG": 0}


# -- Triton: launch hooks and drivers --------------------------------------------------------


@pytest.mark.parametrize("hook", ["launch_enter_hook", "launch_exit_hook"])
def test_launch_hooks_idle_follows_the_hook_chains_calls(hook: str) -> None:
    _triton()
    from triton import knobs

    def profiler(metadata: Any) -> None:
        """A launch hook, as a profiler registers one."""

    chain = getattr(knobs.runtime, hook)
    assert chain.calls == []
    assert _private.launch_hooks_idle(knobs.runtime)
    chain.add(profiler)
    try:
        assert chain.calls == [profiler]
        assert not _private.launch_hooks_idle(knobs.runtime)
    finally:
        chain.remove(profiler)
    assert _private.launch_hooks_idle(knobs.runtime)


def test_lending_a_driver_makes_it_active_until_given_back() -> None:
    _triton()
    from triton.runtime.driver import driver

    before = driver._active
    stand_in = SimpleNamespace(get_benchmarker=lambda: "benchmarker")
    give_back = _private.lend_triton_driver(stand_in)
    try:
        assert driver.active is stand_in
    finally:
        give_back()
    assert driver._active is before


def test_the_default_driver_is_tritons_own() -> None:
    """``DriverConfig.default``: Triton's driver for this machine (an error naming the missing
    driver without a GPU), whatever driver is lent; its benchmarker is callable."""
    _triton()
    give_back = _private.lend_triton_driver(SimpleNamespace())
    try:
        default = _private.triton_default_driver()
    except RuntimeError as error:
        assert not torch.cuda.is_available()
        assert "active drivers" in str(error)
    else:
        assert not isinstance(default, SimpleNamespace)
        assert callable(default.get_benchmarker())
    finally:
        give_back()


# -- torch: the compiler-visible mode ----------------------------------------------------------


@pytest.fixture
def double_op(ns: str) -> Iterator[tuple[Any, list[tuple[Any, ...]]]]:
    """A custom op ``x * 2`` with a ``FunctionalTensorMode`` rule (as opreg registers one) that
    records what opreg's rule asks, then decomposes the op; the op's libraries are destroyed
    afterwards."""
    namespace = ns
    library = torch.library.Library(namespace, "DEF")  # type: ignore[no-untyped-call]
    rules = torch.library.Library(namespace, "FRAGMENT")  # type: ignore[no-untyped-call]
    seen: list[tuple[Any, ...]] = []
    try:
        library.define("double(Tensor x) -> Tensor")  # type: ignore[no-untyped-call]
        library.impl("double", lambda x: x * 2, "CompositeExplicitAutograd")  # type: ignore[no-untyped-call]
        library.impl("double", lambda x: torch.empty_like(x), "Meta")  # type: ignore[no-untyped-call]
        op = getattr(torch.ops, namespace).double.default

        def rule(mode: Any, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
            keeps = _private.export_keeps_triton_ops()
            seen.append((keeps, _private.decomposable_types(types)))
            if keeps:  # the op stays whole, as opreg's rule leaves it under torch.export
                return mode.__torch_dispatch__(func, types, args, kwargs)
            with mode:
                return torch.mul(args[0], 2)

        torch.library.register_torch_dispatch(
            op, _private.functional_tensor_mode(), rule, lib=rules
        )
        yield op, seen
    finally:
        _private.destroy_library(rules)
        _private.destroy_library(library)


def test_functional_tensor_mode_rules_run_when_aot_autograd_traces(
    double_op: tuple[Any, list[tuple[Any, ...]]],
) -> None:
    """A ``register_torch_dispatch`` rule for ``FunctionalTensorMode`` runs when
    ``torch.compile`` traces the op (AOTAutograd), on tensor types torch's rule decomposes,
    with ``torch.export``'s flag off; in eager it does not run."""
    op, seen = double_op
    x = torch.arange(4.0)
    torch.testing.assert_close(op(x), 2 * x)
    assert seen == []
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: op(t) + 1, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), 2 * x + 1)
    assert seen and all(entry == (False, True) for entry in seen)


def test_export_keeps_triton_ops_while_an_exported_program_is_decomposed(
    double_op: tuple[Any, list[tuple[Any, ...]]],
) -> None:
    """``torch.export``'s decomposition (``run_decompositions``) traces under
    ``FunctionalTensorMode`` with torch's "keep custom Triton ops" flag on: the rule sees it
    and keeps the op whole; outside, the flag is off."""
    op, seen = double_op
    assert _private.export_keeps_triton_ops() is False

    class Model(torch.nn.Module):
        def forward(self, t: torch.Tensor) -> torch.Tensor:
            return op(t) + 1  # type: ignore[no-any-return]

    x = torch.arange(4.0)
    program = torch.export.export(Model(), (x,)).run_decompositions()
    assert seen and all(entry == (True, True) for entry in seen)
    assert op in [node.target for node in program.graph.nodes]
    torch.testing.assert_close(program.module()(x), 2 * x + 1)
    assert _private.export_keeps_triton_ops() is False


def test_decomposable_types_are_plain_functional_and_fake_tensors() -> None:
    from torch._subclasses.fake_tensor import FakeTensor
    from torch._subclasses.functional_tensor import FunctionalTensor

    class Other(torch.Tensor):
        pass

    assert _private.decomposable_types((torch.Tensor, FunctionalTensor, FakeTensor))
    assert not _private.decomposable_types((torch.Tensor, Other))


def test_destroy_library_drops_its_definitions(ns: str) -> None:
    """``Library._destroy`` removes what the library registered: the same name can be defined
    again (torch refuses that while the first definition lives)."""
    namespace = ns
    first = torch.library.Library(namespace, "FRAGMENT")  # type: ignore[no-untyped-call]
    first.define("f(Tensor x) -> Tensor")  # type: ignore[no-untyped-call]
    second = torch.library.Library(namespace, "FRAGMENT")  # type: ignore[no-untyped-call]
    try:
        with pytest.raises(RuntimeError):
            second.define("f(Tensor x) -> Tensor")  # type: ignore[no-untyped-call]
        _private.destroy_library(first)
        second.define("f(Tensor x) -> Tensor")  # type: ignore[no-untyped-call]
    finally:
        _private.destroy_library(second)
        _private.destroy_library(first)  # a second destroy: nothing left to drop


def test_wrap_triton_disabled_makes_wrap_triton_hand_back_the_kernel() -> None:
    """Inside, ``torch.library.wrap_triton(kernel)`` is the kernel itself (no higher-order op);
    outside, after a return or an error, and in nested calls, the flag is as it was."""
    _triton()
    kernel = _compiled_jit()
    assert torch.library.wrap_triton(kernel) is not kernel  # the traceable wrapper

    def wrapped() -> Any:
        return torch.library.wrap_triton(kernel)

    run = _private.wrap_triton_disabled(lambda: wrapped)
    assert run() is kernel
    assert torch.library.wrap_triton(kernel) is not kernel

    def nested() -> Any:
        inner = run()
        return inner, torch.library.wrap_triton(kernel)

    assert _private.wrap_triton_disabled(lambda: nested)() == (kernel, kernel)

    def failing() -> Any:
        raise ValueError("launch failed")

    with pytest.raises(ValueError, match="launch failed"):
        _private.wrap_triton_disabled(lambda: failing)()
    assert torch.library.wrap_triton(kernel) is not kernel


# -- torch: functorch's wrapped tensors ------------------------------------------------------


def test_functorch_wrapped_is_true_only_for_transform_wrappers() -> None:
    seen: list[bool] = []

    def probe(t: torch.Tensor) -> torch.Tensor:
        seen.append(_private.functorch_wrapped(t))
        return t.sum()

    x = torch.ones(3)
    probe(x)
    torch.func.grad(probe)(x)
    torch.vmap(probe)(torch.ones(2, 3))
    torch.func.jvp(probe, (x,), (x,))
    assert seen == [False, True, True, True]


# -- torch: the current CUDA device and stream (CUDA builds) -----------------------------------


@needs_cuda_device
def test_cuda_device_and_stream_functions_are_torch_cudas() -> None:
    assert _private.cuda_current_device is not None
    assert _private.cuda_set_device is not None
    assert _private.cuda_raw_stream is not None
    index = torch.cuda.current_device()
    assert _private.cuda_current_device() == index
    assert _private.cuda_raw_stream(index) == torch.cuda.current_stream(index).cuda_stream
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    with torch.cuda.stream(stream):
        assert _private.cuda_raw_stream(index) == stream.cuda_stream
    last = torch.cuda.device_count() - 1
    try:
        _private.cuda_set_device(last)
        assert torch.cuda.current_device() == last
    finally:
        torch.cuda.set_device(index)
