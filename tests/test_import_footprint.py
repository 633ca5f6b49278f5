"""What importing opreg loads: nothing of torch or Triton beyond what ``import torch`` loads.

Every module of opreg imports its torch internals where a registration or a check first needs
them (the private modules import heavy torch modules such as ``torch._subclasses.fake_tensor``
inside their functions), so ``import opreg_kernels`` costs opreg's own modules and nothing of
torch's that a bare ``import torch`` would not load on the same torch; and the pytest plugin,
loaded by every pytest run of an environment that has opreg-testing, imports no torch at all.
Compared in fresh interpreters, against a bare ``import torch`` in one. (Time is measured by
``benchmarks/bench_import.py``, not here.)
"""

from __future__ import annotations

import json
import subprocess
import sys

#: Modules of torch's that opreg once imported at import time and now imports when needed.
HEAVY = (
    "torch._subclasses.fake_tensor",
    "torch._subclasses.functional_tensor",
    "torch._higher_order_ops.invoke_subgraph",
    "torch._library.triton",
    "torch.fx.experimental.symbolic_shapes",
    "torch.export",
    "torch._dynamo",
    "torch._inductor",
    "triton",
)


def _loaded(code: str) -> set[str]:
    """``sys.modules`` after running ``code`` in a fresh interpreter (this environment's)."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def _outside_opreg(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in ("torch", "triton"))


def test_import_opreg_loads_nothing_of_torch_beyond_import_torch() -> None:
    torch_only = _loaded("import torch")
    with_core = _loaded("import torch\nimport opreg_core")
    with_kernels = _loaded("import torch\nimport opreg_kernels")
    assert "opreg_core" in with_core and "opreg_kernels" in with_kernels  # the imports ran
    for name, modules in (("opreg_core", with_core), ("opreg_kernels", with_kernels)):
        extra = _outside_opreg(modules - torch_only)
        assert not extra, f"import {name} loads what import torch does not: {extra}"
        heavy = [m for m in HEAVY if m in modules and m not in torch_only]
        assert not heavy, heavy


def test_pytest_plugin_imports_no_torch() -> None:
    modules = _loaded("import opreg_testing\nimport opreg_testing.plugin")
    assert "opreg_testing.plugin" in modules
    assert not _outside_opreg(modules), _outside_opreg(modules)
