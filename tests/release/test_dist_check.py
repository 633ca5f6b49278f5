"""The release checks: the license copies, no machine paths in the build settings, and
``scripts/check_dist.py`` catching what a bad artifact would hold.

The artifacts themselves are built and checked by ``hatch run dist:build`` (in CI:
``.ci/run``); here the checker runs on small hand-made archives, so each kind of defect is
shown to be caught.
"""

from __future__ import annotations

import importlib.util
import io
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
LICENSE = (ROOT / "LICENSE").read_bytes()
VERSION = "0.1.0"


def _load_check_dist() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_dist", ROOT / "scripts" / "check_dist.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


check_dist = _load_check_dist()


@pytest.mark.parametrize("package", sorted(check_dist.PACKAGES))
def test_each_package_ships_the_root_license(package: str) -> None:
    folder = ROOT / "packages" / package
    assert (folder / "LICENSE").read_bytes() == LICENSE, (
        f"packages/{package}/LICENSE differs from LICENSE: copy the root LICENSE over it"
    )
    project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]


def test_license_is_mit() -> None:
    text = LICENSE.decode()
    assert text.startswith("MIT License\n")
    assert "opreg developers" in text


@pytest.mark.parametrize(
    "path",
    ["hatch.toml", "pyproject.toml", ".ci/run", "examples/downstream/pyproject.toml"]
    + [f"packages/{p}/pyproject.toml" for p in sorted(check_dist.PACKAGES)],
)
def test_build_settings_hold_no_machine_path(path: str) -> None:
    text = (ROOT / path).read_text()
    assert check_dist._MACHINE_PATH.findall(text) == []
    assert "/opt/wheels" not in text


# --- hand-made artifacts -------------------------------------------------------------------

Files = dict[str, bytes]


def _metadata(dist_name: str) -> bytes:
    return (
        f"Metadata-Version: 2.4\nName: {dist_name}\nVersion: {VERSION}\n"
        "License-Expression: MIT\nLicense-File: LICENSE\n"
        f"Description-Content-Type: text/markdown\n\n# {dist_name}\n"
    ).encode()


def _wheel_files(dist_name: str, import_name: str) -> Files:
    info = f"{import_name}-{VERSION}.dist-info"
    return {
        f"{import_name}/__init__.py": f'__version__ = "{VERSION}"\n'.encode(),
        f"{import_name}/py.typed": b"",
        f"{info}/METADATA": _metadata(dist_name),
        f"{info}/licenses/LICENSE": LICENSE,
    }


def _sdist_files(dist_name: str, import_name: str) -> Files:
    return {
        f"src/{import_name}/__init__.py": f'__version__ = "{VERSION}"\n'.encode(),
        f"src/{import_name}/py.typed": b"",
        "pyproject.toml": b"[project]\n",
        "README.md": b"# readme\n",
        "LICENSE": LICENSE,
        "PKG-INFO": _metadata(dist_name),
    }


def _write_wheel(path: Path, files: Files) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)


def _write_sdist(path: Path, top: str, files: Files) -> None:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


def _make_dist(
    folder: Path,
    edit_wheel: Callable[[str, Files], None] = lambda name, files: None,
    edit_sdist: Callable[[str, Files], None] = lambda name, files: None,
) -> Path:
    for dist_name, import_name in check_dist.PACKAGES.items():
        wheel = _wheel_files(dist_name, import_name)
        edit_wheel(import_name, wheel)
        _write_wheel(folder / f"{import_name}-{VERSION}-py3-none-any.whl", wheel)
        sdist = _sdist_files(dist_name, import_name)
        edit_sdist(import_name, sdist)
        _write_sdist(folder / f"{import_name}-{VERSION}.tar.gz", f"{import_name}-{VERSION}", sdist)
    return folder


def test_a_clean_dist_passes(tmp_path: Path) -> None:
    assert check_dist.check_dist(_make_dist(tmp_path), LICENSE) == []


def _only_core(edit: Callable[[Files], None]) -> Callable[[str, Files], None]:
    def apply(import_name: str, files: Files) -> None:
        if import_name == "opreg_core":
            edit(files)

    return apply


def _drop(name: str) -> Callable[[Files], None]:
    def drop(files: Files) -> None:
        del files[name]

    return drop


def _put(name: str, data: bytes) -> Callable[[Files], None]:
    return lambda files: files.__setitem__(name, data)


WHEEL_DEFECTS = {
    "no license": (_drop(f"opreg_core-{VERSION}.dist-info/licenses/LICENSE"), "LICENSE missing"),
    "another license": (
        _put(f"opreg_core-{VERSION}.dist-info/licenses/LICENSE", b"Apache\n"),
        "not the project's LICENSE",
    ),
    "machine path": (
        _put("opreg_core/_paths.py", b'FIND_LINKS = "/opt/wheels"\n'),
        "machine path '/opt/wheels'",
    ),
    "stray file": (_put("conftest.py", b""), "conftest.py is neither in"),
    "compiled file": (_put("opreg_core/__pycache__/x.cpython-311.pyc", b""), "compiled file"),
    "no py.typed": (_drop("opreg_core/py.typed"), "py.typed missing"),
    "version mismatch": (
        _put("opreg_core/__init__.py", b'__version__ = "0.0.9"\n'),
        "__version__ is 0.0.9",
    ),
}

SDIST_DEFECTS = {
    "no license": (_drop("LICENSE"), "LICENSE missing"),
    "tests": (_put("tests/test_core.py", b""), "test or cache file"),
    "stray file": (_put("notes.txt", b""), "unexpected file notes.txt"),
    "machine path": (_put("pyproject.toml", b'PIP_FIND_LINKS = "/opt/wheels"\n'), "machine path"),
    "license not declared": (
        _put("PKG-INFO", _metadata("opreg-core").replace(b"License-File: LICENSE\n", b"")),
        "does not declare License-File",
    ),
}


@pytest.mark.parametrize("defect", sorted(WHEEL_DEFECTS))
def test_a_bad_wheel_is_caught(tmp_path: Path, defect: str) -> None:
    edit, message = WHEEL_DEFECTS[defect]
    problems = check_dist.check_dist(_make_dist(tmp_path, edit_wheel=_only_core(edit)), LICENSE)
    assert problems, f"{defect} was not caught"
    assert all(p.startswith(f"opreg_core-{VERSION}-py3-none-any.whl: ") for p in problems), problems
    assert any(message in p for p in problems), problems


@pytest.mark.parametrize("defect", sorted(SDIST_DEFECTS))
def test_a_bad_sdist_is_caught(tmp_path: Path, defect: str) -> None:
    edit, message = SDIST_DEFECTS[defect]
    problems = check_dist.check_dist(_make_dist(tmp_path, edit_sdist=_only_core(edit)), LICENSE)
    assert problems, f"{defect} was not caught"
    assert all(p.startswith(f"opreg_core-{VERSION}.tar.gz: ") for p in problems), problems
    assert any(message in p for p in problems), problems


def test_missing_and_extra_artifacts_are_caught(tmp_path: Path) -> None:
    _make_dist(tmp_path)
    (tmp_path / f"opreg_kernels-{VERSION}.tar.gz").unlink()
    (tmp_path / "opreg_core-0.2.0-py3-none-any.whl").write_bytes(b"")
    problems = "\n".join(check_dist.check_dist(tmp_path, LICENSE))
    assert "opreg-kernels: expected one sdist, found 0" in problems
    assert "opreg-core: expected one wheel, found 2" in problems
    assert "more than one version" in problems
