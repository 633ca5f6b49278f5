"""Sharding rules without a process group: option checking, laziness, pending registration."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from opreg_core import (
    CustomSharding,
    ElementwiseSharding,
    ReplicateSharding,
    RowwiseSharding,
    register_sharding_rule,
    sharding_rule,
)


@pytest.mark.parametrize(
    ("spec", "cls"),
    [
        ("elementwise", ElementwiseSharding),
        ("rowwise", RowwiseSharding),
        (" Replicate ", ReplicateSharding),
        (lambda *a: [], CustomSharding),
    ],
)
def test_sharding_rule_resolves(spec: object, cls: type) -> None:
    assert isinstance(sharding_rule(spec), cls)  # type: ignore[arg-type]


def test_sharding_rule_errors_name_the_op() -> None:
    with pytest.raises(ValueError, match=r"ns::f: unknown sharding 'columnwise'"):
        sharding_rule("columnwise", "ns::f")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"ns::f: sharding must be"):
        sharding_rule(3, "ns::f")  # type: ignore[arg-type]


def test_register_needs_an_opreg_op() -> None:
    with pytest.raises(TypeError, match="expects an opreg op"):
        register_sharding_rule(torch.ops.aten.add.Tensor, "elementwise")  # type: ignore[arg-type]


def _run(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_rules_stay_pending_until_dtensor_is_imported() -> None:
    """Importing opreg_core and declaring a rule must not import torch.distributed.tensor
    (about 0.6 s); the rule reaches DTensor's registry once DTensor is imported."""
    out = _run(
        """
        import sys, torch, opreg_core
        def f(x: torch.Tensor) -> torch.Tensor:
            return x + 1
        op = opreg_core.register_vmap_op(f, fake_fn=torch.empty_like, name="lazy_test::f")
        opreg_core.register_sharding_rule(op, "elementwise")
        print("torch.distributed.tensor" in sys.modules)
        from torch.distributed.tensor import DTensor
        print(op.overload in DTensor._op_dispatcher.sharding_propagator.op_strategy_funcs)
        """
    )
    assert out.split() == ["False", "True"]


def test_a_replaced_op_does_not_get_the_pending_rule() -> None:
    out = _run(
        """
        import torch, opreg_core
        def f(x: torch.Tensor) -> torch.Tensor:
            return x + 1
        op = opreg_core.register_vmap_op(f, fake_fn=torch.empty_like, name="lazy_test::f")
        opreg_core.register_sharding_rule(op, "elementwise")
        op2 = opreg_core.register_vmap_op(f, fake_fn=torch.empty_like, name="lazy_test::f")
        opreg_core.register_sharding_rule(op2, None)
        from torch.distributed.tensor import DTensor
        print(op2.overload in DTensor._op_dispatcher.sharding_propagator.op_strategy_funcs)
        """
    )
    assert out == "False"
