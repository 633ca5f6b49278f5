"""Small building blocks: device names, throwaway namespaces, finding a module's ops."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types

import pytest
import torch
from torch import Tensor

from opreg_core import get_op, register_vmap_op
from opreg_testing import (
    INTERPRET_ENV,
    TRITON_CPU,
    available_devices,
    enable_interpreter,
    fresh_namespace,
    interpreter_enabled,
    ops_in,
    parametrize_ops,
)
from opreg_testing.devices import device_problem, parse_devices, torch_device


def test_available_devices_start_with_cpu() -> None:
    devices = available_devices()
    assert devices[0] == "cpu"
    assert ("cuda" in devices) == torch.cuda.is_available()


def test_parse_devices_accepts_lists_and_rejects_unknown_names() -> None:
    assert parse_devices(["cpu,cuda:1", " CPU ", TRITON_CPU]) == ("cpu", "cuda:1", TRITON_CPU)
    assert torch_device(TRITON_CPU) == torch.device("cpu")
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        parse_devices(["gpu"])
    with pytest.raises(ValueError, match="no device given"):
        parse_devices([" , "])


def test_fresh_namespace_removes_its_ops() -> None:
    def ident(x: Tensor) -> Tensor:
        return x.clone()

    with fresh_namespace("mytests") as ns:
        assert ns.name.startswith("mytests_")
        op = register_vmap_op(ident, fake_fn=torch.empty_like, name=ns.qualname("ident"))
        assert ns.ops() == (op,) and get_op(op.qualname) is op
    with pytest.raises(KeyError):
        get_op(op.qualname)
    with fresh_namespace() as other:
        assert other.name != ns.name
    with pytest.raises(ValueError, match="namespace prefix"), fresh_namespace("1bad"):
        pass


def test_enabling_the_interpreter_after_triton_was_imported_warns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # setenv, not delenv: monkeypatch undoes a delenv of an absent variable by doing nothing,
    # which left TRITON_INTERPRET=1 for the rest of the session (on a CUDA host, later
    # compiled kernels then ran through the interpreter)
    monkeypatch.setenv(INTERPRET_ENV, "")
    monkeypatch.setitem(
        sys.modules, "triton", sys.modules.get("triton") or types.ModuleType("triton")
    )
    with pytest.warns(RuntimeWarning, match="set after Triton was imported"):
        enable_interpreter()
    assert interpreter_enabled()


#: TRITON_INTERPRET values and whether they turn the interpreter on (Triton's rule: one of
#: 1/y/yes/true/on in any case, nothing stripped).
INTERPRET_VALUES = {
    "1": True,
    "y": True,
    "Y": True,
    "yes": True,
    "Yes": True,
    "true": True,
    "TRUE": True,
    "on": True,
    "oN": True,
    "": False,
    "0": False,
    "2": False,
    "no": False,
    "false": False,
    "off": False,
    "t": False,
    " 1": False,
    "1 ": False,
    "enable": False,
}


@pytest.mark.parametrize(("value", "expected"), INTERPRET_VALUES.items())
def test_interpreter_enabled_reads_the_variable_as_triton_does(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: bool
) -> None:
    monkeypatch.setenv(INTERPRET_ENV, value)
    assert interpreter_enabled() is expected
    monkeypatch.delenv(INTERPRET_ENV)
    assert not interpreter_enabled()


def test_interpreter_enabled_agrees_with_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    triton = pytest.importorskip("triton")
    runtime = triton.knobs.runtime
    if "interpret" in vars(runtime):
        pytest.skip("triton.knobs.runtime.interpret was set in code: it ignores the variable")
    monkeypatch.setenv(INTERPRET_ENV, "1")  # restored afterwards (setenv: it may be absent)
    for value in INTERPRET_VALUES:
        monkeypatch.setenv(INTERPRET_ENV, value)
        assert interpreter_enabled() is bool(runtime.interpret), repr(value)


def test_ops_in_finds_a_modules_ops() -> None:
    kernels = pytest.importorskip("opreg_kernels")
    names = {op.qualname for op in ops_in("opreg_kernels")}
    assert {"opreg::fused_add", "opreg::philox_uniform", "opreg::philox_normal"} <= names
    assert ops_in(kernels) == ops_in("opreg_kernels")
    with pytest.raises(ModuleNotFoundError):
        ops_in("no_such_module_anywhere")
    with pytest.raises(ValueError, match="registered no opreg op"):
        parametrize_ops("json")


def test_device_problem_names_devices_that_are_not_present() -> None:
    assert device_problem("cpu") is None
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    missing = "cuda" if count == 0 else f"cuda:{count}"
    assert f"device {missing!r} is not present" in str(device_problem(missing))
    triton = device_problem(TRITON_CPU)
    if importlib.util.find_spec("triton") is None:  # the no-Triton suite: the reason and the fix
        assert triton is not None
        assert "device 'triton-cpu' cannot run here: Triton is not installed" in triton
        assert "pip install 'opreg-kernels[triton]'" in triton
    else:
        assert triton is None or "device 'triton-cpu' cannot run here: " in triton


def test_importing_the_package_and_its_plugin_imports_no_torch() -> None:
    """The pytest11 entry point imports opreg_testing.plugin in every pytest run (finding 6)."""
    code = (
        "import sys, opreg_testing, opreg_testing.plugin\n"
        "print(sorted(m for m in ('torch', 'opreg_core', 'triton') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_type_checkers_imports_are_the_table_of_public_names() -> None:
    """``opreg_testing._EXPORTS`` declares each public name once (``__all__`` is derived from
    it); the ``TYPE_CHECKING`` block, which type checkers read instead, must import exactly
    those names from exactly those modules, each as an explicit re-export (``X as X``)."""
    import ast
    from pathlib import Path

    import opreg_testing

    tree = ast.parse(Path(opreg_testing.__file__).read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
    )
    imported: dict[str, str] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom), ast.dump(node)
        module = "." * node.level + (node.module or "")
        for alias in node.names:
            assert alias.asname == alias.name, f"{alias.name}: write `{alias.name} as {alias.name}`"
            imported[alias.name] = module
    assert imported == opreg_testing._EXPORTS
    assert opreg_testing.__all__ == [*opreg_testing._EXPORTS, "__version__"]


def test_every_public_name_resolves_and_compare_stays_the_function() -> None:
    import importlib

    import opreg_testing

    # Importing the submodule sets the package attribute `compare`: it must stay the function.
    compare_module = importlib.import_module("opreg_testing.compare")
    for name in opreg_testing.__all__:
        assert getattr(opreg_testing, name) is not None, name
    assert opreg_testing.compare is compare_module.compare
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        opreg_testing.nope  # noqa: B018
