"""Run every Python code block of README.md and docs/**/*.md as a complete program.

Usage (from the repository root): ``python docs/run_blocks.py [FILE.md ...] [-k TEXT]``;
``hatch run blocks`` runs it over every page.

Each ```` ```python ```` block runs alone, in a fresh interpreter (this one's), in an empty
temporary folder, with ``TRITON_INTERPRET=1`` set before anything starts, so blocks that
launch Triton kernels run them on CPU through Triton's interpreter. A block is skipped only
when an HTML comment (invisible on the rendered page) on the line before its fence says so,
with the reason::

    <!-- blocks: skip needs your own package `mylib` -->

The script also checks that the API reference (docs/api/*.md) has an entry for every name
in the ``__all__`` of the three packages. It prints one line per block and closes with
``N passed, N failed, N skipped``; the exit status is 1 if anything failed.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {
    "opreg_core": "packages/opreg-core/src/opreg_core/__init__.py",
    "opreg_kernels": "packages/opreg-kernels/src/opreg_kernels/__init__.py",
    "opreg_testing": "packages/opreg-testing/src/opreg_testing/__init__.py",
}
_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_MARK = re.compile(r"^\s*<!--\s*blocks:\s*skip\b(?P<reason>.*?)-->\s*$")
TIMEOUT_S = 600


@dataclass
class Block:
    """One fenced Python block: where it is, its source, and why it is skipped (if it is)."""

    path: Path
    line: int  #: 1-based line of the opening fence
    source: str
    skip: str | None

    @property
    def label(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks_in(path: Path) -> list[Block]:
    """The Python blocks of one Markdown file, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, indent = m["fence"], len(m["indent"])
        language = m["info"].strip().split(" ")[0].lower() if m["info"].strip() else ""
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        if language in ("python", "py"):
            body = "\n".join(line[indent:] for line in lines[i + 1 : end]) + "\n"
            mark = _MARK.match(lines[i - 1]) if i > 0 else None
            skip = (mark["reason"].strip() or "marked skip") if mark else None
            found.append(Block(path, i + 1, body, skip))
        i = end + 1
    return found


def markdown_files() -> list[Path]:
    """README.md and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def run_block(block: Block) -> tuple[bool, str]:
    """Run one block in a fresh interpreter; (passed, output tail)."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONDONTWRITEBYTECODE="1")
    with tempfile.TemporaryDirectory(prefix="opreg-block-") as folder:
        script = Path(folder) / "block.py"
        script.write_text(block.source, encoding="utf-8")
        try:
            proc = subprocess.run(
                [sys.executable, str(script)],
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return False, f"timed out after {TIMEOUT_S} s"
    output = (proc.stdout + proc.stderr).strip()
    return proc.returncode == 0, "\n".join(output.splitlines()[-30:])


def public_names(init_file: Path) -> list[str]:
    """The names in a package's ``__all__`` (read from the source, without importing it): a
    literal list, or one that unpacks a literal dict assigned before it (opreg-testing's
    ``[*_EXPORTS, "__version__"]``: the table of public names is their one declaration)."""
    tree = ast.parse(init_file.read_text(encoding="utf-8"))
    tables: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.Dict):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            for target in targets:
                if isinstance(target, ast.Name):
                    tables[target.id] = list(ast.literal_eval(node.value))
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            items = node.value.elts if isinstance(node.value, ast.List) else [node.value]
            value = [
                name
                for item in items
                for name in (
                    tables[item.value.id]
                    if isinstance(item, ast.Starred) and isinstance(item.value, ast.Name)
                    else [ast.literal_eval(item)]
                )
            ]
            return [name for name in value if name != "__version__"]
    raise ValueError(f"{init_file}: no __all__")


def missing_api_entries() -> list[str]:
    """Public names without a ``::: package.name`` entry in docs/api/."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs" / "api").glob("*.md"))
    documented = set(re.findall(r"^::: ([\w.]+)\s*$", text, flags=re.MULTILINE))
    return [
        f"{package}.{name}"
        for package, init in PACKAGES.items()
        for name in public_names(ROOT / init)
        if f"{package}.{name}" not in documented
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="Markdown files (default: all)")
    parser.add_argument("-k", default="", help="run only blocks whose label contains TEXT")
    args = parser.parse_args(argv)
    files = [p.resolve() for p in args.files] or markdown_files()
    passed = failed = skipped = 0
    for block in (b for path in files for b in blocks_in(path)):
        if args.k not in block.label:
            continue
        if block.skip is not None:
            skipped += 1
            print(f"SKIP {block.label}: {block.skip}", flush=True)
            continue
        start = time.perf_counter()
        ok, output = run_block(block)
        took = time.perf_counter() - start
        if ok:
            passed += 1
            print(f"PASS {block.label} ({took:.1f} s)", flush=True)
        else:
            failed += 1
            print(f"FAIL {block.label} ({took:.1f} s)\n{output}\n", flush=True)
    if not args.files and not args.k:
        missing = missing_api_entries()
        if missing:
            failed += 1
            print(f"FAIL docs/api: no entry for {', '.join(missing)}")
        else:
            passed += 1
            print("PASS docs/api: an entry for every public name")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
