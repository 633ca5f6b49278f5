"""The shape of the API: forms of use, attributes, naming, registry, re-registration."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch._ops import OpOverload

import opreg_core
from opreg_core import SampleInput, VmapOp, default_name, get_op, register_vmap_op, registered_ops


def _fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def test_decorator_and_call_forms_give_the_same_kind_of_op(ns: str) -> None:
    @register_vmap_op(fake_fn=_fake, name=f"{ns}::double")
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def triple(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    op3 = register_vmap_op(triple, fake_fn=_fake, name=f"{ns}::triple")
    x = torch.arange(4.0)
    assert isinstance(double, VmapOp) and isinstance(op3, VmapOp)
    assert torch.equal(double(x), x * 2)
    assert torch.equal(op3(x), x * 3)


def test_op_exposes_what_was_registered(ns: str) -> None:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        """Scale by n."""
        return x * n

    op = register_vmap_op(
        f,
        fake_fn=lambda x, n: torch.empty_like(x),
        vmap_fn=f,
        fake_vmap_fn=lambda x, n: torch.empty_like(x),
        name=f"{ns}::scale",
    )
    assert isinstance(op, OpOverload)
    assert op.qualname == f"{ns}::scale" and (op.namespace, op.opname) == (ns, "scale")
    assert op.schema == "(Tensor x, SymInt n) -> Tensor"
    assert op.overload is getattr(torch.ops, ns).scale.default
    assert op.batched_overload is not None
    assert op.fallback is f and op.vmap_fn is f
    assert op.__doc__ == "Scale by n."
    assert op.__wrapped__ is f
    keys = {(r.operator.split("::")[1], r.dispatch_key, r.what) for r in op.registrations}
    assert ("scale", "CompositeExplicitAutograd", "fallback") in keys
    assert ("scale", "Meta", "fake") in keys
    assert ("scale", "FuncTorchBatched", "vmap rule") in keys
    assert ("scale__opreg_batched", "FuncTorchBatched", "nested vmap rule") in keys
    assert ("scale", "Autograd", "autograd") in keys
    # torch.ops reaches the same operator
    assert torch.equal(getattr(torch.ops, ns).scale(torch.ones(2), 3), torch.full((2,), 3.0))
    assert repr(op) == f"<opreg op {ns}::scale(Tensor x, SymInt n) -> Tensor>"


def test_default_name_is_module_and_function_name() -> None:
    def fused_add(x: torch.Tensor) -> torch.Tensor:
        return x

    fused_add.__module__ = "mylib.ops"
    assert default_name(fused_add) == "mylib_ops::fused_add"
    fused_add.__module__ = "__main__"
    assert default_name(fused_add) == "main::fused_add"
    fused_add.__module__ = "3d-lib.x"
    assert default_name(fused_add) == "op_3d_lib_x::fused_add"


def test_default_name_registers_in_module_namespace(tmp_path: Path) -> None:
    (tmp_path / "opreg_naming_demo.py").write_text(
        textwrap.dedent("""
        import torch
        from opreg_core import register_vmap_op

        @register_vmap_op(fake_fn=lambda x: torch.empty_like(x))
        def negate(x: torch.Tensor) -> torch.Tensor:
            return -x
    """)
    )
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module("opreg_naming_demo")
        assert module.negate.qualname == "opreg_naming_demo::negate"
        assert torch.equal(torch.ops.opreg_naming_demo.negate(torch.ones(1)), -torch.ones(1))
        assert module.negate in registered_ops("opreg_naming_demo")
        # a reload re-registers the same name and leaves one consistent op
        old = module.negate
        module = importlib.reload(module)
        assert [o.qualname for o in registered_ops("opreg_naming_demo")] == [
            "opreg_naming_demo::negate"
        ]
        assert torch.equal(old(torch.ones(1)), -torch.ones(1))
    finally:
        sys.path.remove(str(tmp_path))
        opreg_core.unregister("opreg_naming_demo::negate")


def test_reregistration_replaces_the_op_and_old_handles_follow(ns: str) -> None:
    def make(k: float) -> VmapOp[..., torch.Tensor]:
        def scale(x: torch.Tensor) -> torch.Tensor:
            return x * k

        return register_vmap_op(
            scale, fake_fn=_fake, vmap_fn=scale, fake_vmap_fn=_fake, name=f"{ns}::scale"
        )

    first = make(2.0)
    second = make(3.0)
    x = torch.ones(3)
    assert torch.equal(second(x), x * 3)
    assert torch.equal(first(x), x * 3), "an old handle calls the new definition"
    assert torch.equal(getattr(torch.ops, ns).scale(x), x * 3)
    assert torch.equal(torch.vmap(first)(torch.ones(2, 3)), torch.full((2, 3), 3.0))
    assert [o for o in registered_ops() if o.qualname == f"{ns}::scale"] == [second]
    assert get_op(f"{ns}::scale") is second


def test_registry_lookup_and_module_filter(ns: str) -> None:
    op = register_vmap_op(
        lambda x: x + 1, fake_fn=_fake, name=f"{ns}::inc", schema="(Tensor x) -> Tensor"
    )
    assert get_op(f"{ns}::inc") is op
    assert op in registered_ops(op.module)
    assert op not in registered_ops("no_such_module_xyz")
    with pytest.raises(KeyError, match="no op named"):
        get_op(f"{ns}::missing")


def test_sample_inputs_are_kept(ns: str) -> None:
    def samples(device: torch.device) -> list[SampleInput]:
        return [SampleInput((torch.ones(2, device=device),), name="ones")]

    op = register_vmap_op(
        lambda x: x + 1,
        fake_fn=_fake,
        name=f"{ns}::inc",
        schema="(Tensor x) -> Tensor",
        sample_inputs=samples,
    )
    assert op.sample_inputs is samples
    (sample,) = op.sample_inputs(torch.device("cpu"))
    assert torch.equal(op(*sample.args), torch.full((2,), 2.0))


def test_device_types_restrict_the_fallback(ns: str) -> None:
    op = register_vmap_op(
        lambda x: x + 1,
        fake_fn=_fake,
        name=f"{ns}::cuda_only",
        schema="(Tensor x) -> Tensor",
        device_types="cuda",
    )
    assert op.device_types == ("cuda",)
    assert {r.dispatch_key for r in op.registrations if r.what == "fallback"} == {"CUDA"}
    with pytest.raises(NotImplementedError):
        op(torch.ones(2))
    cpu = register_vmap_op(
        lambda x: x + 1,
        fake_fn=_fake,
        name=f"{ns}::cpu_only",
        schema="(Tensor x) -> Tensor",
        device_types=["cpu"],
    )
    assert torch.equal(cpu(torch.ones(2)), torch.full((2,), 2.0))


def test_register_kernel_overrides_and_remove_restores(ns: str) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    op = register_vmap_op(f, fake_fn=_fake, vmap_fn=f, fake_vmap_fn=_fake, name=f"{ns}::inc")
    handle = op.register_kernel("cpu", lambda x: x + 100)
    batched = op.register_kernel("cpu", lambda x: x + 1000, batched=True)
    x = torch.zeros(2, 3)
    assert op.kernel_device_types == frozenset({"cpu"})
    assert torch.equal(op(x[0]), torch.full((3,), 100.0))
    assert torch.equal(torch.vmap(op)(x), torch.full((2, 3), 1000.0))
    handle.remove()
    batched.remove()
    assert not handle.active and op.kernel_device_types == frozenset()
    assert torch.equal(op(x[0]), torch.ones(3))
    assert torch.equal(torch.vmap(op)(x), torch.ones(2, 3))
    with pytest.raises(ValueError, match=f"{ns}::inc.*not known"):
        op.register_kernel("npu_unknown", lambda x: x)


def test_register_kernel_again_replaces_previous(ns: str) -> None:
    op = register_vmap_op(
        lambda x: x + 1, fake_fn=_fake, name=f"{ns}::inc", schema="(Tensor x) -> Tensor"
    )
    op.register_kernel("cpu", lambda x: x + 10)
    op.register_kernel("cpu", lambda x: x + 20)
    assert torch.equal(op(torch.zeros(1)), torch.full((1,), 20.0))
    assert len(op._state.handles) == 1


def test_public_api_is_declared() -> None:
    for name in opreg_core.__all__:
        assert hasattr(opreg_core, name), name
    assert (Path(opreg_core.__file__).parent / "py.typed").exists()


def test_chain_of_reregistrations_keeps_every_handle_live(ns: str) -> None:
    handles = [
        register_vmap_op(
            lambda x, k=k: x * k, fake_fn=_fake, name=f"{ns}::chain", schema="(Tensor x) -> Tensor"
        )
        for k in (1.0, 2.0, 3.0, 4.0)
    ]
    x = torch.ones(2)
    for handle in handles:
        torch.testing.assert_close(handle(x), x * 4)
        assert handle.overload is handles[-1].overload


def test_sharding_keyword_declares_a_rule_and_reregistration_drops_it(ns: str) -> None:
    op = register_vmap_op(
        lambda x: x + 1,
        fake_fn=_fake,
        name=f"{ns}::inc",
        schema="(Tensor x) -> Tensor",
        sharding="elementwise",
    )
    assert type(op.sharding).__name__ == "ElementwiseSharding"
    again = register_vmap_op(
        lambda x: x + 2, fake_fn=_fake, name=f"{ns}::inc", schema="(Tensor x) -> Tensor"
    )
    assert again.sharding is None and op.sharding is None  # the earlier handle follows
    with pytest.raises(ValueError, match=f"{ns}::bad"):
        register_vmap_op(
            lambda x: x,
            fake_fn=_fake,
            name=f"{ns}::bad",
            schema="(Tensor x) -> Tensor",
            sharding="diagonal",
        )
    assert f"{ns}::bad" not in {o.qualname for o in registered_ops()}
