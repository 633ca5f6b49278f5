"""Structured results: one :class:`CheckResult` per check, an :class:`OpReport` per op."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import CheckFailure, OpCheckFailed

Status = Literal["passed", "failed", "skipped"]


@dataclass
class CheckResult:
    """The outcome of one check on one op.

    ``reason`` says why a check was skipped, or (one line) why it failed; ``failure`` holds the
    full :class:`CheckFailure`. ``info`` carries check-specific facts, e.g. for vmap which
    batching path ran (``info["batching"]``). ``notes`` are one-line facts worth reading: of
    a passed check, what it accepted or could not check, e.g. the autograd check's ``"once
    differentiable: double backward raises ..."`` for an op whose backward declines second
    derivatives with a clear error, or the export check's ``"not checked: torch.export.load
    in another process, ..."`` for an op registered from ``__main__``; of any check, that it
    ran over its time budget (``"autograd took 42 s, over its 30 s budget: ..."``).
    """

    check: str
    op: str
    status: Status
    duration: float = 0.0
    reason: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    failure: CheckFailure | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    @property
    def skipped(self) -> bool:
        return self.status == "skipped"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the failure as its full message)."""
        return {
            "check": self.check,
            "op": self.op,
            "status": self.status,
            "duration_s": round(self.duration, 4),
            "reason": self.reason,
            "message": str(self.failure) if self.failure is not None else None,
            "info": self.info,
            "notes": list(self.notes),
        }


@dataclass
class OpReport:
    """Every check that ran on one op (on one device)."""

    op: str
    device: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No check failed (skipped checks do not count against the op)."""
        return not any(r.failed for r in self.results)

    @property
    def checked(self) -> bool:
        """At least one check passed: the op was really checked, not only skipped.

        A report whose checks all skipped (no samples, or none a check could use) is ``ok``
        but not ``checked``; ``opreg check`` counts it as a failure unless told otherwise.
        """
        return any(r.passed for r in self.results)

    @property
    def failures(self) -> list[CheckFailure]:
        return [r.failure for r in self.results if r.failure is not None]

    def by_status(self, status: Status) -> list[str]:
        """Names of the checks that ended with ``status``."""
        return [r.check for r in self.results if r.status == status]

    def __getitem__(self, check: str) -> CheckResult:
        for result in self.results:
            if result.check == check:
                return result
        ran = ", ".join(r.check for r in self.results)
        raise KeyError(f"check {check!r} did not run on {self.op} (ran: {ran})")

    def raise_for_failures(self) -> None:
        """Raise the failure of a failed check (``OpCheckFailed`` for several); else nothing."""
        failures = self.failures
        if len(failures) == 1:
            raise failures[0]
        if failures:
            raise OpCheckFailed(failures)

    def summary(self) -> str:
        """``op on device: passed fake, autograd (note); skipped kernel (why)``: the reason of
        each check that did not pass, the notes of each that did."""
        parts = []
        for status in ("failed", "passed", "skipped"):
            names = [
                r.check + (f" ({why})" if (why := _explanation(r)) else "")
                for r in self.results
                if r.status == status
            ]
            if names:
                parts.append(f"{status} {', '.join(names)}")
        return f"{self.op} on {self.device}: " + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "device": self.device,
            "ok": self.ok,
            "checked": self.checked,
            "results": [r.to_dict() for r in self.results],
        }


def _explanation(result: CheckResult) -> str:
    """What :meth:`OpReport.summary` says after a check's name: its notes if it passed, else
    its reason."""
    return "; ".join(result.notes) if result.passed else result.reason
