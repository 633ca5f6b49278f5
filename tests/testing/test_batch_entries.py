"""vmap batch entries differ in value, not only in order: batching rules that mix entries
(a reduction over the whole batch) are caught, while ops on special domains (positive only,
bounded, integer, index, boolean, inf/nan/0) pass, and an author can take over."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from opreg_testing import CheckFailure, SampleInput, check_op, check_vmap
from opreg_testing.checks._vmap_cases import VmapCase, batch_entries, entry, vmap_cases

Register = Callable[..., Any]  # the ``register`` fixture (conftest.py)

GEN = torch.Generator().manual_seed(0)
MATRIX = [SampleInput((torch.randn(3, 4, generator=GEN),), name="3x4")]
VECTOR = [SampleInput((torch.randn(6, generator=GEN),), name="6")]


def _empty(x: Tensor) -> Tensor:
    return torch.empty_like(x)


def one_arg_op(register: Register, fn: Callable[[Tensor], Tensor], vmap_fn: Any) -> Any:
    return register(fn, vmap_fn=vmap_fn, fake_fn=_empty, fake_vmap_fn=_empty)


def centre(x: Tensor) -> Tensor:
    return x - x.mean()


def from_max(x: Tensor) -> Tensor:
    return x - x.amax()


def by_sum(x: Tensor) -> Tensor:
    return x / x.sum()


def by_norm(x: Tensor) -> Tensor:
    norm: Tensor = torch.linalg.vector_norm(x)
    return x / norm


def sort_all(x: Tensor) -> Tensor:
    return x.flatten().sort().values.view(x.shape)


def running(x: Tensor) -> Tensor:
    return x.flatten().cumsum(0).view(x.shape)


def softmax_all(x: Tensor) -> Tensor:
    return torch.softmax(x.flatten(), 0).view(x.shape)


#: op (per sample) -> a wrong vmap_fn that applies the same formula to the whole batch.
MIXING = {
    "mean": (centre, MATRIX),
    "amax": (from_max, MATRIX),
    "sum": (by_sum, MATRIX),
    "norm": (by_norm, MATRIX),
    "sort": (sort_all, MATRIX),
    "cumsum": (running, MATRIX),
    "softmax": (softmax_all, VECTOR),
}


@pytest.mark.parametrize("kind", MIXING)
def test_a_batching_rule_that_reduces_over_the_batch_is_caught(
    register: Register, kind: str
) -> None:
    fn, samples = MIXING[kind]
    op = one_arg_op(register, fn, fn)  # the per-sample formula, applied to the whole batch
    with pytest.raises(CheckFailure) as info:
        check_vmap(op, samples)
    message = str(info.value)
    assert f"vmap check failed for {op.qualname}" in message
    assert f"sample: '{samples[0].name}'" in message and "case:   vmap in_dims=" in message
    assert "the entries influence each other" in message  # the hint: a batch of 1 is right


def test_the_same_rules_pass_when_written_per_entry(register: Register) -> None:
    op = one_arg_op(
        register, centre, lambda x: x - x.mean(dim=tuple(range(1, x.dim())), keepdim=True)
    )
    assert check_vmap(op, MATRIX).info["batch_entries"] == {"variants": 1}


def triple(x: Tensor) -> Tensor:
    return x * 3


def test_a_rule_wrong_for_a_single_entry_gets_the_other_hint(register: Register) -> None:
    op = one_arg_op(register, triple, lambda x: x * 2)
    with pytest.raises(CheckFailure, match="already for a batch of one entry"):
        check_vmap(op, MATRIX)


# -- the entries themselves -------------------------------------------------------------------


def _entries(sample: SampleInput, case: VmapCase) -> list[Any]:
    """The first argument of every entry of ``case`` (all levels), entry 0 first."""
    indices = itertools.product(*(range(s) for s in case.sizes))
    return [entry(sample, case, index).args[0] for index in indices]


def _cases(sample: SampleInput) -> list[VmapCase]:
    return vmap_cases(sample, entries=batch_entries(sample, [sample], "auto"))


def test_entry_zero_is_the_sample_and_the_others_differ_in_mean_scale_and_extremes() -> None:
    sample = MATRIX[0]
    for case in _cases(sample):
        values = _entries(sample, case)
        assert torch.equal(values[0], sample.args[0])
        stats = [
            (v.mean().item(), v.norm().item(), v.amax().item(), v.amin().item()) for v in values
        ]
        for a, b in itertools.combinations(stats, 2):
            assert all(x != y for x, y in zip(a, b, strict=True)), (case, a, b)


def test_entries_are_deterministic() -> None:
    sample = MATRIX[0]
    case = _cases(sample)[0]
    assert all(
        torch.equal(a, b)
        for a, b in zip(_entries(sample, case), _entries(sample, case), strict=True)
    )


def test_floating_entries_keep_signs_bounds_zeros_and_special_values() -> None:
    x = torch.tensor([[-1.0, 1.0, 0.0, -0.0], [float("inf"), -float("inf"), float("nan"), 0.5]])
    x = torch.cat([x, torch.linspace(-1, 1, 8).view(2, 4)], dim=1)
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        sample = SampleInput((x.to(dtype),))
        for value in _entries(sample, _cases(sample)[0]):
            finite = value[value.isfinite()]
            assert value.isnan().sum() == 1 and (value == float("inf")).sum() == 1
            assert (value == -float("inf")).sum() == 1 and (value == 0).sum() == 2
            assert finite.abs().max() <= 1
            assert sorted(torch.sign(finite).tolist()) == sorted(
                torch.sign(x[x.isfinite()].to(dtype)).tolist()
            )


def test_tiny_positive_values_stay_positive() -> None:
    x = torch.full((4,), torch.finfo(torch.float16).smallest_normal / 4, dtype=torch.float16)
    sample = SampleInput((x,))
    assert all(bool((v > 0).all()) for v in _entries(sample, _cases(sample)[0]))


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.bool])
def test_integer_and_boolean_entries_are_permutations(dtype: torch.dtype) -> None:
    x = torch.tensor([0, 1, 5, 2, 1, 0, 1, 3]).to(dtype)
    sample = SampleInput((x, torch.ones(8)))
    values = _entries(sample, _cases(sample)[0])
    assert any(not torch.equal(v, x) for v in values)
    assert all(torch.equal(v.sort().values, x.sort().values) for v in values)


def test_permute_mode_only_reorders_floats() -> None:
    sample = MATRIX[0]
    case = vmap_cases(sample, entries=batch_entries(sample, [sample], "permute"))[0]
    flat = sample.args[0].flatten().sort().values
    values = _entries(sample, case)
    assert all(torch.equal(v.flatten().sort().values, flat) for v in values)
    assert not torch.equal(values[1], values[0])


def test_samples_of_one_signature_are_the_entries() -> None:
    a = SampleInput((torch.arange(4.0), 2))
    b = SampleInput((torch.arange(4.0) + 10, 2))
    other_scalar = SampleInput((torch.arange(4.0) + 20, 3))
    other_shape = SampleInput((torch.arange(5.0), 2))
    same_values = SampleInput((torch.arange(4.0), 2))
    samples = [a, b, other_scalar, other_shape, same_values]
    found = batch_entries(a, samples, "auto")
    assert found.mode == "samples" and found.group == (a, b)
    values = _entries(a, vmap_cases(a, entries=found)[0])
    assert [v[0].item() for v in values] == [0.0, 10.0, 0.0]
    assert batch_entries(other_shape, samples, "auto").mode == "variants"
    assert batch_entries(other_shape, samples, "samples").mode == "permute"
    assert batch_entries(a, samples, "variants").mode == "variants"
    with pytest.raises(ValueError, match="batch_entries must be one of"):
        batch_entries(a, samples, "random")


# -- correct ops on special domains pass --------------------------------------------------------


def _refuse(condition: Tensor, what: str) -> None:
    if bool(condition.any()):
        raise ValueError(f"out of the domain: {what}")


def checked_log(x: Tensor) -> Tensor:
    _refuse(x <= 0, "x must be positive")
    return x.log()


def checked_asin(x: Tensor) -> Tensor:
    _refuse(x.abs() > 1, "|x| must be <= 1")
    return x.asin()


def checked_sqrt(x: Tensor) -> Tensor:
    _refuse(x < 0, "x must be >= 0")
    return x.sqrt()


@pytest.mark.parametrize(
    ("fn", "x"),
    [
        (checked_log, torch.rand(3, 4, generator=GEN) + 1e-3),
        (checked_asin, torch.linspace(-1, 1, 12).view(3, 4)),
        (checked_sqrt, torch.tensor([0.0, 4.0, float("inf"), 1e-30, 2.0, 9.0])),
    ],
)
def test_ops_on_a_restricted_domain_pass(
    register: Register, fn: Callable[[Tensor], Tensor], x: Tensor
) -> None:
    op = one_arg_op(register, fn, fn)  # elementwise: the same function is a correct vmap_fn
    assert check_vmap(op, [SampleInput((x,))]).info["cases"] > 0


def special(x: Tensor) -> Tensor:
    return torch.where(x.isnan(), -1.0, torch.where(x.isinf(), 2.0, torch.sign(x)))


def test_a_sample_with_inf_nan_and_zero_passes(register: Register) -> None:
    x = torch.tensor([[0.0, float("nan"), -float("inf")], [float("inf"), -2.0, 3.0]])
    check_vmap(one_arg_op(register, special, special), [SampleInput((x,))])


def test_integer_and_boolean_inputs_pass(register: Register) -> None:
    def affine(x: Tensor) -> Tensor:
        return x * 3 + 1

    def invert(x: Tensor) -> Tensor:
        return ~x

    check_vmap(one_arg_op(register, affine, affine), [SampleInput((torch.arange(12).view(3, 4),))])
    mask = torch.tensor([[True, False, True], [False, False, True]])
    check_vmap(one_arg_op(register, invert, invert), [SampleInput((mask,))])


def pick(x: Tensor, index: Tensor) -> Tensor:
    if bool(((index < 0) | (index >= x.shape[-1])).any()):
        raise ValueError("index out of range")
    return x.gather(-1, index)


def test_index_inputs_stay_in_range(register: Register) -> None:
    op = register(
        pick,
        fake_fn=lambda x, index: x.new_empty(index.shape),
        vmap_fn=pick,  # x and index both batched at dim 0: gather on the last dim is per entry
        fake_vmap_fn=lambda x, index: x.new_empty(index.shape),
    )
    x = torch.randn(3, 5, generator=GEN)
    index = torch.tensor([[0, 4, 4, 1], [2, 2, 3, 0], [1, 0, 4, 3]])
    assert check_vmap(op, [SampleInput((x, index))]).info["cases"] > 0
    selected = torch.ops.aten.index_select.default  # a plain torch op with an index tensor
    check_vmap(selected, [SampleInput((x, 1, torch.tensor([4, 0, 2])))])


# -- the author takes over ----------------------------------------------------------------------


def normalized(p: Tensor) -> Tensor:
    """An op whose input must sum to 1 (a domain that scaling leaves)."""
    _refuse((p.sum(-1) - 1).abs() > 1e-5, "p must sum to 1")
    return p * p.log()


def test_the_author_takes_over_with_samples_of_one_signature(register: Register) -> None:
    op = one_arg_op(register, normalized, normalized)
    p = torch.tensor([0.1, 0.2, 0.3, 0.4])
    with pytest.raises(CheckFailure, match="p must sum to 1"):
        check_vmap(op, [SampleInput((p,))])  # scaled variants leave the domain
    check_vmap(op, [SampleInput((p,))], batch_entries="permute")
    q = torch.tensor([0.7, 0.1, 0.1, 0.1])
    result = check_vmap(op, [SampleInput((p,)), SampleInput((q,))])
    assert result.info["batch_entries"] == {"samples": 2}


def test_unknown_batch_entries_is_a_usage_error(register: Register) -> None:
    op = one_arg_op(register, centre, centre)
    with pytest.raises(ValueError, match="batch_entries must be one of"):
        check_vmap(op, MATRIX, batch_entries="shuffle")


def test_check_op_passes_the_options_to_the_vmap_check(register: Register) -> None:
    op = one_arg_op(register, normalized, normalized)
    p = [SampleInput((torch.tensor([0.1, 0.2, 0.3, 0.4]),))]
    assert check_op(op, p, checks="vmap").results[0].status == "failed"
    options = {"vmap": {"batch_entries": "permute", "layouts": False}}
    result = check_op(op, p, checks="vmap", options=options).results[0]
    assert result.status == "passed" and result.info["batch_entries"] == {"permute": 1}
