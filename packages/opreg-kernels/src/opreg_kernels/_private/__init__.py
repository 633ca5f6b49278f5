"""Every torch and Triton internal that opreg-kernels relies on, and nothing else: the boundary.

A torch or Triton upgrade that drops or changes one of these breaks here, in one place:
``tests/test_private_boundaries.py`` names each entry of :data:`INTERNALS` that no longer
resolves, and fails on any internal used outside this package. The rest of opreg-kernels takes
what it needs of these from here (``from ._private import x``).

Layout: one module per concern. Each holds the imports of its internals, a comment per group
of them saying why they are needed (``Why:``), the torch or Triton releases they were checked on
and the public API that would replace them, the functions built on them, and its own
``INTERNALS`` (each internal named in one module). This module is the list: it re-exports every
name the rest of opreg-kernels uses, and its :data:`INTERNALS` joins the concerns' lists.

- ``cuda``: the current CUDA device and stream (torch);
- ``launch``: launching a compiled Triton kernel, through its C launcher where the launcher
  layout is a tested one (:data:`LAYOUT_INTERNALS`), and Triton's launch hooks;
- ``jit``: a Triton kernel's autotune/heuristics layers and its JIT function's binder;
- ``autotune``: the config and meta-parameters ``Autotuner.run``/``Heuristics.run`` compute;
- ``driver``: Triton's active driver and benchmarker (autotuning under the interpreter);
- ``compiler``: the compiler-visible mode, and ``wrap_triton``'s dispatch off in eager (torch);
- ``functorch``: functorch's wrapped tensors (torch).

Importing this package imports neither Triton nor a GPU driver: the Triton internals are
reached only through objects that Triton itself handed to the caller (a compiled kernel,
the runtime knobs), or imported inside the functions that need them; :data:`INTERNALS` is data
(the test imports Triton to check its names).
"""

from __future__ import annotations

from . import autotune, compiler, cuda, driver, functorch, jit, launch
from .autotune import autotuner_config, heuristics_options, set_autotuner_best_config
from .compiler import (
    decomposable_types,
    destroy_library,
    export_keeps_triton_ops,
    functional_tensor_mode,
    wrap_triton_disabled,
)
from .cuda import cuda_current_device, cuda_raw_stream, cuda_set_device
from .driver import (
    autotune_benchmark_call,
    autotuner_base_fn,
    lend_triton_driver,
    triton_benchmarker,
    triton_default_driver,
)
from .functorch import functorch_wrapped
from .jit import triton_binder, triton_kernel_layers
from .launch import (
    LAYOUT_INTERNALS,
    UNKNOWN_SHAPE,
    compiled_kernel_launcher,
    cuda_launch_layout,
    cuda_launcher_shape,
    launch_hooks_idle,
    launcher_shape,
)

__all__ = [
    "INTERNALS",
    "LAYOUT_INTERNALS",
    "UNKNOWN_SHAPE",
    "autotune_benchmark_call",
    "autotuner_base_fn",
    "autotuner_config",
    "compiled_kernel_launcher",
    "cuda_current_device",
    "cuda_launch_layout",
    "cuda_launcher_shape",
    "cuda_raw_stream",
    "cuda_set_device",
    "decomposable_types",
    "destroy_library",
    "export_keeps_triton_ops",
    "functional_tensor_mode",
    "functorch_wrapped",
    "heuristics_options",
    "launch_hooks_idle",
    "launcher_shape",
    "lend_triton_driver",
    "set_autotuner_best_config",
    "triton_benchmarker",
    "triton_binder",
    "triton_default_driver",
    "triton_kernel_layers",
    "wrap_triton_disabled",
]

#: Dotted names of every internal opreg-kernels uses, each named once, by its concern's module
#: (those of one launcher layout only: :data:`LAYOUT_INTERNALS`).
INTERNALS: tuple[str, ...] = (
    *cuda.INTERNALS,
    *launch.INTERNALS,
    *jit.INTERNALS,
    *autotune.INTERNALS,
    *driver.INTERNALS,
    *compiler.INTERNALS,
    *functorch.INTERNALS,
)
