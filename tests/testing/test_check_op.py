"""``check_op``: which checks ran, passed, failed or were skipped and why; option checking."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from opreg_testing import (
    ALL_CHECKS,
    CheckFailure,
    CheckResult,
    NoSamplesError,
    OpCheckFailed,
    SampleInput,
    SampleInputsError,
    check_fake,
    check_op,
    check_vmap,
    runner,
)
from opreg_testing.checks import CHECKS
from opreg_testing.checks._harness import Budget
from opreg_testing.table import render_details

Register = Callable[..., Any]


def double(x: Tensor) -> Tensor:
    return 2 * x


def samples(device: torch.device) -> list[SampleInput]:
    return [SampleInput((torch.randn(2, 3, device=device),), name="2x3")]


def test_report_lists_every_check_in_order_with_status_and_reason(register: Register) -> None:
    op = register(double, fake_fn=torch.empty_like, sample_inputs=samples)
    seen: list[CheckResult] = []
    report = check_op(op, checks=["vmap", "fake", "kernel", "autograd"], progress=seen.append)
    assert (
        [r.check for r in report.results]
        == ["vmap", "fake", "kernel", "autograd"]
        == [r.check for r in seen]
    )
    assert report.ok and report.op == op.qualname and report.device == "cpu"
    assert report.by_status("passed") == ["vmap", "fake"]
    assert report.by_status("skipped") == ["kernel", "autograd"]
    assert report["autograd"].reason == "the op has no backward"
    assert all(r.duration >= 0 for r in report.results)
    assert report.summary() == (
        f"{op.qualname} on cpu: passed vmap, fake; skipped kernel (no kernel registered for "
        "device type 'cpu' (kernels: none)), autograd (the op has no backward)"
    )
    with pytest.raises(KeyError, match="check 'opcheck' did not run"):
        report["opcheck"]


def test_failures_are_recorded_not_raised_until_asked(register: Register) -> None:
    op = register(double, fake_fn=lambda x: x.new_empty(1), sample_inputs=samples)
    op.register_kernel("cpu", lambda x: 3 * x)
    report = check_op(op, checks="fake,kernel,vmap")
    assert not report.ok
    assert report.by_status("failed") == ["fake", "kernel"]
    assert report["fake"].reason == (
        "the fake implementation of the op disagrees with the real output: "
        "output: shape (1,), expected (2, 3)"
    )
    with pytest.raises(OpCheckFailed) as info:
        report.raise_for_failures()
    assert [f.check for f in info.value.failures] == ["fake", "kernel"]
    single = check_op(op, checks=["kernel"])
    with pytest.raises(CheckFailure, match="opreg kernel check failed"):
        single.raise_for_failures()


def test_report_is_json_ready(register: Register) -> None:
    op = register(double, fake_fn=lambda x: x.new_empty(1), sample_inputs=samples)
    data = json.loads(json.dumps(check_op(op, checks=["fake", "vmap"]).to_dict()))
    assert data["ok"] is False and data["checked"] is True
    fake, vmap = data["results"]
    assert fake["status"] == "failed" and fake["message"].startswith("opreg fake check failed")
    assert vmap["status"] == "passed" and vmap["info"]["batching"] == "opreg per-sample loop"


def test_all_checks_by_default_and_options_reach_the_checks(register: Register) -> None:
    op = register(double, fake_fn=torch.empty_like, sample_inputs=samples)
    report = check_op(op, options={"compile": {"backend": "aot_eager", "vmap": False}})
    assert [r.check for r in report.results] == list(ALL_CHECKS)
    assert report["compile"].info == {"backend": "aot_eager", "dynamic": False, "vmap_cases": 0}


def test_explicit_samples_and_device(register: Register) -> None:
    op = register(double, fake_fn=torch.empty_like)
    report = check_op(op, [(torch.ones(3),)], checks="fake", device="cpu")
    assert report.ok and report.device == "cpu"


def test_a_raising_sample_inputs_hook_is_named(register: Register) -> None:
    def broken(device: torch.device) -> list[SampleInput]:
        raise RuntimeError("no data today")

    op = register(double, fake_fn=torch.empty_like, sample_inputs=broken)
    with pytest.raises(
        SampleInputsError, match="sample_inputs\\('cpu'\\) raised RuntimeError: no data"
    ):
        check_op(op)


def test_bad_arguments_raise(register: Register) -> None:
    op = register(double, fake_fn=torch.empty_like, sample_inputs=samples)
    with pytest.raises(ValueError, match="unknown check\\(s\\) 'fast'; choose from fake, vmap"):
        check_op(op, checks=["fake", "fast"])
    with pytest.raises(ValueError, match="checks must name at least one"):
        check_op(op, checks=[])
    with pytest.raises(ValueError, match="options for unknown check 'speed'"):
        check_op(op, options={"speed": {}})
    with pytest.raises(TypeError, match="unknown option\\(s\\) 'backnd' for the compile check"):
        check_op(op, options={"compile": {"backnd": "eager"}})
    # option values are validated up front, as the check_* functions do
    with pytest.raises(ValueError, match="batch_entries must be one of"):
        check_op(op, checks="fake", options={"autograd": {"batch_entries": "nope"}})
    with pytest.raises(ValueError, match=r"unknown torch\.compile backend 'nope'"):
        check_op(op, options={"compile": {"backend": "nope"}})
    with pytest.raises(NoSamplesError):
        check_op(register(double, name=op.namespace + "::bare", fake_fn=torch.empty_like))


def test_the_check_functions_reject_unknown_keywords_like_python(register: Register) -> None:
    op = register(double, fake_fn=torch.empty_like, sample_inputs=samples)
    with pytest.raises(
        TypeError,
        match="check_fake\\(\\) got an unexpected keyword argument 'dynamc'; "
        "the fake check accepts: dynamic, layouts",
    ):
        check_fake(op, dynamc=False)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="randomness must be"):
        check_vmap(op, randomness="sometimes")
    assert check_fake(op, dynamic=False, layouts=False).info["dynamic"] is False


def test_report_says_whether_anything_was_checked(register: Register) -> None:
    """Issue 10, finding 3: a report of skips only is ok (nothing failed) but not checked."""
    op = register(double, fake_fn=torch.empty_like, sample_inputs=samples)
    skipped_only = check_op(op, checks="kernel,autograd")
    assert skipped_only.ok and not skipped_only.checked
    assert skipped_only.to_dict()["checked"] is False
    assert check_op(op, checks="kernel,fake").checked

    def count(n: int) -> Tensor:
        return torch.arange(n)

    no_tensors = register(count, fake_fn=lambda n: torch.empty(n, dtype=torch.long))
    report = check_op(no_tensors, [(3,)], checks="vmap,autograd,kernel")
    assert report.ok and not report.checked


# -- a failing kernel is named first (issue 20, finding 5) ---------------------------------------


def _launcher(wrong_index: int) -> Callable[[Tensor], Tensor]:
    """A Triton launcher of ``2 * x``; it writes ``2 * x + 1`` at flat index ``wrong_index``
    (-1: nowhere). Defined on first use: Triton's interpreter is on by then."""
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(x_ptr, out_ptr, n, WRONG: tl.constexpr, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        y = tl.load(x_ptr + offsets, mask=mask) * 2
        tl.store(out_ptr + offsets, tl.where(offsets == WRONG, y + 1, y), mask=mask)

    def launch(x: Tensor) -> Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        kernel[(triton.cdiv(max(x.numel(), 1), 64),)](
            x, out, x.numel(), WRONG=wrong_index, BLOCK=64
        )
        return out

    return launch


def _triton_double(
    name: str, launcher: Callable[[Tensor], Tensor], vmap_fn: Callable[[Tensor], Tensor]
) -> Any:
    from opreg_kernels import register_triton_op

    def contiguous(x: Tensor) -> Tensor:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)

    return register_triton_op(
        double,
        name=name,
        schema="(Tensor x) -> Tensor",
        fake_fn=contiguous,
        triton_fn=launcher,
        vmap_fn=vmap_fn,
        fake_vmap_fn=contiguous,
        triton_vmap_fn=launcher if vmap_fn is double else None,
        sample_inputs=samples,
    )


@pytest.mark.needs_triton
def test_a_wrong_triton_kernel_skips_the_checks_that_run_through_it(opreg_namespace: Any) -> None:
    # The kernel writes one wrong value; vmap(op) then differed from the op stacked over the
    # batch only past the first entry, which used to read "entries influence each other (does
    # the batching rule reduce over the batch dim?)", and gradcheck through the kernel could
    # take minutes (issue 37). The checks that run the op through the kernel now wait for it.
    op = _triton_double(opreg_namespace.qualname("one_wrong_value"), _launcher(2), double)
    seen: list[str] = []
    report = check_op(
        op,
        checks=["fake", "vmap", "autograd", "kernel"],
        device="triton-cpu",
        options={"vmap": {"nested": False}},
        progress=lambda r: seen.append(r.check),
    )
    assert seen == ["kernel", "fake", "vmap", "autograd"]  # the kernel check ran first
    assert [r.check for r in report.results] == ["fake", "vmap", "autograd", "kernel"]  # as asked
    assert report.by_status("failed") == ["kernel"]
    assert report["fake"].passed  # the fake never runs the kernel's values
    reason = (
        "the kernel check failed on triton-cpu, and this check runs the op through its Triton "
        "kernel: fix the kernel first"
    )
    for check in ("vmap", "autograd"):
        assert report[check].skipped and report[check].reason == reason
    assert f"skipped vmap ({reason}), autograd ({reason})" in report.summary()
    assert not report.ok


@pytest.mark.needs_triton
def test_a_right_kernel_with_a_wrong_batching_rule_still_blames_the_rule(
    opreg_namespace: Any,
) -> None:
    def mixing(x: Tensor) -> Tensor:  # wrong: entry 0 shifted by the mean over the batch
        return 2 * x + (x.mean(0) - x[0])  # (right for a batch of one entry)

    op = _triton_double(opreg_namespace.qualname("wrong_rule"), _launcher(-1), mixing)
    report = check_op(
        op, checks=["vmap", "kernel"], device="triton-cpu", options={"vmap": {"nested": False}}
    )
    assert report["kernel"].passed
    vmap = report["vmap"]
    assert vmap.failed
    assert "kernel" not in vmap.reason
    assert "does the batching rule reduce over the batch dim?" in vmap.reason


# -- time budgets (issue 37) ---------------------------------------------------------------------


def test_every_check_declares_a_time_budget_with_a_hint() -> None:
    for name, check in CHECKS.items():
        assert check.budget.seconds > 0 and check.budget.hint, name
    assert CHECKS["autograd"].budget.note("autograd", 42.4) == (
        f"autograd took 42 s, over its 30 s budget: {CHECKS['autograd'].budget.hint}"
    )
    assert CHECKS["autograd"].budget.note("autograd", 29.9) is None


def test_a_check_over_its_budget_gets_a_note_and_is_not_stopped(
    register: Register, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Budgets of zero seconds: every check that runs is over its budget (a report, not a kill).
    tight = {
        name: dataclasses.replace(check, budget=Budget(0, f"{name} hint"))
        for name, check in CHECKS.items()
    }
    monkeypatch.setattr(runner, "CHECKS", tight)
    op = register(double, fake_fn=lambda x: x.new_empty(1), sample_inputs=samples)
    report = check_op(op, checks="fake,vmap")
    fake, vmap = report["fake"], report["vmap"]
    assert fake.failed and vmap.passed  # both ran to the end
    assert fake.notes == ["fake took 0 s, over its 0 s budget: fake hint"]
    assert vmap.notes == ["vmap took 0 s, over its 0 s budget: vmap hint"]
    assert "passed vmap (vmap took 0 s, over its 0 s budget: vmap hint)" in report.summary()
    assert "fake took 0 s, over its 0 s budget" in render_details([report])
    assert report.to_dict()["results"][0]["notes"] == fake.notes
