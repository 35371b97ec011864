"""The wheel holds every package and data file the planner needs, found by pyproject's
`[tool.setuptools.packages.find]` (a package left out fails here, not in a user's `pip install`)."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from setuptools import find_packages

try:
    import tomllib
except ImportError:                      # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("planner", "catalog")         # the import packages the wheel carries (ui and app.py are the app's)


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _package_dirs() -> set[str]:
    """Every directory under the shipped packages with an __init__.py, as a dotted name."""
    return {".".join(p.parent.relative_to(ROOT).parts) for top in SHIPPED for p in (ROOT / top).rglob("__init__.py")}


def test_pyproject_finds_every_package():
    config = _pyproject()["tool"]["setuptools"]
    assert isinstance(config.get("packages"), dict) and "find" in config["packages"], \
        "list no packages by hand: [tool.setuptools.packages.find] finds them"
    found = set(find_packages(str(ROOT), include=config["packages"]["find"]["include"]))
    assert _package_dirs() <= found, f"packages the wheel would leave out: {sorted(_package_dirs() - found)}"
    assert {p.split(".")[0] for p in found} == set(SHIPPED), f"unexpected top-level packages: {sorted(found)}"


def test_catalog_data_files_are_package_data():
    patterns = _pyproject()["tool"]["setuptools"]["package-data"]["catalog"]
    data = sorted(p.name for p in (ROOT / "catalog").iterdir() if p.suffix not in (".py", ".pyc") and p.is_file())
    assert data and all(any(Path(name).match(pat) for pat in patterns) for name in data), (data, patterns)


@pytest.mark.slow
def test_the_built_wheel_holds_every_module_and_data_file(tmp_path):
    """Build the wheel from a copy of the sources (no build folders left in the checkout) and read
    its file list: every .py of planner/ and catalog/ and the catalog's YAML and JSON."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for top in SHIPPED:
        shutil.copytree(ROOT / top, src / top, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    str(src), "-w", str(out)], check=True, timeout=300)
    (wheel,) = out.glob("hetplan-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {str(p.relative_to(src)) for top in SHIPPED for p in (src / top).rglob("*")
                if p.is_file() and p.suffix in (".py", ".yaml", ".json")}
    assert expected <= names, f"files the wheel leaves out: {sorted(expected - names)}"
