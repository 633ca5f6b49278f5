"""Contract tests: the behaviour opreg-testing relies on, for every torch internal it uses.

``opreg_testing._private.INTERNALS`` lists each internal; ``tests/test_private_boundaries.py``
checks that each still resolves. These tests check that each still *does* what the checks rely
on, so a torch release that changes one fails a test named after it. Each test declares the
internals it covers (``@covers``); the last test asserts that every entry of ``INTERNALS`` is
covered by some test here, and that every name a test declares is an entry.
"""

from __future__ import annotations

import pytest
import torch
from tests.contract_coverage import Coverage

from opreg_testing import OpNamespace, _private

#: Which internals each test covers (``@covers``), checked by the last test.
_coverage = Coverage()
covers = _coverage.covers
COVERED = _coverage.covered


@pytest.fixture
def ns(opreg_namespace: OpNamespace) -> str:
    """A fresh operator namespace (the opreg-testing plugin's), as text."""
    return opreg_namespace.name


# -- op types ---------------------------------------------------------------------------------


@covers(
    "torch._library.custom_ops.CustomOpDef",
    "torch._library.custom_ops.CustomOpDef._opoverload",
    "torch._ops.OpOverload",
    "torch._ops.OpOverload._schema",
)
def test_custom_op_def_opoverload_is_the_operator_with_its_schema(ns: str) -> None:
    @torch.library.custom_op(f"{ns}::scale_into", mutates_args=("out",))
    def scale_into(x: torch.Tensor, out: torch.Tensor, alpha: float) -> None:
        out.copy_(x * alpha)

    assert isinstance(scale_into, torch._library.custom_ops.CustomOpDef)
    overload = _private.custom_op_overload(scale_into)
    assert isinstance(overload, torch._ops.OpOverload)
    assert overload is scale_into._opoverload
    assert overload.name() == f"{ns}::scale_into"
    schema = _private.overload_schema(overload)
    assert [a.name for a in schema.arguments] == ["x", "out", "alpha"]
    writes = [a.alias_info is not None and a.alias_info.is_write for a in schema.arguments]
    assert writes == [False, True, False]
    out = torch.zeros(3)
    overload(torch.ones(3), out, 2.0)
    torch.testing.assert_close(out, torch.full((3,), 2.0))


@covers("torch._ops.OpOverloadPacket", "torch._ops.OpOverloadPacket._qualified_op_name")
def test_op_overload_packet_qualified_op_name() -> None:
    packet = torch.ops.aten.add
    assert isinstance(packet, torch._ops.OpOverloadPacket)
    assert not isinstance(packet, torch._ops.OpOverload)
    assert isinstance(packet.Tensor, torch._ops.OpOverload)
    assert _private.packet_qualname(packet) == "aten::add"


# -- fake tensors -------------------------------------------------------------------------------


@covers(
    "torch._subclasses.fake_tensor.FakeTensorMode",
    "torch._subclasses.fake_tensor.FakeTensorMode.from_tensor",
)
def test_fake_tensor_mode_from_tensor_keeps_metadata_without_data() -> None:
    real = torch.randn(3, 4, dtype=torch.float64).t()
    mode = _private.fake_mode(dynamic=False)
    fake = _private.to_fake(mode, real, dynamic=False)
    assert isinstance(fake, torch._subclasses.fake_tensor.FakeTensor)
    assert (fake.shape, fake.stride(), fake.dtype, fake.device) == (
        real.shape, real.stride(), real.dtype, real.device,
    )  # fmt: skip
    with mode:
        out = fake @ torch.ones(3, 2, dtype=torch.float64)
    assert isinstance(out, torch._subclasses.fake_tensor.FakeTensor)
    assert out.shape == (4, 2)


@covers(
    "torch.fx.experimental.symbolic_shapes.ShapeEnv",
    "torch.fx.experimental.symbolic_shapes.DimDynamic.DYNAMIC",
    "torch.fx.experimental.symbolic_shapes.StatelessSymbolicContext",
)
def test_a_stateless_symbolic_context_makes_every_dim_symbolic() -> None:
    mode = _private.fake_mode(dynamic=True)
    fake = _private.to_fake(mode, torch.randn(3, 5), dynamic=True)
    assert all(isinstance(d, torch.SymInt) for d in fake.shape)
    with mode:
        out = torch.cat([fake, fake], dim=0)
    assert isinstance(out.shape[0], torch.SymInt) and isinstance(out.shape[1], torch.SymInt)
    assert int(out.shape[0]) == 6  # the hint: the sample's own size


# -- trees ---------------------------------------------------------------------------------------


@covers("torch.utils._pytree.tree_leaves", "torch.utils._pytree.tree_map_only")
def test_pytree_walks_lists_tuples_and_dicts() -> None:
    a, b = torch.ones(1), torch.zeros(1)
    tree = {"x": [a, (2, b)], "y": "s"}
    leaves = _private.tree_leaves(tree)
    assert sum(isinstance(x, torch.Tensor) for x in leaves) == 2 and 2 in leaves and "s" in leaves
    mapped = _private.tree_map_only(torch.Tensor, lambda t: t + 1, tree)
    assert isinstance(mapped["x"][1], tuple) and mapped["y"] == "s" and mapped["x"][1][0] == 2
    torch.testing.assert_close(mapped["x"][1][1], torch.ones(1))


# -- dispatcher queries, version counters ---------------------------------------------------------


@covers("torch._C._dispatch_has_kernel_for_dispatch_key")
def test_has_kernel_for_dispatch_key_tells_a_batching_rule(ns: str) -> None:
    library = torch.library.Library(ns, "FRAGMENT")  # type: ignore[no-untyped-call]
    try:
        library.define("f(Tensor x) -> Tensor")  # type: ignore[no-untyped-call]
        library.impl("f", lambda x: x * 2, "CompositeExplicitAutograd")  # type: ignore[no-untyped-call]
        assert not _private.has_kernel_for_dispatch_key(f"{ns}::f", "FuncTorchBatched")
        assert _private.has_kernel_for_dispatch_key(f"{ns}::f", "CompositeExplicitAutograd")
        library.impl("f", lambda x: x * 2, "FuncTorchBatched")  # type: ignore[no-untyped-call]
        assert _private.has_kernel_for_dispatch_key(f"{ns}::f", "FuncTorchBatched")
    finally:
        library._destroy()  # type: ignore[no-untyped-call]
    assert _private.has_kernel_for_dispatch_key("aten::add.Tensor", "FuncTorchBatched")


@covers("torch.Tensor._version")
def test_tensor_version_counts_the_writes_autograd_sees() -> None:
    x = torch.zeros(3)
    v = _private.tensor_version(x)
    x.add_(1)
    assert _private.tensor_version(x) == v + 1
    x[0] = 5.0
    assert _private.tensor_version(x) == v + 2
    view = x[1:]
    view.mul_(2)  # a write through a view bumps the base's counter too
    assert _private.tensor_version(x) == v + 3
    x.data.add_(1)  # behind autograd's back: no bump
    assert _private.tensor_version(x) == v + 3


# -- every internal is covered ---------------------------------------------------------------------


def test_every_internal_has_a_contract_test() -> None:
    _coverage.check(_private.INTERNALS, "opreg_testing._private")
