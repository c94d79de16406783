"""The checkout's distributions, copied for a build: pip builds a local folder in place
(its ``build/``), which must not happen in the checkout the suite runs from."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.processes import ROOT

FOLDERS = ("shared", "brain", "hands", "examples")
"""The folders that each hold a distribution; the root's is ``pyproject.toml`` + ``src/``."""
LEFT_OUT = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")


def copy_sources(dest: Path) -> Path:
    """The root's and every folder's distribution sources under ``dest``; returns ``dest``."""
    for folder in (*FOLDERS, "src"):
        shutil.copytree(ROOT / folder, dest / folder, ignore=LEFT_OUT)
    for name in ("pyproject.toml", "hatch_build.py", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    return dest
