"""Starting and killing real worker processes in tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKDIR = ROOT
"""Where test processes start: the repository's root, for the tests' own package; the
``brainhands`` they import is the installed one (each of its folders holds a distribution,
not a package: ``brain/`` is ``brain/brainhands/brain``)."""


def spawn_module(
    module: str,
    *args: str,
    env: dict[str, str] | None = None,
    log: Path | None = None,
    prefix: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """Run ``python -m module args`` from ``WORKDIR``, output to ``log``; ``prefix``: a
    command that runs it (``ip netns exec NS``: in a network namespace)."""
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - closed by the child
    return subprocess.Popen(
        [*prefix, sys.executable, "-m", module, *args],
        cwd=WORKDIR,
        env={**os.environ, **(env or {})},
        stdout=out,
        stderr=subprocess.STDOUT,
    )


def spawn_email_hands(
    *args: str, env: dict[str, str] | None = None, log: Path | None = None
) -> subprocess.Popen[bytes]:
    """A real ``brainhands hands`` process for the tests' email pool and tools (``args``:
    more options)."""
    return spawn_module(
        "brainhands",
        "hands",
        "--pool",
        "email",
        "--tools",
        "tests.helpers.tools",
        *args,
        env=env,
        log=log,
    )
