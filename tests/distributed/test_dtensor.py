"""opreg ops on DTensor: 2 CPU ranks with gloo (loopback), one launch for all checks.

``dtensor_worker.py`` runs every check on both ranks under ``torch.distributed.run``; each test
here asserts that one check passed on every rank. Skipped where torch.distributed or gloo is
missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

WORKER = Path(__file__).with_name("dtensor_worker.py")
RANKS = 2
CHECKS = [
    "lazy_import",
    "elementwise",
    "elementwise_two_outputs",
    "elementwise_vmap",
    "rowwise",
    "rowwise_vmap",
    "rowwise_replicated_arg",
    "replicate",
    "custom",
    "no_rule_fails",
    "reregistration",
    "shipped_philox",
]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, str]]:
    """Launch the worker once on 2 ranks (rendezvous on a free loopback port); its reports."""
    out = tmp_path_factory.mktemp("dtensor")
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc-per-node={RANKS}", str(WORKER), str(out),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    reports = [out / f"rank{r}.json" for r in range(RANKS)]
    if proc.returncode != 0 or not all(p.exists() for p in reports):
        pytest.fail(f"the DTensor worker failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return [json.loads(p.read_text()) for p in reports]


def test_every_check_is_listed(results: list[dict[str, str]]) -> None:
    assert sorted(k for k in results[0] if not k.startswith("_")) == sorted(CHECKS)


@pytest.mark.parametrize("check", CHECKS)
def test_check(results: list[dict[str, str]], check: str) -> None:
    for rank, report in enumerate(results):
        assert report[check] == "ok", f"rank {rank}:\n{report[check]}"
