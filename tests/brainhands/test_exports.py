"""The public face: one import root, and the names a user writes, pinned."""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

import brainhands
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


def test_each_folder_is_on_the_path_through_its_own_distribution_alone() -> None:
    """The checkout's editable installs (scripts/setup): each distribution puts its one folder
    on the path (a .pth line), the root's only ``src/``, though its wheel holds the roles too;
    none installs a file of ``brainhands``, so no file belongs to two distributions. The
    root's requires the roles' own, which put theirs."""
    folders = {}
    for folder, name in {
        "src": "brainhands",
        "shared": "brainhands-core",
        "brain": "brainhands-brain",
        "hands": "brainhands-hands",
        "examples": "brainhands-examples",
    }.items():
        files = importlib.metadata.files(name) or []
        assert not [f for f in files if f.parts[0] == "brainhands"], name
        lines = [
            line
            for pth in files
            if pth.suffix == ".pth"
            for line in Path(str(pth.locate())).read_text().splitlines()
            if line
        ]
        folders[folder] = lines
    assert folders == {folder: [str(ROOT / folder)] for folder in folders}
    roles = [r for r in importlib.metadata.requires("brainhands") or [] if r.startswith("brainh")]
    assert roles == ["brainhands-core==0.1.0", "brainhands-brain==0.1.0", "brainhands-hands==0.1.0"]
