"""The exceptions the checks raise: one failure names the op, the check, the sample and the case."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .compare import Mismatch


class CheckFailure(AssertionError):
    """A check found the op inconsistent.

    It is an ``AssertionError`` so that pytest reports it as a test failure. The message
    names the op, the check, the sample, the case within the check (``in_dims``, backend, ...)
    and, for value comparisons, the first mismatch; the same facts are attributes.
    """

    def __init__(
        self,
        op: str,
        check: str,
        problem: str,
        *,
        sample: str | None = None,
        case: str | None = None,
        mismatch: Mismatch | None = None,
    ) -> None:
        self.op = op
        self.check = check
        self.problem = problem
        self.sample = sample
        self.case = case
        self.mismatch = mismatch
        super().__init__(self.render())

    def render(self) -> str:
        """The multi-line message: headline, then sample, case and problem."""
        lines = [f"opreg {self.check} check failed for {self.op}"]
        if self.sample is not None:
            lines.append(f"  sample: {self.sample}")
        if self.case is not None:
            lines.append(f"  case:   {self.case}")
        problem = self.problem if self.mismatch is None else f"{self.problem}: {self.mismatch}"
        first, *rest = problem.splitlines() or [""]
        lines.append(f"  problem: {first}")
        lines.extend(f"    {line}" for line in rest)
        return "\n".join(lines)

    def summary(self) -> str:
        """One line, for tables: the problem (and mismatch) without the headline."""
        text = self.problem if self.mismatch is None else f"{self.problem}: {self.mismatch}"
        return text.splitlines()[0] if text else ""


class OpCheckFailed(AssertionError):
    """Several checks of one op failed; raised by :meth:`OpReport.raise_for_failures`."""

    def __init__(self, failures: list[CheckFailure]) -> None:
        self.failures = failures
        super().__init__("\n\n".join(str(f) for f in failures))


#: The smallest ``sample_inputs`` hook, quoted by the messages about ops nothing checked.
SAMPLE_INPUTS_EXAMPLE = (
    "sample_inputs=lambda device: [SampleInput((torch.randn(3, device=device),))]"
)


def unchecked_message(op: str, *, has_samples: bool) -> str:
    """Why nothing was checked on ``op`` and how to give it samples the checks can use."""
    if has_samples:
        why = f"nothing was checked on {op}: every check skipped"
        fix = "give it sample_inputs with arguments the checks can use"
    else:
        why = f"nothing was checked on {op}: it has no sample_inputs"
        fix = "register it with sample_inputs"
    return f"{why}; {fix}, e.g. {SAMPLE_INPUTS_EXAMPLE} (SampleInput from opreg_core)"


class NoSamplesError(ValueError):
    """The op carries no ``sample_inputs`` and no samples were passed."""


class SampleInputsError(RuntimeError):
    """An op's ``sample_inputs`` hook raised; the original error is the ``__cause__``."""


def kernel_not_run_message(op: str, kernel: str, reason: str) -> str:
    """Why a Triton op is not green: its Triton kernel ran on no device, only its fallback."""
    return (
        f"{op}: its Triton kernel ({kernel}) ran on no device in this run, so only its PyTorch "
        f"fallback was checked: {reason}"
    )
