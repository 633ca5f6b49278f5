"""opreg ops on DTensor: 2 ranks, one launch of the worker for all checks of a backend.

``dtensor_worker.py`` runs every check on both ranks under ``torch.distributed.run``; each test
here asserts that one check passed on every rank. CPU ranks with gloo (loopback) everywhere;
on a host with 2 GPUs, also one GPU per rank with NCCL (NVLink multicast off), with the
checks that the Triton kernels run on each rank's own GPU under the device guard. Skipped
where torch.distributed or gloo is missing.
"""

from __future__ import annotations

import importlib.util
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
    "compiled",
    "autocast",
]


CUDA_CHECKS = ["triton_on_local_shard", "device_guard"]
Reports = list[dict[str, str]]


def torchrun(
    script: Path, *args: str, timeout: int, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` on 2 local ranks (rendezvous on a free loopback port)."""
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", **extra_env}
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc-per-node={RANKS}", str(script), *args,
    ]  # fmt: skip
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def run_worker(out: Path, device: str, timeout: int) -> Reports:
    """Launch the worker once on 2 ranks; its reports."""
    env = {"OPREG_DIST_DEVICE": device}
    if device == "cuda":
        env.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    proc = torchrun(WORKER, str(out), timeout=timeout, **env)
    reports = [out / f"rank{r}.json" for r in range(RANKS)]
    if proc.returncode != 0 or not all(p.exists() for p in reports):
        pytest.fail(f"the DTensor worker failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return [json.loads(p.read_text()) for p in reports]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Reports:
    return run_worker(tmp_path_factory.mktemp("dtensor"), "cpu", timeout=120)


@pytest.fixture(scope="module")
def cuda_results(tmp_path_factory: pytest.TempPathFactory) -> Reports:
    if not torch.distributed.is_nccl_available():
        pytest.skip("torch.distributed has no NCCL")
    return run_worker(tmp_path_factory.mktemp("dtensor_cuda"), "cuda", timeout=400)


def test_every_check_is_listed(results: Reports) -> None:
    assert sorted(k for k in results[0] if not k.startswith("_")) == sorted(CHECKS)
    assert [r["_device"] for r in results] == ["cpu", "cpu"]


@pytest.mark.parametrize("check", CHECKS)
def test_check(results: Reports, check: str) -> None:
    for rank, report in enumerate(results):
        assert report[check] == "ok", f"rank {rank}:\n{report[check]}"


@pytest.mark.needs_gpus(RANKS)
def test_every_check_is_listed_nccl(cuda_results: Reports) -> None:
    assert sorted(k for k in cuda_results[0] if not k.startswith("_")) == sorted(
        CHECKS + CUDA_CHECKS
    )
    assert [r["_device"] for r in cuda_results] == [f"cuda:{r}" for r in range(RANKS)]


@pytest.mark.needs_gpus(RANKS)
@pytest.mark.parametrize("check", CHECKS + CUDA_CHECKS)
def test_check_nccl(cuda_results: Reports, check: str) -> None:
    for rank, report in enumerate(cuda_results):
        assert report[check] == "ok", f"rank {rank}:\n{report[check]}"


def test_the_example_runs_on_two_ranks() -> None:
    """examples/distributed/dtensor_example.py under torch.distributed.run, as the README says
    (NCCL where each rank has a GPU, gloo otherwise)."""
    example = Path(__file__).parents[2] / "examples" / "distributed" / "dtensor_example.py"
    proc = torchrun(example, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    checks = 4 if importlib.util.find_spec("opreg_kernels") else 3  # + philox_normal
    assert proc.stdout.count("equals unsharded: True") == checks, proc.stdout
    assert "False" not in proc.stdout
