"""A name registered again: quietly by the same definition (a re-run cell), with a warning and
stale handles that raise when another definition takes it over (issue 37, item 3)."""

from __future__ import annotations

import types
import warnings

import pytest
import torch

from opreg_core import OpRedefinedWarning, VmapOp, get_op, register_vmap_op


def _define(module: str, name: str, body: str) -> types.FunctionType:
    """A function ``name`` defined in a module named ``module`` (as another file would)."""
    namespace: dict[str, object] = {"torch": torch, "__name__": module}
    source = f"def {name}(x: torch.Tensor, t: float) -> torch.Tensor:\n    return {body}\n"
    exec(compile(source, f"/src/{module}.py", "exec"), namespace)
    fn = namespace[name]
    assert isinstance(fn, types.FunctionType)
    return fn


def _register(ns: str, fn: types.FunctionType) -> VmapOp[..., torch.Tensor]:
    return register_vmap_op(
        fn, name=f"{ns}::soft_threshold", fake_fn=lambda x, t: torch.empty_like(x)
    )


def test_the_same_definition_again_replaces_quietly_and_old_handles_follow(ns: str) -> None:
    x = torch.randn(5)
    first = _register(ns, _define("mylib.ops", "soft_threshold", "x + t"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a re-run cell warns of nothing
        second = _register(ns, _define("mylib.ops", "soft_threshold", "x * t"))
    torch.testing.assert_close(first(x, 2.0), x * 2.0)
    torch.testing.assert_close(second(x, 2.0), x * 2.0)


@pytest.mark.parametrize(
    ("module", "name"), [("other.ops", "soft_threshold"), ("mylib.ops", "soft_threshold_v2")]
)
def test_a_takeover_from_elsewhere_warns_naming_both_definitions(
    ns: str, module: str, name: str
) -> None:
    _register(ns, _define("mylib.ops", "soft_threshold", "x + t"))
    with pytest.warns(OpRedefinedWarning) as record:
        _register(ns, _define(module, name, "torch.zeros_like(x)"))
    assert len(record) == 1
    message = str(record[0].message)
    assert "\n" not in message
    assert f"{ns}::soft_threshold" in message
    assert f"{module}:{name} (/src/{module}.py:1)" in message
    assert "mylib.ops:soft_threshold (/src/mylib.ops.py:1)" in message
    assert issubclass(OpRedefinedWarning, UserWarning)


def test_after_a_takeover_the_old_handle_raises_naming_the_new_definition(ns: str) -> None:
    x = torch.randn(5)
    old = _register(ns, _define("mylib.ops", "soft_threshold", "x + t"))
    torch.testing.assert_close(old(x, 1.0), x + 1.0)
    with pytest.warns(OpRedefinedWarning):
        new = _register(ns, _define("other.ops", "soft_threshold", "torch.zeros_like(x)"))
    for call in (lambda: old(x, 1.0), lambda: torch.vmap(old, in_dims=(0, None))(x, 1.0)):
        with pytest.raises(RuntimeError, match=f"^opreg: {ns}::soft_threshold: .*replaced by "
                           r"other\.ops:soft_threshold"):  # fmt: skip
            call()
    torch.testing.assert_close(new(x, 1.0), torch.zeros_like(x))  # the new op works
    assert get_op(f"{ns}::soft_threshold") is new
    assert old.fallback is not new.fallback  # the old handle still describes its own op
    # The stale handle stays stale when the first definition comes back (its cell re-run).
    with pytest.warns(OpRedefinedWarning):
        again = _register(ns, _define("mylib.ops", "soft_threshold", "x - t"))
    torch.testing.assert_close(again(x, 1.0), x - 1.0)
    with pytest.raises(RuntimeError, match="was replaced by"):
        old(x, 1.0)
