"""The opreg pytest plugin, loaded through the ``pytest11`` entry point.

Fixtures: ``opreg_devices``, ``opreg_device`` (tests using it run once per device),
``opreg_triton_cpu``, ``opreg_namespace``, ``opreg_seed`` and ``opreg_check``.
Markers: ``needs_cuda``, ``needs_triton``, ``needs_gpus(n)``.
Options: ``--opreg-device``, ``--opreg-triton-interpret``, ``--opreg-compile-backend``,
``--opreg-seed`` (and the ini keys ``opreg_devices``, ``opreg_triton_interpret``,
``opreg_compile_backend``, ``opreg_seed``).

Triton's interpreter (``TRITON_INTERPRET=1``) must be on before Triton is imported, so the
plugin decides at start-up, before conftest files and test modules are imported:
``on`` sets it, ``off`` leaves the environment alone, ``auto`` (default) sets it when Triton
is installed and no CUDA device is present.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import pytest
import torch

from .checks.compile import check_backend
from .devices import TRITON_CPU, available_devices, cuda_device_count, parse_devices, torch_device
from .errors import OpCheckFailed
from .interpreter import (
    TritonUnavailable,
    enable_interpreter,
    interpreter_enabled,
    kernels_module,
    triton_device,
    triton_installed,
)
from .namespace import OpNamespace, fresh_namespace
from .report import OpReport
from .runner import check_op
from .target import OpLike

_DEVICES = pytest.StashKey[tuple[str, ...]]()
_BACKEND = pytest.StashKey[str]()
_INTERPRETER_AT_START = pytest.StashKey[bool]()
_MARKERS = (
    "needs_cuda: skip the test unless a CUDA device is present",
    "needs_triton: skip the test unless Triton can run kernels here (CUDA, or CPU through "
    "Triton's interpreter)",
    "needs_gpus(n): skip the test unless at least n CUDA devices are present",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("opreg", "opreg operator checks")
    group.addoption(
        "--opreg-device",
        action="append",
        dest="opreg_devices",
        metavar="DEVICES",
        help="devices for tests using the opreg_device fixture: cpu, cuda, cuda:N, triton-cpu "
        "(comma-separated or repeated). Default: cpu, and cuda if present. triton-cpu is the "
        "CPU with the Triton kernels of opreg-kernels ops run by Triton's interpreter.",
    )
    group.addoption(
        "--opreg-triton-interpret",
        choices=("auto", "on", "off"),
        dest="opreg_triton_interpret",
        help="run Triton kernels on CPU through Triton's interpreter (sets TRITON_INTERPRET=1 "
        "at start-up). auto (default): when Triton is installed and there is no CUDA device.",
    )
    group.addoption(
        "--opreg-seed",
        type=int,
        dest="opreg_seed",
        metavar="N",
        help="base seed of opreg_seed (default 0)",
    )
    group.addoption(
        "--opreg-compile-backend",
        dest="opreg_compile_backend",
        metavar="NAME",
        help="torch.compile backend of the compile check run by opreg_check (default inductor; "
        "aot_eager skips code generation and is faster)",
    )
    parser.addini("opreg_devices", "default for --opreg-device", type="args", default=[])
    parser.addini(
        "opreg_compile_backend", "default for --opreg-compile-backend", default="inductor"
    )
    parser.addini("opreg_triton_interpret", "default for --opreg-triton-interpret", default="auto")
    parser.addini("opreg_seed", "default for --opreg-seed", default="0")


def _interpret_mode(config: pytest.Config) -> str:
    # known_args_namespace: parsed already when the early start-up hook runs.
    option = getattr(config.known_args_namespace, "opreg_triton_interpret", None)
    mode = str(option or config.getini("opreg_triton_interpret")).strip().lower()
    if mode not in ("auto", "on", "off"):
        raise pytest.UsageError(f"opreg_triton_interpret must be auto, on or off, got {mode!r}")
    return mode


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Turn Triton's interpreter on before conftest files (which may import Triton) load."""
    _start_interpreter(early_config)


def _start_interpreter(config: pytest.Config) -> None:
    if _INTERPRETER_AT_START in config.stash:
        return
    mode = _interpret_mode(config)
    if mode == "on" or (mode == "auto" and triton_installed() and not torch.cuda.is_available()):
        enable_interpreter()
    config.stash[_INTERPRETER_AT_START] = interpreter_enabled()


def pytest_configure(config: pytest.Config) -> None:
    for line in _MARKERS:
        config.addinivalue_line("markers", line)
    _start_interpreter(config)  # in case the early hook did not run (plugin given with -p)
    chosen: list[str] = config.getoption("opreg_devices") or list(config.getini("opreg_devices"))
    try:
        devices = parse_devices(chosen) if chosen else available_devices()
    except ValueError as exc:
        raise pytest.UsageError(f"--opreg-device: {exc}") from None
    config.stash[_DEVICES] = devices
    backend = config.getoption("opreg_compile_backend") or config.getini("opreg_compile_backend")
    try:
        config.stash[_BACKEND] = check_backend(str(backend))
    except ValueError as exc:
        raise pytest.UsageError(f"--opreg-compile-backend: {exc}") from None


def pytest_report_header(config: pytest.Config) -> str:
    empty: tuple[str, ...] = ()
    chosen = config.stash.get(_DEVICES, empty)
    devices = ", ".join(chosen)
    interpreter = "on" if interpreter_enabled() else "off"
    return f"opreg: devices {devices}; Triton interpreter {interpreter}"


# -- markers -------------------------------------------------------------------------------


def triton_runnable() -> str | None:
    """Why Triton kernels cannot run here, or None if they can."""
    if not triton_installed():
        return "Triton is not installed"
    kernels = kernels_module()
    if kernels is not None and not kernels.has_triton():
        return "Triton is disabled or fails to import (see opreg_kernels.has_triton())"
    if not torch.cuda.is_available() and not interpreter_enabled():
        return "no CUDA device and Triton's interpreter is off (--opreg-triton-interpret=on)"
    return None


def _gpus_needed(marker: pytest.Mark) -> int:
    args = marker.args or (2,)
    count = args[0]
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise pytest.UsageError(f"needs_gpus(n) takes a positive int, got {count!r}")
    return count


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("needs_cuda") is not None and not torch.cuda.is_available():
        pytest.skip("needs CUDA: no CUDA device is present")
    if item.get_closest_marker("needs_triton") is not None:
        reason = triton_runnable()
        if reason is not None:
            pytest.skip(f"needs Triton: {reason}")
    marker = item.get_closest_marker("needs_gpus")
    if marker is not None:
        wanted, present = _gpus_needed(marker), cuda_device_count()
        if present < wanted:
            pytest.skip(f"needs {wanted} GPUs, {present} present")


# -- fixtures ------------------------------------------------------------------------------


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "opreg_device" in metafunc.fixturenames:
        devices = metafunc.config.stash[_DEVICES]
        metafunc.parametrize("opreg_device", devices, indirect=True, ids=list(devices))


@pytest.fixture(scope="session")
def opreg_devices(pytestconfig: pytest.Config) -> tuple[str, ...]:
    """The device names chosen for this run (``--opreg-device``), e.g. ``("cpu", "cuda")``."""
    return pytestconfig.stash[_DEVICES]


@pytest.fixture
def opreg_triton_cpu(pytestconfig: pytest.Config) -> Iterator[Any]:
    """Triton kernels of opreg-kernels ops run on CPU, through Triton's interpreter, for one test.

    Sets ``TRITON_INTERPRET=1``, registers ``"cpu"`` as a Triton device type and gives every
    Triton op a CPU kernel; all of it is undone after the test. Skips the test without Triton
    or opreg-kernels, and on a CUDA machine whose run did not start with the interpreter on
    (kernels already compiled for the GPU cannot run on CPU tensors).
    """
    if torch.cuda.is_available() and not pytestconfig.stash.get(_INTERPRETER_AT_START, False):
        pytest.skip(
            "Triton on CPU: this run has CUDA and started without Triton's interpreter "
            "(use --opreg-triton-interpret=on)"
        )
    try:
        with triton_device("cpu") as state:
            yield state
    except TritonUnavailable as exc:
        pytest.skip(f"Triton on CPU: {exc}")


@pytest.fixture
def opreg_device(request: pytest.FixtureRequest) -> torch.device:
    """One device per test run (the test is parametrized over ``opreg_devices``).

    ``triton-cpu`` gives ``torch.device("cpu")`` with :func:`opreg_triton_cpu` active. A
    device that is not present skips the test.
    """
    name: str = getattr(request, "param", "cpu")
    device = torch_device(name)
    if device.type == "cuda" and (
        not torch.cuda.is_available() or (device.index or 0) >= torch.cuda.device_count()
    ):
        pytest.skip(f"device {name} is not present")
    if name == TRITON_CPU:
        request.getfixturevalue("opreg_triton_cpu")
    return device


@pytest.fixture
def opreg_namespace() -> Iterator[OpNamespace]:
    """A fresh, unique op namespace; every opreg op registered in it is removed after the test."""
    with fresh_namespace() as namespace:
        yield namespace


@pytest.fixture
def opreg_seed(request: pytest.FixtureRequest) -> Iterator[int]:
    """Seeds torch and ``random`` deterministically for the test (base seed + test id).

    The global RNG states are restored afterwards, so tests stay independent.
    """
    base = request.config.getoption("opreg_seed")
    if base is None:
        try:
            base = int(str(request.config.getini("opreg_seed")))
        except ValueError:
            raise pytest.UsageError("opreg_seed must be an integer") from None
    seed = (base + zlib.crc32(request.node.nodeid.encode())) % 2**31
    initialized = torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    cuda = list(range(torch.cuda.device_count())) if initialized else []
    state = random.getstate()
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)
        random.seed(seed)
        request.node.user_properties.append(("opreg_seed", seed))
        yield seed
    random.setstate(state)


CheckRunner = Callable[..., OpReport]


@pytest.fixture
def opreg_check(request: pytest.FixtureRequest) -> CheckRunner:
    """``opreg_check(op, checks=..., device=..., samples=..., **check_op_kwargs)``.

    Runs :func:`opreg_testing.check_op`, fails the test with the checks' messages if any
    failed, skips it if every check was skipped, and returns the report otherwise. The device
    defaults to the test's ``opreg_device`` when it uses that fixture, else CPU; the compile
    check uses ``--opreg-compile-backend`` unless ``options`` say otherwise.
    """
    backend = request.config.stash[_BACKEND]

    def run(
        op: OpLike,
        checks: str | Iterable[str] | None = None,
        *,
        device: Any = None,
        options: Mapping[str, Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> OpReport:
        if device is None and "opreg_device" in request.fixturenames:
            device = request.getfixturevalue("opreg_device")
        merged = {"compile": {"backend": backend}} if checks is None or "compile" in checks else {}
        for check, opts in (options or {}).items():
            merged[check] = {**merged.get(check, {}), **opts}
        report = check_op(op, checks=checks, device=device, options=merged, **kwargs)
        failures = report.failures
        if failures:
            pytest.fail(
                str(OpCheckFailed(failures)) if len(failures) > 1 else str(failures[0]),
                pytrace=False,
            )
        if report.results and all(r.skipped for r in report.results):
            reasons = "; ".join(f"{r.check}: {r.reason}" for r in report.results)
            pytest.skip(f"{report.op} on {report.device}: {reasons}")
        return report

    return run
