"""The OpInfo sweep as tests: every op of PyTorch's ``op_db`` registered with opreg and
compared with the native op (see sweep.py, build.py, transforms.py, outcomes.py).

By default a quick subset runs (every ``QUICK_STEP``-th op of ``op_db``, one sample each);
``OPREG_OPINFO=full`` sweeps every op (``OPREG_OPINFO_SAMPLES`` samples each, default 1):
``hatch run opinfo``. The summary line is printed, and the per-op table is written to
``OPREG_OPINFO_REPORT`` (default ``$TMPDIR/opreg-opinfo-<mode>.json``).

One test per must-be-zero category, and one per known opreg defect (tests named
``test_known_defect_*``): those fail until the defect's fix lands, and keep failing loudly if
it comes back; ``test_no_other_opreg_raises`` guards every raise that is not a known defect.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

from .outcomes import KNOWN_DEFECTS, RULE_CANT, TORCH_LIMITS, Case, Tally
from .sweep import op_db, sweep

#: The quick subset: every QUICK_STEP-th entry of op_db (702 in torch 2.13: 176 entries).
QUICK_STEP = 4
#: The quick subset must sweep at least this many ops (entries not expressible don't count).
QUICK_MIN_OPS = 140
#: The full sweep must sweep at least this many ops.
FULL_MIN_OPS = 550

MODE = os.environ.get("OPREG_OPINFO", "quick")


def _report_path() -> str:
    return os.environ.get("OPREG_OPINFO_REPORT") or os.path.join(
        tempfile.gettempdir(), f"opreg-opinfo-{MODE}.json"
    )


@pytest.fixture(scope="module")
def tally(request: pytest.FixtureRequest) -> Iterator[Tally]:
    if MODE not in ("quick", "full"):
        raise ValueError(f"OPREG_OPINFO must be 'quick' or 'full', got {MODE!r}")
    db = op_db()
    if MODE == "full":
        result = sweep(db, int(os.environ.get("OPREG_OPINFO_SAMPLES", "1")))
    else:
        result = sweep(db[::QUICK_STEP], 1)
    path = _report_path()
    result.write(path)
    capture = request.config.pluginmanager.getplugin("capturemanager")
    text = f"\n{result.summary()}\nper-op table: {path}"
    if capture is None:
        print(text)
    else:
        with capture.global_and_fixture_disabled():
            print(text)
    yield result


def _listing(cases: list[Case]) -> str:
    return "\n".join(
        f"  {c.op}[{c.sample}] {c.case}: " + (f"[{c.defect}] " if c.defect else "") + c.reason
        for c in cases
    )


def test_coverage(tally: Tally) -> None:
    minimum = FULL_MIN_OPS if MODE == "full" else QUICK_MIN_OPS
    assert len(tally.ops()) >= minimum, tally.summary()
    counts = tally.counts()
    assert counts["pass"] > 10 * len(tally.ops()) // 2, tally.summary()
    # Every case that did not pass says why.
    assert all(c.reason for c in tally.cases if c.category != "pass")
    # Every documented torch limit used is in the table (and shown by test_torch_limits.py).
    assert {c.limit for c in tally.cases if c.limit} <= {p.key for p in TORCH_LIMITS}


def test_no_silent_mismatch(tally: Tally) -> None:
    cases = tally.of("silent_mismatch")
    assert not cases, f"{len(cases)} silent mismatches:\n{_listing(cases)}"


def test_no_false_alarm(tally: Tally) -> None:
    cases = tally.of("false_alarm")
    assert not cases, f"{len(cases)} check_op false alarms:\n{_listing(cases)}"


def test_no_other_opreg_raises(tally: Tally) -> None:
    """opreg raises where the native op works, other than the known defects below."""
    cases = [c for c in tally.of("opreg_raises") if not c.defect]
    assert not cases, f"{len(cases)} opreg raises where native works:\n{_listing(cases)}"


@pytest.mark.parametrize("defect", [p.key for p in KNOWN_DEFECTS])
def test_known_defect_fixed(tally: Tally, defect: str) -> None:
    """No case hits a fixed opreg defect (they would come back loudly; see KNOWN_DEFECTS)."""
    cases = [c for c in tally.of("opreg_raises") if c.defect == defect]
    what = next(p.what for p in KNOWN_DEFECTS if p.key == defect)
    assert not cases, f"known defect {defect} ({what}): {len(cases)} cases:\n{_listing(cases)}"


def test_rule_cant_is_only_the_expanded_input_contract(tally: Tally) -> None:
    """Every ``rule_cant`` case is a generic rule's own raise under opreg's contract, shown by
    running the rule alone (outcomes.RULE_CANT), never anything else."""
    cases = [c for c in tally.of("rule_cant") if c.defect not in {p.key for p in RULE_CANT}]
    assert not cases, _listing(cases)
