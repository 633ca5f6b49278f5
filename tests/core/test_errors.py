"""Bad registrations and bad batching rules raise clear errors that name the op."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from opreg_core import register_vmap_op


def _f(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def _fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _two(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x, x


def _unannotated(x):  # type: ignore[no-untyped-def]
    return x


def _bad_type(x: torch.Tensor, d: dict[str, int]) -> torch.Tensor:
    return x


BAD: list[tuple[str, Callable[..., Any], dict[str, Any], type[Exception], str]] = [
    ("missing fake_fn", _f, {}, TypeError, "fake_fn must be a callable, got missing"),
    (
        "fake_fn not callable",
        _f,
        {"fake_fn": 3},
        TypeError,
        "fake_fn must be a callable, got a int",
    ),
    (
        "vmap_fn without fake_vmap_fn",
        _f,
        {"fake_fn": _fake, "vmap_fn": _f},
        TypeError,
        "vmap_fn needs fake_vmap_fn",
    ),
    (
        "fake_vmap_fn without vmap_fn",
        _f,
        {"fake_fn": _fake, "fake_vmap_fn": _fake},
        ValueError,
        "fake_vmap_fn is given but vmap_fn is not",
    ),
    (
        "vmap_wrap_inputs without vmap_fn",
        _f,
        {"fake_fn": _fake, "vmap_wrap_inputs": _f},
        ValueError,
        "vmap_wrap_inputs is given but vmap_fn is not",
    ),
    (
        "vmap_fn not callable",
        _f,
        {"fake_fn": _fake, "vmap_fn": "x", "fake_vmap_fn": _fake},
        TypeError,
        "vmap_fn must be a callable",
    ),
    (
        "name without namespace",
        _f,
        {"fake_fn": _fake, "name": "justname"},
        ValueError,
        "must have the form 'namespace::opname'",
    ),
    ("name not a string", _f, {"fake_fn": _fake, "name": 42}, TypeError, "name must be a string"),
    (
        "invalid characters in name",
        _f,
        {"fake_fn": _fake, "name": "my-lib::op"},
        ValueError,
        "namespace 'my-lib'",
    ),
    (
        "reserved namespace",
        _f,
        {"fake_fn": _fake, "name": "aten::my_add"},
        ValueError,
        "reserved for PyTorch",
    ),
    (
        "reserved suffix",
        _f,
        {"fake_fn": _fake, "name": "ns_ok::f__opreg_batched"},
        ValueError,
        "reserves for the batched operators",
    ),
    (
        "overload in name",
        _f,
        {"fake_fn": _fake, "name": "ns_ok::f.out"},
        ValueError,
        "must not name an overload",
    ),
    (
        "unannotated parameter",
        _unannotated,
        {"fake_fn": _fake},
        ValueError,
        "cannot build a schema.*must have a type annotation",
    ),
    (
        "unsupported parameter type",
        _bad_type,
        {"fake_fn": _fake},
        ValueError,
        "argument 'd' is annotated as a dict.*pass the values as separate arguments",
    ),
    (
        "invalid schema string",
        _f,
        {"fake_fn": _fake, "schema": "(Tensor x -> Tensor"},
        ValueError,
        "invalid schema",
    ),
    (
        "schema not a string",
        _f,
        {"fake_fn": _fake, "schema": 3},
        TypeError,
        "schema must be a string",
    ),
    (
        "mutates_args names a missing parameter",
        _f,
        {"fake_fn": _fake, "mutates_args": ["y"]},
        ValueError,
        "mutates_args names 'y', which is not a parameter",
    ),
    (
        "mutates_args of wrong type",
        _f,
        {"fake_fn": _fake, "mutates_args": [1]},
        TypeError,
        "mutates_args must be a string or a sequence of strings",
    ),
    (
        "zero max_vmap_level",
        _f,
        {"fake_fn": _fake, "vmap_fn": _f, "fake_vmap_fn": _fake, "max_vmap_level": 0},
        ValueError,
        "at least 1, got 0",
    ),
    (
        "negative max_vmap_level",
        _f,
        {"fake_fn": _fake, "vmap_fn": _f, "fake_vmap_fn": _fake, "max_vmap_level": -2},
        ValueError,
        "at least 1, got -2",
    ),
    (
        "float max_vmap_level",
        _f,
        {"fake_fn": _fake, "max_vmap_level": 1.5},
        TypeError,
        "max_vmap_level must be a positive int",
    ),
    (
        "vmap_out_dims arity",
        _two,
        {"fake_fn": _two, "vmap_fn": _two, "fake_vmap_fn": _two, "vmap_out_dims": (0, 0, 0)},
        ValueError,
        "vmap_out_dims has 3 entries but the op returns 2",
    ),
    (
        "vmap_out_dims type",
        _f,
        {"fake_fn": _fake, "vmap_out_dims": "0"},
        TypeError,
        "vmap_out_dims must be an int, None or a tuple",
    ),
    (
        "unknown device type",
        _f,
        {"fake_fn": _fake, "device_types": "npu_unknown"},
        ValueError,
        "device_types: device type 'npu_unknown' is not known",
    ),
    (
        "device_types of wrong type",
        _f,
        {"fake_fn": _fake, "device_types": [3]},
        TypeError,
        "device_types must be a string or a sequence",
    ),
    (
        "setup_context without backward",
        _f,
        {"fake_fn": _fake, "setup_context": _f},
        ValueError,
        "setup_context is given but backward is not",
    ),
    (
        "backward on a non-differentiable op",
        _f,
        {"fake_fn": _fake, "backward": _f, "differentiable": False},
        ValueError,
        "differentiable=False declares",
    ),
    (
        "differentiable not a bool",
        _f,
        {"fake_fn": _fake, "differentiable": "yes"},
        TypeError,
        "differentiable must be a bool",
    ),
    (
        "sample_inputs not callable",
        _f,
        {"fake_fn": _fake, "sample_inputs": [1]},
        TypeError,
        "sample_inputs must be a callable",
    ),
]


@pytest.mark.parametrize(
    ("fn", "kwargs", "exc", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_registration(
    ns: str, fn: Callable[..., Any], kwargs: dict[str, Any], exc: type[Exception], message: str
) -> None:
    kwargs = {"name": f"{ns}::op", **kwargs}
    with pytest.raises(exc, match=message) as info:
        register_vmap_op(fn, **kwargs)
    assert str(info.value).startswith("opreg: ")


def test_error_names_the_op(ns: str) -> None:
    with pytest.raises(TypeError, match=f"opreg: {ns}::op: fake_fn"):
        register_vmap_op(_f, name=f"{ns}::op")


def test_not_a_function() -> None:
    with pytest.raises(TypeError, match="expects a function"):
        register_vmap_op(3, fake_fn=_fake)  # type: ignore[call-overload]


def test_name_of_an_existing_non_opreg_op_is_refused(ns: str) -> None:
    lib = torch.library.Library(ns, "FRAGMENT")
    lib.define("taken(Tensor x) -> Tensor")
    with pytest.raises(
        ValueError, match=f"{ns}::taken already exists and was not registered by opreg"
    ):
        register_vmap_op(_f, fake_fn=_fake, name=f"{ns}::taken")
    lib._destroy()


def test_failed_registration_leaves_nothing_behind(
    ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("boom")

    with monkeypatch.context() as m:  # torch fails after the definition, at a kernel
        m.setattr(torch.library.Library, "impl", broken)
        with pytest.raises(RuntimeError, match="boom"):
            register_vmap_op(_f, fake_fn=_fake, name=f"{ns}::ok2")
    # the half-made definition was removed: the name is free again
    op = register_vmap_op(_f, fake_fn=_fake, name=f"{ns}::ok2")
    assert torch.equal(op(torch.zeros(1)), torch.ones(1))


def _vmap_op(ns: str, vmap_fn: Callable[..., Any], **kwargs: Any) -> Any:
    return register_vmap_op(
        _f, fake_fn=_fake, vmap_fn=vmap_fn, fake_vmap_fn=_fake, name=f"{ns}::op", **kwargs
    )


def test_vmap_fn_returning_wrong_batch_size_is_an_error(ns: str) -> None:
    op = _vmap_op(ns, lambda x: x[:1] + 1)
    with pytest.raises(
        RuntimeError, match=rf"{ns}::op: output 0 of vmap_fn has shape \(1, 3\).*size 4"
    ):
        torch.vmap(op)(torch.zeros(4, 3))


def test_vmap_fn_returning_wrong_batch_dim_is_an_error(ns: str) -> None:
    op = _vmap_op(ns, lambda x: (x + 1).t(), vmap_out_dims=0)
    with pytest.raises(
        RuntimeError,
        match=r"shape \(3, 4\): its batch dim 0 \(vmap_out_dims\) should have size 4 "
        r"\(the batch size\), got 3",
    ):
        torch.vmap(op)(torch.zeros(4, 3))


def test_vmap_fn_returning_wrong_number_of_outputs_is_an_error(ns: str) -> None:
    op = register_vmap_op(
        _two, fake_fn=_two, vmap_fn=lambda x: (x, x, x), fake_vmap_fn=_two, name=f"{ns}::two"
    )
    with pytest.raises(
        RuntimeError, match=f"{ns}::two: vmap_fn returned 3 outputs, the op declares 2 outputs"
    ):
        torch.vmap(op)(torch.zeros(4, 3))


def test_vmap_wrap_inputs_must_return_a_tuple(ns: str) -> None:
    op = _vmap_op(ns, _f, vmap_wrap_inputs=lambda info, dims, x: x)
    with pytest.raises(TypeError, match="vmap_wrap_inputs must return a tuple"):
        torch.vmap(op)(torch.zeros(4, 3))


def test_backward_returning_wrong_number_of_gradients(ns: str) -> None:
    op = register_vmap_op(_f, fake_fn=_fake, name=f"{ns}::op", backward=lambda ctx, g: (g, g))
    x = torch.zeros(3, requires_grad=True)
    with pytest.raises(
        RuntimeError, match=f"{ns}::op: backward returned 2 gradients, expected one per input"
    ):
        op(x).sum().backward()


@pytest.mark.parametrize(
    "bad", [lambda x: (x, x, x), lambda x: x, lambda x: [x]], ids=["three", "tensor", "list of one"]
)
def test_kernels_of_multi_output_ops_returning_wrong_arity(
    ns: str, bad: Callable[..., Any]
) -> None:
    """PyTorch itself crashes on a Python kernel's tuple of the wrong length; opreg checks."""
    op = register_vmap_op(
        bad, fake_fn=_two, name=f"{ns}::two", schema="(Tensor x) -> (Tensor, Tensor)"
    )
    with pytest.raises(
        RuntimeError, match=f"{ns}::two: the function returned .*declares 2 outputs"
    ):
        op(torch.zeros(2))
    good = register_vmap_op(_two, fake_fn=bad, name=f"{ns}::two2")
    with pytest.raises(RuntimeError, match="fake_fn returned"):
        torch.compile(good, fullgraph=True, backend="eager")(torch.zeros(2))
    good.register_kernel("cpu", bad)
    with pytest.raises(RuntimeError, match="the cpu kernel returned"):
        good(torch.zeros(2))


def test_backward_that_needs_a_setup_context_gets_a_clear_error(ns: str) -> None:
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors  # nothing was saved: no setup_context
        return g * x

    op = register_vmap_op(_f, fake_fn=_fake, name=f"{ns}::op", backward=backward)
    x = torch.ones(3, requires_grad=True)
    with pytest.raises(
        RuntimeError, match=f"{ns}::op: backward raised ValueError.*without setup_context"
    ):
        op(x).sum().backward()


def test_the_setup_context_hint_after_the_function_settled(ns: str) -> None:
    """A backward that fails only after one passed (the op's Function has settled, see
    ``DirectRecord.function_for``) gets the same hint."""
    calls = [0]

    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        calls[0] += 1
        if calls[0] == 1:
            return g
        (x,) = ctx.saved_tensors  # nothing was saved: no setup_context
        return g * x

    op = register_vmap_op(_f, fake_fn=_fake, name=f"{ns}::op", backward=backward)
    x = torch.ones(3, requires_grad=True)
    op(x).sum().backward()
    with pytest.raises(
        RuntimeError, match=f"{ns}::op: backward raised ValueError.*without setup_context"
    ):
        op(x).sum().backward()
    assert calls[0] == 2


def test_a_backward_error_unrelated_to_ctx_gets_no_setup_context_hint(ns: str) -> None:
    """Only errors that reading an empty ctx raises get the setup_context hint."""

    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("Cannot access storage of TensorWrapper")

    op = register_vmap_op(_f, fake_fn=_fake, name=f"{ns}::op", backward=backward)
    x = torch.ones(3, requires_grad=True)
    with pytest.raises(NotImplementedError, match="TensorWrapper") as info:
        op(x).sum().backward()
    assert "setup_context" not in str(info.value)
