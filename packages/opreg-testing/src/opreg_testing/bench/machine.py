"""The header of a report: the machine, the versions, the GPU's clocks, how timing was done,
and each device's measured copy bandwidth (the yardstick of the bandwidth column)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
from typing import Any

import torch

from .timing import Settings, device_rounds, flush_bytes, summarize

#: Bytes per buffer of the copy-bandwidth measurement, per device type.
COPY_BYTES = {"cuda": 512 * 2**20, "cpu": 64 * 2**20}


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _load() -> str:
    """The load average over 1, 5 and 15 minutes: other work on the machine skews times."""
    try:
        one, five, fifteen = os.getloadavg()
    except (OSError, AttributeError):
        return "unknown"
    return f"{one:.2f} {five:.2f} {fifteen:.2f} (1, 5, 15 min) on {os.cpu_count()} logical cores"


def _clocks(index: int) -> str:
    """SM and memory clocks now and at most, from nvidia-smi (or why they are unknown)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "unknown (nvidia-smi not found)"
    query = "clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.draw,temperature.gpu"
    try:
        done = subprocess.run(
            [smi, f"--id={index}", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown (nvidia-smi: {type(exc).__name__})"
    sm, sm_max, mem, mem_max, power, temp = [v.strip() for v in done.stdout.split(",")][:6]
    return f"SM {sm} (max {sm_max}), memory {mem} (max {mem_max}), {power}, {temp} C"


def header(devices: list[torch.device], settings: Settings, compiled: bool) -> dict[str, Any]:
    """Machine, versions, clocks and the timing method, as the report's header."""
    data: dict[str, Any] = {
        "machine": f"{platform.node()} ({platform.system()} {platform.release()}, "
        f"{platform.machine()})",
        "cpu": f"{_cpu_model()}, {os.cpu_count()} logical cores, "
        f"torch threads {torch.get_num_threads()}",
        "load": _load(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "triton": _version("triton") or "not installed",
        "opreg": {
            "opreg-core": _version("opreg-core"),
            "opreg-kernels": _version("opreg-kernels"),
            "opreg-testing": _version("opreg-testing"),
        },
        "rounds": settings.rounds,
        "warmup": settings.warmup,
        "timing": {},
        "compiled": "torch.compile(fallback, fullgraph=True, dynamic=False), Inductor; "
        "compile time not counted"
        if compiled
        else "off (--no-compile)",
    }
    gpus = []
    for device in devices:
        if device.type == "cuda":
            index = device.index if device.index is not None else torch.cuda.current_device()
            props = torch.cuda.get_device_properties(index)
            l2 = getattr(props, "L2_cache_size", 0) / 2**20
            gpus.append(
                f"cuda:{index} {props.name}, {props.total_memory / 2**30:.0f} GiB, "
                f"{props.multi_processor_count} SMs, L2 {l2:.0f} MiB; "
                f"CUDA {torch.version.cuda}; clocks: {_clocks(index)}"
            )
            flush = flush_bytes(device) if settings.flush_l2 else 0
            flushed = (
                f", L2 flushed before each call ({flush // 2**20} MiB written)" if flush else ""
            )
            data["timing"][str(device)] = (
                f"CUDA events around each call{flushed}; {settings.rounds} interleaved rounds "
                f"after {settings.warmup} warm-up calls; median, spread = half the interquartile "
                "range"
            )
        else:
            data["timing"][str(device)] = (
                "plain timer (time.perf_counter around a batch of calls lasting >= 2 ms: the CPU "
                f"has no events, no cache flush); {settings.rounds} interleaved rounds after "
                f"{settings.warmup} warm-up calls; median, spread = half the interquartile range"
            )
    if gpus:
        data["gpus"] = gpus
    data["host timing"] = (
        "time.perf_counter around a batch of queued calls (tiny inputs), "
        f"{settings.host_rounds} interleaved rounds"
    )
    return data


def copy_gbps(device: torch.device, settings: Settings) -> float:
    """The device's copy bandwidth in GB/s: ``dst.copy_(src)`` of a large buffer, bytes read
    plus bytes written over the median time."""
    nbytes = COPY_BYTES.get(device.type, COPY_BYTES["cpu"])
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    quick = Settings(rounds=max(5, min(settings.rounds, 10)), warmup=2, flush_l2=False)
    times = device_rounds([lambda: dst.copy_(src)], device, quick)[0]
    return 2 * nbytes / summarize(times).median / 1e9


__all__ = ["COPY_BYTES", "copy_gbps", "header"]
