"""The harness every check runs in: a check's declaration (:class:`Check`: its body, its
options and its time budget), the context it runs in (:class:`CheckContext`), running and
timing it (:func:`execute`), and turning errors into :class:`CheckFailure` messages that name
the op, the check, the sample and the case."""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

import torch

from opreg_core import SampleInput, first_call_fake_check_paused

from ..compare import ToleranceSpec, check_tolerance_spec, compare
from ..errors import CheckFailure
from ..interpreter import device_and_serving
from ..report import CheckResult, Status
from ..samples import SamplesArg, as_device, clone_sample, describe_sample, gather_samples
from ..target import OpLike, Target, resolve

#: Lines of an unexpected exception's message kept in a failure message.
_MAX_ERROR_LINES = 8

#: Deprecation warnings that torch raises about itself (e.g. ``torch.jit.script_method``
#: while Inductor imports) are not the op's business: the checks silence them, so that a
#: suite run with ``-W error::DeprecationWarning`` tests the op, not torch's internals.
_TORCH_DEPRECATIONS = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
_TORCH_MODULE = r"torch(\.|$)"  # torch and its submodules, not e.g. torchvision


class Skip(Exception):
    """Raised inside a check: it does not apply to this op (the message says why)."""


@dataclass
class CheckContext:
    """What a check body gets: the op, its samples, the device and a place for facts."""

    check: str
    target: Target
    samples: list[SampleInput]
    device: torch.device
    tolerance: ToleranceSpec = None
    info: dict[str, Any] = field(default_factory=dict)
    #: One-line facts a check wants read (e.g. "once differentiable: ...", or that it ran
    #: over its time budget), kept in :attr:`CheckResult.notes`.
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.target.name

    def for_check(self, check: str) -> CheckContext:
        """The same op, samples, device and tolerance for another check (with its own info
        and notes)."""
        return dataclasses.replace(self, check=check, info={}, notes=[])

    def describe(self, sample: SampleInput) -> str:
        return describe_sample(sample, self.target.arg_names)

    def failure(
        self, problem: str, sample: SampleInput | None = None, case: str | None = None, **kw: Any
    ) -> CheckFailure:
        label = None if sample is None else self.describe(sample)
        return CheckFailure(self.name, self.check, problem, sample=label, case=case, **kw)

    @contextmanager
    def step(
        self,
        what: str,
        sample: SampleInput | None = None,
        case: str | None = None,
        hint: str | None = None,
    ) -> Iterator[None]:
        """Run a step; an unexpected exception becomes a failure saying ``what`` raised it
        (followed by ``hint``, the likely cause, when given)."""
        try:
            yield
        except (CheckFailure, Skip):
            raise
        except Exception as exc:
            problem = f"{what} raised {format_exception(exc)}"
            if hint is not None:
                problem += f"\n{hint}"
            raise self.failure(problem, sample, case) from exc

    def run(self, fn: Callable[..., Any], sample: SampleInput) -> tuple[Any, dict[str, Any]]:
        """Call ``fn`` on a fresh copy of ``sample``; return its output and the mutated args."""
        copy = clone_sample(sample)
        out = fn(*copy.args, **copy.kwargs)
        return out, mutated_values(self.target, copy)

    def assert_same(
        self,
        expected: tuple[Any, dict[str, Any]],
        actual: tuple[Any, dict[str, Any]],
        sample: SampleInput,
        case: str,
        what: str,
        tolerance: ToleranceSpec = None,
    ) -> None:
        """Fail with the first mismatch between two ``run`` results."""
        tol = self.tolerance if tolerance is None else tolerance
        found = compare(expected[0], actual[0], tolerance=tol)
        for name, value in expected[1].items():
            if found is None:
                found = compare(
                    value, actual[1][name], tolerance=tol, where=f"argument {name!r} after the call"
                )
        if found is not None:
            raise self.failure(what, sample, case, mismatch=found)


def format_exception(exc: BaseException) -> str:
    """``TypeName: message`` with the message cut to a few lines."""
    lines = str(exc).strip().splitlines()
    if len(lines) > _MAX_ERROR_LINES:
        lines = [*lines[:_MAX_ERROR_LINES], "..."]
    return f"{type(exc).__name__}: " + "\n".join(lines) if lines else type(exc).__name__


def mutated_values(target: Target, sample: SampleInput) -> dict[str, Any]:
    """The values of the arguments the op mutates, by name (after a call)."""
    names = target.mutated_args
    if not names:
        return {}
    positional = target.arg_names
    values: dict[str, Any] = {}
    for name in names:
        if name in sample.kwargs:
            values[name] = sample.kwargs[name]
        elif name in positional and positional.index(name) < len(sample.args):
            values[name] = sample.args[positional.index(name)]
    return values


def sample_device(samples: list[SampleInput]) -> torch.device:
    """The device of the first tensor in the samples (CPU if there is none)."""
    for sample in samples:
        for value in (*sample.args, *sample.kwargs.values()):
            items = value if isinstance(value, (list, tuple)) else (value,)
            for item in items:
                if isinstance(item, torch.Tensor):
                    return item.device
    return torch.device("cpu")


Body = Callable[[CheckContext], None]


def prepare(
    check: str,
    op: OpLike | Target,
    samples: SamplesArg | list[SampleInput],
    device: str | torch.device | None,
    tolerance: object = None,
) -> CheckContext:
    """Resolve the op and its samples (raising on bad input) into a context for ``execute``."""
    target = op if isinstance(op, Target) else resolve(op)
    dev = as_device(device)
    gathered = gather_samples(target, samples, dev)
    return CheckContext(
        check, target, gathered, dev or sample_device(gathered), check_tolerance_spec(tolerance)
    )


@contextmanager
def torch_deprecations_ignored() -> Iterator[None]:
    """Ignore deprecation warnings attributed to torch's own modules, for the block only."""
    with warnings.catch_warnings():
        for category in _TORCH_DEPRECATIONS:
            warnings.filterwarnings("ignore", category=category, module=_TORCH_MODULE)
        yield


@dataclass(frozen=True)
class Budget:
    """How long a check should take on an op with a few small samples, on a small CPU machine,
    and what makes it slow when it takes longer (the second half of its note).

    A check that runs over its budget is not stopped: its result gets a note, such as
    ``autograd took 42 s, over its 30 s budget: ...``, so a slow op or slow samples are seen.
    """

    seconds: float
    hint: str

    def note(self, check: str, elapsed: float) -> str | None:
        """The note of a check that took ``elapsed`` seconds (None: within the budget)."""
        if elapsed <= self.seconds:
            return None
        return f"{check} took {elapsed:.0f} s, over its {self.seconds:.0f} s budget: {self.hint}"


def execute(ctx: CheckContext, body: Body, budget: Budget | None = None) -> CheckResult:
    """Run ``body`` and time it: passed, skipped (``Skip``) or failed (``CheckFailure``); a
    check that took longer than ``budget`` gets a note saying so (it is never stopped).

    Torch's deprecation warnings about itself are ignored while the body runs (only then).
    """
    start = time.perf_counter()
    try:
        # The fake check compares the fake itself; the others fail for their own reasons.
        with torch_deprecations_ignored(), first_call_fake_check_paused():
            body(ctx)
    except Skip as skip:
        return _result(ctx, start, budget, "skipped", str(skip))
    except CheckFailure as failure:
        return _result(ctx, start, budget, "failed", failure.summary(), failure)
    except Exception as exc:  # a step outside ``ctx.step``: still a failure of this op
        unexpected = ctx.failure(f"the check raised {format_exception(exc)}")
        unexpected.__cause__ = exc
        return _result(ctx, start, budget, "failed", unexpected.summary(), unexpected)
    return _result(ctx, start, budget, "passed", "")


def _result(
    ctx: CheckContext,
    start: float,
    budget: Budget | None,
    status: Status,
    reason: str,
    failure: CheckFailure | None = None,
) -> CheckResult:
    elapsed = time.perf_counter() - start
    over = None if budget is None else budget.note(ctx.check, elapsed)
    if over is not None:
        ctx.notes.append(over)
    return CheckResult(
        ctx.check, ctx.name, status, elapsed, reason, ctx.info, failure, notes=ctx.notes
    )


def run_public(ctx: CheckContext, body: Body, budget: Budget | None = None) -> CheckResult:
    """For the public ``check_*`` functions: a failure is raised, anything else returned."""
    result = execute(ctx, body, budget)
    if result.failure is not None:
        raise result.failure
    return result


#: A check's keyword options: a ``TypedDict`` (``total=False``) naming each with its type.
Options = TypeVar("Options", bound=Mapping[str, object])


@dataclass(frozen=True)
class Check(Generic[Options]):
    """One check, declared once: its name, its body and its keyword options.

    ``defaults`` holds every option with its default; its type (a ``TypedDict``) is what
    ``check_<name>(op, **options)`` and ``check_op(options={name: {...}})`` accept.
    ``validate`` rejects a bad value (``ValueError``/``TypeError``) before anything runs.
    ``budget``: how long the check should take (a note when it runs over).
    """

    name: str
    body: Callable[[CheckContext, Options], None]
    defaults: Options
    validate: Callable[[Options], None] | None = None
    budget: Budget = field(kw_only=True)

    def resolve(self, given: Mapping[str, object], caller: str | None = None) -> Options:
        """``given`` completed with the defaults and validated.

        An unknown name raises ``TypeError``: worded for ``caller`` (a function taking the
        options as keywords) when given, else for ``check_op``'s ``options``.
        """
        unknown = [name for name in given if name not in self.defaults]
        if unknown:
            accepted = ", ".join(self.defaults) or "none"
            if caller is not None:
                raise TypeError(
                    f"{caller}() got an unexpected keyword argument {unknown[0]!r}; "
                    f"the {self.name} check accepts: {accepted}"
                )
            raise TypeError(
                f"unknown option(s) {', '.join(map(repr, unknown))} for the {self.name} check; "
                f"it accepts: {accepted}"
            )
        options = cast(Options, {**self.defaults, **given})
        if self.validate is not None:
            self.validate(options)
        return options

    def bind(self, options: Options) -> Body:
        """The body with resolved ``options``, ready for :func:`execute`."""
        return lambda ctx: self.body(ctx, options)

    def check(
        self,
        op: OpLike,
        samples: SamplesArg,
        device: str | torch.device | None,
        options: Mapping[str, object],
        tolerance: object = None,
    ) -> CheckResult:
        """What the public ``check_<name>`` does: a failure is raised, anything else returned."""
        resolved = self.resolve(options, f"check_{self.name}")
        run_on, serving = device_and_serving(device)  # triton-cpu: as check_op runs it
        ctx = prepare(self.name, op, samples, run_on, tolerance)
        with serving:
            return run_public(ctx, self.bind(resolved), self.budget)
