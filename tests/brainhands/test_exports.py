"""The public face: one import root, and the names a user writes, pinned."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import brainhands
from tests.helpers.distributions import copy_sources
from tests.helpers.processes import ROOT, WORKDIR

DOCUMENTED = set(re.findall(r"``(\w+)``", brainhands.__doc__ or ""))
"""The names a user writes, as the package's docstring lists them: the pin kept in one place,
the place a user reads, so a name cannot come or go without the docstring saying so."""


def test_brainhands_exports_what_a_user_writes() -> None:
    assert brainhands.__all__ == sorted(DOCUMENTED)
    assert set(brainhands._EXPORTS) == DOCUMENTED
    brain = importlib.import_module("brainhands.brain")
    assert sorted(brainhands._HOMES["brainhands.brain"]) == sorted(brain.__all__)
    for name in brainhands.__all__:
        home = importlib.import_module(brainhands._EXPORTS[name])
        assert getattr(brainhands, name) is getattr(home, name)
    assert set(brainhands.__all__) <= set(dir(brainhands))
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        brainhands.nothing_here  # noqa: B018


def test_importing_brainhands_loads_neither_side_until_a_name_is_used() -> None:
    code = (
        "import sys, brainhands\n"
        "print(sorted(m for m in sys.modules if m.startswith('brainhands.')))\n"
        "brainhands.TaskKind\n"
        "print(any(m.startswith('brainhands.hands') for m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=WORKDIR, capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == ["[]", "False"]


DISTRIBUTIONS = {
    "shared": "brainhands-core",
    "brain": "brainhands-brain",
    "hands": "brainhands-hands",
    "examples": "brainhands-examples",
    ".": "brainhands",
}
"""Each folder and the distribution it holds (the root's code is in src/)."""


def test_every_file_has_one_path() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert [line for line in tracked.splitlines() if line.startswith("120000")] == []
    for folder in ("shared", "brain", "hands", "examples"):
        module = importlib.import_module(f"brainhands.{folder}")
        assert Path(module.__file__ or "").parent == ROOT / folder / "brainhands" / folder
        assert not (ROOT / folder / "__init__.py").exists()  # a distribution, not a package
    assert Path(brainhands.__file__ or "") == ROOT / "shared" / "brainhands" / "__init__.py"


def test_each_folder_builds_a_wheel_of_its_own_part_of_brainhands(tmp_path: Path) -> None:
    sources = copy_sources(tmp_path / "sources")
    folders = [str(sources / folder) for folder in DISTRIBUTIONS]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), *folders],
        check=True,
        capture_output=True,
    )
    contents = {}
    for folder, name in DISTRIBUTIONS.items():
        [wheel] = tmp_path.glob(f"{name.replace('-', '_')}-*.whl")
        names = zipfile.ZipFile(wheel).namelist()
        tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
        assert tops == {"brainhands"}, f"{name}: {tops}"
        contents[folder] = {n for n in names if not n.split("/")[0].endswith(".dist-info")}
    packages = {
        folder: {n.split("/")[1] for n in names if n.count("/") > 1}
        for folder, names in contents.items()
    }
    assert packages == {
        "shared": {"shared"},
        "brain": {"brain"},
        "hands": {"hands"},
        "examples": {"examples"},
        ".": {"api", "cli", "client", "mcp_server"},
    }
    # The package's own module, once: the core's; the others add packages beside it.
    owners = [f for f, names in contents.items() if "brainhands/__init__.py" in names]
    assert owners == ["shared"]
    assert "brainhands/shared/lease_scripts/renew.lua" in contents["shared"]
    assert "brainhands/shared/store/migrations/env.py" in contents["shared"]
    assert "brainhands/examples/notify/script.json" in contents["examples"]
    assert "brainhands/examples/demo.py" in contents["examples"]  # the demo is no runtime's
    assert "brainhands/__main__.py" in contents["."]
    assert any(n.startswith("brainhands/api/console/") for n in contents["."])
