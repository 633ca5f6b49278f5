"""Fixtures every test folder shares."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

#: The two routes of an op object's call (opreg_core's direct call, or the dispatcher).
DIRECT, DISPATCHER = "direct", "dispatcher"

Route = Callable[..., tuple[str, Any]]


@contextlib.contextmanager
def _entries(op: Any) -> Iterator[list[int]]:
    """Counts the calls the op object hands to the dispatcher (its C++ entry point, held by
    the direct call's closure)."""
    call = op._state.call
    cell = call.__closure__[call.__code__.co_freevars.index("entry")]
    entry = cell.cell_contents
    count = [0]

    def spy(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return entry(*args, **kwargs)

    cell.cell_contents = spy
    try:
        yield count
    finally:
        cell.cell_contents = entry


@pytest.fixture
def route() -> Route:
    """``route(op, *args, **kwargs)``: which route the call took (``"direct"`` or
    ``"dispatcher"``), and its result."""

    def call(op: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
        with _entries(op) as count:
            out = op(*args, **kwargs)
        return (DISPATCHER if count[0] else DIRECT), out

    return call


@pytest.fixture
def dispatcher_entries() -> Callable[[Any], contextlib.AbstractContextManager[list[int]]]:
    """``with dispatcher_entries(op) as count:``: ``count[0]`` calls of the op object went to
    the dispatcher in the block (for calls that raise, where ``route`` returns nothing)."""
    return _entries
