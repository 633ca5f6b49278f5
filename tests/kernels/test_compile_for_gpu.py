"""Compile every shipped Triton kernel for an H100/H200 (sm_90) on this machine, no GPU needed.

Triton's interpreter accepts kernels that the GPU compiler rejects; Triton's own
compiler (with its bundled ptxas) produces the real cubin, so CI catches those.
Runs in a subprocess: the kernels must be defined with the interpreter off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

_SCRIPT = r"""
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from opreg_kernels.ops.fused_add import triton_kernels as add
from opreg_kernels.ops.philox import triton_kernels as philox

def build(kernel, types, constexprs, aligned):
    # Constexprs left out take the kernel's defaults, as in a launch.
    defaults = {p.name: p.default for p in kernel.params if p.is_constexpr and p.has_default}
    constexprs = {**defaults, **constexprs}
    names = [n for n in kernel.arg_names if n not in constexprs]
    signature = dict(zip(names, types, strict=True))
    signature.update({name: "constexpr" for name in constexprs})
    # As Triton specialises a launch: 16-byte aligned pointers, sizes divisible by 16.
    attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
    source = ASTSource(kernel, signature, constexprs=constexprs, attrs=attrs)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    ptx = compiled.asm["ptx"]
    return {
        "cubin": len(compiled.asm["cubin"]),
        "vector_stores": ptx.count("st.global.v4"),
        "hardware_log2": ptx.count("lg2.approx"),
    }


results = {}
philox_types = ["*i64", "*fp32", "i32", "i32", "i32", "i32", "i32"]
loops = [(philox._philox_long_rows_kernel, {"LOOP": philox.DEFAULT_LOOP}),
         (philox._philox_short_rows_kernel, {})]
for kernel, loop in loops:
    for normal in (False, True):
        for wide in (False, True):
            for fast in (False, True):
                for masked in (False, True):
                    for ptx in (False, True) if normal else (False,):
                        key = (f"{kernel.fn.__name__} normal={normal} wide={wide} "
                               f"fast_sincos={fast} masked={masked} ptx_math={ptx}")
                        constexprs = {"NORMAL": normal, "WIDE": wide, "FAST_SINCOS": fast,
                                      "PTX_MATH": ptx, "MASKED": masked,
                                      "BLOCK": philox.DEFAULT_BLOCK, **loop}
                        results[key] = build(kernel, philox_types, constexprs, aligned=(0, 1, 2))
for dtype in ("fp32", "fp16", "bf16", "fp64", "i32", "i64"):
    for wide in (False, True):
        types = [f"*{dtype}"] * 3 + ["i64" if wide else "i32"]
        constexprs = {"WIDE": wide, "BLOCK": add.DEFAULT_BLOCK, "EVICT": add.DEFAULT_EVICT}
        key = f"_add_kernel {dtype} wide={wide}"
        results[key] = build(add._add_kernel, types, constexprs, aligned=(0, 1, 2, 3))
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def compiled() -> dict[str, Any]:
    pytest.importorskip("triton")
    env = {
        k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "OPREG_DISABLE_TRITON")
    }
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=600
    )
    if proc.returncode != 0 and "ptxas" in proc.stderr and "not found" in proc.stderr.lower():
        pytest.skip("this Triton build has no ptxas")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_every_kernel_variant_compiles_to_a_cubin(compiled: dict[str, Any]) -> None:
    assert len(compiled) == 2 * 2 * (4 + 8) + 12  # philox: 2 kernels, masked or not
    for key, result in compiled.items():
        assert result["cubin"] > 0, key


def test_kernels_store_sixteen_bytes_per_instruction(compiled: dict[str, Any]) -> None:
    # Philox: the interleaved (BLOCK, 4) layout must give 16-byte stores (else bandwidth drops).
    for key, result in compiled.items():
        if key.startswith("_philox") or key.startswith("_add_kernel fp32"):
            assert result["vector_stores"] > 0, key


def test_ptx_math_uses_the_hardware_log2_only_when_asked(compiled: dict[str, Any]) -> None:
    for key, result in compiled.items():
        assert (result["hardware_log2"] > 0) == key.endswith("ptx_math=True"), key
