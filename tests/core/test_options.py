"""The keyword options of ``register_vmap_op``, ``device_type_name`` and ``VmapOp.extensions``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import opreg_core
from opreg_core import VmapOpOptions, device_type_name, register_vmap_op


def _fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _register(ns: str, opname: str = "inc", **options: Any) -> opreg_core.VmapOp[Any, Any]:
    return register_vmap_op(
        lambda x: x + 1,
        fake_fn=_fake,
        name=f"{ns}::{opname}",
        schema="(Tensor x) -> Tensor",
        **options,
    )


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        (" CUDA:1 ", "cuda"),
        ("cpu", "cpu"),
        ("Meta", "meta"),
        ("privateuseone:0", "privateuseone"),
        (torch.device("cuda", 0), "cuda"),
        (torch.device("cpu"), "cpu"),
    ],
)
def test_device_type_name_normalises(device: str | torch.device, expected: str) -> None:
    assert device_type_name(device) == expected


@pytest.mark.parametrize("device", [0, None, b"cuda", ["cpu"]])
def test_device_type_name_refuses_other_types_naming_them(device: Any) -> None:
    with pytest.raises(TypeError, match=type(device).__name__):
        device_type_name(device)


@pytest.mark.parametrize(
    ("keyword", "message"),
    [
        ("fake_fnn", "unexpected keyword argument 'fake_fnn'; did you mean 'fake_fn'\\?"),
        (
            "vmap_outdims",
            "unexpected keyword argument 'vmap_outdims'; did you mean 'vmap_out_dims'\\?",
        ),
        ("zzz", "unexpected keyword argument 'zzz'$"),
    ],
)
def test_unknown_keyword_is_a_type_error_with_the_nearest_option(
    ns: str, keyword: str, message: str
) -> None:
    with pytest.raises(TypeError, match=f"^register_vmap_op\\(\\) got an {message}"):
        _register(ns, **{keyword: _fake})
    with pytest.raises(TypeError, match=message):  # the decorator form refuses it at once
        register_vmap_op(fake_fn=_fake, **{keyword: _fake})  # type: ignore[call-overload]
    assert f"{ns}::inc" not in {op.qualname for op in opreg_core.registered_ops()}


def test_options_typed_dict_lists_every_keyword() -> None:
    assert VmapOpOptions.__optional_keys__ == frozenset(VmapOpOptions.__annotations__)
    assert set(VmapOpOptions.__annotations__) == {
        "fake_fn",
        "vmap_fn",
        "fake_vmap_fn",
        "vmap_wrap_inputs",
        "vmap_out_dims",
        "max_vmap_level",
        "name",
        "mutates_args",
        "device_types",
        "schema",
        "backward",
        "setup_context",
        "jvp",
        "differentiable",
        "sample_inputs",
        "sharding",
        "autocast",
    }


def test_options_forwarded_as_a_dict_register_the_same_op(ns: str) -> None:
    options: VmapOpOptions = {
        "fake_fn": _fake,
        "differentiable": False,
        "vmap_out_dims": 0,
        "name": f"{ns}::double",
        "schema": "(Tensor x) -> Tensor",
    }
    op = register_vmap_op(lambda x: x * 2, **options)
    assert op.differentiable is False and op.vmap_out_dims == (0,)
    assert torch.equal(op(torch.ones(2)), torch.full((2,), 2.0))


def test_extensions_start_empty_per_registration_and_follow_reregistration(ns: str) -> None:
    first = _register(ns)
    assert first.extensions == {}
    first.extensions["tests.marker"] = 1
    second = _register(ns)
    assert second.extensions == {}
    assert first.extensions is second.extensions  # the earlier handle is the live op
    second.extensions["tests.marker"] = 2
    assert first.extensions == {"tests.marker": 2}


def test_unregister_drops_the_extensions(ns: str) -> None:
    op = _register(ns)
    op.extensions["tests.marker"] = object()
    opreg_core.unregister(op.qualname)
    assert op.extensions == {}
    assert _register(ns).extensions == {}


def test_typing_cases_pass_mypy_strict() -> None:
    """``typing_cases.py`` type-checks, and mypy rejects each wrong keyword it marks."""
    api = pytest.importorskip("mypy.api")
    root = Path(__file__).parents[2]
    cases = Path(__file__).with_name("typing_cases.py")
    out, err, status = api.run(
        ["--strict", "--config-file", str(root / "pyproject.toml"), str(cases)]
    )
    assert status == 0, out + err


def test_a_device_index_is_refused_where_a_device_type_is_expected(ns: str) -> None:
    """A kernel serves every device of its type: ``"cpu:0"`` is an error, not silently "cpu"."""
    op = _register(ns)
    with pytest.raises(ValueError, match=f"{ns}::inc: register_kernel: .*'cpu:0'.*device index"):
        op.register_kernel("cpu:0", lambda x: x)
    with pytest.raises(ValueError, match=f"{ns}::dev: device_types: .*device index"):
        _register(ns, "dev", device_types=("cpu:1",))
    handle = op.register_kernel(" CPU ", lambda x: x + 10)
    assert handle.device_type == "cpu" and op.kernel_device_types == frozenset({"cpu"})
