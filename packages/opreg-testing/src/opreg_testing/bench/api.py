"""``bench_op``: benchmark one opreg op from a script or a notebook, and ``bench_ops``, the
loop over ops and devices that ``opreg bench`` runs. Imports torch only when called."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .errors import BenchError
from .report import BenchReport
from .rows import SECTIONS, OpResult

if TYPE_CHECKING:
    import torch

    from opreg_core import VmapOp

    from .measure import Plan


def resolve_device(op: str, device: object) -> tuple[str, torch.device]:
    """A device to bench on: its name and torch device; :class:`BenchError` for an unknown
    device, one that is not present, or ``triton-cpu`` (an interpreter: its times say
    nothing about a kernel)."""
    import torch

    from ..devices import TRITON_CPU, device_problem, parse_devices

    if device is None:
        name = "cuda" if torch.cuda.is_available() else "cpu"
    elif isinstance(device, torch.device):
        name = str(device)
    elif isinstance(device, str):
        try:
            (name,) = parse_devices([device])
        except ValueError as exc:
            raise BenchError(op, str(exc)) from None
    else:
        raise TypeError(f"device must be a string or a torch.device, got {type(device).__name__}")
    if name == TRITON_CPU:
        raise BenchError(
            op,
            f"{TRITON_CPU} runs Triton kernels through Triton's interpreter, whose times say "
            "nothing about the kernel: benchmark on cuda (or cpu, for the fallback)",
        )
    problem = device_problem(name)
    if problem is not None:
        raise BenchError(op, problem)
    return name, torch.device(name)


def make_plan(
    device_type: str,
    *,
    sizes: Sequence[int] | None = None,
    quick: bool = False,
    compile: bool = True,
    sections: Iterable[str] | None = None,
    rounds: int | None = None,
    vmap_batch: int = 8,
    sample: str | None = None,
    flush_l2: bool = True,
) -> Plan:
    """The :class:`~opreg_testing.bench.measure.Plan` of a run on ``device_type``."""
    from .ladder import MAX_SIZES, default_ladder
    from .measure import Plan
    from .timing import Settings

    chosen = tuple(sorted(set(sizes))) if sizes else default_ladder(device_type, quick)
    if not chosen or any(not isinstance(s, int) or s < 1 for s in chosen):
        raise ValueError(f"sizes must be positive numbers of elements, got {sizes!r}")
    if len(chosen) > MAX_SIZES:
        raise ValueError(
            f"at most {MAX_SIZES} sizes (torch.compile keeps {MAX_SIZES} per function)"
        )
    picked = tuple(SECTIONS) if sections is None else tuple(sections)
    unknown = [s for s in picked if s not in SECTIONS]
    if unknown or not picked:
        raise ValueError(f"unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}")
    if vmap_batch < 1:
        raise ValueError(f"vmap_batch must be >= 1, got {vmap_batch}")
    count = rounds if rounds is not None else (5 if quick else 15)
    settings = Settings(rounds=count, host_rounds=count, flush_l2=flush_l2)
    return Plan(chosen, settings, picked, compile, vmap_batch, sample)


def bench_ops(
    ops: Sequence[VmapOp[Any, Any]],
    devices: Sequence[str],
    plans: dict[str, Plan],
    status: Callable[[str], None] | None = None,
    done: Callable[[OpResult], None] | None = None,
) -> BenchReport:
    """Every op on every device (an op that cannot run there is listed, ``skipped``)."""
    import torch

    from .machine import copy_gbps, header
    from .measure import measure

    torch_devices = [torch.device(d) for d in devices]
    first = plans[devices[0]]
    report = BenchReport(header=header(torch_devices, first.settings, first.compile))
    for name, device in zip(devices, torch_devices, strict=True):
        if status is not None:
            status(f"measuring the copy bandwidth of {name}")
        report.copy_gbps[name] = copy_gbps(device, plans[name].settings)
    for name, device in zip(devices, torch_devices, strict=True):
        for op in ops:
            try:
                result = measure(op, device, plans[name], status, name)
            except BenchError as exc:
                result = OpResult(op.qualname, name, skipped=exc.problem)
            report.results.append(result)
            if done is not None:
                done(result)
    return report


def bench_op(
    op: VmapOp[Any, Any] | str,
    *,
    device: str | torch.device | None = None,
    sizes: Sequence[int] | None = None,
    quick: bool = False,
    compile: bool = True,
    sections: Iterable[str] | None = None,
    rounds: int | None = None,
    vmap_batch: int = 8,
    sample: str | None = None,
    flush_l2: bool = True,
    status: Callable[[str], None] | None = None,
) -> BenchReport:
    """Benchmark ``op`` on ``device`` (default: CUDA when present, else the CPU).

    Sections (``sections``, default all): ``device``: device time of the op (``kernel``), its
    fallback and ``torch.compile`` of the fallback (``compile=False``: not), on a ladder of
    ``sizes`` (elements of the largest input; default per device type, ``quick``: two), with
    the bytes moved and the achieved bandwidth, and peak memory on CUDA; ``host``: host time
    per call on tiny inputs of the op, its launcher and a bare ``torch.library`` op;
    ``train``: forward + backward against autograd through the fallback (ops with a
    backward); ``vmap``: ``vmap(op)`` on ``vmap_batch`` entries against a loop and against
    ``vmap(fallback)``. Inputs come from ``sample_inputs(device, size=n)`` when the hook takes
    ``size``, else from scaling the op's first sample (or the one named ``sample``).

    Timing: ``rounds`` interleaved rounds (default 15, ``quick``: 5) after warm-up, medians
    and quartiles; CUDA events with the L2 flushed before each call (``flush_l2``) on GPUs,
    a plain timer on the CPU. Raises :class:`BenchError` (one line: ``opreg: <op>:
    <problem>``) for an op without samples, an unknown or absent device, a device its Triton
    kernel cannot serve, or a ladder that does not fit from its first size; a ladder that
    stops later is reported in ``result.stopped``.
    """
    from opreg_core import VmapOp, get_op

    if isinstance(op, str):
        op = get_op(op)
    if not isinstance(op, VmapOp):
        raise TypeError(f"bench_op expects an opreg op (or its name), got {type(op).__name__}")
    name, torch_device = resolve_device(op.qualname, device)
    plan = make_plan(
        torch_device.type,
        sizes=sizes,
        quick=quick,
        compile=compile,
        sections=sections,
        rounds=rounds,
        vmap_batch=vmap_batch,
        sample=sample,
        flush_l2=flush_l2,
    )
    from .machine import copy_gbps, header
    from .measure import measure

    report = BenchReport(header=header([torch_device], plan.settings, plan.compile))
    report.copy_gbps[name] = copy_gbps(torch_device, plan.settings)
    report.results.append(measure(op, torch_device, plan, status, name))
    return report


__all__ = ["bench_op", "bench_ops", "make_plan", "resolve_device"]
