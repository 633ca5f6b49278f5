"""Each documented torch limit that the sweep files under ``torch_cant`` happens without opreg:
with plain torch or a ``torch.library.custom_op`` built the same way, and its message matches
the pattern the sweep recognises it by. The sweep's own classification is tested too."""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as fwAD

from opreg_testing import fresh_namespace

from .outcomes import EXPANDED_INPUT, TORCH_LIMITS, Pattern, classify_raise, compare_run

LIMITS = {p.key: p for p in TORCH_LIMITS}


def _raises(fn: object) -> BaseException:
    try:
        fn()  # type: ignore[operator]
    except Exception as exc:
        return exc
    raise AssertionError("expected torch to raise")


def _matches(limit: Pattern, exc: BaseException, case: str) -> bool:
    return limit.matches(f"{type(exc).__name__}: {exc}", case)


def test_func_jvp_inside_a_dual_level() -> None:
    x = torch.randn(3, dtype=torch.float64)

    def nested() -> None:
        with fwAD.dual_level():
            torch.func.jvp(torch.sin, (x,), (torch.ones_like(x),))

    limit = LIMITS["func.jvp-inside-dual_level"]
    assert _matches(limit, _raises(nested), "check_op:autograd")


def test_vmap_inside_a_custom_op_under_compile() -> None:
    with fresh_namespace("opinfo_limit") as ns:
        qualname = ns.qualname("vmapped_sin")

        @torch.library.custom_op(qualname, mutates_args=())
        def vmapped_sin(x: torch.Tensor) -> torch.Tensor:
            return torch.vmap(torch.sin)(x)

        vmapped_sin.register_fake(lambda x: torch.empty_like(x))
        x = torch.randn(3, 4)
        torch.testing.assert_close(vmapped_sin(x), x.sin())  # eager works
        compiled = torch.compile(lambda x: vmapped_sin(x), backend="aot_eager", fullgraph=True)
        exc = _raises(lambda: compiled(x))
        from .build import destroy_twin

        destroy_twin(vmapped_sin)
    assert _matches(LIMITS["vmap-inside-custom-op-under-compile"], exc, "check_op:compile")


def test_native_op_outside_its_domain() -> None:
    a = -torch.eye(3, dtype=torch.float64)  # not positive-definite
    exc = _raises(lambda: torch.linalg.cholesky(a))
    message = f"problem: the op on one batch entry raised {type(exc).__name__}: {exc}"
    assert LIMITS["batch-entry-outside-domain"].matches(message, "check_op:vmap")
    assert not LIMITS["batch-entry-outside-domain"].matches(message, "vmap(in_dims=0)")


def test_compare_run_classifies() -> None:
    def boom() -> None:
        raise RuntimeError("nope")

    one = torch.ones(2)
    assert compare_run("op", 0, "eager", lambda: one, lambda: one).category == "pass"
    assert compare_run("op", 0, "eager", lambda: one, lambda: one * 2).category == "silent_mismatch"
    assert compare_run("op", 0, "eager", lambda: one, boom).category == "opreg_raises"
    assert compare_run("op", 0, "eager", boom, boom).category == "torch_cant"
    assert compare_run("op", 0, "eager", boom, lambda: one).category == "torch_cant"
    nan = torch.tensor([float("nan")])
    assert compare_run("op", 0, "eager", lambda: nan, lambda: nan.clone()).category == "pass"


def test_known_defect_patterns() -> None:
    a = RuntimeError('savedLocalDispatchKeySet_.has_value() INTERNAL ASSERT FAILED at "x"')
    assert classify_raise(a, "jvp") == ("opreg_raises", "a:jvp-rule-uses-torch.func", "")
    b = RuntimeError("Expected X.is_contiguous(memory_format) to be true, but got false.")
    assert classify_raise(b, "grad(vmap)") == ("opreg_raises", "b:grad-vmap-expanded-input", "")
    # The same message elsewhere is not defect b (expanded inputs there are found by evidence).
    assert classify_raise(b, "vmap(in_dims=0)") == ("opreg_raises", "", "")
    assert EXPANDED_INPUT.key.startswith("c:")


def test_opcheck_counts_equal_nan_gradients_as_different() -> None:
    """torch.library.opcheck's test_aot_dispatch_dynamic compares gradients with
    torch.testing.assert_close (equal_nan=False): an op whose gradient is NaN (special.entr
    at a negative input) fails it even though eager and AOT give the same NaNs."""
    with fresh_namespace("opinfo_limit") as ns:
        qualname = ns.qualname("entr")

        @torch.library.custom_op(qualname, mutates_args=())
        def entr(x: torch.Tensor) -> torch.Tensor:
            return torch.special.entr(x)

        entr.register_fake(lambda x: torch.empty_like(x))

        def setup(ctx: object, inputs: tuple[torch.Tensor], output: torch.Tensor) -> None:
            ctx.save_for_backward(inputs[0])  # type: ignore[attr-defined]

        def backward(ctx: object, g: torch.Tensor) -> torch.Tensor:
            (x,) = ctx.saved_tensors  # type: ignore[attr-defined]
            return -g * (torch.log(x) + 1)

        entr.register_autograd(backward, setup_context=setup)
        x = torch.tensor([-1.0, 0.5, 2.0], dtype=torch.float64, requires_grad=True)
        result = torch.library.opcheck(
            entr, (x,), test_utils="test_aot_dispatch_dynamic", raise_exception=False
        )
        from .build import destroy_twin

        destroy_twin(entr)
    outcome = result["test_aot_dispatch_dynamic"]
    assert isinstance(outcome, AssertionError)
    assert "Gradients of the operator are different" in str(outcome)


def _split(x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(o.clone() for o in torch.tensor_split(x, idx))


def _hand_fake(x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
    ctx = torch.library.get_ctx()
    return tuple(x.new_empty((ctx.new_dynamic_size(), *x.shape[1:])) for _ in range(len(idx) + 1))


def test_native_fake_of_a_data_dependent_output() -> None:
    """tensor_split at tensor indices: a custom_op whose fake is the native op raises under
    torch.compile; the same op with a fake made of new_dynamic_size() compiles, as an opreg op
    and as a custom_op (so it is the generic fake, not opreg)."""
    from opreg_core import register_vmap_op

    from .build import destroy_twin

    schema = "(Tensor x, Tensor idx) -> (Tensor, Tensor, Tensor, Tensor)"
    x, idx = torch.randn(5, 5, 5, dtype=torch.float64), torch.tensor([1, 3, 4])
    with fresh_namespace("opinfo_limit") as ns:
        twin = torch.library.custom_op(ns.qualname("split"), _split, mutates_args=(), schema=schema)
        twin.register_fake(_split)
        compiled = torch.compile(lambda x, i: twin(x, i), backend="aot_eager", fullgraph=True)
        exc = _raises(lambda: compiled(x, idx))
        destroy_twin(twin)
        op = register_vmap_op(
            _split, name=ns.qualname("op"), schema=schema, fake_fn=_hand_fake, differentiable=False
        )
        compiled = torch.compile(lambda x, i: op(x, i), backend="aot_eager", fullgraph=True)
        for got, want in zip(compiled(x, idx), _split(x, idx), strict=True):
            torch.testing.assert_close(got, want)
    assert _matches(LIMITS["native-fake-of-data-dependent-output"], exc, "compile(aot_eager)")
