"""The mutation corpus: loads the corpus package, keeps the score and prints it at the end.

The score (caught / total mutants, false alarms / total correct ops) is printed in the terminal
summary of every run that collected the corpus, whatever the output capture; with the
environment variable ``OPREG_MUTATION_SCORE`` set to a file path, it is also written there as
JSON.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

# Triton's interpreter must be on before the corpus' Triton kernels are defined (on their first
# use); without CUDA, turn it on as opreg-kernels' own tests do.
if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

#: Where the score is written as JSON when set.
SCORE_ENV = "OPREG_MUTATION_SCORE"
_PACKAGE = "opreg_mutation_corpus"


def _load_corpus() -> ModuleType:
    """Import ``corpus/`` as the package ``opreg_mutation_corpus`` (tests are no package)."""
    if _PACKAGE in sys.modules:
        return sys.modules[_PACKAGE]
    folder = Path(__file__).parent / "corpus"
    spec = importlib.util.spec_from_file_location(
        _PACKAGE, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_PACKAGE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_PACKAGE]
        raise
    return module


corpus = _load_corpus()


@dataclass
class Score:
    """Outcomes of the corpus entries that ran in this session."""

    mutants: dict[str, dict[str, Any]] = field(default_factory=dict)
    correct: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  #: entry name -> why it did not run

    def caught(self) -> list[str]:
        return [n for n, r in self.mutants.items() if r["caught"]]

    def false_alarms(self) -> list[str]:
        return [n for n, r in self.correct.items() if r["false_alarm"]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "mutants": {"caught": len(self.caught()), "total": len(self.mutants)},
            "correct": {"false_alarms": len(self.false_alarms()), "total": len(self.correct)},
            "uncaught": {n: r for n, r in self.mutants.items() if not r["caught"]},
            "false_alarms": {n: r for n, r in self.correct.items() if r["false_alarm"]},
            "skipped": dict(self.skipped),
        }


_SCORE = pytest.StashKey[Score]()


def _score(config: pytest.Config) -> Score:
    if _SCORE not in config.stash:
        config.stash[_SCORE] = Score()
    return config.stash[_SCORE]


@pytest.fixture
def mutation_score(pytestconfig: pytest.Config) -> Score:
    """The session's score, to which each corpus test adds its outcome."""
    return _score(pytestconfig)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    score = config.stash.get(_SCORE, None)
    if score is None or not (score.mutants or score.correct or score.skipped):
        return
    write = terminalreporter.write_line
    terminalreporter.section("opreg mutation corpus")
    skipped = f" ({len(score.skipped)} entries skipped)" if score.skipped else ""
    write(
        f"mutants caught: {len(score.caught())}/{len(score.mutants)}; "
        f"false alarms: {len(score.false_alarms())}/{len(score.correct)} correct ops{skipped}"
    )
    for name, result in score.mutants.items():
        if not result["caught"]:
            needs = f" [needs: {result['needs']}]" if result["needs"] else ""
            write(f"  uncaught {name} ({result['check']}): {result['detail']}{needs}")
    for name, result in score.correct.items():
        if result["false_alarm"]:
            write(f"  false alarm {name}: {result['detail']}")
    for name, reason in score.skipped.items():
        write(f"  skipped {name}: {reason}")
    path = os.environ.get(SCORE_ENV)
    if path:
        Path(path).write_text(json.dumps(score.to_dict(), indent=2) + "\n")
        write(f"score written to {path}")
