"""Putting one op's kernels into the dispatcher, recording each registration."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ._naming import BATCHED_SUFFIX, NOGRAD_SUFFIX
from ._private import Library, OpOverload, operator_exists
from ._state import Registration
from ._versions import speed_paths_allowed


def check_name_free(qualname: str) -> None:
    """Refuse a name that an operator not registered by opreg already has."""
    namespace, opname = qualname.split("::")
    for name in (opname, opname + BATCHED_SUFFIX, opname + NOGRAD_SUFFIX):
        if not operator_exists(f"{namespace}::{name}"):
            continue
        raise ValueError(
            f"opreg: {qualname}: an operator named {namespace}::{name} already exists and was not "
            "registered by opreg; choose another name=..."
        )


class Registrar:
    """Puts one op's kernels into a ``torch.library.Library`` and records what it registered."""

    def __init__(self, namespace: str) -> None:
        self.lib = Library(namespace)
        self.namespace = namespace
        self.done: list[Registration] = []
        #: Fakes are registered without ``register_fake``'s caller inspection (a tested
        #: torch: ``_versions``), else through it.
        self.direct_fakes = speed_paths_allowed()

    def define(self, opname: str, schema: str) -> OpOverload[..., Any]:
        self.lib.define(f"{opname}{schema}")
        self.done.append(Registration(f"{self.namespace}::{opname}", "", "definition"))
        packet = getattr(getattr(torch.ops, self.namespace), opname)
        return packet.default  # type: ignore[no-any-return]

    def impl(
        self, opname: str, kernel: Any, key: str, what: str, with_keyset: bool = False
    ) -> None:
        self.lib.impl(opname, kernel, key, with_keyset=with_keyset)
        self.done.append(Registration(f"{self.namespace}::{opname}", key, what))

    def fake(self, opname: str, fake: Callable[..., Any], what: str) -> None:
        self.lib.register_fake(f"{self.namespace}::{opname}", fake, direct=self.direct_fakes)
        self.done.append(Registration(f"{self.namespace}::{opname}", "Meta", what))
