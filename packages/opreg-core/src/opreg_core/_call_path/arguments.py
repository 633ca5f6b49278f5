"""Where each kind of argument sits in a call of an op, read once from its signature, and
the helpers the routes use to lay a call's arguments out (``spread``, ``own_lists``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from .._signature import OPTIONAL_TENSOR, OPTIONAL_TENSOR_LIST, TENSOR, TENSOR_LIST, Signature

#: Argument kinds the plan covers: a schema type -> the Python type the value must have
#: exactly (what the dispatcher would hand the kernel unchanged); tensors are checked apart.
_SCALAR_KINDS: dict[str, type] = {"float": float, "int": int, "bool": bool, "str": str}

#: How many lengths of its list arguments an op keeps the positions of (``spreader``); calls
#: with others work them out again.
_SPREAD_LENGTHS = 64

#: (position in the spread values, may be None) of each tensor of a call.
Positions = tuple[tuple[int, bool], ...]


class ArgumentPlan(NamedTuple):
    """Where each kind of argument sits in a call, read once from the op's signature."""

    tensors: tuple[int, ...]  #: positions of the ``Tensor`` arguments
    optional: tuple[int, ...]  #: positions of the ``Tensor?`` arguments
    scalars: tuple[tuple[int, type], ...]  #: (position, the exact Python type) of the scalars
    mutated: tuple[int, ...]  #: positions of the mutated (``Tensor(a!)``) arguments
    #: (position, its elements may be None) of the ``Tensor[]`` and ``Tensor?[]`` arguments
    lists: tuple[tuple[int, bool], ...] = ()

    @property
    def positions(self) -> Positions:
        """Every tensor argument, the required ones first, with whether it may be None."""
        return (*((i, False) for i in self.tensors), *((i, True) for i in self.optional))


def argument_plan(signature: Signature) -> ArgumentPlan | None:
    """The plan of an op's arguments in declaration order (the positional ones, then the
    keyword-only ones), or None where the direct route does not apply to the op."""
    if signature.returns_list or len(signature.types) != len(signature.names):
        return None
    tensors, optional, scalars, lists = [], [], [], []
    for i, kind in enumerate(signature.types):
        if kind == TENSOR:
            tensors.append(i)
        elif kind == OPTIONAL_TENSOR:
            optional.append(i)
        elif kind in _SCALAR_KINDS:
            scalars.append((i, _SCALAR_KINDS[kind]))
        elif kind in (TENSOR_LIST, OPTIONAL_TENSOR_LIST):
            lists.append((i, kind == OPTIONAL_TENSOR_LIST))
        else:
            return None
    if not tensors and not lists:
        return None  # no tensor to say which device kernel serves the call
    mutated = tuple(signature.names.index(name) for name in signature.mutated)
    if any(i not in tensors for i in mutated):
        return None  # a mutated Tensor? or list of tensors: the dispatcher's
    return ArgumentPlan(tuple(tensors), tuple(optional), tuple(scalars), mutated, tuple(lists))


def spreader(
    plan: ArgumentPlan, signature: Signature
) -> Callable[[tuple[Any, ...]], tuple[list[Any], Positions] | None]:
    """``spread(full)`` for an op with list arguments: every argument, then the elements of
    each list argument (as the op's Function takes them, ``DirectRecord``); and the positions
    there of every tensor argument and list element, with whether it may be None. None where
    a list argument is not a ``list`` (the dispatcher converts a tuple)."""
    positions, lists = plan.positions, plan.lists
    count, list_positions = len(signature.types), signature.list_positions
    known: dict[tuple[int, ...], Positions] = {}  # at most ``_SPREAD_LENGTHS`` of them

    def spread(full: tuple[Any, ...]) -> tuple[list[Any], Positions] | None:
        values, counted = [*full], []
        for i in list_positions:
            elements = full[i]
            if type(elements) is not list:
                return None
            values += elements
            counted.append(len(elements))
        lengths = tuple(counted)
        where = known.get(lengths)
        if where is None:
            spread_list, start = [*positions], count
            for (_, optional), n in zip(lists, lengths, strict=True):
                spread_list += [(j, optional) for j in range(start, start + n)]
                start += n
            where = tuple(spread_list)
            if len(known) < _SPREAD_LENGTHS:
                known[lengths] = where
        return values, where

    return spread


def list_owner(
    signature: Signature,
) -> Callable[[tuple[Any, ...], dict[str, Any]], tuple[tuple[Any, ...], dict[str, Any]]]:
    """``own_lists(args, kwargs)``: the same with a new list for each list argument: the
    dispatcher hands a kernel lists of its own, which it may change without its caller
    seeing it."""
    list_positions, npos, keywords = (
        signature.list_positions,
        len(signature.positional),
        signature.kwarg_only,
    )

    def own_lists(
        args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        own, own_kwargs = [*args], {**kwargs}
        for i in list_positions:
            if i < npos:
                own[i] = [*own[i]]
            else:
                name = keywords[i - npos]
                own_kwargs[name] = [*own_kwargs[name]]
        return tuple(own), own_kwargs

    return own_lists
