"""Sample calls of an op (``sample_inputs=``), for the checking tools."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class SampleInput:
    """One sample call of an op, for the checking tools: ``op(*args, **kwargs)``."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    name: str = ""


SampleInputs = Callable[[torch.device], Iterable[SampleInput]]
