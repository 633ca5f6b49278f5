"""compile check: ``torch.compile(fullgraph=True)`` of the op, and of ``vmap(op)``, matches eager.

``fullgraph=True`` turns any graph break into an error, so passing means the op stays in one
graph. Each compiled function gets a code object of its own, so Dynamo's per-code cache
never fills up across many ops or samples (which would make it silently run eager).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, TypedDict, Unpack

import torch

from opreg_core import SampleInput

from ..compare import ToleranceSpec
from ..report import CheckResult
from ..samples import SamplesArg
from ..target import OpLike
from ._harness import Budget, Check, CheckContext
from ._vmap_cases import batched_sample, vmap_cases, vmapped

_counter = 0


def _fresh(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A wrapper of ``fn`` with a brand-new code object (its own Dynamo cache entry)."""
    global _counter
    _counter += 1

    def call(*args: Any) -> Any:
        return fn(*args)

    code = call.__code__.replace(co_name=f"opreg_compile_check_{_counter}")
    return types.FunctionType(code, call.__globals__, code.co_name, None, call.__closure__)


def _compile_case(
    ctx: CheckContext,
    fn: Callable[..., Any],
    sample: SampleInput,
    inputs: SampleInput,
    case: str,
    backend: str,
    dynamic: bool | None,
) -> None:
    with ctx.step("eager", sample, case):
        expected = ctx.run(fn, inputs)
    compiled = torch.compile(_fresh(fn), fullgraph=True, backend=backend, dynamic=dynamic)
    with ctx.step(f"torch.compile(fullgraph=True, backend={backend!r})", sample, case):
        actual = ctx.run(compiled, inputs)
    ctx.assert_same(expected, actual, sample, case, "the compiled result differs from eager")


def check_backend(backend: object) -> str:
    """Validate a ``torch.compile`` backend name (``ValueError`` lists the known ones)."""
    if not isinstance(backend, str):
        raise TypeError(f"backend must be the name of a torch.compile backend, got {backend!r}")
    known = torch.compiler.list_backends(exclude_tags=())
    if backend not in known:
        raise ValueError(f"unknown torch.compile backend {backend!r}; known: {', '.join(known)}")
    return backend


class CompileOptions(TypedDict, total=False):
    """The compile check's options: keywords of :func:`check_compile`, ``check_op``'s
    ``options["compile"]`` (defaults in :data:`COMPILE`)."""

    backend: str  #: the ``torch.compile`` backend
    dynamic: bool | None  #: ``torch.compile``'s ``dynamic``
    vmap: bool  #: also ``torch.compile`` of ``vmap(op)``
    reset: bool  #: ``torch.compiler.reset()`` first


def _validate(options: CompileOptions) -> None:
    check_backend(options["backend"])


def run_compile(ctx: CheckContext, options: CompileOptions) -> None:
    """The body of the compile check (see :func:`check_compile`)."""
    backend, dynamic = options["backend"], options["dynamic"]
    if options["reset"]:
        torch.compiler.reset()
    op = ctx.target.call
    vmapped_cases = 0
    for sample in ctx.samples:

        def call(*args: Any, _kw: dict[str, Any] = sample.kwargs) -> Any:
            return op(*args, **_kw)

        plain = SampleInput(sample.args, name=sample.name)
        _compile_case(ctx, call, sample, plain, f"backend={backend}", backend, dynamic)
        if not options["vmap"] or ctx.target.mutated_args:
            continue
        for case in vmap_cases(sample, nested=False)[:1]:
            b = batched_sample(sample, case)
            inputs = SampleInput(b.args, name=sample.name)
            fn = vmapped(op, case, b.kwargs, "error", ctx.target.output_batch_dims)
            _compile_case(ctx, fn, sample, inputs, f"{case}, backend={backend}", backend, dynamic)
            vmapped_cases += 1
    ctx.info.update(backend=backend, dynamic=dynamic, vmap_cases=vmapped_cases)


#: The compile check, with its options' defaults.
COMPILE = Check(
    "compile",
    run_compile,
    CompileOptions(backend="inductor", dynamic=False, vmap=True, reset=True),
    _validate,
    budget=Budget(
        60,
        "Inductor compiles every case, and its first compile in a process starts it up: the "
        "aot_eager backend (opreg check --compile-backend aot_eager) is faster",
    ),
)


def check_compile(
    op: OpLike,
    samples: SamplesArg = None,
    *,
    device: str | torch.device | None = None,
    tolerance: ToleranceSpec = None,
    **options: Unpack[CompileOptions],
) -> CheckResult:
    """Check ``torch.compile(fullgraph=True)`` of the op (and, with ``vmap=True``, the
    default, of ``vmap(op)``) against eager.

    A graph break, a compile error or a different result fails. ``backend`` is passed to
    ``torch.compile`` (default ``"inductor"``, what users run; ``"aot_eager"`` skips code
    generation and is faster), as is ``dynamic`` (default False); ``reset=True`` (default)
    calls ``torch.compiler.reset()`` first so earlier compilations cannot mask a problem.
    Raises :class:`CheckFailure`.
    """
    return COMPILE.check(op, samples, device, options, tolerance)
