"""Layout variants: every sample also runs as transposed, strided and offset views through the
kernel, vmap and fake checks, so code that ignores strides is caught on contiguous samples."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from opreg_testing import CheckFailure, SampleInput, check_fake, check_kernel, check_vmap
from opreg_testing.layouts import LAYOUTS, layout_variants, relayout
from opreg_testing.samples import clone_sample, describe_sample

Register = Callable[..., Any]  # the ``register`` fixture (conftest.py)

X = torch.arange(12.0).view(3, 4)
SAMPLES = [SampleInput((X,), name="3x4")]


def _flat(t: Tensor) -> Tensor:
    """``t``'s storage read as if ``t`` were contiguous from its first element: a stride bug."""
    return t.as_strided(t.shape, torch.empty(t.shape).stride(), t.storage_offset())


def _from_storage_start(t: Tensor) -> Tensor:
    """``t`` read from the start of its storage: an offset bug."""
    return t.as_strided(t.shape, t.stride(), 0)


# -- the variants -------------------------------------------------------------------------------


def test_variants_hold_the_same_values_in_other_layouts() -> None:
    index = torch.tensor([2, 0, 1])
    sample = SampleInput((X, [index], 2.0), {"w": torch.ones(2, 1)}, name="#0")
    variants = dict(layout_variants(sample))
    assert list(variants) == list(LAYOUTS)
    for layout, variant in variants.items():
        assert variant.name == f"#0 {layout}" and variant.args[2] == 2.0
        pairs = [
            (X, variant.args[0]),
            (index, variant.args[1][0]),
            (torch.ones(2, 1), variant.kwargs["w"]),
        ]
        assert all(torch.equal(a, b) for a, b in pairs)
    assert variants["transposed"].args[0].stride() == (1, 3)
    assert variants["transposed"].args[1][0].is_contiguous()  # 1-d: nothing to transpose
    assert variants["strided"].args[0].stride() == (8, 2)
    assert variants["strided"].args[1][0].stride() == (2,)
    offset = variants["offset"].args[0]
    assert offset.is_contiguous() and offset.storage_offset() == 1
    text = describe_sample(variants["strided"], ("x", "index"))
    assert text.startswith("'#0 strided' (x: Tensor[3, 4] float32 strides (8, 2), ")


def test_tensors_with_fewer_than_two_elements_are_left_alone() -> None:
    sample = SampleInput((torch.tensor(1.0), torch.ones(1, 1), 3))
    assert layout_variants(sample) == []
    assert relayout(sample.args[0], "strided") is sample.args[0]
    with pytest.raises(ValueError, match="unknown layout"):
        relayout(X, "diagonal")


def test_clones_keep_the_layout_and_requires_grad() -> None:
    leaf = torch.randn(3, 4).requires_grad_()
    for _, variant in layout_variants(SampleInput((leaf.detach().requires_grad_(),))):
        original = variant.args[0]
        copy = clone_sample(variant).args[0]
        assert copy.stride() == original.stride()
        assert copy.storage_offset() == original.storage_offset()
        assert copy.is_leaf and copy.requires_grad and torch.equal(copy, original)
        assert copy.untyped_storage().data_ptr() != original.untyped_storage().data_ptr()


# -- the kernel check -------------------------------------------------------------------------


def double(x: Tensor) -> Tensor:
    return x * 2


def _op_with_kernel(register: Register, kernel: Callable[[Tensor], Tensor]) -> Any:
    op = register(double, fake_fn=lambda x: torch.empty_like(x))
    op.register_kernel("cpu", kernel)
    return op


@pytest.mark.parametrize(
    ("kernel", "layout"),
    [
        (lambda x: _flat(x) * 2, "transposed"),  # ignores strides
        (lambda x: _from_storage_start(x) * 2, "offset"),  # ignores the storage offset
    ],
)
def test_a_kernel_wrong_only_for_non_contiguous_inputs_is_caught(
    register: Register, kernel: Callable[[Tensor], Tensor], layout: str
) -> None:
    op = _op_with_kernel(register, kernel)
    check_kernel(op, SAMPLES, layouts=False)  # contiguous samples alone do not show it
    with pytest.raises(CheckFailure) as info:
        check_kernel(op, SAMPLES)
    message = str(info.value)
    assert f"kernel check failed for {op.qualname}" in message
    assert f"sample: '3x4 {layout}'" in message
    assert "the kernel differs from the fallback" in message


def test_a_kernel_that_makes_its_input_contiguous_passes(register: Register) -> None:
    op = _op_with_kernel(register, lambda x: _flat(x.contiguous()) * 2)
    assert check_kernel(op, SAMPLES).info["layout_variants"] == len(LAYOUTS)


def contiguous_only(x: Tensor) -> Tensor:
    if not x.is_contiguous():
        raise ValueError("x must be contiguous")
    return x * 2


def test_a_layout_both_fallback_and_kernel_reject_alike_is_consistent(register: Register) -> None:
    op = register(contiguous_only, fake_fn=lambda x: torch.empty_like(x))
    op.register_kernel("cpu", contiguous_only)
    result = check_kernel(op, SAMPLES)
    assert set(result.info["layouts_rejected"]) == {"3x4 transposed", "3x4 strided"}
    assert result.info["layout_variants"] == 1  # offset: still contiguous


def test_a_layout_only_the_kernel_rejects_fails(register: Register) -> None:
    op = _op_with_kernel(register, contiguous_only)
    with pytest.raises(CheckFailure, match="the kernel raised ValueError: x must be contiguous"):
        check_kernel(op, SAMPLES)


def scale_(x: Tensor) -> None:
    x.mul_(2)


def test_an_op_that_writes_into_a_view_is_compared_through_the_view(register: Register) -> None:
    op = register(scale_, fake_fn=lambda x: None, mutates_args=("x",))
    op.register_kernel("cpu", scale_)
    assert check_kernel(op, SAMPLES).info["layout_variants"] == len(LAYOUTS)

    def contiguous_write(x: Tensor) -> None:
        _flat(x).copy_(_flat(x) * 2)  # writes as if x were contiguous

    op.register_kernel("cpu", contiguous_write)
    with pytest.raises(CheckFailure, match="argument 'x' after the call"):
        check_kernel(op, SAMPLES)


# -- the vmap and fake checks ----------------------------------------------------------------


def test_a_vmap_fn_that_ignores_the_storage_offset_is_caught(register: Register) -> None:
    op = register(
        double,
        fake_fn=lambda x: torch.empty_like(x),
        vmap_fn=lambda x: _from_storage_start(x) * 2,  # in_dims 0, -1, 1: all offset 0
        fake_vmap_fn=lambda x: torch.empty_like(x),
    )
    check_vmap(op, SAMPLES, layouts=False)
    with pytest.raises(CheckFailure) as info:
        check_vmap(op, SAMPLES, nested=False)
    message = str(info.value)
    assert "vmap check failed" in message and ", offset batched inputs" in message


def test_a_fake_that_fails_on_non_contiguous_inputs_is_caught(register: Register) -> None:
    op = register(double, fake_fn=lambda x: x.view(-1).new_empty(x.shape))
    check_fake(op, SAMPLES, layouts=False)
    with pytest.raises(CheckFailure) as info:
        check_fake(op, SAMPLES)
    assert "'3x4 transposed'" in str(info.value) and "under FakeTensorMode raised" in str(
        info.value
    )


def test_a_fake_that_claims_contiguous_output_is_caught(register: Register) -> None:
    op = register(double, fake_fn=lambda x: x.new_empty(x.shape))  # x * 2 keeps x's layout
    check_fake(op, SAMPLES, layouts=False)
    with pytest.raises(CheckFailure) as info:
        check_fake(op, SAMPLES)
    assert info.value.mismatch is not None and info.value.mismatch.kind == "strides"


def test_correct_ops_pass_every_layout(register: Register) -> None:
    op = register(
        double,
        fake_fn=lambda x: torch.empty_like(x),
        vmap_fn=double,
        fake_vmap_fn=lambda x: torch.empty_like(x),
    )
    op.register_kernel("cpu", double)
    assert check_vmap(op, SAMPLES).info["cases"] > len(LAYOUTS)
    check_fake(op, SAMPLES)
    check_kernel(op, SAMPLES)


# -- a Triton kernel under the interpreter ------------------------------------------------------

TRITON_SCRIPT = """
import torch
import triton
import triton.language as tl

from opreg_core import SampleInput
from opreg_kernels import register_triton_op
from opreg_testing import CheckFailure, check_kernel


@triton.jit
def _double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)


def launcher(contiguous):
    def launch(x):
        if contiguous:
            x = x.contiguous()
        out = torch.empty(x.shape, dtype=x.dtype)  # pointer arithmetic as if x were contiguous
        _double[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
        return out
    return launch


for name, contiguous in (("strided_bug", False), ("good", True)):
    op = register_triton_op(
        lambda x: 2 * x,
        name=f"opreg_layout_test::{name}",
        schema="(Tensor x) -> Tensor",
        fake_fn=lambda x: x.new_empty(x.shape),
        triton_fn=launcher(contiguous),
    )
    sample = SampleInput((torch.arange(12.0).view(3, 4),), name="3x4")
    try:
        result = check_kernel(op, [sample], triton_interpreter=True)
        print(name, "passed", result.info["layout_variants"])
    except CheckFailure as failure:
        print(name, "failed", failure.sample)
"""


def test_a_triton_kernel_that_ignores_strides_is_caught_under_the_interpreter() -> None:
    pytest.importorskip("triton")
    pytest.importorskip("opreg_kernels")
    env = {**os.environ, "TRITON_INTERPRET": "1", "OPREG_DISABLE_TRITON": ""}
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(TRITON_SCRIPT)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines == [
        "strided_bug failed '3x4 transposed' (x: Tensor[3, 4] float32 strides (1, 3))",
        "good passed 3",
    ]
