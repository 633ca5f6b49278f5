"""The tested torch range gates the speed paths built on torch internals (``_versions``).

On a torch release outside ``TESTED_TORCH`` an op registered then takes none of them: its call
is the operator's entry point (the dispatcher's route, no direct call), its vmap rule always
dispatches the batched op (no fold of the levels, no twin without an autograd kernel, no
one-level pass), and its Function's graph node runs autograd's own ``apply``; the results are
the same, and ``fast_paths()`` says so. The tests simulate an untested release by flipping the
module's flag (and the version its reasons name) before registering a fresh op.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import torch
from torch.func import grad, vmap

import opreg_core
import opreg_core._batching as batching
from opreg_core import TESTED_TORCH, FastPath, fast_paths, register_vmap_op
from opreg_core import _versions as versions

_OPREG = str(Path(opreg_core.__file__).parent)
#: The tested range as the reasons write it (with an en dash).
RANGE = "2.11\u20132.15"
PATH_NAMES = [
    "direct call",
    "vmap short path",
    "vmap no-grad twin",
    "vmap one-level pass",
    "backward node call",
    "fake registration",
]


@pytest.fixture
def untested(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's torch seen as an untested release (2.16.0) from here on."""
    monkeypatch.setattr(versions, "TORCH_VERSION", "2.16.0")
    monkeypatch.setattr(versions, "TORCH_TESTED", False)


@pytest.fixture
def switches_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The vmap short paths' switches on (whatever ``OPREG_VMAP_*`` the run was started with)."""
    monkeypatch.setattr(batching, "short_path_enabled", True)
    monkeypatch.setattr(batching, "nograd_op_enabled", True)


# -- the range ----------------------------------------------------------------------------------


def test_the_running_torch_is_read_against_the_tested_range() -> None:
    assert torch.__version__ == versions.TORCH_VERSION
    assert versions.TORCH_TESTED is versions.in_range(torch.__version__, TESTED_TORCH)
    assert opreg_core.TESTED_TORCH == ((2, 11), (2, 15))


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("2.11.0", True),
        ("2.13.0+cpu", True),
        ("2.15.0+cu132", True),
        ("2.15.3", True),
        ("2.10.1", False),
        ("2.16.0", False),
        ("2.16.0a0+git1234", False),
        ("3.0.0", False),
        ("nightly", False),
    ],
)
def test_a_release_is_in_the_range_by_major_and_minor(version: str, expected: bool) -> None:
    assert versions.in_range(version, TESTED_TORCH) is expected


def test_release_and_range_text() -> None:
    assert versions.release("2.15.0+cu132") == (2, 15)
    assert versions.release("unknown") is None
    assert versions.range_text(TESTED_TORCH) == RANGE


# -- fast_paths() -------------------------------------------------------------------------------


def test_fast_paths_is_exported() -> None:
    assert "fast_paths" in opreg_core.__all__ and "FastPath" in opreg_core.__all__
    assert opreg_core.fast_paths is fast_paths


def test_on_a_tested_torch_every_fast_path_is_taken(switches_on: None) -> None:
    if not versions.TORCH_TESTED:
        pytest.skip(f"torch {torch.__version__} is outside the tested range")
    paths = fast_paths()
    assert [p.name for p in paths] == PATH_NAMES
    assert all(isinstance(p, FastPath) and p.taken for p in paths)
    expected = f"torch {torch.__version__} is tested ({RANGE})"
    assert {p.reason for p in paths} == {expected}


def test_on_an_untested_torch_no_fast_path_is_taken(untested: None, switches_on: None) -> None:
    paths = fast_paths()
    assert [p.name for p in paths] == PATH_NAMES
    assert not any(p.taken for p in paths)
    for p in paths:
        assert p.reason.startswith(f"torch 2.16.0 is untested (tested: {RANGE}): "), p
    reasons = {p.name: p.reason for p in paths}
    assert reasons["direct call"].endswith("the dispatcher's route (the operator's entry point)")
    assert reasons["backward node call"].endswith("autograd's BackwardCFunction.apply")


def test_a_switched_off_path_says_which_switch(
    switches_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not versions.TORCH_TESTED:
        pytest.skip(f"torch {torch.__version__} is outside the tested range")
    monkeypatch.setattr(batching, "short_path_enabled", False)
    paths = {p.name: p for p in fast_paths()}
    assert not paths["vmap short path"].taken
    assert "OPREG_VMAP_SHORT_PATH=0" in paths["vmap short path"].reason
    assert paths["vmap no-grad twin"].taken and paths["direct call"].taken


# -- ops registered on an untested torch ----------------------------------------------------------


def _square_op(ns: str, name: str, paths: list[str] | None = None) -> Any:
    """``x * x * w`` with a backward, a ``vmap_fn`` that notes how it was reached, and a jvp."""

    def vmap_fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if paths is not None:
            paths.append(_vmap_path())
        return x * x * w

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(*inputs)

    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, w = ctx.saved_tensors
        return 2 * g * x * w, g * x * x

    def jvp(ctx: Any, tx: Any, tw: Any) -> torch.Tensor:
        x, w = ctx.saved_tensors
        out = torch.zeros_like(x)
        out = out if tx is None else out + 2 * tx * x * w
        return out if tw is None else out + tw * x * x

    return register_vmap_op(
        lambda x, w: x * x * w,
        schema="(Tensor x, Tensor w) -> Tensor",
        name=f"{ns}::{name}",
        fake_fn=lambda x, w: torch.empty_like(x),
        vmap_fn=vmap_fn,
        fake_vmap_fn=lambda x, w: torch.empty_like(x),
        setup_context=setup,
        backward=backward,
        jvp=jvp,
    )


FOLD, TWIN, ONE_PASS, DISPATCHED = "fold", "twin", "one-level pass", "dispatched"


def _vmap_path() -> str:
    """How ``vmap_fn`` (its caller two frames up) was reached: by the fold of every level
    (no dispatcher; from the op's call or its batching kernel), by the one-level pass, by a
    rule that dispatched the batched op's twin without an autograd kernel, or by a rule that
    dispatched the batched op itself."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_name
        if name in {"_fold_and_call", "vmap_fold"}:  # every level's fold; one level's
            return FOLD
        if name == "_only_level":
            rules = frame.f_locals["self"]
            return TWIN if frame.f_locals.get("twin") and rules.nograd_op else ONE_PASS
        if name in {"op_rule", "batched_rule"}:
            rules = frame.f_locals["self"]
            op = frame.f_locals.get("op")
            return TWIN if op is not None and op is rules.nograd_op else DISPATCHED
        frame = frame.f_back
    return DISPATCHED


def _frames(call: Callable[[], Any]) -> list[str]:
    """The names of opreg's frames that ``call()`` runs."""
    calls: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(_OPREG):
            calls.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return calls


def test_the_call_of_an_op_registered_on_an_untested_torch_is_the_dispatchers(
    ns: str, untested: None
) -> None:
    op = _square_op(ns, "sq")
    assert op._state.call is op.overload._op  # no direct call: the entry point
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, dtype=torch.float64)
    out = op(x, w)
    torch.testing.assert_close(out, x * x * w)
    (g,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(g, 2 * x * w)
    # Through the dispatcher: the op's Autograd kernel records the call; the direct call's
    # frame ("call") never runs.
    frames = _frames(lambda: op(x, w))
    assert "call" not in frames and "kernel" in frames, frames
    with torch.no_grad():
        assert "call" not in _frames(lambda: op(x, w))


def test_the_same_op_on_a_tested_torch_takes_the_direct_call(ns: str, route: Any) -> None:
    """The counterpart of the test above, on this (tested) torch: the observation is real."""
    if not versions.TORCH_TESTED:
        pytest.skip(f"torch {torch.__version__} is outside the tested range")
    op = _square_op(ns, "sq")
    assert op._state.call is not op.overload._op
    x, w = torch.randn(3, requires_grad=True), torch.randn(3)
    taken, out = route(op, x, w)
    assert taken == "direct"
    torch.testing.assert_close(out, x * x * w)


def test_an_op_keeps_the_paths_it_was_registered_with(
    ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(versions, "TORCH_TESTED", False)
    op = _square_op(ns, "sq")
    monkeypatch.setattr(versions, "TORCH_TESTED", True)
    assert op._state.call is op.overload._op
    torch.testing.assert_close(op(torch.ones(2), torch.ones(2)), torch.ones(2))


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_vmap_on_an_untested_torch_dispatches_every_level(
    ns: str, switches_on: None, monkeypatch: pytest.MonkeyPatch, depth: int, requires_grad: bool
) -> None:
    """The same vmap, with the op registered on this torch and on an "untested" one: equal
    results (and gradients), and on the untested one neither the fold, the twin nor the
    one-level pass runs."""
    results = []
    seen: dict[bool, list[str]] = {}
    for tested in (True, False):
        monkeypatch.setattr(versions, "TORCH_TESTED", tested)
        paths: list[str] = []
        op = _square_op(ns, f"sq_{tested}", paths)
        f: Any = op
        for _ in range(depth):
            f = vmap(f, in_dims=(0, None))
        shape = (*(2, 3, 5)[:depth], 4)  # ``depth`` batch dims, then the sample's
        x = torch.linspace(-1, 1, math.prod(shape), dtype=torch.float64).reshape(shape)
        x.requires_grad_(requires_grad)
        w = torch.linspace(1, 2, 4, dtype=torch.float64)
        out = f(x, w)
        torch.testing.assert_close(out, x * x * w)
        grads = torch.autograd.grad(out.sum(), x) if requires_grad else ()
        results.append((out.detach(), grads))
        seen[tested] = paths
    (out_a, grads_a), (out_b, grads_b) = results
    torch.testing.assert_close(out_a, out_b, rtol=0, atol=0)
    for a, b in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert seen[False] and set(seen[False]) == {DISPATCHED}, seen
    if versions.in_range(torch.__version__, TESTED_TORCH) and not requires_grad:
        # On this torch the fast path ran for the op registered as tested: the op's call
        # folds every level, one included (the observation tells the paths apart).
        assert set(seen[True]) == {FOLD}, seen


def test_grad_of_vmap_and_jvp_on_an_untested_torch(ns: str, untested: None) -> None:
    op = _square_op(ns, "sq")
    x = torch.randn(2, 3, dtype=torch.float64)
    w = torch.randn(3, dtype=torch.float64)
    g = grad(lambda x: vmap(op, in_dims=(0, None))(x, w).sum())(x)
    torch.testing.assert_close(g, 2 * x * w)
    t = torch.randn(2, 3, dtype=torch.float64)
    out, tangent = torch.func.jvp(lambda x: op(x, w), (x,), (t,))
    torch.testing.assert_close(out, x * x * w)
    torch.testing.assert_close(tangent, 2 * t * x * w)


def test_the_graph_node_runs_autograds_own_apply_on_an_untested_torch(
    ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a tested torch the node of the op's Function calls its backward itself; on an
    untested one autograd's ``BackwardCFunction.apply`` does; same gradient."""
    own_apply = torch.autograd.function.BackwardCFunction.apply
    for tested in (True, False):
        monkeypatch.setattr(versions, "TORCH_TESTED", tested)
        op = _square_op(ns, f"sq_{tested}")
        x = torch.randn(3, dtype=torch.float64, requires_grad=True)
        w = torch.randn(3, dtype=torch.float64)
        out = op.overload(x, w)  # through the dispatcher: the op's Autograd kernel records
        node = type(out.grad_fn)
        assert (node.apply is own_apply) is (not tested), (tested, node.apply)
        (g,) = torch.autograd.grad(out.sum(), x)
        torch.testing.assert_close(g, 2 * x * w)


@pytest.fixture
def no_fast_paths_anywhere(untested: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Registration on an untested torch never probes the vmap level keys (a short-path
    internal): the probe is made to fail loudly if it runs."""

    def probe() -> None:
        raise AssertionError("the vmap level keys were probed on an untested torch")

    monkeypatch.setattr("opreg_core._build.vmap_level_keys", probe)


def test_registration_on_an_untested_torch_builds_no_fast_path(
    ns: str, no_fast_paths_anywhere: None
) -> None:
    """No twin operator and no probe of the level keys; nested vmap still computes."""
    op = _square_op(ns, "sq")
    operators = {r.operator for r in op.registrations}
    assert f"{ns}::sq__opreg_batched" in operators
    assert f"{ns}::sq__opreg_batched_nograd" not in operators
    x = torch.randn(2, 2, 3)
    torch.testing.assert_close(vmap(vmap(op))(x, x), x * x * x)
