"""Inspect the release artifacts in a dist folder; exit 1 listing every problem found.

Usage: ``python scripts/check_dist.py [DIST]`` (default ``dist``); ``hatch run dist:build``
runs it after building. What a user downloads must hold the product and nothing else:

- one wheel and one sdist per package, all of one version, equal to the package's
  ``__version__``;
- the MIT license (identical to the repository's ``LICENSE``) in every wheel
  (``*.dist-info/licenses/LICENSE``) and every sdist, declared in the metadata;
- wheels hold only the import package and its ``.dist-info``, with ``py.typed``;
- sdists hold only ``src/``, ``pyproject.toml``, ``README.md``, ``LICENSE``, ``PKG-INFO`` and
  the ``.gitignore`` hatchling copies so that a build from the sdist ignores the same files;
  no tests (the test suite lives at the repository root and needs all three packages);
- no compiled files, no caches, and no machine paths (``/opt/...``, ``/work/...``, home
  folders, this checkout's own path) in any file.
"""

from __future__ import annotations

import email.parser
import re
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "opreg-core": "opreg_core",
    "opreg-kernels": "opreg_kernels",
    "opreg-testing": "opreg_testing",
}
SDIST_TOP_LEVEL = {"src", "pyproject.toml", "README.md", "LICENSE", "PKG-INFO", ".gitignore"}
_MACHINE_PATH = re.compile(
    r"(?<![\w.])/(?:opt|work|root|home|Users|tmp|mnt|srv)/[\w.-]+|[A-Za-z]:\\\\?[\w.-]+\\"
)
_VERSION = re.compile(r'^__version__ = "([^"]+)"$', re.MULTILINE)


@dataclass(frozen=True)
class Member:
    """One file of an artifact: its path inside the archive and its bytes."""

    name: str
    data: bytes


def _wheel_members(path: Path) -> list[Member]:
    with zipfile.ZipFile(path) as archive:
        return [Member(i.filename, archive.read(i)) for i in archive.infolist() if not i.is_dir()]


def _sdist_members(path: Path) -> list[Member]:
    members = []
    with tarfile.open(path, "r:gz") as archive:
        for info in archive.getmembers():
            if info.isfile():
                extracted = archive.extractfile(info)
                assert extracted is not None  # a regular file always has content
                members.append(Member(info.name, extracted.read()))
            elif not info.isdir():
                members.append(Member(info.name, b""))  # a link: reported below
    return members


def _common_problems(artifact: str, members: list[Member], root_dir: str) -> list[str]:
    problems = []
    for member in members:
        parts = member.name.split("/")
        if member.name.endswith((".pyc", ".pyo")) or "__pycache__" in parts:
            problems.append(f"{artifact}: compiled file {member.name}")
        if any(
            p in {"tests", "test", ".pytest_cache", ".hypothesis", ".mypy_cache"} for p in parts
        ):
            problems.append(f"{artifact}: test or cache file {member.name}")
        if not member.name.startswith(root_dir):
            problems.append(f"{artifact}: {member.name} lies outside {root_dir}")
        text = member.data.decode("utf-8", errors="replace")
        for found in sorted(set(_MACHINE_PATH.findall(text)) | _own_paths(text)):
            problems.append(f"{artifact}: {member.name} holds the machine path {found!r}")
    return problems


def _own_paths(text: str) -> set[str]:
    own = {str(ROOT), str(Path.home())}
    return {p for p in own if len(p) > 1 and p in text}


def _metadata_problems(artifact: str, raw: bytes, name: str, version: str) -> list[str]:
    metadata = email.parser.BytesParser().parsebytes(raw)
    problems = []
    if metadata["Name"] != name or metadata["Version"] != version:
        problems.append(f"{artifact}: metadata names {metadata['Name']} {metadata['Version']}")
    if metadata["License-Expression"] != "MIT":
        problems.append(f"{artifact}: License-Expression is {metadata['License-Expression']!r}")
    if "LICENSE" not in (metadata.get_all("License-File") or []):
        problems.append(f"{artifact}: the metadata does not declare License-File: LICENSE")
    if metadata["Description-Content-Type"] != "text/markdown" or not metadata.get_payload():
        problems.append(f"{artifact}: no Markdown description (the package README)")
    return problems


def _version_of(
    artifact: str, members: list[Member], init_path: str
) -> tuple[str | None, list[str]]:
    init = next((m for m in members if m.name == init_path), None)
    if init is None:
        return None, [f"{artifact}: missing {init_path}"]
    match = _VERSION.search(init.data.decode())
    if match is None:
        return None, [f"{artifact}: {init_path} sets no __version__"]
    return match.group(1), []


def check_wheel(
    path: Path, dist_name: str, import_name: str, version: str, license_text: bytes
) -> list[str]:
    """Problems of one wheel."""
    artifact = path.name
    members = _wheel_members(path)
    dist_info = f"{import_name}-{version}.dist-info/"
    problems = [
        f"{artifact}: {m.name} is neither in {import_name}/ nor in {dist_info}"
        for m in members
        if not m.name.startswith((f"{import_name}/", dist_info))
    ]
    problems += _common_problems(artifact, members, "")
    by_name = {m.name: m for m in members}
    if by_name.get(f"{dist_info}licenses/LICENSE", Member("", b"")).data != license_text:
        problems.append(
            f"{artifact}: {dist_info}licenses/LICENSE missing or not the project's LICENSE"
        )
    if f"{import_name}/py.typed" not in by_name:
        problems.append(f"{artifact}: {import_name}/py.typed missing")
    if f"{dist_info}METADATA" in by_name:
        problems += _metadata_problems(
            artifact, by_name[f"{dist_info}METADATA"].data, dist_name, version
        )
    else:
        problems.append(f"{artifact}: no METADATA")
    found, version_problems = _version_of(artifact, members, f"{import_name}/__init__.py")
    problems += version_problems
    if found is not None and found != version:
        problems.append(f"{artifact}: {import_name}.__version__ is {found}, the wheel {version}")
    return problems


def check_sdist(
    path: Path, dist_name: str, import_name: str, version: str, license_text: bytes
) -> list[str]:
    """Problems of one sdist."""
    artifact = path.name
    members = _sdist_members(path)
    top = f"{import_name}-{version}/"
    problems = _common_problems(artifact, members, top)
    by_name = {m.name.removeprefix(top): m for m in members}
    for name in sorted(by_name):
        first = name.split("/")[0]
        in_package = name.startswith(f"src/{import_name}/")
        if first not in SDIST_TOP_LEVEL or (first == "src" and not in_package):
            problems.append(f"{artifact}: unexpected file {name}")
    for required in ("pyproject.toml", "README.md", "PKG-INFO", f"src/{import_name}/py.typed"):
        if required not in by_name:
            problems.append(f"{artifact}: {required} missing")
    if by_name.get("LICENSE", Member("", b"")).data != license_text:
        problems.append(f"{artifact}: LICENSE missing or not the project's LICENSE")
    if "PKG-INFO" in by_name:
        problems += _metadata_problems(artifact, by_name["PKG-INFO"].data, dist_name, version)
    return problems


def check_dist(dist: Path, license_text: bytes) -> list[str]:
    """Every problem of the release artifacts in ``dist``; empty when the release is clean."""
    if not dist.is_dir():
        return [f"{dist} is not a folder: build it first (hatch run dist:build)"]
    files = sorted(p for p in dist.iterdir())
    wheels = {p: p.name.split("-")[:2] for p in files if p.name.endswith(".whl")}
    sdists = {
        p: p.name.removesuffix(".tar.gz").rsplit("-", 1)
        for p in files
        if p.name.endswith(".tar.gz")
    }
    problems = [
        f"{p.name}: not a wheel or an sdist" for p in files if p not in wheels and p not in sdists
    ]
    versions = {v for _, v in wheels.values()} | {v for _, v in sdists.values()}
    if len(versions) > 1:
        problems.append(f"more than one version in {dist}: {sorted(versions)}")
    for dist_name, import_name in PACKAGES.items():
        for kind, artifacts, check in (
            ("wheel", wheels, check_wheel),
            ("sdist", sdists, check_sdist),
        ):
            mine = [(p, v) for p, (n, v) in artifacts.items() if n == import_name]
            if len(mine) != 1:
                problems.append(f"{dist_name}: expected one {kind}, found {len(mine)}")
            for path, version in mine:
                try:
                    problems += check(path, dist_name, import_name, version, license_text)
                except (OSError, zipfile.BadZipFile, tarfile.TarError) as error:
                    problems.append(f"{path.name}: cannot be read ({error})")
    known = set(PACKAGES.values())
    for path, (name, _) in {**wheels, **sdists}.items():
        if name not in known:
            problems.append(f"{path.name}: not one of the opreg packages")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print("usage: python scripts/check_dist.py [DIST]", file=sys.stderr)
        return 2
    dist = (ROOT / (argv[0] if argv else "dist")).resolve()
    problems = check_dist(dist, (ROOT / "LICENSE").read_bytes())
    for problem in problems:
        print(f"dist check: {problem}", file=sys.stderr)
    if problems:
        print(f"dist check: {len(problems)} problem(s) in {dist}", file=sys.stderr)
        return 1
    print(f"dist check: {len(list(dist.iterdir()))} artifacts in {dist} are clean")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
