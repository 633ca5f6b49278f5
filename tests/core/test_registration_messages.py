"""Registration errors for argument types an author might try: one line naming the op, the
argument and the fix, without torch's list of valid types or its log lines (issue 37, item 5).
"""

from __future__ import annotations

import logging
from typing import Any, Optional

import pytest
import torch
from torch import Tensor

from opreg_core import register_vmap_op


def generator(x: Tensor, gen: torch.Generator) -> Tensor:
    return x


def optional_generator(x: Tensor, gen: Optional[torch.Generator] = None) -> Tensor:  # noqa: UP045
    return x


def plain_dict(x: Tensor, opts: dict) -> Tensor:  # type: ignore[type-arg]
    return x


def tensor_dict(x: Tensor, opts: dict[str, Tensor]) -> Tensor:
    return x


def int_tuple(x: Tensor, size: tuple[int, int]) -> Tensor:
    return x


def optional_tuple(x: Tensor, size: tuple[int, ...] | None = None) -> Tensor:
    return x


CASES = [
    (generator, "gen", "is a torch.Generator", "take an int seed"),
    (optional_generator, "gen", "is a torch.Generator", "docs/writing-an-op.md"),
    (plain_dict, "opts", "is annotated as a dict", "pass the values as separate arguments"),
    (tensor_dict, "opts", "is annotated as a dict", "list[Tensor]"),
    (int_tuple, "size", "is annotated as a tuple", "pass the values as separate arguments"),
    (optional_tuple, "size", "is annotated as a tuple", "list[int]"),
]


@pytest.mark.parametrize(("fn", "arg", "what", "fix"), CASES, ids=[c[0].__name__ for c in CASES])
def test_a_refused_annotation_is_one_line_naming_op_argument_and_fix(
    ns: str, caplog: pytest.LogCaptureFixture, fn: Any, arg: str, what: str, fix: str
) -> None:
    name = f"{ns}::refused"
    with caplog.at_level(logging.DEBUG), pytest.raises(ValueError) as info:
        register_vmap_op(fn, fake_fn=fn, name=name)
    message = str(info.value)
    assert message.startswith(f"opreg: {name}: argument '{arg}' {what}"), message
    assert fix in message
    assert "\n" not in message and "valid types" not in message and "PyObject" not in message
    assert len(message) < 400
    # torch's "Passed invalid type ... to is_opaque_type" log line (torch._library) stays out:
    # opreg decides before infer_schema runs.
    assert [r.getMessage() for r in caplog.records if r.name.startswith("torch")] == []


def test_a_generator_in_a_schema_gets_the_same_advice(ns: str) -> None:
    with pytest.raises(ValueError, match=r"argument 'g' is a torch\.Generator.*int seed"):
        register_vmap_op(
            lambda x, g: x, fake_fn=lambda x, g: x, name=f"{ns}::refused",
            schema="(Tensor x, Generator g) -> Tensor",
        )  # fmt: skip


def test_list_annotations_are_still_accepted(ns: str) -> None:
    def f(x: Tensor, sizes: list[int], ts: list[Tensor]) -> Tensor:
        return x * len(sizes) + sum(ts)

    op = register_vmap_op(f, fake_fn=lambda x, s, t: torch.empty_like(x), name=f"{ns}::lists")
    x = torch.ones(2)
    torch.testing.assert_close(op(x, [1, 2], [x, x]), x * 4)
