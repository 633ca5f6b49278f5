"""The opreg pytest plugin, loaded through the ``pytest11`` entry point.

Fixtures: ``opreg_devices``, ``opreg_device`` (tests using it run once per device),
``opreg_triton_cpu``, ``opreg_namespace``, ``opreg_seed``, ``opreg_check`` and ``opreg_bench``
(benchmarks with budgets: off unless ``--opreg-bench`` is given).
Markers: ``needs_cuda``, ``needs_triton``, ``needs_gpus(n)`` (and ``opreg_unchecked``, set by
:func:`~opreg_testing.parametrize_ops`).
Options: ``--opreg-device``, ``--opreg-triton-interpret``, ``--opreg-compile-backend``,
``--opreg-seed``, ``--opreg-bench``, ``--opreg-max-ratio`` (and the ini keys ``opreg_devices``,
``opreg_triton_interpret``, ``opreg_compile_backend``, ``opreg_seed``, ``opreg_max_ratio``,
``opreg_unchecked``).

Installed, the plugin loads in every pytest run of the environment, so it stays out of the
way of projects that do not use opreg: at start-up it only registers its options and markers
(no torch import, no environment change). A project uses it by setting any ``opreg_*`` ini
key (``opreg_triton_interpret = auto`` is the usual one line) or passing an ``--opreg-*``
option; then the plugin starts as it always did: it validates the options, prints its
header line and decides about Triton's interpreter before conftest files and test modules
are imported (``TRITON_INTERPRET=1`` must be set before Triton is imported): ``on`` sets
it, ``off`` leaves the environment alone, ``auto`` (default) sets it when Triton is
installed and no CUDA device is present. Fixtures and markers work either way; they import
torch when a test uses them.

The devices default to those of ``opreg check`` (:func:`opreg_testing.devices.default_devices`:
cpu, cuda when present, triton-cpu when Triton kernels can run on CPU); ``opreg_check`` skips an
op without a Triton kernel on triton-cpu when cpu is checked too (it would run the same code
twice). As in ``opreg check``, a Triton op whose Triton kernel no ``opreg_check`` ran, on any
device, is not green: the run exits 1 with a section naming the op, the kernel and why it
could not run (``opreg_unchecked = skip`` accepts it, still listed).
"""

from __future__ import annotations

import difflib
import random
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import torch

    from .namespace import OpNamespace
    from .report import OpReport
    from .target import OpLike

_USED = pytest.StashKey[bool]()
_DEVICES = pytest.StashKey[tuple[str, ...]]()
_BACKEND = pytest.StashKey[str]()
_INTERPRETER_AT_START = pytest.StashKey[bool]()
#: Triton ops seen by opreg_check: qualname -> whether a check ran its Triton kernel.
_TRITON_OPS = pytest.StashKey[dict[str, bool]]()
_MARKERS = (
    "needs_cuda: skip the test unless a CUDA device is present",
    "needs_triton: skip the test unless Triton can run kernels here (CUDA, or CPU through "
    "Triton's interpreter)",
    "needs_gpus(n): skip the test unless at least n CUDA devices are present",
    "opreg_unchecked(message): an op nothing can check (parametrize_ops sets it for an op "
    "without sample_inputs): the test fails with the message, or skips with the ini key "
    "opreg_unchecked = skip",
)
#: The ``dest`` of every --opreg-* option and the name of every ini key: setting any of them
#: means the project uses the plugin.
_OPTIONS = (
    "opreg_devices",
    "opreg_triton_interpret",
    "opreg_seed",
    "opreg_compile_backend",
    "opreg_bench",
    "opreg_max_ratio",
)
_INI_KEYS = (*(o for o in _OPTIONS if o != "opreg_bench"), "opreg_unchecked")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("opreg", "opreg operator checks")
    group.addoption(
        "--opreg-device",
        action="append",
        dest="opreg_devices",
        metavar="DEVICES",
        help="devices for tests using the opreg_device fixture: cpu, cuda, cuda:N, triton-cpu "
        "(comma-separated or repeated). Default, as for opreg check: cpu, cuda if present, and "
        "triton-cpu when Triton kernels can run on CPU here. cpu runs each op as registered "
        "for the CPU (the PyTorch fallback of a Triton op); triton-cpu is the CPU with every "
        "Triton op's Triton kernel run by Triton's interpreter, in every check.",
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
    group.addoption(
        "--opreg-bench",
        action="store_const",
        const=True,
        dest="opreg_bench",
        help="run the tests that use the opreg_bench fixture (benchmarks with budgets; "
        "skipped without this option)",
    )
    group.addoption(
        "--opreg-max-ratio",
        action="append",
        dest="opreg_max_ratio",
        metavar="RATIO=LIMIT",
        help="a budget for every opreg_bench call, as opreg bench --max-ratio: e.g. "
        "kernel/compiled=1.0 (repeatable)",
    )
    # Default None: "not set", so that the plugin can tell a project that uses it.
    parser.addini("opreg_devices", "default for --opreg-device", type="args", default=None)
    parser.addini("opreg_compile_backend", "default for --opreg-compile-backend", default=None)
    parser.addini(
        "opreg_triton_interpret",
        "default for --opreg-triton-interpret (auto, on, off); setting any opreg_* key turns "
        "the plugin's start-up on",
        default=None,
    )
    parser.addini("opreg_seed", "default for --opreg-seed", default=None)
    parser.addini(
        "opreg_max_ratio",
        "default for --opreg-max-ratio (RATIO=LIMIT ...)",
        type="args",
        default=None,
    )
    parser.addini(
        "opreg_unchecked",
        "fail (default) or skip: what a test of an op without sample_inputs does",
        default=None,
    )


def _used(config: pytest.Config) -> bool:
    """Whether the project uses the plugin: an opreg ini key set or an --opreg-* option given."""
    if _USED not in config.stash:
        # known_args_namespace: parsed already when the early start-up hook runs.
        given = config.known_args_namespace
        config.stash[_USED] = any(getattr(given, o, None) is not None for o in _OPTIONS) or any(
            config.getini(key) is not None for key in _INI_KEYS
        )
    return config.stash[_USED]


def _setting(config: pytest.Config, name: str, default: str) -> str:
    """An option's value, else its ini key's, else ``default``."""
    value = getattr(config.known_args_namespace, name, None)
    if value is None:
        value = config.getini(name)
    return default if value is None else str(value).strip()


def _interpret_mode(config: pytest.Config) -> str:
    mode = _setting(config, "opreg_triton_interpret", "auto").lower()
    if mode not in ("auto", "on", "off"):
        raise pytest.UsageError(f"opreg_triton_interpret must be auto, on or off, got {mode!r}")
    return mode


def _unchecked_mode(config: pytest.Config) -> str:
    mode = str(config.getini("opreg_unchecked") or "fail").strip().lower()
    if mode not in ("fail", "skip"):
        raise pytest.UsageError(f"opreg_unchecked must be fail or skip, got {mode!r}")
    return mode


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Turn Triton's interpreter on before conftest files (which may import Triton) load."""
    if _used(early_config):
        _start_interpreter(early_config)


def _start_interpreter(config: pytest.Config) -> None:
    if _INTERPRETER_AT_START in config.stash:
        return
    from .interpreter import interpreter_enabled, start_interpreter

    start_interpreter(_interpret_mode(config))
    config.stash[_INTERPRETER_AT_START] = interpreter_enabled()


def _cuda_present() -> bool:
    import torch

    return torch.cuda.is_available()


def _ini_keys(config: pytest.Config) -> list[str]:
    """The keys of the project's pytest configuration (``config.inipath``), read from the file
    (pytest's own list of them is private): ``[tool.pytest.ini_options]`` or ``[tool.pytest]``
    of a pyproject.toml, ``[pytest]`` or ``[tool:pytest]`` of an ini-style file."""
    import configparser
    import tomllib

    path = config.inipath
    if path is None or not path.is_file():
        return []
    try:
        if path.suffix == ".toml":
            tool = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {})
            table = tool.get("pytest", {})
            return [*table.get("ini_options", {}), *table]
        parser = configparser.ConfigParser(interpolation=None)
        parser.read(path, encoding="utf-8")
        sections = [name for name in ("pytest", "tool:pytest") if parser.has_section(name)]
        return [key for name in sections for key in parser.options(name)]
    except (OSError, ValueError, configparser.Error):  # pytest reports a broken file itself
        return []


def _check_ini_keys(config: pytest.Config) -> None:
    """A misspelled ``opreg_*`` ini key is a usage error naming it (pytest only warns)."""
    for key in _ini_keys(config):
        if key.startswith("opreg") and key not in _INI_KEYS:
            close = difflib.get_close_matches(str(key), _INI_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise pytest.UsageError(
                f"unknown opreg ini key {key!r}{hint}; the keys: {', '.join(_INI_KEYS)}"
            )


def pytest_configure(config: pytest.Config) -> None:
    for line in _MARKERS:
        config.addinivalue_line("markers", line)
    _check_ini_keys(config)
    if _used(config):  # validate now: a bad value is a usage error before collection
        _start_interpreter(config)  # in case the early hook did not run (plugin given with -p)
        _unchecked_mode(config)
        _devices(config)
        _backend(config)
        _budgets(config)


def _devices(config: pytest.Config) -> tuple[str, ...]:
    """The devices of ``--opreg-device`` / ``opreg_devices`` (default: ``default_devices()``,
    the same as ``opreg check``'s)."""
    if _DEVICES not in config.stash:
        from .devices import default_devices, parse_devices

        chosen: list[str] = config.getoption("opreg_devices") or list(
            config.getini("opreg_devices") or ()
        )
        try:
            config.stash[_DEVICES] = parse_devices(chosen) if chosen else default_devices()
        except ValueError as exc:
            raise pytest.UsageError(f"--opreg-device: {exc}") from None
    return config.stash[_DEVICES]


def _backend(config: pytest.Config) -> str:
    """The compile check's backend (``--opreg-compile-backend``; default inductor)."""
    if _BACKEND not in config.stash:
        from .checks.compile import check_backend

        try:
            backend = _setting(config, "opreg_compile_backend", "inductor")
            config.stash[_BACKEND] = check_backend(backend)
        except ValueError as exc:
            raise pytest.UsageError(f"--opreg-compile-backend: {exc}") from None
    return config.stash[_BACKEND]


def _budgets(config: pytest.Config) -> dict[str, float]:
    """The budgets of ``--opreg-max-ratio`` / ``opreg_max_ratio`` (a bad one: usage error)."""
    from .bench.budgets import parse_budgets

    given = config.getoption("opreg_max_ratio") or list(config.getini("opreg_max_ratio") or ())
    try:
        return parse_budgets(given)
    except ValueError as exc:
        raise pytest.UsageError(f"--opreg-max-ratio: {exc}") from None


def pytest_report_header(config: pytest.Config) -> str | None:
    if not _used(config):
        return None
    from .interpreter import interpreter_enabled
    from .paths import paths_summary

    devices = ", ".join(_devices(config))
    interpreter = "on" if interpreter_enabled() else "off"
    warning = _triton_warning()
    note = "" if warning is None else f"\nopreg: {warning}"
    paths = f"\nopreg: {paths_summary()}"
    return f"opreg: devices {devices}; Triton interpreter {interpreter}{paths}{note}"


def _triton_warning() -> str | None:
    """A line when Triton is installed but cannot run (fails to import, or is disabled)."""
    from .interpreter import triton_installed, triton_problem

    if not triton_installed():
        return None
    problem = triton_problem()
    return None if problem is None else f"{problem}; every Triton op runs its PyTorch fallback"


def _kernels_not_run(config: pytest.Config) -> list[str]:
    """Messages for the Triton ops seen by opreg_check whose Triton kernel never ran."""
    from .errors import kernel_not_run_message
    from .interpreter import kernel_name, kernel_not_run_reason

    seen = config.stash.get(_TRITON_OPS, {})
    missing = [op for op, ran in seen.items() if not ran]
    if not missing:
        return []
    reason = kernel_not_run_reason(_devices(config))
    return [kernel_not_run_message(op, kernel_name(op), reason) for op in missing]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A Triton op whose kernel no check ran is not green (as in ``opreg check``)."""
    config = session.config
    if not _used(config) or not _kernels_not_run(config):
        return
    if _unchecked_mode(config) == "fail" and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not _used(config):
        return
    messages = _kernels_not_run(config)
    if messages:
        verdict = (
            "accepted by opreg_unchecked = skip"
            if _unchecked_mode(config) == "skip"
            else ("a failure: the run exits 1; opreg_unchecked = skip accepts it")
        )
        terminalreporter.write_sep("=", f"opreg: Triton kernels not run ({verdict})")
        for message in messages:
            terminalreporter.write_line(message)
    warning = None if messages else _triton_warning()  # else the messages say it
    if warning is not None:
        terminalreporter.write_sep("=", "opreg: Triton")
        terminalreporter.write_line(f"Warning: {warning}")


# -- markers -------------------------------------------------------------------------------


def triton_runnable() -> str | None:
    """Why Triton kernels cannot run here, or None if they can."""
    from .interpreter import interpreter_enabled, kernels_without_triton, triton_installed

    if not triton_installed():
        return "Triton is not installed"
    if kernels_without_triton():
        return "Triton is disabled or fails to import (see opreg_kernels.has_triton())"
    if not _cuda_present() and not interpreter_enabled():
        return "no CUDA device and Triton's interpreter is off (--opreg-triton-interpret=on)"
    return None


def _gpus_needed(marker: pytest.Mark) -> int:
    if marker.kwargs:
        unknown = next(iter(marker.kwargs))
        raise pytest.UsageError(
            f"needs_gpus() got an unexpected keyword argument {unknown!r}; "
            "it takes the count as its one positional argument: needs_gpus(2)"
        )
    args = marker.args or (2,)
    count = args[0]
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise pytest.UsageError(f"needs_gpus(n) takes a positive int, got {count!r}")
    return count


def _not_checked(config: pytest.Config, message: str) -> None:
    """Fail the test (or skip it, with ``opreg_unchecked = skip``): nothing checks its op."""
    if _unchecked_mode(config) == "skip":
        pytest.skip(message)
    pytest.fail(f"{message} (or set opreg_unchecked = skip in the pytest ini)", pytrace=False)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """A test of an op nothing can check fails (a failed test, not a setup error)."""
    unchecked = item.get_closest_marker("opreg_unchecked")
    if unchecked is not None:
        _not_checked(item.config, str(unchecked.args[0] if unchecked.args else "not checked"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("needs_cuda") is not None and not _cuda_present():
        pytest.skip("needs CUDA: no CUDA device is present")
    if item.get_closest_marker("needs_triton") is not None:
        reason = triton_runnable()
        if reason is not None:
            pytest.skip(f"needs Triton: {reason}")
    marker = item.get_closest_marker("needs_gpus")
    if marker is not None:
        from .devices import cuda_device_count

        wanted, present = _gpus_needed(marker), cuda_device_count()
        if present < wanted:
            pytest.skip(f"needs {wanted} GPUs, {present} present")


# -- fixtures ------------------------------------------------------------------------------


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "opreg_device" in metafunc.fixturenames:
        devices = _devices(metafunc.config)
        metafunc.parametrize("opreg_device", devices, indirect=True, ids=list(devices))


@pytest.fixture(scope="session")
def opreg_devices(pytestconfig: pytest.Config) -> tuple[str, ...]:
    """The device names chosen for this run (``--opreg-device``), e.g. ``("cpu", "cuda")``."""
    return _devices(pytestconfig)


@pytest.fixture
def opreg_triton_cpu(pytestconfig: pytest.Config) -> Iterator[Any]:
    """Triton kernels of opreg-kernels ops run on CPU, through Triton's interpreter, for one test.

    Sets ``TRITON_INTERPRET=1``, registers ``"cpu"`` as a Triton device type and gives every
    Triton op a CPU kernel; all of it is undone after the test. Skips the test without Triton
    or opreg-kernels, and on a CUDA machine whose run did not start with the interpreter on
    (kernels already compiled for the GPU cannot run on CPU tensors).
    """
    from .interpreter import TritonUnavailable, triton_device

    if _cuda_present() and not pytestconfig.stash.get(_INTERPRETER_AT_START, False):
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
    from .devices import TRITON_CPU, device_problem, torch_device

    name: str = getattr(request, "param", "cpu")
    if name == TRITON_CPU:
        request.getfixturevalue("opreg_triton_cpu")
    else:
        problem = device_problem(name)
        if problem is not None:
            pytest.skip(problem)
    return torch_device(name)


@pytest.fixture
def opreg_namespace() -> Iterator[OpNamespace]:
    """A fresh, unique op namespace; every opreg op registered in it is removed after the test."""
    from .namespace import fresh_namespace

    with fresh_namespace() as namespace:
        yield namespace


@pytest.fixture
def opreg_seed(request: pytest.FixtureRequest) -> Iterator[int]:
    """Seeds torch and ``random`` deterministically for the test (base seed + test id).

    The global RNG states are restored afterwards, so tests stay independent.
    """
    import torch

    try:
        base = int(_setting(request.config, "opreg_seed", "0"))
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


CheckRunner = Callable[..., "OpReport"]


@pytest.fixture
def opreg_check(request: pytest.FixtureRequest) -> CheckRunner:
    """``opreg_check(op, checks=..., device=..., samples=..., **check_op_kwargs)``.

    Runs :func:`opreg_testing.check_op`, fails the test with the checks' messages if any
    failed, and returns the report otherwise. An op without samples fails the test with a
    message saying how to add ``sample_inputs`` (skips it with ``opreg_unchecked = skip``);
    a run whose checks all skipped (none of them applies, e.g. ``kernel`` on a device without
    a kernel) skips the test with the reasons: a skip, never a pass. The device defaults to
    the test's ``opreg_device`` when it uses that fixture (by its name: ``triton-cpu`` runs the
    Triton kernels, and skip reasons say ``on triton-cpu``), else CPU; on ``triton-cpu`` an op
    without a Triton kernel is skipped when ``cpu`` is checked too (checked there). The compile
    check uses ``--opreg-compile-backend`` unless ``options`` say otherwise. Other keywords:
    ``samples``, ``tolerance`` and ``progress`` of ``check_op``; another one is a
    ``TypeError`` naming it. Each Triton op's run is noted: one whose Triton kernel no check
    ran fails the session (see the module docstring).
    """
    from .devices import TRITON_CPU
    from .errors import NoSamplesError, OpCheckFailed, unchecked_message
    from .runner import check_op
    from .target import resolve

    backend = _backend(request.config)
    config = request.config

    def run(
        op: OpLike,
        checks: str | Iterable[str] | None = None,
        *,
        device: Any = None,
        options: Mapping[str, Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> OpReport:
        for key in kwargs:
            if key not in _CHECK_OP_KEYWORDS:
                close = difflib.get_close_matches(key, _OPREG_CHECK_KEYWORDS, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise TypeError(
                    f"opreg_check() got an unexpected keyword argument {key!r}{hint}; "
                    f"it accepts: {', '.join(_OPREG_CHECK_KEYWORDS)}"
                )
        target = resolve(op)
        if device is None and "opreg_device" in request.fixturenames:
            request.getfixturevalue("opreg_device")  # sets the device up (triton-cpu: kernels)
            params = getattr(getattr(request.node, "callspec", None), "params", {})
            device = params.get("opreg_device", "cpu")  # the name: triton-cpu, not cpu
            if _checked_on_cpu_instead(config, target, device):
                pytest.skip(
                    f"{target.name} on {TRITON_CPU}: the op has no Triton kernel, so "
                    f"{TRITON_CPU} runs what cpu runs: it is checked on cpu"
                )
        merged = {"compile": {"backend": backend}} if checks is None or "compile" in checks else {}
        for check, opts in (options or {}).items():
            merged[check] = {**merged.get(check, {}), **opts}
        try:
            report = check_op(op, checks=checks, device=device, options=merged, **kwargs)
        except NoSamplesError:
            if kwargs.get("samples") is not None:
                raise  # the caller's own (empty) samples: a plain error
            _record_triton(config, target.opreg, None)
            _not_checked(request.config, unchecked_message(target.name, has_samples=False))
            raise  # not reached: _not_checked fails or skips
        _record_triton(config, target.opreg, report)
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


#: The keywords of ``opreg_check`` beyond ``checks``, ``device`` and ``options``: those of
#: ``check_op`` it passes on.
_CHECK_OP_KEYWORDS = ("samples", "tolerance", "progress")
_OPREG_CHECK_KEYWORDS = ("checks", "device", "options", *_CHECK_OP_KEYWORDS)


def _checked_on_cpu_instead(config: pytest.Config, target: Any, device: str) -> bool:
    """Whether ``target`` is a test's op on triton-cpu that has no Triton kernel, in a run
    that checks cpu too: triton-cpu would run the same code again."""
    from .devices import TRITON_CPU
    from .interpreter import triton_info

    if device != TRITON_CPU or "cpu" not in _devices(config):
        return False
    return target.opreg is None or triton_info(target.opreg) is None


def _record_triton(config: pytest.Config, op: Any, report: OpReport | None) -> None:
    """Note a Triton op's check, and whether it ran the op's Triton kernel."""
    from .interpreter import triton_info, triton_ran

    if op is None or triton_info(op) is None:
        return
    seen = config.stash.setdefault(_TRITON_OPS, {})
    seen[op.qualname] = seen.get(op.qualname, False) or (report is not None and triton_ran(report))


@pytest.fixture
def opreg_bench(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``opreg_bench(op, max_ratio={"kernel/compiled": 1.0}, **bench_op_kwargs)``.

    Runs :func:`opreg_testing.bench_op` and fails the test when a ratio exceeds its budget
    (``max_ratio``, over the run's ``--opreg-max-ratio``), naming the op, the row and the
    figure; returns the :class:`~opreg_testing.BenchReport` otherwise. Off by default:
    a test using it skips unless the run passes ``--opreg-bench`` (timings belong in a job
    of their own, on a quiet machine). The device defaults to the test's ``opreg_device``
    when it uses that fixture (``triton-cpu`` skips: an interpreter's times say nothing).
    """
    config = request.config
    if not config.getoption("opreg_bench"):
        pytest.skip("benchmarks are off: pass --opreg-bench to run the opreg_bench tests")
    budgets = _budgets(config)

    def run(op: Any, *, max_ratio: Mapping[str, float] | None = None, **kwargs: Any) -> Any:
        from .bench import bench_op
        from .bench.budgets import parse_budget, violations
        from .devices import TRITON_CPU

        limits = dict(budgets)
        for name, limit in (max_ratio or {}).items():
            parse_budget(f"{name}={limit}")  # a bad name or limit: ValueError naming the ratios
            limits[name] = float(limit)
        if kwargs.get("device") is None and "opreg_device" in request.fixturenames:
            params = getattr(getattr(request.node, "callspec", None), "params", {})
            device = params.get("opreg_device", "cpu")
            if device == TRITON_CPU:
                pytest.skip(f"opreg_bench: {TRITON_CPU} is an interpreter, not benchmarked")
            kwargs["device"] = device
        report = bench_op(op, **kwargs)
        excess = violations(report, limits)
        if excess:
            lines = "\n".join(f"  {v.message}" for v in excess)
            pytest.fail(f"opreg bench: budget exceeded:\n{lines}", pytrace=False)
        return report

    return run
