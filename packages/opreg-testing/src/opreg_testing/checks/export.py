"""export check: the op survives ``torch.export`` save and load, and the loaded program
matches eager.

For each sample: ``torch.export.export`` of a call of the op (the sample's tensors are the
program's inputs, its other arguments constants), ``torch.export.save`` into memory,
``torch.export.load`` and a run of the loaded program, compared with eager (outputs and
mutated arguments). With ``vmap=True`` the same for ``vmap(op)``. Torch before 2.13 cannot
save vmap's pre-dispatch nodes (``SerializeError``, for plain torch functions too); there the
vmap program is saved after ``run_decompositions()``, which traces vmap into the op's batched
operator (what deployment flows such as AOTInductor save; it costs about a second a sample,
so it is not done where the program saves as exported), and ``info["vmap_decomposed"]`` says
so.

The load runs in this process, where the op is registered: a fresh process per op would cost
a torch import each (seconds), and ops registered inside functions (tests, fresh namespaces)
could not be registered there anyway. What a fresh process needs is checked instead: the
module the op was registered from (``op.module``) must be importable by that name, since a
process loading the program registers the op by importing it. A module that cannot be found
fails, saying so. An op registered from ``__main__`` (a script, a notebook, where authors
prototype) is checked in this process all the same, and the fresh-process part is reported as
not checked, in a note with the fix: where an op is registered says nothing about whether it
is right, and ``opreg check MODULE`` imports the op from its module, so it checks that part.
``tests/kernels/test_export.py`` runs the round trip across processes.
"""

from __future__ import annotations

import importlib.util
import io
import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypedDict, Unpack

import torch

from opreg_core import SampleInput

from ..compare import ToleranceSpec
from ..report import CheckResult
from ..samples import SamplesArg, map_tensors
from ..target import OpLike
from ._harness import Budget, Check, CheckContext
from ._vmap_cases import batched_sample, vmap_cases, vmapped

#: The logger ``torch.export.load`` writes the cause of a failed load to (its exception only
#: says "see the warnings above").
_EXPORT_LOGGER = "torch.export"


class _Call(torch.nn.Module):
    """``fn`` on a sample whose tensors are the module's inputs, in order."""

    def __init__(self, fn: Callable[..., Any], sample: SampleInput) -> None:
        super().__init__()
        self.fn = fn
        self.sample = sample

    def forward(self, *tensors: torch.Tensor) -> Any:
        args, kwargs = _with_tensors(self.sample, tensors)
        return self.fn(*args, **kwargs)


def _tensors(sample: SampleInput) -> tuple[torch.Tensor, ...]:
    found: list[torch.Tensor] = []

    def take(t: torch.Tensor) -> torch.Tensor:
        found.append(t)
        return t

    map_tensors(take, (sample.args, sample.kwargs))
    return tuple(found)


def _with_tensors(
    sample: SampleInput, tensors: tuple[torch.Tensor, ...]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The sample's arguments with its tensors replaced by ``tensors``, in order."""
    it = iter(tensors)
    args, kwargs = map_tensors(lambda _: next(it), (sample.args, sample.kwargs))
    return tuple(args), dict(kwargs)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self.lines.extend(str(record.exc_info[1]).splitlines())
        self.lines.append(record.getMessage())


@contextmanager
def _load_causes() -> Iterator[_Records]:
    """Collect what ``torch.export.load`` logs while the block runs."""
    records = _Records()
    logger = logging.getLogger(_EXPORT_LOGGER)
    logger.addHandler(records)
    try:
        yield records
    finally:
        logger.removeHandler(records)


def _unresolved(records: _Records) -> str | None:
    """The line of a failed load naming an operator torch could not resolve, if any."""
    for line in records.lines:
        if "failed to resolve" in line:
            return line.strip()
    return None


def _vmap_not_saveable(exc: Exception) -> bool:
    """Whether ``torch.export.save`` failed on vmap's pre-dispatch nodes (torch before 2.13)."""
    return type(exc).__name__ == "SerializeError" and "torch._functorch.predispatch" in str(exc)


def _decomposed(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    with warnings.catch_warnings():  # torch's own deprecation, raised from copyreg
        warnings.filterwarnings("ignore", ".*isinstance.treespec, LeafSpec", FutureWarning)
        decomposed: torch.export.ExportedProgram = program.run_decompositions()
    return decomposed


def _round_trip(
    ctx: CheckContext,
    fn: Callable[..., Any],
    sample: SampleInput,
    inputs: SampleInput,
    case: str,
) -> bool:
    """One sample's round trip; returns whether the program was saved decomposed."""
    with ctx.step("eager", sample, case):
        expected = ctx.run(fn, inputs)
    module = _Call(fn, inputs)
    with ctx.step("torch.export.export", sample, case):
        program = torch.export.export(module, _tensors(inputs))
    buffer = io.BytesIO()
    decomposed = False
    with ctx.step(
        "torch.export.save", sample, case, hint="an argument of the call cannot be serialised"
    ):
        try:
            torch.export.save(program, buffer)
        except Exception as exc:
            if not _vmap_not_saveable(exc):
                raise
            decomposed = True
            buffer = io.BytesIO()
            torch.export.save(_decomposed(program), buffer)
    buffer.seek(0)
    with _load_causes() as records:
        try:
            loaded = torch.export.load(buffer)
        except Exception as exc:
            cause = _unresolved(records)
            raise ctx.failure(
                f"torch.export.load raised {type(exc).__name__}: {exc}".strip()
                + (f"\n{cause}" if cause else ""),
                sample,
                case,
            ) from exc
    call = loaded.module()

    def run_loaded(*args: Any, **kwargs: Any) -> Any:
        return call(*_tensors(SampleInput(args, kwargs)))

    with ctx.step("the loaded program", sample, case):
        actual = ctx.run(run_loaded, inputs)
    ctx.assert_same(
        expected, actual, sample, case, "the program loaded by torch.export.load differs from eager"
    )
    return decomposed


#: The case of the export check that a saved program loads in another process.
FRESH_PROCESS = "torch.export.load in another process"

#: What the note of an op registered from ``__main__`` says (see the module docstring).
FROM_MAIN_NOTE = (
    f"not checked: {FRESH_PROCESS}, since the op is registered from __main__ (a script or "
    "notebook), which another process cannot import to register it; register the op in an "
    "importable module: `opreg check MODULE` then checks that part too"
)


def _module_problem(module: str) -> str | None:
    """Why a fresh process cannot import ``module`` by name (None: it can; ``__main__`` is
    the caller's to handle)."""
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        return f"its module {module!r} cannot be found ({type(exc).__name__}: {exc})"
    if found is None:
        return f"its module {module!r} cannot be found on the import path"
    return None


class ExportOptions(TypedDict, total=False):
    """The export check's options: keywords of :func:`check_export`, ``check_op``'s
    ``options["export"]`` (defaults in :data:`EXPORT`)."""

    vmap: bool  #: also ``vmap(op)``
    #: fail when the op's module cannot be imported by name elsewhere (registered from
    #: ``__main__``: a note saying that part was not checked)
    importable: bool


def _validate(options: ExportOptions) -> None:
    for name in ("vmap", "importable"):
        if not isinstance(options[name], bool):
            raise TypeError(f"the export check's {name} must be True or False")


def run_export(ctx: CheckContext, options: ExportOptions) -> None:
    """The body of the export check (see :func:`check_export`)."""
    opreg = ctx.target.opreg
    from_main = options["importable"] and opreg is not None and opreg.module == "__main__"
    if options["importable"] and opreg is not None and not from_main:
        problem = _module_problem(opreg.module)
        if problem is not None:
            raise ctx.failure(
                f"a saved program calling the op loads only in a process that registers it, "
                f"by importing the module that registers it, but {problem}: register the op "
                "in an importable module",
                case=FRESH_PROCESS,
            )
    op = ctx.target.call
    vmapped_cases = decomposed = 0
    for sample in ctx.samples:

        def call(*args: Any, _kw: dict[str, Any] = sample.kwargs) -> Any:
            return op(*args, **_kw)

        plain = SampleInput(sample.args, name=sample.name)
        _round_trip(ctx, call, sample, plain, "torch.export")
        if not options["vmap"] or ctx.target.mutated_args:
            continue
        for case in vmap_cases(sample, nested=False)[:1]:
            b = batched_sample(sample, case)
            inputs = SampleInput(b.args, name=sample.name)
            fn = vmapped(op, case, b.kwargs, "error", ctx.target.output_batch_dims)
            decomposed += _round_trip(ctx, fn, sample, inputs, f"{case}, torch.export")
            vmapped_cases += 1
    ctx.info.update(vmap_cases=vmapped_cases, vmap_decomposed=decomposed)
    if opreg is not None:
        ctx.info.update(module=opreg.module)
    if from_main:
        ctx.info["not_checked"] = {FRESH_PROCESS: "the op is registered from __main__"}
        ctx.notes.append(FROM_MAIN_NOTE)


#: The export check, with its options' defaults.
EXPORT = Check(
    "export",
    run_export,
    ExportOptions(vmap=True, importable=True),
    _validate,
    budget=Budget(
        30,
        "it exports, saves, loads and runs a program for every sample (and for vmap(op)): "
        "fewer samples, or vmap=False, make it faster",
    ),
)


def check_export(
    op: OpLike,
    samples: SamplesArg = None,
    *,
    device: str | torch.device | None = None,
    tolerance: ToleranceSpec = None,
    **options: Unpack[ExportOptions],
) -> CheckResult:
    """Check that a program calling the op survives ``torch.export.save`` and
    ``torch.export.load`` and, loaded, matches eager (with ``vmap=True``, the default, also
    ``vmap(op)``; saved after ``run_decompositions()`` where torch cannot save vmap as
    exported, before 2.13).

    An export, save or load error, or a different result, fails. With ``importable=True``
    (default), so does an op registered from a module that cannot be imported by its name:
    another process could not register it to load the program. For an op registered from
    ``__main__`` (a script, a notebook) that part is not checked, and the result says so in
    a note (``result.notes``, ``info["not_checked"]``). The load runs in this process.
    Raises :class:`CheckFailure`.
    """
    return EXPORT.check(op, samples, device, options, tolerance)
