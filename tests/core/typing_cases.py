"""Static typing of ``register_vmap_op``'s and ``register_triton_op``'s keywords, checked by
``mypy --strict`` (``hatch run types``, a CI step; ``test_options.py`` too, where mypy is
installed). Never run: it only has to type-check.

Each call marked ``# type: ignore[...]`` must be rejected by mypy: ``--strict`` reports an
unused ignore, so a keyword that mypy stopped checking fails the check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Unpack, assert_type

import torch

from opreg_core import VmapOp, VmapOpOptions, register_vmap_op


def _f(x: torch.Tensor, k: int) -> torch.Tensor:
    return x * k


def _fake(x: torch.Tensor, k: int) -> torch.Tensor:
    return torch.empty_like(x)


class _ExtendedOptions(VmapOpOptions, total=False):
    """What a package built on opreg-core does: add its keywords, forward the rest."""

    extra_fn: Callable[..., Any] | None


def _register_extended(
    fn: Callable[[torch.Tensor, int], torch.Tensor], /, **options: Unpack[_ExtendedOptions]
) -> VmapOp[[torch.Tensor, int], torch.Tensor]:
    options.pop("extra_fn", None)
    forwarded: VmapOpOptions = options  # a TypedDict with more keys is a VmapOpOptions
    return register_vmap_op(fn, **forwarded)


def _cases() -> None:
    op: VmapOp[[torch.Tensor, int], torch.Tensor]
    op = register_vmap_op(_f, fake_fn=_fake, name="typing_cases::f", differentiable=False)
    assert_type(op(torch.ones(2), 3), torch.Tensor)
    decorator = register_vmap_op(fake_fn=_fake, vmap_out_dims=(0,), mutates_args=())
    op = decorator(_f)
    op = _register_extended(_f, fake_fn=_fake, extra_fn=None, sharding="elementwise")
    op = register_vmap_op(_f, fake_fn=_fake, autocast="lower_precision")
    op = register_vmap_op(_f, fake_fn=_fake, autocast={"cuda": torch.bfloat16, "cpu": "float32"})

    register_vmap_op(_f, fake_fn=_fake, differentiable="yes")  # type: ignore[call-overload]
    register_vmap_op(_f, fake_fn=_fake, max_vmap_level="2")  # type: ignore[call-overload]
    register_vmap_op(_f, fake_fn=_fake, sharding="diagonal")  # type: ignore[call-overload]
    register_vmap_op(_f, fake_fn=_fake, autocast="bf16")  # type: ignore[call-overload]
    register_vmap_op(_f, fake_fn=_fake, autocast=torch.bfloat16)  # type: ignore[call-overload]
    register_vmap_op(_f, fake_fn=_fake, autocast={"cpu": "fp16"})  # type: ignore[dict-item]
    register_vmap_op(_f, fake_fnn=_fake)  # type: ignore[call-overload]
    register_vmap_op(fake_fn=_fake, name=3)  # type: ignore[call-overload]
    _register_extended(_f, fake_fn=_fake, extra_fn=3)  # type: ignore[arg-type]
    op(torch.ones(2), "3")  # type: ignore[arg-type]


def _triton_cases() -> None:
    """``register_triton_op``'s keywords (opreg-kernels' ``TritonOpOptions``) are typed too."""
    from opreg_kernels import register_triton_op

    op: VmapOp[[torch.Tensor, int], torch.Tensor]
    op = register_triton_op(_f, fake_fn=_fake, triton_fn=_f, compiler_visible=True)
    op = register_triton_op(triton_fn="pkg.mod:launch", triton_device_types=("cuda",))(_f)
    register_triton_op(_f, fake_fn=_fake, triton_fn=3)  # type: ignore[call-overload]
    register_triton_op(_f, fake_fn=_fake, compiler_visible="yes")  # type: ignore[call-overload]
    op = register_triton_op(_f, fake_fn=_fake, triton_fn=_f, autocast="float32")
    register_triton_op(_f, fake_fn=_fake, triton_fn=_f, autocast=1)  # type: ignore[call-overload]
    register_triton_op(_f, fake_fn=_fake, triton_fnn=_f)  # type: ignore[call-overload]
    assert_type(op(torch.ones(2), 3), torch.Tensor)


def _option_types(op: VmapOp[[torch.Tensor, int], torch.Tensor]) -> None:
    """Every option has its declared type on the op's ``options`` (``VmapOpOptions``)."""
    assert_type(op.options["vmap_fn"], Callable[..., Any] | None)
    assert_type(op.options["differentiable"], bool)
    assert_type(op.vmap_out_dims, tuple[int | None, ...])
    not_an_int: int = op.options["vmap_fn"]  # type: ignore[assignment]
    del not_an_int
    op.options["no_such_option"]  # type: ignore[typeddict-item]
