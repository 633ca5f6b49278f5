"""The dispatcher: dispatch keys of device types, operators by name, schemas, fragments."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

# Why: a device type's backend dispatch key (where ``device_types`` registers kernels), whether
# a name is taken by an operator opreg did not register, a schema parsed before anything is
# registered, and destroying a ``torch.library.Library`` fragment (``unregister``,
# re-registration).
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: ``torch.library`` queries for dispatch keys and operators, a public
# schema parser, and ``Library.destroy()``.

# Why (fake registration): ``torch.library.register_fake`` inspects its caller to name the
# fake's source (``inspect.getframeinfo`` reads the calling file, ``inspect.getmodule`` scans
# ``sys.modules``), about 0.5 ms a call, the largest part of registering an op (opreg registers
# two fakes per op, and opreg-kernels' shipped ops at import). On a tested torch, opreg puts
# the fake where that function puts it (the operator's ``fake_impl`` holder in
# ``torch._library.simple_registry``, which also registers its Meta kernel) and keeps the
# handle in the library (``Library._registration_handles``), so that destroying the library
# removes it as before; the source it names is the fake's own definition.
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: ``torch.library.register_fake`` (taken on an untested torch), or a way
# to give it the source instead of having it inspect the caller.


#: Dotted names of the internals used here.
INTERNALS: tuple[str, ...] = (
    "torch._C._dispatch_key_for_device",
    "torch._C._dispatch_find_schema_or_throw",
    "torch._C.parse_schema",
    "torch.library.Library._destroy",
    "torch._library.simple_registry.singleton",
    "torch.library.Library._registration_handles",
)


def dispatch_key_for_device(device_type: str) -> str:
    """The backend dispatch key name of a device type (``"cuda"`` -> ``"CUDA"``); RuntimeError
    for a device type this torch build does not know."""
    return str(torch._C._dispatch_key_for_device(device_type))


parse_schema: Callable[[str], torch.FunctionSchema] = torch._C.parse_schema


def operator_exists(qualname: str) -> bool:
    """Whether the dispatcher knows an operator (default overload) of this name."""
    try:
        torch._C._dispatch_find_schema_or_throw(qualname, "")
    except RuntimeError:
        return False
    return True


class Library:
    """A typed wrapper of ``torch.library.Library`` (a ``FRAGMENT`` of one namespace)."""

    def __init__(self, namespace: str) -> None:
        self._lib = torch.library.Library(namespace, "FRAGMENT")  # type: ignore[no-untyped-call]

    def define(self, schema: str) -> None:
        self._lib.define(schema)  # type: ignore[no-untyped-call]

    def impl(
        self,
        opname: str,
        kernel: Callable[..., Any],
        dispatch_key: str,
        *,
        with_keyset: bool = False,
        allow_override: bool = False,
    ) -> None:
        extra = {"allow_override": True} if allow_override and _IMPL_ALLOWS_OVERRIDE else {}
        self._lib.impl(opname, kernel, dispatch_key, with_keyset=with_keyset, **extra)  # type: ignore[no-untyped-call]

    def register_fake(self, qualname: str, fake: Callable[..., Any], *, direct: bool) -> None:
        """``torch.library.register_fake(qualname, fake, lib=...)``; ``direct``: the same
        registration without the inspection of the caller (see the section above)."""
        if not direct:
            torch.library.register_fake(qualname, fake, lib=self._lib)
            return
        code = getattr(fake, "__code__", None)
        source = qualname if code is None else f"{code.co_filename}:{code.co_firstlineno}"
        holder = torch._library.simple_registry.singleton.find(qualname).fake_impl
        handle = holder.register(fake, source, lib=self._lib)
        self._lib._registration_handles.append(handle)

    def destroy(self) -> None:
        self._lib._destroy()  # type: ignore[no-untyped-call]


def _impl_allows_override() -> bool:

    return "allow_override" in inspect.signature(torch.library.Library.impl).parameters


_IMPL_ALLOWS_OVERRIDE = _impl_allows_override()
