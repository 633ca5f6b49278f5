"""Static SASS instruction counts of the Philox normal kernels, compiled for sm_90 without a GPU.

    python benchmarks/probes/philox_sass.py [--dump DIR]

Compiles the long-row kernel (``loop`` 1, block 1024, unmasked) as the launchers do on an
H100/H200 — ``philox_normal``'s (hardware log2, fused reduction) and ``philox_normal_exact``'s
(``enable_fp_fusion=False``) — with Triton's own compiler and bundled ``ptxas``, disassembles
the cubin with the bundled ``cuobjdump`` and prints the instruction count per Philox call (the
kernel's whole static count divided by the calls each thread makes; slow-path subroutines that
rarely run, such as ``sqrt.rn``'s, are counted too). The count is a proxy for the kernels'
speed, which is near the GPU's instruction issue rate; run it at two commits to compare.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import tempfile
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # the kernels must be compiled, not interpreted

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from opreg_kernels.ops.philox import triton_kernels as philox

_BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
_OPCODE = re.compile(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")


def sass(exact: bool, block: int, num_warps: int) -> str:
    kernel = philox._philox_long_rows_kernel
    constexprs = {
        "NORMAL": True, "WIDE": False, "BLOCK": block, "LOOP": 1, "FAST_SINCOS": True,
        "PTX_MATH": True, "EXACT": exact, "MASKED": False,
    }  # fmt: skip
    names = [n for n in kernel.arg_names if n not in constexprs]
    types = ["*i64", "*fp32", "i32", "i32", "i32", "i32", "i32"]
    signature = {**dict(zip(names, types, strict=True)), **dict.fromkeys(constexprs, "constexpr")}
    attrs = {(i,): [["tt.divisibility", 16]] for i in (0, 1, 2)}
    source = ASTSource(kernel, signature, constexprs=constexprs, attrs=attrs)
    options = {"num_warps": num_warps, **(philox._EXACT_OPTIONS if exact else {})}
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        command = [str(_BIN / "cuobjdump"), "-sass", str(cubin)]
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", help="also write each kernel's SASS into this folder")
    args = parser.parse_args()
    block, num_warps = philox.DEFAULT_BLOCK, philox.DEFAULT_NUM_WARPS
    calls_per_thread = block // (32 * num_warps)
    for name, exact in (("philox_normal", False), ("philox_normal_exact", True)):
        text = sass(exact, block, num_warps)
        opcodes = [m.group(1) for m in map(_OPCODE.search, text.splitlines()) if m]
        kinds = collections.Counter(op.split(".")[0] for op in opcodes)
        print(f"{name}: {len(opcodes)} instructions, {calls_per_thread} Philox calls per thread: "
              f"{len(opcodes) / calls_per_thread:.1f} per call; most used: "
              f"{dict(kinds.most_common(8))}")  # fmt: skip
        if args.dump:
            Path(args.dump).mkdir(parents=True, exist_ok=True)
            (Path(args.dump) / f"{name}.sass").write_text(text)


if __name__ == "__main__":
    main()
