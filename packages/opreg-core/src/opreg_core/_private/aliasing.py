"""Aliasing outputs: the identity of the storage a tensor views."""

from __future__ import annotations

import torch

# Why: an output that shares storage with an input (or another output) is caught at a kernel's
# first call (``_aliasing``); storage identity is what ``torch.library.custom_op`` compares
# (``torch._library.utils.check_aliasing_constraint``), the storage object's ``_cdata``: a new
# Python storage object is made per ``untyped_storage()`` call, and ``data_ptr`` cannot tell
# two empty storages apart.
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: a public storage identity (or ``torch.library``'s aliasing check).

#: Dotted names of the internals used here.
INTERNALS: tuple[str, ...] = ("torch.UntypedStorage._cdata",)


def storage_id(t: torch.Tensor) -> int | None:
    """An id of the storage ``t`` views (the same for every view of it), or None for a tensor
    without storage (a wrapper subclass)."""
    try:
        return int(t.untyped_storage()._cdata)
    except (RuntimeError, NotImplementedError, TypeError):
        return None
