"""One owner per op: everything a registration holds lives in its ``OpState``; the op object
holds one reference to it, which a re-registration swaps, and nothing else writes to it. (An
option is one declaration and its consumer: ``test_options_declaration.py``.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from opreg_core import VmapOp, register_vmap_op

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "packages").glob("*/src/*/**/*.py"))


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def _fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def test_every_option_is_an_attribute_of_the_op(ns: str) -> None:
    op = register_vmap_op(_double, fake_fn=_fake, name=f"{ns}::double", mutates_args=())
    for name, value in op.options.items():
        assert getattr(op, name) is value
    assert "name" not in op.options and op.qualname == f"{ns}::double"
    assert op.vmap_out_dims == (0,) and op.mutates_args == () and op.device_types is None
    with pytest.raises(AttributeError, match="no_such_attribute"):
        op.no_such_attribute  # type: ignore[attr-defined]  # noqa: B018


def test_a_re_registration_swaps_the_one_reference(ns: str) -> None:
    first = register_vmap_op(_double, fake_fn=_fake, name=f"{ns}::again")
    old_state = first._state
    second = register_vmap_op(_double, fake_fn=_fake, name=f"{ns}::again")
    assert first._state is second._state is not old_state
    assert type(first) is type(second) is VmapOp  # no class of its own, no patched __call__
    assert "__call__" not in vars(first) and "__call__" not in vars(VmapOp).get("__dict__", {})
    x = torch.ones(3)
    assert torch.equal(first(x), x * 2) and torch.equal(second(x), x * 2)
    assert first.overload is second.overload


def _dict_writes(path: Path) -> list[str]:
    """Where ``path`` writes to an object's ``__dict__`` (``x.__dict__[...] =``,
    ``x.__dict__.update``, ``vars(x).update``) or patches a class's ``__call__``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        text = ast.unparse(node) if isinstance(node, ast.expr | ast.stmt) else ""
        if isinstance(node, ast.Call) and (
            (text.startswith("setattr(") and "__call__" in text)
            or ".__dict__.update(" in text.split("\n")[0]
            or (text.startswith("vars(") and ".update(" in text)
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text[:60]}")
        if isinstance(node, ast.Assign) and any(
            "__dict__[" in ast.unparse(t) for t in node.targets
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text[:60]}")
    return found


def test_no_module_writes_to_an_op_but_its_constructor() -> None:
    """Only ``VmapOp._adopt`` (which its constructor ``_create`` and a re-registration call)
    writes an op's ``__dict__``; ``new_op_object`` takes the operator's state for it."""
    writes = [w for path in SOURCES for w in _dict_writes(path)]
    allowed = ("_op.py", "_private")
    assert [w for w in writes if not any(a in w.split(":")[0] for a in allowed)] == []
    in_op = [w for w in writes if w.split(":")[0].endswith("_op.py")]
    assert len(in_op) == 2  # both in VmapOp._adopt
