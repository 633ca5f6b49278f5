"""Mutants of real OpInfo ops: each wrong rule must be caught by the sweep's comparison with the
native op and/or by ``check_op``; the same ops with their generic rules raise no alarm.

Mutants: one op's ``vmap_fn`` registered for another (sin with cos's, mul with add's, cumsum
with cumprod's); a backward with a dropped factor (``grad * 0.5``); a fake with a wrong shape,
and one with a wrong dtype; a jvp of the wrong op (written without torch.func, so that it is
caught as a wrong value while known defect "a" still makes torch.func jvp rules raise).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from .build import OpCase, build_case, contiguous_vmap_rule, vjp_backward
from .outcomes import Case, Tally
from .sweep import op_db, samples, sweep_case

#: (op, the op whose rules are mixed in): same arguments, different values.
PAIRS = {"sin": "cos", "mul": "add", "cumsum": "cumprod"}


def _opinfo(name: str) -> Any:
    return next(o for o in op_db() if o.name == name and not o.variant_test_name)


def _case(name: str, other: str | None = None) -> OpCase:
    """``name`` at its first sample in float64 (or ``other`` at ``name``'s sample)."""
    sample_of = _opinfo(name)
    index, sample = next(samples(sample_of, torch.float64, 1, Tally()))
    return build_case(_opinfo(other or name), sample, index, torch.float64)


def _run(case: OpCase, **overrides: Any) -> dict[str, Case]:
    tally = Tally()
    sweep_case(case, tally, run_check_op=True, **overrides)
    return {c.case: c for c in tally.cases}


def _wrong(outcomes: dict[str, Case], name: str) -> bool:
    """The mutant was caught in case ``name``: a mismatch there, or a failed check_op check."""
    return outcomes[name].category != "pass"


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_generic_rules_raise_no_alarm(name: str) -> None:
    outcomes = _run(_case(name))
    bad = [
        c
        for c in outcomes.values()
        if c.category in ("silent_mismatch", "false_alarm")
        or (c.category == "opreg_raises" and not c.defect)
    ]
    assert not bad, bad
    assert outcomes["vmap(in_dims=0)"].category == "pass"
    assert outcomes["grad"].category == "pass"
    assert outcomes["check_op:fake"].category == "pass"
    assert outcomes["check_op:vmap"].category == "pass"


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_mixed_vmap_rule_is_caught(name: str) -> None:
    case = _case(name)
    other = _case(name, PAIRS[name])
    outcomes = _run(case, vmap_fn=contiguous_vmap_rule(other))
    for transform in ("vmap(in_dims=0)", "vmap(in_dims=-1)", "vmap(vmap)"):
        assert outcomes[transform].category == "silent_mismatch", outcomes[transform]
    assert _wrong(outcomes, "check_op:vmap")


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_dropped_factor_in_backward_is_caught(name: str) -> None:
    outcomes = _run(_case(name), backward=vjp_backward(_case(name), scale=0.5))
    for transform in ("grad", "grad(vmap)", "vmap(grad)"):
        assert outcomes[transform].category == "silent_mismatch", outcomes[transform]
    assert _wrong(outcomes, "check_op:autograd")


def _wrong_shape(case: OpCase) -> Callable[..., Any]:
    def fake(*args: Any) -> Any:
        out = case.fallback(*args)
        return out.new_empty((*out.shape, 2))

    return fake


def _wrong_dtype(case: OpCase) -> Callable[..., Any]:
    def fake(*args: Any) -> Any:
        return case.fallback(*args).to(torch.float32)

    return fake


@pytest.mark.parametrize("name", sorted(PAIRS))
@pytest.mark.parametrize("fake", [_wrong_shape, _wrong_dtype], ids=["shape", "dtype"])
def test_wrong_fake_is_caught(name: str, fake: Callable[[OpCase], Any]) -> None:
    case = _case(name)
    outcomes = _run(case, fake_fn=fake(case))
    assert _wrong(outcomes, "check_op:fake")
    # In eager, the kernel's first call compares the fake with its outputs: opreg's error,
    # naming the fake, where the native op works (no wrong value).
    assert outcomes["eager"].category == "opreg_raises"
    assert "fix fake_fn" in outcomes["eager"].reason, outcomes["eager"]


def _tangent(t: Any, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(like) if t is None else t


def _cos_jvp(ctx: Any, t: Any) -> torch.Tensor:  # the jvp of cos, registered for sin
    (x,) = ctx.saved_tensors
    return -torch.sin(x) * _tangent(t, x)


def _add_jvp(ctx: Any, t0: Any, t1: Any) -> torch.Tensor:  # the jvp of add, registered for mul
    x, y = ctx.saved_tensors
    return _tangent(t0, x) + _tangent(t1, y)


@pytest.mark.parametrize(("name", "jvp"), [("sin", _cos_jvp), ("mul", _add_jvp)])
def test_jvp_of_the_wrong_op_is_caught(name: str, jvp: Callable[..., Any]) -> None:
    case = _case(name)
    assert len(case.tensor_pos) == jvp.__code__.co_argcount - 1  # the sample fits the rule
    outcomes = _run(case, jvp=jvp)
    for transform in ("jvp", "jacfwd"):
        assert outcomes[transform].category == "silent_mismatch", outcomes[transform]
    assert _wrong(outcomes, "check_op:autograd")
    assert outcomes["grad"].category == "pass"  # the backward is still right
