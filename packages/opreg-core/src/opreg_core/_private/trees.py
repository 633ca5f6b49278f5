"""Trees: the tensors in arguments and outputs, lists included, walked and rebuilt."""

from __future__ import annotations

# Why: lists of tensors in arguments and outputs are walked and rebuilt.
# Checked on torch 2.11, 2.13, 2.14, 2.15 (``tests/core/test_internals_contract.py``).
# Public replacement: ``torch.utils.pytree`` (not importable in torch 2.13).
from torch.utils._pytree import tree_leaves as tree_leaves
from torch.utils._pytree import tree_map_only as tree_map_only

#: Dotted names of the internals used here.
INTERNALS: tuple[str, ...] = (
    "torch.utils._pytree.tree_leaves",
    "torch.utils._pytree.tree_map_only",
)
