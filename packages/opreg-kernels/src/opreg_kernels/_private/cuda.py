"""torch: the current CUDA device and stream, without the public functions' per-call checks."""

from __future__ import annotations

from collections.abc import Callable

import torch

# Why: the dispatcher kernel switches to the tensors' device around each launch, and the fast
# launch passes the current stream to the compiled kernel. The public functions
# (torch.cuda.current_device / set_device, torch.cuda.current_stream(i).cuda_stream) re-check
# lazy initialisation and build a Stream object on every call: about a third of a microsecond
# more per launch. Public replacement: those functions, should they become as cheap.
# None in torch builds without CUDA (callers then use torch.get_device_module's functions, or
# Triton's own launch path). Checked on torch 2.11, 2.13, 2.14, 2.15 (present in each CUDA
# build; their behaviour is tested on a CUDA device only).

#: torch internals that exist only in builds with CUDA (or ROCm) support.
INTERNALS: tuple[str, ...] = (
    "torch._C._cuda_getDevice",
    "torch._C._cuda_setDevice",
    "torch._C._cuda_getCurrentRawStream",
)

#: ``torch.cuda.current_device()`` without its per-call checks (None without CUDA support).
cuda_current_device: Callable[[], int] | None = getattr(torch._C, "_cuda_getDevice", None)
#: ``torch.cuda.set_device(index)`` without its per-call checks (None without CUDA support).
cuda_set_device: Callable[[int], None] | None = getattr(torch._C, "_cuda_setDevice", None)
#: The raw ``cudaStream_t`` of the current stream of a device index (None without CUDA).
cuda_raw_stream: Callable[[int], int] | None = getattr(torch._C, "_cuda_getCurrentRawStream", None)
