"""Contract tests: the behaviour opreg-core relies on, for every torch internal it uses.

``opreg_core._private.INTERNALS`` lists each internal; ``tests/test_private_boundaries.py``
checks that each still resolves. These tests check that each still *does* what opreg relies
on, so a torch release that changes one fails a test named after it. Each test declares the
internals it covers (``@covers``); the last test asserts that every entry of ``INTERNALS`` is
covered by some test here, and that every name a test declares is an entry.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch._C._functorch as functorch_c
import torch.autograd.forward_ad as forward_ad
from tests.contract_coverage import Coverage
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from opreg_core import _private

#: Which internals each test covers (``@covers``), checked by the last test.
_coverage = Coverage()
covers = _coverage.covers
COVERED = _coverage.covered


@pytest.fixture
def lib(ns: str) -> Iterator[tuple[str, Any]]:
    """A fragment of the test's namespace with ``f(Tensor x) -> Tensor`` (``x * 2`` on
    ``CompositeExplicitAutograd``), destroyed afterwards."""
    library = torch.library.Library(ns, "FRAGMENT")  # type: ignore[no-untyped-call]
    library.define("f(Tensor x) -> Tensor")  # type: ignore[no-untyped-call]
    library.impl("f", lambda x: x * 2, "CompositeExplicitAutograd")  # type: ignore[no-untyped-call]
    try:
        yield ns, library
    finally:
        library._destroy()  # type: ignore[no-untyped-call]


# -- operators ----------------------------------------------------------------------------------


@covers("torch._ops.OpOverload", "torch._ops.OpOverload._op", "torch._ops.OpOverloadPacket")
def test_op_overload_op_is_the_operators_entry_point(lib: tuple[str, Any]) -> None:
    ns, _ = lib
    packet = getattr(torch.ops, ns).f
    assert isinstance(packet, torch._ops.OpOverloadPacket)
    overload = packet.default
    assert isinstance(overload, torch._ops.OpOverload)
    x = torch.ones(3, requires_grad=True)
    out = overload._op(x)  # the dispatcher's C++ entry: autograd and all
    torch.testing.assert_close(out, torch.full((3,), 2.0))
    assert out.requires_grad
    assert not hasattr(packet, "no_such_overload")


@covers("torch._ops.OpOverload._schema")
def test_op_overload_schema_names_arguments_and_writes(ns: str) -> None:
    library = torch.library.Library(ns, "FRAGMENT")  # type: ignore[no-untyped-call]
    try:
        library.define("g(Tensor(a!) x, Tensor y, *, float alpha=1.0) -> ()")  # type: ignore[no-untyped-call]
        schema = getattr(torch.ops, ns).g.default._schema
        assert isinstance(schema, torch.FunctionSchema)
        assert [a.name for a in schema.arguments] == ["x", "y", "alpha"]
        assert [a.kwarg_only for a in schema.arguments] == [False, False, True]
        assert schema.arguments[0].alias_info is not None
        assert schema.arguments[0].alias_info.is_write
        assert schema.arguments[1].alias_info is None
        assert schema.returns == []
    finally:
        library._destroy()  # type: ignore[no-untyped-call]


@covers("torch._ops.OpOverload._handle", "torch._C._after_autograd_keyset")
def test_op_overload_handle_redispatches_below_autograd(lib: tuple[str, Any]) -> None:
    """An ``Autograd`` kernel taking the key set redispatches below autograd through the
    overload's handle, as opreg's autograd kernel does."""
    ns, library = lib
    overload = getattr(torch.ops, ns).f.default
    after = torch._C._after_autograd_keyset
    assert not after.has(torch._C.DispatchKey.AutogradCPU) and after.has(torch._C.DispatchKey.CPU)
    seen: list[bool] = []

    def autograd(keyset: Any, x: torch.Tensor) -> torch.Tensor:
        seen.append(keyset.has(torch._C.DispatchKey.AutogradCPU))
        return overload._handle.redispatch_boxed(keyset & after, x)

    library.impl("f", autograd, "Autograd", with_keyset=True)  # type: ignore[no-untyped-call]
    out = overload(torch.ones(3, requires_grad=True))
    torch.testing.assert_close(out, torch.full((3,), 2.0))
    assert seen == [True]  # the redispatch went below the Autograd kernel, not back into it


def test_a_new_op_object_is_the_operator(lib: tuple[str, Any]) -> None:
    """What ``new_op_object`` relies on (``OpOverload`` state in its ``__dict__``)."""
    ns, _ = lib
    overload = getattr(torch.ops, ns).f.default
    cls = type("Probe", (torch._ops.OpOverload,), {"__call__": overload._op})
    op = _private.new_op_object(cls, overload)
    assert op.name() == overload.name() and op._schema is overload._schema
    torch.testing.assert_close(op(torch.ones(2)), torch.full((2,), 2.0))


# -- the dispatcher -----------------------------------------------------------------------------


@covers("torch._C._dispatch_key_for_device", "torch._C._get_privateuse1_backend_name")
def test_dispatch_key_for_device_names_backend_keys() -> None:
    assert str(torch._C._dispatch_key_for_device("cpu")) == "CPU"
    assert str(torch._C._dispatch_key_for_device("cuda")) == "CUDA"
    with pytest.raises(RuntimeError):
        torch._C._dispatch_key_for_device("opreg_no_such_device")
    assert torch._C._get_privateuse1_backend_name() == "privateuseone"
    assert _private.autocast_dispatch_key("cpu") == "AutocastCPU"


@covers("torch._C._dispatch_find_schema_or_throw")
def test_dispatch_find_schema_or_throw_tells_taken_names(lib: tuple[str, Any]) -> None:
    ns, _ = lib
    torch._C._dispatch_find_schema_or_throw(f"{ns}::f", "")
    torch._C._dispatch_find_schema_or_throw("aten::add", "Tensor")
    with pytest.raises(RuntimeError):
        torch._C._dispatch_find_schema_or_throw(f"{ns}::no_such_op", "")
    assert _private.operator_exists(f"{ns}::f") and not _private.operator_exists(f"{ns}::nope")


@covers("torch._C.parse_schema")
def test_parse_schema_reads_types_defaults_and_aliases() -> None:
    parsed = torch._C.parse_schema(
        "ns::f(Tensor(a!) x, Tensor? w, Tensor[] xs, int[] dims=[], *, float alpha=0.5) -> "
        "(Tensor, Tensor[])"
    )
    assert [a.name for a in parsed.arguments] == ["x", "w", "xs", "dims", "alpha"]
    assert [str(a.real_type) for a in parsed.arguments] == [
        "Tensor", "Optional[Tensor]", "List[Tensor]", "List[int]", "float",
    ]  # fmt: skip
    assert parsed.arguments[0].alias_info.is_write
    assert parsed.arguments[4].kwarg_only and parsed.arguments[4].default_value == 0.5
    assert parsed.arguments[3].has_default_value() and not parsed.arguments[2].has_default_value()
    assert [str(r.real_type) for r in parsed.returns] == ["Tensor", "List[Tensor]"]
    assert str(torch._C.parse_schema("ns::g(Tensor[]? xs) -> Tensor").arguments[0].real_type) == (
        "Optional[List[Tensor]]"
    )
    with pytest.raises(RuntimeError):
        torch._C.parse_schema("ns::f(Tensor x -> Tensor")


@covers("torch.library.Library._destroy")
def test_library_destroy_frees_the_name(ns: str) -> None:
    library = torch.library.Library(ns, "FRAGMENT")  # type: ignore[no-untyped-call]
    library.define("h(Tensor x) -> Tensor")  # type: ignore[no-untyped-call]
    assert _private.operator_exists(f"{ns}::h")
    library._destroy()  # type: ignore[no-untyped-call]
    assert not _private.operator_exists(f"{ns}::h")
    again = torch.library.Library(ns, "FRAGMENT")  # type: ignore[no-untyped-call]
    try:
        again.define("h(Tensor x, int n) -> Tensor")  # type: ignore[no-untyped-call]
        assert [a.name for a in getattr(torch.ops, ns).h.default._schema.arguments] == ["x", "n"]
    finally:
        again._destroy()  # type: ignore[no-untyped-call]


@covers("torch._library.simple_registry.singleton", "torch.library.Library._registration_handles")
@pytest.mark.parametrize("direct", [True, False])
def test_a_fake_registered_directly_is_the_one_register_fake_registers(
    ns: str, direct: bool
) -> None:
    """opreg's fake registration without ``register_fake``'s caller inspection does what that
    function does: fake tensors (and meta ones) run the fake, the library keeps the
    registration, and destroying the library takes the fake away."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    def fake(x: torch.Tensor) -> torch.Tensor:
        return x.new_empty(x.shape[0] * 2)

    library = _private.Library(ns)
    library.define("twice(Tensor x) -> Tensor")
    library.impl("twice", lambda x: torch.cat([x, x]), "CompositeExplicitAutograd")
    qualname = f"{ns}::twice"
    try:
        library.register_fake(qualname, fake, direct=direct)
        holder = torch._library.simple_registry.singleton.find(qualname).fake_impl
        assert holder.kernel is not None and holder.kernel.func is not None
        if direct:  # the source named is the fake's own definition
            assert holder.kernel.source.endswith(f":{fake.__code__.co_firstlineno}")
        op = getattr(torch.ops, ns).twice.default
        with FakeTensorMode() as mode:
            out = op(mode.from_tensor(torch.ones(3)))
        assert out.shape == (6,)
        assert op(torch.ones(3, device="meta")).shape == (6,)
        handles = library._lib._registration_handles
        assert handles, "the registration is kept by the library"
    finally:
        library.destroy()
    assert torch._library.simple_registry.singleton.find(qualname).fake_impl.kernel is None


@covers(
    "torch._C.DispatchKeySet",
    "torch._C.DispatchKeySet.raw_repr",
    "torch._C.DispatchKeySet.from_raw_repr",
    "torch._C.DispatchKey",
)
def test_dispatch_key_set_raw_repr_round_trips() -> None:
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.FuncTorchBatched) | torch._C.DispatchKeySet(
        torch._C.DispatchKey.ADInplaceOrView
    )
    raw = keys.raw_repr()
    assert isinstance(raw, int)
    back = torch._C.DispatchKeySet.from_raw_repr(raw)
    assert back.raw_repr() == raw
    assert back.has(torch._C.DispatchKey.FuncTorchBatched)
    assert not back.has(torch._C.DispatchKey.CPU)
    # Bits combine as sets do (what VmapLevelKeys.state_below computes with).
    only = torch._C.DispatchKeySet(torch._C.DispatchKey.FuncTorchBatched).raw_repr()
    assert torch._C.DispatchKeySet.from_raw_repr(raw & ~only).has(
        torch._C.DispatchKey.ADInplaceOrView
    )
    assert not torch._C.DispatchKeySet.from_raw_repr(raw & ~only).has(
        torch._C.DispatchKey.FuncTorchBatched
    )
    for name in (
        "Undefined", "FuncTorchBatched", "FuncTorchDynamicLayerFrontMode",
        "FuncTorchDynamicLayerBackMode", "BackendSelect", "ADInplaceOrView",
        "AutogradFunctionality", "AutocastCPU", "AutocastCUDA", "CPU", "CUDA",
    ):  # fmt: skip
        assert name in torch._C.DispatchKey.__members__, name


@covers("torch._C._dispatch_keys")
def test_dispatch_keys_tell_plain_tensors_apart() -> None:
    plain = torch._C._dispatch_keys(torch.ones(2)).raw_repr()
    assert torch._C._dispatch_keys(torch.zeros(3, 4).t()).raw_repr() == plain  # a strided view
    assert torch._C._dispatch_keys(torch.ones(2, requires_grad=True)).raw_repr() == plain
    assert _private.dispatch_keys_raw(torch.ones(5)) == plain
    conj = torch.ones(2, dtype=torch.complex64).conj()
    assert torch._C._dispatch_keys(conj).has(torch._C.DispatchKey.Conjugate)
    assert _private.dispatch_keys_raw(conj) != _private.dispatch_keys_raw(
        torch.ones(2, dtype=torch.complex64)
    )
    with torch.inference_mode():
        assert torch._C._dispatch_keys(torch.ones(2)).raw_repr() != plain
    seen: list[int] = []
    torch.vmap(lambda x: seen.append(_private.dispatch_keys_raw(x)) or x)(torch.ones(2, 3))
    assert seen[0] != plain and torch._C.DispatchKeySet.from_raw_repr(seen[0]).has(
        torch._C.DispatchKey.FuncTorchBatched
    )


@covers(
    "torch._C._ForceDispatchKeyGuard",
    "torch._C._dispatch_tls_local_include_set",
    "torch._C._dispatch_tls_local_exclude_set",
)
def test_force_dispatch_key_guard_sets_the_local_key_sets() -> None:
    include = torch._C._dispatch_tls_local_include_set()
    exclude = torch._C._dispatch_tls_local_exclude_set()
    new_exclude = exclude | torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
    with torch._C._ForceDispatchKeyGuard(include, new_exclude):
        assert torch._C._dispatch_tls_local_exclude_set().raw_repr() == new_exclude.raw_repr()
        assert torch._C._dispatch_tls_local_include_set().raw_repr() == include.raw_repr()
    assert torch._C._dispatch_tls_local_exclude_set().raw_repr() == exclude.raw_repr()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        # (autocast's switch edits the exclude set: the guard comes inside it)
        inside = torch._C._dispatch_tls_local_exclude_set()
        forced = inside | torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
        with torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), forced):
            out = torch.mm(torch.ones(2, 2), torch.ones(2, 2))
        assert out.dtype == torch.float32  # AutocastCPU excluded: no cast
        assert torch.mm(torch.ones(2, 2), torch.ones(2, 2)).dtype == torch.bfloat16


@covers(
    "torch._C._dispatch_tls_is_dispatch_key_excluded",
    "torch._C.DispatchKey.AutogradFunctionality",
    "torch._C._AutoDispatchBelowAutograd",
)
def test_auto_dispatch_below_autograd_excludes_autograd_keys() -> None:
    key = torch._C.DispatchKey.AutogradFunctionality
    assert not torch._C._dispatch_tls_is_dispatch_key_excluded(key)
    assert not _private.autograd_excluded()
    x = torch.ones(2, requires_grad=True)
    with torch._C._AutoDispatchBelowAutograd():
        assert torch._C._dispatch_tls_is_dispatch_key_excluded(key)
        assert _private.autograd_excluded()
        out = x * 2
    assert out.grad_fn is None and not out.requires_grad
    with torch.inference_mode():
        assert _private.autograd_excluded()
    assert (x * 2).grad_fn is not None


@covers("torch._C._AutoDispatchBelowADInplaceOrView", "torch._C._after_ADInplaceOrView_keyset")
def test_auto_dispatch_below_inplace_or_view_skips_the_version_bump() -> None:
    x = torch.zeros(2)
    before = x._version
    with torch._C._AutoDispatchBelowADInplaceOrView():
        assert _private.inplace_or_view_excluded()
        x.add_(1)
    assert x._version == before  # the ADInplaceOrView kernel (which bumps) was skipped
    x.add_(1)
    assert x._version == before + 1
    assert not _private.inplace_or_view_excluded()
    after = torch._C._after_ADInplaceOrView_keyset
    assert not after.has(torch._C.DispatchKey.ADInplaceOrView) and after.has(
        torch._C.DispatchKey.CPU
    )


@covers("torch._C._any_requires_grad")
def test_any_requires_grad_checks_tensor_arguments() -> None:
    a, b = torch.ones(2), torch.ones(2, requires_grad=True)
    assert torch._C._any_requires_grad(a, b, 3, "s")
    assert not torch._C._any_requires_grad(a, 2.0, None)
    assert torch._C._any_requires_grad(a, w=b)
    assert not torch._C._any_requires_grad(a, w=a)
    assert torch._C._any_requires_grad([a, b])  # a list of tensors is looked into


@covers("torch._C._increment_version")
def test_increment_version_bumps_each_tensor() -> None:
    a, b = torch.zeros(2), torch.zeros(3)
    va, vb = a._version, b._version
    torch._C._increment_version([a, b])
    assert (a._version, b._version) == (va + 1, vb + 1)
    with torch.inference_mode():
        c = torch.zeros(2)
    torch._C._increment_version([c])  # an inference tensor has no counter: left alone


# -- modes, tracers, profiler, autocast ---------------------------------------------------------


@covers("torch._C._len_torch_dispatch_stack", "torch._C._len_torch_function_stack")
def test_mode_stack_lengths_count_active_modes() -> None:
    assert torch._C._len_torch_dispatch_stack() == 0
    assert torch._C._len_torch_function_stack() == 0

    class Dispatch(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            return func(*args, **(kwargs or {}))

    class Function(TorchFunctionMode):
        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            return func(*args, **(kwargs or {}))

    with Dispatch():
        assert torch._C._len_torch_dispatch_stack() == 1
    with Function():
        assert torch._C._len_torch_function_stack() == 1
    assert torch._C._len_torch_dispatch_stack() == torch._C._len_torch_function_stack() == 0


@covers("torch._C._is_tracing")
def test_is_tracing_inside_jit_trace() -> None:
    seen: list[bool] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        seen.append(torch._C._is_tracing())
        return x * 2

    assert not torch._C._is_tracing()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch 2.15 deprecates torch.jit
        torch.jit.trace(f, torch.ones(2), check_trace=False)
    assert seen == [True]


@covers("torch.autograd.profiler._is_profiler_enabled")
def test_profiler_flag_is_set_while_a_profiler_runs() -> None:
    assert torch.autograd.profiler._is_profiler_enabled is False
    assert not _private.profiler_enabled()
    with torch.autograd.profiler.profile():
        assert _private.profiler_enabled()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert _private.profiler_enabled()
    assert not _private.profiler_enabled()


@covers("torch.compiler._is_compiling_flag")
def test_compiling_flag_is_set_while_torch_export_runs_python(ns: str) -> None:
    """Non-strict ``torch.export`` runs the module's Python, the op object's call included:
    the flag sends that call to the dispatcher, which the exporter records. (Dynamo puts the
    op object into its graph as the operator without running its call; torch 2.11 leaves the
    flag False in code Dynamo traces, 2.13 to 2.15 set it.)"""
    assert not _private.compiling()
    seen: list[bool] = []

    class Module(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(_private.compiling())
            return x * 2

    torch.export.export(Module(), (torch.ones(2),), strict=False)
    assert seen and all(seen)
    assert not _private.compiling()


@covers("torch._C._is_any_autocast_enabled", "torch._C._ExcludeDispatchKeyGuard")
def test_exclude_dispatch_key_guard_skips_autocast() -> None:
    assert not torch._C._is_any_autocast_enabled()
    a = torch.ones(2, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch._C._is_any_autocast_enabled()
        assert torch.mm(a, a).dtype == torch.bfloat16
        with _private.excluding_dispatch_key("AutocastCPU")():
            assert torch.mm(a, a).dtype == torch.float32
    assert not torch._C._is_any_autocast_enabled()


# -- functorch: vmap --------------------------------------------------------------------------


@covers(
    "torch._C._functorch.maybe_current_level", "torch._C._functorch.get_dynamic_layer_stack_depth"
)
def _level_and_depth() -> tuple[int, int]:
    return functorch_c.maybe_current_level(), functorch_c.get_dynamic_layer_stack_depth()


def test_maybe_current_level_inside_vmap() -> None:
    assert functorch_c.maybe_current_level() is None
    assert functorch_c.get_dynamic_layer_stack_depth() == 0
    seen: list[tuple[int, int]] = []

    def inner(x: torch.Tensor) -> torch.Tensor:
        seen.append(
            (functorch_c.maybe_current_level(), functorch_c.get_dynamic_layer_stack_depth())
        )
        return x

    def outer(x: torch.Tensor) -> torch.Tensor:
        seen.append(
            (functorch_c.maybe_current_level(), functorch_c.get_dynamic_layer_stack_depth())
        )
        return torch.vmap(inner)(x)

    torch.vmap(outer)(torch.ones(2, 3, 4))
    (outer_level, outer_depth), (inner_level, inner_depth) = seen
    assert inner_level == outer_level + 1 and (outer_depth, inner_depth) == (1, 2)


@covers("torch._C._functorch._add_batch_dim", "torch._C._functorch._unwrap_batched")
def test_add_batch_dim_and_unwrap_batched_round_trip_at_a_level() -> None:
    x = torch.arange(24.0).reshape(2, 3, 4)
    seen: list[Any] = []

    def f(t: torch.Tensor) -> torch.Tensor:
        level = functorch_c.maybe_current_level()
        inner, dim = functorch_c._unwrap_batched(t, level)
        seen.append((inner.shape, dim, type(inner) is torch.Tensor))
        same, none = functorch_c._unwrap_batched(torch.ones(4), level)  # not batched here
        seen.append((same.shape, none))
        return functorch_c._add_batch_dim(inner * 10, dim, level)

    out = torch.vmap(f, in_dims=1)(x)
    assert seen == [((2, 3, 4), 1, True), ((4,), None)]
    torch.testing.assert_close(out, x.movedim(1, 0) * 10)


@covers("torch._C._functorch.tls_set_vmap_excluded")
def test_tls_set_vmap_excluded_sends_a_call_one_level_down(ns: str) -> None:
    """A batching rule's call with ``FuncTorchBatched`` excluded reaches the next level down
    (the kernel below sees what that level holds), the lowering opreg's rules use."""
    library = torch.library.Library(ns, "FRAGMENT")  # type: ignore[no-untyped-call]
    below: list[bool] = []
    try:
        library.define("p(Tensor x) -> Tensor")  # type: ignore[no-untyped-call]
        op = getattr(torch.ops, ns).p.default

        def kernel(x: torch.Tensor) -> torch.Tensor:
            below.append(functorch_c.maybe_current_level() is None)
            return x + 1

        def rule(x: torch.Tensor) -> torch.Tensor:
            level = functorch_c.maybe_current_level()
            inner, dim = functorch_c._unwrap_batched(x, level)
            functorch_c.tls_set_vmap_excluded(True)
            try:
                out = op(inner)
            finally:
                functorch_c.tls_set_vmap_excluded(False)
            return functorch_c._add_batch_dim(out, dim, level)

        library.impl("p", kernel, "CompositeExplicitAutograd")  # type: ignore[no-untyped-call]
        library.impl("p", rule, "FuncTorchBatched")  # type: ignore[no-untyped-call]
        x = torch.arange(6.0).reshape(2, 3)
        torch.testing.assert_close(torch.vmap(op)(x), x + 1)
        assert below == [True]  # one call, below the only level
        torch.testing.assert_close(torch.vmap(torch.vmap(op))(x[None]), x[None] + 1)
        assert below == [True, True]  # each level's rule lowered it once: one kernel call
    finally:
        library._destroy()  # type: ignore[no-untyped-call]


@covers(
    "torch._C._functorch.peek_interpreter_stack",
    "torch._C._functorch.TransformType",
    "torch._C._functorch.CVmapInterpreterPtr",
    "torch._C._functorch.CVmapInterpreterPtr.randomness",
    "torch._C._functorch.RandomnessType",
    "torch._C._are_functorch_transforms_active",
)
@pytest.mark.parametrize("randomness", ["error", "same", "different"])
def test_peek_interpreter_stack_tells_the_vmap_level_and_its_randomness(randomness: str) -> None:
    assert functorch_c.peek_interpreter_stack() is None
    assert not torch._C._are_functorch_transforms_active()
    seen: list[Any] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        top = functorch_c.peek_interpreter_stack()
        seen.append((top.key(), top.level() == functorch_c.maybe_current_level()))
        seen.append(functorch_c.CVmapInterpreterPtr(top).randomness())
        seen.append(torch._C._are_functorch_transforms_active())
        seen.append(_private.vmap_randomness())
        return x

    torch.vmap(f, randomness=randomness)(torch.ones(2))
    expected = getattr(functorch_c.RandomnessType, randomness.capitalize())
    assert seen == [(functorch_c.TransformType.Vmap, True), expected, True, randomness]


@covers(
    "torch._C._functorch.pop_dynamic_layer_stack", "torch._C._functorch.push_dynamic_layer_stack"
)
def test_popping_and_pushing_a_dynamic_layer_runs_below_it() -> None:
    seen: list[Any] = []

    def inner(x: torch.Tensor) -> torch.Tensor:
        depth = functorch_c.get_dynamic_layer_stack_depth()
        layer = functorch_c.pop_dynamic_layer_stack()
        try:
            seen.append((depth, functorch_c.get_dynamic_layer_stack_depth()))
            seen.append(functorch_c.peek_interpreter_stack().level())
        finally:
            functorch_c.push_dynamic_layer_stack(layer)
        seen.append(functorch_c.get_dynamic_layer_stack_depth())
        return x * 2

    def outer(x: torch.Tensor) -> torch.Tensor:
        seen.append(functorch_c.maybe_current_level())
        return torch.vmap(inner)(x)

    out = torch.vmap(outer)(torch.ones(2, 3))
    torch.testing.assert_close(out, torch.full((2, 3), 2.0))
    outer_level, (before, popped), top_after_pop, after = seen
    assert (before, popped, after) == (2, 1, 2) and top_after_pop == outer_level


@covers(
    "torch._C._functorch.pop_dynamic_layer_stack", "torch._C._functorch.push_dynamic_layer_stack"
)
@pytest.mark.parametrize("depth", [1, 2])
def test_popping_every_vmap_level_at_the_caller_gives_the_state_below_them(
    ns: str, depth: int
) -> None:
    """What the op's call relies on when it folds the vmap levels itself: popping them where
    the caller stands (no level being processed) leaves the dispatch state that functorch
    gives an operation it sends below every level (here: an operator's kernel reached through
    a batching rule that lowers it), and pushing them back restores the caller's."""
    seen: dict[str, Any] = {}

    def state() -> tuple[int, int]:
        return (
            torch._C._dispatch_tls_local_include_set().raw_repr(),
            torch._C._dispatch_tls_local_exclude_set().raw_repr(),
        )

    lib = torch.library.Library(ns, "FRAGMENT")
    lib.define("probe(Tensor x) -> Tensor")
    op = getattr(torch.ops, ns).probe.default

    def below(x: torch.Tensor) -> torch.Tensor:
        seen["below"] = state()
        return x.clone()

    def rule(x: torch.Tensor) -> torch.Tensor:  # every level: lower the call, unbatched
        level = functorch_c.maybe_current_level()
        inner, dim = functorch_c._unwrap_batched(x, level)
        with torch._C._ExcludeDispatchKeyGuard(
            torch._C.DispatchKeySet(torch._C.DispatchKey.FuncTorchBatched)
        ):
            out = op(inner)
        return functorch_c._add_batch_dim(out, dim, level)

    def caller(x: torch.Tensor) -> torch.Tensor:
        before = state()
        layers = [functorch_c.pop_dynamic_layer_stack() for _ in range(depth)]
        try:
            seen["popped"] = state()
        finally:
            for layer in reversed(layers):
                functorch_c.push_dynamic_layer_stack(layer)
        seen["restored"] = state() == before
        return op(x)  # type: ignore[no-any-return]

    lib.impl("probe", below, "CompositeExplicitAutograd")
    lib.impl("probe", rule, "FuncTorchBatched")
    try:
        f: Any = caller
        for _ in range(depth):
            f = torch.vmap(f)
        f(torch.zeros(*(2,) * depth, 3))
    finally:
        lib._destroy()
    assert seen["popped"] == seen["below"] and seen["restored"]


# -- functorch: grad and jvp ---------------------------------------------------------------------


@covers("torch._C._functorch._wrap_for_grad", "torch._C._functorch._unwrap_for_grad")
def test_wrap_and_unwrap_for_grad_round_trip_at_a_grad_level() -> None:
    seen: list[Any] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        level = functorch_c.maybe_current_level()
        inner = functorch_c._unwrap_for_grad(x, level)
        seen.append(functorch_c.is_gradtrackingtensor(x))
        seen.append(functorch_c.is_gradtrackingtensor(inner))
        rewrapped = functorch_c._wrap_for_grad(inner, level)
        seen.append(functorch_c.is_gradtrackingtensor(rewrapped))
        torch.testing.assert_close(inner, torch.ones(3))
        return (x * x).sum()

    g = torch.func.grad(f)(torch.ones(3))
    torch.testing.assert_close(g, torch.full((3,), 2.0))
    assert seen == [True, False, True]


@covers("torch._C._functorch.CJvpInterpreterPtr", "torch._C._is_fwd_grad_enabled")
def test_jvp_interpreter_says_the_forward_grad_mode_it_found() -> None:
    seen: list[Any] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        top = functorch_c.peek_interpreter_stack()
        seen.append(top.key())
        seen.append(functorch_c.CJvpInterpreterPtr(top).prevFwdGradMode())
        return x * 2

    assert torch._C._is_fwd_grad_enabled()
    torch.func.jvp(f, (torch.ones(2),), (torch.ones(2),))
    assert seen == [functorch_c.TransformType.Jvp, True]


@covers("torch._functorch.eager_transforms.JVP_NESTING")
def test_jvp_nesting_counts_open_torch_func_jvps() -> None:
    from torch._functorch import eager_transforms

    seen: list[int] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        seen.append(eager_transforms.JVP_NESTING)
        return x * 2

    assert eager_transforms.JVP_NESTING == 0
    torch.func.jvp(f, (torch.ones(2),), (torch.ones(2),))
    torch.func.jvp(lambda x: torch.func.jvp(f, (x,), (x,))[1], (torch.ones(2),), (torch.ones(2),))
    assert seen == [1, 2] and eager_transforms.JVP_NESTING == 0


@covers(
    "torch.autograd.forward_ad._current_level", "torch.autograd.forward_ad._set_fwd_grad_enabled"
)
def test_forward_ad_current_level_and_the_forward_grad_switch() -> None:
    assert forward_ad._current_level == -1 and _private.forward_ad_level() == -1
    with forward_ad.dual_level():
        assert forward_ad._current_level >= 0 and _private.forward_ad_level() >= 0
        x = forward_ad.make_dual(torch.ones(2), torch.full((2,), 3.0))
        assert forward_ad.unpack_dual(x * 2).tangent is not None
        with forward_ad._set_fwd_grad_enabled(False):
            assert not torch._C._is_fwd_grad_enabled()
            assert forward_ad.unpack_dual(x * 2).tangent is None
        assert torch._C._is_fwd_grad_enabled()
        assert _private.tangent_flags([x, torch.ones(2), 3]) == [True, False, False]
    assert forward_ad._current_level == -1


# -- autograd Functions ---------------------------------------------------------------------------


def _square_function(node_calls_backward: bool, calls: list[str]) -> Any:
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x * x

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(inputs[0])

    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        calls.append("backward")
        (x,) = ctx.saved_tensors
        return 2 * g * x

    methods = {
        "forward": staticmethod(forward),
        "setup_context": staticmethod(setup_context),
        "backward": staticmethod(backward),
    }
    return _private.function_class("Square", methods, node_calls_backward=node_calls_backward)


@covers(
    "torch.autograd.function._SingleLevelFunction",
    "torch.autograd.function._SingleLevelFunction._backward_cls",
)
@pytest.mark.parametrize("node_calls_backward", [True, False])
def test_single_level_function_apply_and_backward(node_calls_backward: bool) -> None:
    calls: list[str] = []
    function = _square_function(node_calls_backward, calls)
    assert issubclass(function, torch.autograd.function._SingleLevelFunction)
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    out = function.apply(x)
    assert type(out.grad_fn) is function._backward_cls
    own = torch.autograd.function.BackwardCFunction.apply
    assert (type(out.grad_fn).apply is own) is (not node_calls_backward)
    (g,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(g, 2 * x.detach())
    assert calls == ["backward"]
    # A new backward reaches nodes recorded before (the node's class is looked up per call).
    out = function.apply(x)
    _private.set_backward(function, lambda ctx, g: 3 * g)
    (g,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(g, torch.full((2,), 3.0))


@covers("torch._functorch.autograd_function.enable_single_level_autograd_function")
def test_single_level_function_under_torch_func_grad_needs_the_permission() -> None:
    function = _square_function(True, [])
    x = torch.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError):
        torch.func.grad(lambda x: function.apply(x).sum())(x)

    def allowed(x: torch.Tensor) -> torch.Tensor:
        with _private.enable_single_level_autograd_function():
            return function.apply(x).sum()

    torch.testing.assert_close(torch.func.grad(allowed)(x), 2 * x)


# -- storage, trees ------------------------------------------------------------------------------


@covers("torch.UntypedStorage._cdata")
def test_storage_cdata_identifies_a_storage_across_views() -> None:
    x = torch.zeros(4)
    view = x[1:]
    assert x.untyped_storage()._cdata == view.untyped_storage()._cdata
    assert _private.storage_id(x) == _private.storage_id(view.t() if view.dim() > 1 else view)
    assert _private.storage_id(x) != _private.storage_id(x.clone())
    assert _private.storage_id(torch.empty(0)) != _private.storage_id(torch.empty(0))


@covers("torch.utils._pytree.tree_leaves", "torch.utils._pytree.tree_map_only")
def test_pytree_walks_lists_tuples_and_dicts() -> None:
    from torch.utils._pytree import tree_leaves, tree_map_only

    a, b = torch.ones(1), torch.zeros(1)
    tree = [a, (3, [b, "s"]), {"k": a}]
    leaves = tree_leaves(tree)
    assert [type(x) for x in leaves] == [torch.Tensor, int, torch.Tensor, str, torch.Tensor]
    assert leaves[0] is a and leaves[2] is b
    doubled = tree_map_only(torch.Tensor, lambda t: t + 1, tree)
    assert doubled[1][0] == 3 and doubled[1][1][1] == "s"
    torch.testing.assert_close(doubled[1][1][0], torch.ones(1))
    assert isinstance(doubled[1], tuple) and isinstance(doubled[2], dict)


# -- DTensor sharding caches ----------------------------------------------------------------------

_SHARDING_CACHES = """
import torch, torch.distributed as dist
from torch.distributed.tensor import DTensor, Shard, debug, distribute_tensor, init_device_mesh
from opreg_core import _private, register_vmap_op, register_sharding_rule

dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,))
a = distribute_tensor(torch.ones(4, 2), mesh, [Shard(0)])
propagator = DTensor._op_dispatcher.sharding_propagator

def fill():
    # the Python cache (propagate) and the C++ fast path's (a DTensor call)
    info = DTensor._op_dispatcher.unwrap_to_op_info(torch.ops.aten.add.Tensor, (a, a), {})
    propagator.propagate(info)
    a + a
    a + a
    assert propagator.propagate_op_sharding.cache_info().currsize == 1
    hits, misses = torch._C._get_DTensor_sharding_propagator_cache_stats()
    assert hits >= 1, (hits, misses)

def cleared():
    assert propagator.propagate_op_sharding.cache_info().currsize == 0
    assert torch._C._get_DTensor_sharding_propagator_cache_stats() == (0, 0)
    a + a  # a miss: the decision was gone
    assert torch._C._get_DTensor_sharding_propagator_cache_stats() == (0, 1)

fill()
debug._clear_sharding_prop_cache()
cleared()
fill()
del debug._clear_sharding_prop_cache  # as on torch 2.9: the fallback clears each cache
_private.clear_sharding_caches()
cleared()

op = register_vmap_op(lambda x: x * 2, schema="(Tensor x) -> Tensor", name="contract::twice",
                      fake_fn=lambda x: torch.empty_like(x))
register_sharding_rule(op, "elementwise")
assert op.overload in propagator.op_strategy_funcs
_private.forget_sharding_strategies(DTensor, [op.overload])
assert op.overload not in propagator.op_strategy_funcs
assert op.overload not in propagator.op_to_schema_info
dist.destroy_process_group()
print("ok")
"""


@covers(
    "torch.distributed.tensor.DTensor._op_dispatcher",
    "torch.distributed.tensor.debug._clear_sharding_prop_cache",
    "torch.distributed.tensor._sharding_prop.ShardingPropagator.propagate_op_sharding",
    "torch._C._clear_DTensor_sharding_propagator_cache",
)
def test_clear_sharding_prop_cache_and_its_fallback_clear_dtensors_caches() -> None:
    """A cached sharding decision is gone after the clear, through DTensor's helper and
    through opreg's fallback where that helper is missing (torch 2.9); the strategies of a
    destroyed operator are dropped. In a fresh process: one gloo rank, no network."""
    if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
        pytest.skip("torch.distributed with gloo is not available")
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_SHARDING_CACHES)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


# -- every internal is covered ---------------------------------------------------------------------


def test_every_internal_has_a_contract_test() -> None:
    _coverage.check(_private.INTERNALS, "opreg_core._private")


@covers(
    "torch._subclasses.fake_tensor.FakeTensorMode",
    "torch._subclasses.fake_tensor.FakeTensorMode.from_tensor",
)
def test_fake_run_gives_fake_outputs_with_the_inputs_metadata() -> None:
    from opreg_core._private import fake_run

    x = torch.randn(3, 4, requires_grad=True)
    out = fake_run(lambda t, ts: [t.sum(0), ts[0].to(torch.float64)], (x, [x]), {})
    assert [(tuple(o.shape), o.dtype, o.device.type) for o in out] == [
        ((4,), torch.float32, "cpu"),
        ((3, 4), torch.float64, "cpu"),
    ]
    assert type(out[0]).__name__ == "FakeTensor"
