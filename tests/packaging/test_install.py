"""Installable the way Python users install: ``pip install <checkout>`` and ``pip install
git+<url>`` into a fresh virtual environment give the whole of brainhands (the CLI, the
client, the API and every role, package data included), and each distribution builds its
own wheel with ``python -m build``, holding its own part of ``brainhands`` and nothing else.

Everything is built from a clone of this checkout's HEAD, so that a file the working tree
has but the repository does not cannot make a test pass. pip's cache is used, as a user's
is: the builds' own requirements (hatchling, setuptools) come from it after the first run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.helpers.processes import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

WHOLE = ("src", "shared", "brain", "hands")
"""The folders whose ``brainhands/`` the root distribution's wheel holds."""
FOLDERS = {
    "shared": "brainhands-core",
    "brain": "brainhands-brain",
    "hands": "brainhands-hands",
    "examples": "brainhands-examples",
}
"""The folders that each hold a distribution of their own."""


def run(
    command: list[str | Path], cwd: Path, env: dict[str, str] | None = None, timeout: int = 300
) -> str:
    """``command``'s output; it must succeed."""
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout's HEAD, cloned into a temporary folder."""
    head = run(["git", "rev-parse", "HEAD"], ROOT).strip()
    dest = tmp_path_factory.mktemp("clone") / "brainhands"
    run(["git", "clone", "--quiet", "--no-checkout", ROOT, dest], ROOT)
    run(["git", "checkout", "--quiet", head], dest)
    return dest


def package_files(clone: Path, folders: tuple[str, ...]) -> set[str]:
    """The files of ``brainhands`` that ``folders`` hold, by their path in an installation."""
    tracked = run(["git", "ls-files", "--", *(f"{f}/brainhands" for f in folders)], clone)
    return {line.split("/", 1)[1] for line in tracked.splitlines()}


@pytest.fixture(scope="module", params=["directory", "git"])
def installed(request: pytest.FixtureRequest, clone: Path) -> Path:
    """A fresh environment with brainhands installed, not editable, the way the README says:
    ``pip install <the clone>`` or ``pip install git+file://<the clone>``; its ``bin``."""
    home = clone.parent / f"venv-{request.param}"
    venv.create(home, with_pip=True)
    head = run(["git", "rev-parse", "HEAD"], clone).strip()
    source = str(clone) if request.param == "directory" else f"git+file://{clone}@{head}"
    run([home / "bin" / "python", "-m", "pip", "install", "-q", source], clone, timeout=400)
    return home / "bin"


def run_installed(bin: Path, command: list[str | Path], cwd: Path) -> str:
    """``command`` of the fresh environment, with nothing of this checkout or this
    process's environment (its settings, its path) to lean on."""
    env = {"PATH": f"{bin}:/usr/bin:/bin", "HOME": str(cwd)}
    return run(command, cwd, env=env, timeout=120)


def test_the_install_runs_the_cli_every_role_and_the_store_migrations(
    installed: Path, tmp_path: Path
) -> None:
    assert "usage: brainhands" in run_installed(installed, ["brainhands", "--help"], tmp_path)
    for role in ("brainhands.brain", "brainhands.hands"):
        shown = run_installed(installed, ["python", "-m", role, "--help"], tmp_path)
        assert f"usage: python -m {role}" in shown
    # The store's migrations are package data (alembic's env.py beside its versions): the
    # default store, a SQLite file in the working directory, is brought to the head.
    migrated = run_installed(installed, ["brainhands", "migrate"], tmp_path)
    assert "empty -> " in migrated, migrated
    assert (tmp_path / "brainhands.db").exists()
    # Every requirement of what is installed is there, the roles' own included.
    run_installed(installed, ["python", "-m", "pip", "check"], tmp_path)


def test_the_install_is_one_distribution_holding_every_file_of_its_packages(
    installed: Path, clone: Path, tmp_path: Path
) -> None:
    seen = run_installed(
        installed,
        [
            "python",
            "-c",
            textwrap.dedent(
                """
                import importlib.metadata as md, json
                whole = md.distribution("brainhands")
                print(json.dumps({
                    "distributions": sorted(
                        d.metadata["Name"] for d in md.distributions()
                        if d.metadata["Name"].startswith("brainhands")
                    ),
                    "files": sorted(
                        str(f) for f in whole.files or []
                        if f.parts[0] == "brainhands" and "__pycache__" not in f.parts
                    ),
                    "requires": whole.requires,
                }))
                """
            ),
        ],
        tmp_path,
    )
    found = json.loads(seen)
    assert found["distributions"] == ["brainhands"]
    # The lease scripts (.lua), the migrations' template, the console's pages and each
    # package's py.typed come with the code; nothing of the examples does.
    assert set(found["files"]) == package_files(clone, WHOLE)
    requires = [Requirement(text) for text in found["requires"]]
    always = {r.name for r in requires if r.marker is None}
    assert not {name for name in always if name.startswith("brainhands")}  # the roles are held
    assert {"aio-pika", "sqlalchemy", "httpx", "fastapi"} <= always  # the core's, the root's
    for_mcp = {r.name for r in requires if r.marker and r.marker.evaluate({"extra": "mcp"})}
    assert for_mcp == {"mcp", "pyyaml"}  # the root's mcp extra and the Hands' own


def wheel_files(wheel: Path) -> set[str]:
    """The files a wheel installs, its own metadata left out."""
    names = zipfile.ZipFile(wheel).namelist()
    return {n for n in names if not n.split("/")[0].endswith(".dist-info")}


@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_each_folder_builds_a_wheel_of_its_own_part_of_brainhands(
    folder: str, clone: Path, tmp_path: Path
) -> None:
    run([sys.executable, "-m", "build", "--wheel", "--outdir", tmp_path, clone / folder], clone)
    [wheel] = tmp_path.glob("*.whl")
    assert wheel.name.startswith(FOLDERS[folder].replace("-", "_") + "-0.1.0-")
    assert wheel_files(wheel) == package_files(clone, (folder,))


def test_the_root_builds_the_whole_from_its_sdist(clone: Path, tmp_path: Path) -> None:
    """``python -m build`` makes the sdist, then the wheel from the sdist alone: what the
    root's wheel takes from the role folders (their code, their pyproject.toml) is in it."""
    run([sys.executable, "-m", "build", "--outdir", tmp_path, clone], clone)
    [wheel] = tmp_path.glob("*.whl")
    assert wheel.name.startswith("brainhands-0.1.0-")
    assert wheel_files(wheel) == package_files(clone, WHOLE)
