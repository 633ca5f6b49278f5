"""The operator's schema and what the kernels need to know about its arguments and returns.

Which types an op may take and return (checked once, at registration, by
:func:`parse_signature`; an error names the op and the argument otherwise):

- tensors: ``Tensor``, ``Tensor?``, ``Tensor[]`` and ``Tensor?[]`` (the only types vmap
  batches and autograd differentiates; a list is spread into its elements for autograd, every
  element a separate input);
- plain values, passed through unchanged (never batched, no gradient): ``int``/``SymInt``,
  ``float``, ``bool``, ``complex``, ``str``, ``Scalar``, ``ScalarType`` (``torch.dtype``),
  ``Layout``, ``MemoryFormat``, ``Device``, each also optional (``int?``) and as a list
  (``int[]``, ``int[2]``, ``int[]?``, ``int?[]``);
- returns: ``Tensor``, ``Tensor[]``, and the plain ``int``/``SymInt``, ``float``, ``bool``,
  ``Scalar`` that ``torch.library.infer_schema`` accepts; several of them as a tuple.

Refused: ``Tensor[]?`` (PyTorch's dispatcher does not look into it when it picks a kernel: a
vmap batching only that argument crashes in functorch, torch 2.11 to 2.15 alike; ``Tensor[]``
or ``Tensor?[]`` say the same), with one message on every torch, whether the type comes from
a schema or from the annotation ``list[Tensor] | None`` (which ``torch.library.infer_schema``
accepts from torch 2.15 on and refuses before), ``Generator`` (``torch.compile`` cannot pass
one to an operator: take a seed), ``Any``, ``Storage``, ``Stream``, ``QScheme``, ``Dimname``
and nested lists of tensors (no op author's type: opreg's vmap, autograd and tests cannot give
them a meaning), an alias
annotation other than a mutation (``Tensor(a) x``, ``-> Tensor(a)``: an opreg op returns new
tensors, never a view of an input), and returns that vmap cannot stack or autograd cannot
track (``Tensor?``, ``Tensor?[]``, lists of plain values, ``ScalarType``, ...).
"""

from __future__ import annotations

import collections.abc
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ._private import parse_schema

#: ``Signature.types`` of a tensor argument and of an optional one.
TENSOR, OPTIONAL_TENSOR = "Tensor", "Optional[Tensor]"
#: ``Signature.types`` of a list of tensors and of a list of optional tensors.
TENSOR_LIST, OPTIONAL_TENSOR_LIST = "List[Tensor]", "List[Optional[Tensor]]"


class Signature:
    """Argument layout of an op, read once from its schema so kernels don't parse per call.

    A plain slotted class (not a dataclass: creating one costs about 0.5 ms of import);
    treat it as read-only."""

    __slots__ = (
        "defaults", "kwarg_only", "list_args", "mutated", "num_returns", "positional",
        "returns_list", "schema", "tensor_returns", "types",
    )  # fmt: skip

    def __init__(
        self,
        *,
        schema: str,
        positional: tuple[str, ...],
        kwarg_only: tuple[str, ...],
        defaults: Mapping[str, Any],
        num_returns: int,
        mutated: tuple[str, ...],
        returns_list: bool,
        list_args: bool,
        tensor_returns: tuple[bool, ...] = (),
        types: tuple[str, ...] = (),
    ) -> None:
        self.schema = schema  #: the schema without the name, e.g. ``"(Tensor x) -> Tensor"``
        self.positional = positional
        self.kwarg_only = kwarg_only
        self.defaults = defaults  #: argument name -> default, for arguments that have one
        self.num_returns = num_returns
        self.mutated = mutated
        self.returns_list = returns_list  #: some output is a list of tensors
        #: some argument is a list of tensors (``Tensor[]``, ``Tensor?[]``): autograd
        #: spreads it into its elements (lists of plain values are passed as they are)
        self.list_args = list_args
        #: per output: a tensor or a list of tensors (True), or a plain value (False)
        self.tensor_returns = tensor_returns
        #: per argument, in declaration order: its type as ``str(argument.real_type)``
        #: (``"Tensor"``, ``"Optional[Tensor]"``, ``"float"``, ...)
        self.types = types

    @property
    def names(self) -> tuple[str, ...]:
        return self.positional + self.kwarg_only

    @property
    def tensor_positions(self) -> tuple[int, ...]:
        """Positions, in declaration order, of the ``Tensor`` and ``Tensor?`` arguments."""
        return tuple(i for i, kind in enumerate(self.types) if kind in (TENSOR, OPTIONAL_TENSOR))

    @property
    def list_positions(self) -> tuple[int, ...]:
        """Positions, in declaration order, of the ``Tensor[]`` and ``Tensor?[]`` arguments."""
        return tuple(i for i, kind in enumerate(self.types) if kind in TENSOR_LIST_TYPES)

    def full_args(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
        """All arguments in declaration order, with the defaults the dispatcher dropped put back."""
        if len(args) == len(self.positional) and not self.kwarg_only:
            return args
        out = list(args)
        for name in self.positional[len(args) :]:
            out.append(kwargs[name] if name in kwargs else self.defaults[name])
        for name in self.kwarg_only:
            out.append(kwargs[name] if name in kwargs else self.defaults[name])
        return tuple(out)

    def split(self, full: tuple[Any, ...]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Inverse of :meth:`full_args`: positional args and kwarg-only kwargs."""
        npos = len(self.positional)
        return full[:npos], dict(zip(self.kwarg_only, full[npos:], strict=True))


def infer_schema(
    op_name: str, fn: Callable[..., Any], schema: str | None, mutates_args: Sequence[str]
) -> str:
    """The schema string (without name) from ``schema`` or from ``fn``'s annotations."""
    if schema is not None:
        if not isinstance(schema, str):
            raise TypeError(
                f"opreg: {op_name}: schema must be a string, got {type(schema).__name__}"
            )
        return schema
    _refuse_before_inferring(op_name, fn)
    hint = "(annotate every parameter and the return with supported types, or pass schema=...)"
    try:
        return torch.library.infer_schema(fn, mutates_args=tuple(mutates_args))
    except (ValueError, TypeError) as exc:
        raise type(exc)(
            f"opreg: {op_name}: cannot build a schema from the annotations of "
            f"{getattr(fn, '__qualname__', fn)!r}: {exc} {hint}"
        ) from exc
    except Exception as exc:
        # torch's own failure on an annotation it does not expect (torch 2.9's infer_schema
        # raises AttributeError on some unions): opreg's message, naming the argument.
        where = _failing_annotation(fn, type(exc))
        raise ValueError(
            f"opreg: {op_name}: cannot build a schema from the annotations of "
            f"{getattr(fn, '__qualname__', fn)!r}: torch.library.infer_schema failed on "
            f"{where} ({type(exc).__name__}: {exc}) {hint}"
        ) from exc


def optional_tensor_list_error(qualname: str, name: str) -> ValueError:
    """The refusal of a ``Tensor[]?`` argument (see the module docstring), on every torch."""
    return ValueError(
        f"opreg: {qualname}: argument '{name}' has type Tensor[]? (list[Tensor] | None), which "
        "opreg does not support: PyTorch's dispatcher does not look at the tensors in a "
        "Tensor[]? when it picks a kernel (vmap, autograd and tensor subclasses that only that "
        "argument brings are missed; a vmap batching only it crashes); take list[Tensor] "
        "(Tensor[]) and pass an empty list for none, or list[Tensor | None] (Tensor?[])"
    )


def _refuse_before_inferring(op_name: str, fn: Callable[..., Any]) -> None:
    """Refuse, in opreg's one line, the parameter annotations that
    ``torch.library.infer_schema`` would refuse with its own long message (a list of every
    valid type, and a log line of torch's for ``tuple``/``dict`` ones) or turn into a type
    opreg refuses anyway: ``list[Tensor] | None`` (torch 2.15 turns it into ``Tensor[]?``,
    earlier releases refuse it with their own message; opreg says the same on each), a
    ``torch.Generator``, and a ``dict`` or ``tuple`` of values."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return  # infer_schema says what is wrong
    scope = getattr(fn, "__globals__", {})
    for param in parameters:
        annotation = _evaluated(param.annotation, scope)
        if _is_optional_tensor_list(annotation):
            raise optional_tensor_list_error(op_name, param.name)
        if _is_generator(annotation):
            raise generator_error(op_name, param.name)
        container = _container(annotation)
        if container is not None:
            raise ValueError(
                f"opreg: {op_name}: argument '{param.name}' is annotated as a {container}, "
                "which an operator's schema cannot hold: pass the values as separate arguments, "
                "or as a list (list[Tensor], list[int], list[float])"
            )


def generator_error(qualname: str, name: str) -> ValueError:
    """The refusal of a ``torch.Generator`` argument (annotation or schema alike)."""
    return ValueError(
        f"opreg: {qualname}: argument '{name}' is a torch.Generator: torch.Generator arguments "
        "are not supported by torch.library ops (torch.compile cannot pass one to an "
        "operator): take an int seed and make the generator inside the op (see "
        "docs/writing-an-op.md)"
    )


def _evaluated(annotation: Any, scope: dict[str, Any]) -> Any:
    """An annotation, a string (``from __future__ import annotations``) evaluated in the
    function's module as ``torch.library.infer_schema`` evaluates it; None if it fails."""
    if isinstance(annotation, str):
        try:
            return eval(annotation, scope)  # (as infer_schema evaluates it)
        except Exception:
            return None  # infer_schema says what is wrong
    return annotation


def _is_generator(annotation: Any) -> bool:
    """``torch.Generator``, maybe optional."""
    if annotation is torch.Generator:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return torch.Generator in typing.get_args(annotation)
    return False


def _container(annotation: Any) -> str | None:
    """ "dict" or "tuple" where the annotation is one (maybe optional, maybe parametrized)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        found = [_container(a) for a in typing.get_args(annotation)]
        return next((f for f in found if f is not None), None)
    base = typing.get_origin(annotation) or annotation
    if base in (dict, collections.abc.Mapping, collections.abc.MutableMapping):
        return "dict"
    if base is tuple:
        return "tuple"
    return None


def _is_optional_tensor_list(annotation: Any) -> bool:
    """Whether an (evaluated) annotation is an optional list (or sequence) of tensors."""
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return False
    members = [a for a in typing.get_args(annotation) if a is not type(None)]
    if len(members) == len(typing.get_args(annotation)) or len(members) != 1:
        return False  # no None among them, or a union of more than one list type
    (member,) = members
    return typing.get_origin(member) in (list, collections.abc.Sequence) and typing.get_args(
        member
    ) == (torch.Tensor,)


def _failing_annotation(fn: Callable[..., Any], error: type[BaseException]) -> str:
    """What ``torch.library.infer_schema`` fails on with ``error``: "argument 'x'" or "the
    return annotation", found by giving it each alone (on a function of ``fn``'s module);
    "the function itself" where none alone fails so (``fn`` is no plain function, e.g. a
    ``functools.partial``, whose module torch cannot find)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return "the function itself"

    def probe(params: list[inspect.Parameter], returns: Any) -> bool:
        def stub(*args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

        # The function's module is where infer_schema evaluates string annotations.
        scope = getattr(fn, "__globals__", None)
        function = stub if scope is None else types.FunctionType(stub.__code__, scope)
        function.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=params, return_annotation=returns
        )
        try:
            torch.library.infer_schema(function, mutates_args=())
        except Exception as exc:
            return not isinstance(exc, error)  # another failure is not the one reported
        return True

    for param in signature.parameters.values():
        if not probe([param], torch.Tensor):
            return f"argument '{param.name}'"
    if not probe([], signature.return_annotation):
        return "the return annotation"
    return "the function itself"


#: The argument types that hold tensors (as ``str(argument.real_type)``).
TENSOR_TYPES = frozenset({TENSOR, OPTIONAL_TENSOR, TENSOR_LIST, OPTIONAL_TENSOR_LIST})
#: The tensor types given to autograd as one input per element.
TENSOR_LIST_TYPES = frozenset({TENSOR_LIST, OPTIONAL_TENSOR_LIST})
#: Plain (non-tensor) values an argument may hold, alone, optional or in a list.
PLAIN_TYPES = frozenset(
    {
        "int",
        "float",
        "bool",
        "complex",
        "str",
        "number",
        "ScalarType",
        "Layout",
        "MemoryFormat",
        "Device",
    }
)
#: The return types: those ``torch.library.infer_schema`` accepts.
RETURN_TYPES = frozenset({"Tensor", "List[Tensor]", "int", "float", "bool", "number"})

_WRAPPED = re.compile(r"^(?:Optional|List)\[(.*)\]$")
#: A Dimname argument in a schema's text (alone, optional or in a list), and its name.
_DIMNAME = re.compile(r"\bDimname\b[?\[\]0-9]*\s+(\w+)")


def _plain(type_name: str) -> bool:
    """A plain value's type: one of :data:`PLAIN_TYPES`, maybe optional, maybe in a list."""
    for _ in range(3):  # int, int?, int[], int?[], int[]?
        if type_name in PLAIN_TYPES:
            return True
        match = _WRAPPED.match(type_name)
        if match is None:
            return False
        type_name = match.group(1)
    return False


def _shown(type_name: str) -> str:
    """A type as the schema language writes it (``Tensor?[]`` for ``List[Optional[Tensor]]``)."""
    match = _WRAPPED.match(type_name)
    if match is None:
        return {"number": "Scalar"}.get(type_name, type_name)
    suffix = "?" if type_name.startswith("Optional") else "[]"
    return _shown(match.group(1)) + suffix


def _check_argument(qualname: str, arg: Any) -> None:
    """Refuse an argument type that opreg cannot give a meaning (see the module docstring)."""
    type_name = str(arg.real_type)
    alias = arg.alias_info
    if alias is not None and not alias.is_write:
        raise ValueError(
            f"opreg: {qualname}: argument '{arg.name}' has the alias annotation "
            f"{type_name}({', '.join(sorted(alias.before_set))}) without '!': an opreg op "
            "returns new tensors, never a view of an input, so only a mutated argument "
            "(mutates_args, 'Tensor(a!)') may carry one"
        )
    if type_name in TENSOR_TYPES or _plain(type_name):
        return
    if type_name == "Optional[List[Tensor]]":
        raise optional_tensor_list_error(qualname, arg.name)
    base = type_name
    while (match := _WRAPPED.match(base)) is not None:
        base = match.group(1)
    if base == "Generator":
        raise generator_error(qualname, arg.name)
    because = (
        "an argument is a tensor (Tensor, Tensor?, Tensor[], Tensor?[]) or a plain "
        "value (int, SymInt, float, bool, complex, str, Scalar, ScalarType, Layout, "
        "MemoryFormat, Device; optional or in a list): vmap, autograd and the checks have no "
        "meaning for other types"
    )
    raise ValueError(
        f"opreg: {qualname}: argument '{arg.name}' has type {_shown(type_name)}, which opreg "
        f"does not support: {because}"
    )


def _check_return(qualname: str, index: int, ret: Any) -> None:
    type_name = str(ret.real_type)
    if ret.alias_info is not None:
        raise ValueError(
            f"opreg: {qualname}: output {index} has an alias annotation: an opreg op returns "
            "new tensors, never an input or a view of one (return a clone; a mutating op "
            "returns nothing, '-> ()')"
        )
    if type_name not in RETURN_TYPES:
        raise ValueError(
            f"opreg: {qualname}: output {index} has type {_shown(type_name)}, which opreg does "
            "not support as a return: return Tensor, Tensor[], int, SymInt, float, bool or "
            "Scalar, or a tuple of them (vmap cannot stack, nor autograd track, other types; "
            "for an optional tensor output return an empty tensor or a flag)"
        )


def parse_signature(qualname: str, schema: str) -> Signature:
    """Parse ``schema`` and collect the argument layout; refuse the types opreg cannot support
    (see the module docstring). Errors name the op and the argument."""
    named = _DIMNAME.search(schema)
    if named is not None:
        # Checked on the text: torch 2.11 parses a Dimname as a str, torch 2.13 refuses it.
        raise ValueError(
            f"opreg: {qualname}: argument '{named.group(1)}' has type Dimname, which opreg does "
            "not support: named tensors have no meaning for vmap, autograd and the checks; "
            "take a dim (int) instead"
        )
    try:
        parsed = parse_schema(f"{qualname}{schema}")
    except RuntimeError as exc:
        raise ValueError(f"opreg: {qualname}: invalid schema {schema!r}: {exc}") from exc
    if "..." in str(parsed):
        raise ValueError(
            f"opreg: {qualname}: schema {schema!r} has '...': an opreg op declares every "
            "argument and output"
        )
    for index, ret in enumerate(parsed.returns):
        _check_return(qualname, index, ret)
    positional: list[str] = []
    kwarg_only: list[str] = []
    defaults: dict[str, Any] = {}
    mutated: list[str] = []
    for arg in parsed.arguments:
        _check_argument(qualname, arg)
        (kwarg_only if arg.kwarg_only else positional).append(arg.name)
        if arg.has_default_value():
            defaults[arg.name] = arg.default_value
        if arg.alias_info is not None and arg.alias_info.is_write:
            mutated.append(arg.name)
    return Signature(
        schema=schema,
        positional=tuple(positional),
        kwarg_only=tuple(kwarg_only),
        defaults=defaults,
        num_returns=len(parsed.returns),
        mutated=tuple(mutated),
        returns_list=any(str(r.real_type) == "List[Tensor]" for r in parsed.returns),
        list_args=any(str(a.real_type) in TENSOR_LIST_TYPES for a in parsed.arguments),
        tensor_returns=tuple(str(r.real_type) in TENSOR_TYPES for r in parsed.returns),
        types=tuple(str(a.real_type) for a in parsed.arguments),
    )
