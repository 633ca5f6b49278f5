"""Each keyword of ``register_vmap_op`` and ``register_triton_op`` is declared once, in its
options ``TypedDict``; the name check, the default and the op's attribute follow from it.

The flow tests add a keyword the way a developer does, one field in the declaration's source,
then register ops in a fresh interpreter that imports that copy of the packages.
"""

import ast
import inspect
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
import torch
from torch._ops import OpOverload

import opreg_core
import opreg_kernels
from opreg_core import Default, VmapOp, VmapOpOptions, option_values, register_vmap_op
from opreg_core._options import OpSpec


class _Options(TypedDict, total=False):
    plain: int | None
    scaled: Annotated[float, Default(2.0)]
    listed: Annotated[tuple[str, ...], "other metadata", Default(("a",))]


def test_option_values_fill_in_the_declared_defaults() -> None:
    assert option_values(_Options, {}, "f") == {"plain": None, "scaled": 2.0, "listed": ("a",)}
    assert option_values(_Options, {"scaled": 3.0, "plain": 1}, "f") == {
        "plain": 1,
        "scaled": 3.0,
        "listed": ("a",),
    }


@pytest.mark.parametrize(
    ("keyword", "message"),
    [
        ("scaeld", r"^f\(\) got an unexpected keyword argument 'scaeld'; did you mean 'scaled'\?$"),
        ("zzz", r"^f\(\) got an unexpected keyword argument 'zzz'$"),
    ],
)
def test_option_values_refuse_an_undeclared_keyword_naming_the_caller(
    keyword: str, message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        option_values(_Options, {"plain": 1, keyword: 1}, "f")


def test_a_declaration_with_string_annotations_is_refused_clearly() -> None:
    """Postponed annotations would hide the defaults: an error, never a default of None."""
    namespace: dict[str, Any] = {}
    exec(
        "from __future__ import annotations\n"
        "from typing import Annotated, TypedDict\n"
        "from opreg_core import Default\n"
        "class Late(TypedDict, total=False):\n"
        "    scaled: Annotated[float, Default(2.0)]\n",
        namespace,
    )
    with pytest.raises(TypeError, match=r"Late\.scaled: the annotation is a string.*__future__"):
        option_values(namespace["Late"], {}, "f")


def test_the_op_carries_every_option_but_name_under_its_own_name(ns: str) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    def fake(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    op = register_vmap_op(fn, fake_fn=fake, name=f"{ns}::inc", mutates_args=[])
    declared = set(VmapOpOptions.__optional_keys__)
    assert set(op.options) == declared - {"name"}  # the op's resolved options (its OpState's)
    shown = {label: getattr(op, label) for label in op.options if label != "sharding"}
    assert all(shown[label] is op.options[label] for label in shown)  # type: ignore[literal-required]
    assert callable(op.name)  # OpOverload's own name() stays
    # The normalised options; the others as given or their defaults.
    assert (op.vmap_out_dims, op.mutates_args, op.device_types) == ((0,), (), None)
    assert op.schema == "(Tensor x) -> Tensor" and op.fake_fn is fake
    assert op.differentiable is True and op.vmap_fn is None and op.sharding is None
    # Type checkers see each option's type in ``op.options`` (a ``VmapOpOptions``); the op's
    # documented attributes are also typed on VmapOp, for them alone (the interpreter reads
    # them from ``options``). A new keyword needs no annotation there, but none may be stale.
    source = Path(inspect.getfile(VmapOp)).read_text()
    cls = next(
        n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == "VmapOp"
    )
    typed = {
        n.target.id
        for block in cls.body
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
        for n in block.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }
    stale = {name for name in typed if not hasattr(VmapOp, name)}  # e.g. a removed option
    assert not stale, stale


def test_no_option_hides_a_field_of_the_spec_or_a_member_of_the_op() -> None:
    """The op and the spec carry each option as an attribute of its name: none may take the
    name of something else they have (``name`` is OpOverload's ``name()``: it is not set)."""
    options = set(VmapOpOptions.__optional_keys__) - {"name"}
    assert not options & set(OpSpec.__slots__)
    # The op's attribute of each option is made from the declaration (a property reading
    # ``op.options``): none may shadow what the op is as an ``OpOverload``. ``sharding``: the
    # op shows the rule in force, resolved (``register_sharding_rule`` may replace it);
    # ``op.options["sharding"]`` is what was given.
    assert not options & set(dir(OpOverload))
    assert options <= set(dir(VmapOp))


def _copy_with_field(tmp_path: Path, package: Path, module: str, cls: str, field: str) -> None:
    """Copy ``package`` under ``tmp_path``, with ``field`` added at the end of class ``cls``
    in its ``module``: the one edit that adds a keyword."""
    target = tmp_path / package.name
    shutil.copytree(package, target, ignore=shutil.ignore_patterns("__pycache__"))
    source = (target / module).read_text()
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == cls)
    lines = source.splitlines(keepends=True)
    lines.insert(node.end_lineno or 0, textwrap.indent(textwrap.dedent(field), "    "))
    (target / module).write_text("".join(lines))


#: What each interpreter of the flow tests starts with: an op and a way to catch a refusal.
_OPS = """
import os
import torch
def fn(x: torch.Tensor) -> torch.Tensor:
    return x + 1
def fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)
def refused(call):
    try:
        call()
    except TypeError as exc:
        return str(exc)
    raise AssertionError("not refused")
"""


def _run(tmp_path: Path, script: str) -> None:
    """Run ``_OPS`` and ``script`` in a fresh interpreter that imports the copy."""
    result = subprocess.run(
        [sys.executable, "-c", _OPS + textwrap.dedent(script)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path), "OPREG_DISABLE_TRITON": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("ok"), result.stdout


def test_a_keyword_declared_in_vmap_op_options_flows_to_the_op(tmp_path: Path) -> None:
    _copy_with_field(
        tmp_path,
        Path(opreg_core.__file__).parent,
        "_options.py",
        "VmapOpOptions",
        '''
        autocast_probe: Annotated[int, Default(7)]
        """A keyword added by the test, in this one place."""
        ''',
    )
    _run(
        tmp_path,
        """
        import opreg_core
        from opreg_core import register_vmap_op
        from opreg_core._options import resolve
        assert opreg_core.__file__.startswith(os.getcwd()), opreg_core.__file__
        op = register_vmap_op(fn, fake_fn=fake, name="decl::a")
        assert op.autocast_probe == 7
        assert resolve(fn, {"fake_fn": fake}).options["autocast_probe"] == 7
        op = register_vmap_op(fake_fn=fake, name="decl::b", autocast_probe=3)(fn)
        assert op.autocast_probe == 3 and torch.equal(op(torch.zeros(1)), torch.ones(1))
        message = refused(lambda: register_vmap_op(fn, fake_fn=fake, autocast_prob=3))
        assert message == (
            "register_vmap_op() got an unexpected keyword argument 'autocast_prob'; "
            "did you mean 'autocast_probe'?"
        ), message
        print("ok")
        """,
    )


def test_a_keyword_declared_in_triton_op_options_is_taken_by_register_triton_op(
    tmp_path: Path,
) -> None:
    shutil.copytree(
        Path(opreg_core.__file__).parent,
        tmp_path / "opreg_core",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    _copy_with_field(
        tmp_path,
        Path(opreg_kernels.__file__).parent,
        "_register.py",
        "TritonOpOptions",
        '''
        triton_probe: Annotated[int, Default(5)]
        """A keyword added by the test, in this one place."""
        ''',
    )
    _run(
        tmp_path,
        """
        import opreg_kernels
        from opreg_kernels import register_triton_op
        from opreg_kernels._register import _split_options
        assert opreg_kernels.__file__.startswith(os.getcwd()), opreg_kernels.__file__
        triton, core = _split_options({"fake_fn": fake, "triton_fn": fn})
        assert triton["triton_probe"] == 5 and core == {"fake_fn": fake}
        triton, core = _split_options({"fake_fn": fake, "triton_probe": 2})
        assert triton["triton_probe"] == 2 and "triton_probe" not in core
        # Taken by register_triton_op, not forwarded (register_vmap_op would refuse it).
        op = register_triton_op(
            fn, fake_fn=fake, triton_fn=fn, triton_device_types=(), name="decl::t", triton_probe=2
        )
        assert torch.equal(op(torch.zeros(1)), torch.ones(1))
        for call in (
            lambda: register_triton_op(fn, fake_fn=fake, triton_fn=fn, triton_prob=2),
            lambda: register_triton_op(fake_fn=fake, triton_fn=fn, triton_prob=2),
        ):
            message = refused(call)
            assert message == (
                "register_triton_op() got an unexpected keyword argument 'triton_prob'; "
                "did you mean 'triton_probe'?"
            ), message
        print("ok")
        """,
    )
