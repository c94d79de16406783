"""The public face: one import root, and the names a user writes, pinned."""

from __future__ import annotations

import importlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import brainhands
from tests.helpers.processes import ROOT, WORKDIR

EXPORTED = [
    "ALL",
    "Agent",
    "AgentRegistry",
    "AnswerTimeout",
    "AnthropicModel",
    "ApiError",
    "BrainhandsError",
    "Call",
    "Child",
    "ChildOutcome",
    "Client",
    "Decision",
    "DecisionRefused",
    "Dispatch",
    "Fail",
    "Finish",
    "Goto",
    "HttpClient",
    "HttpSubmission",
    "InvalidRequest",
    "JoinPolicy",
    "LeaseLost",
    "ModelAdapter",
    "ModelError",
    "ModelResponse",
    "ModelSettings",
    "Next",
    "NotFoundError",
    "OpenAIChatModel",
    "PendingApproval",
    "PhaseContext",
    "QueryAnswer",
    "ReceivedSignal",
    "ReplayPolicy",
    "RetryPolicy",
    "ScriptedModel",
    "SessionView",
    "Sleep",
    "Spawn",
    "Submission",
    "SubmissionFailed",
    "SyncHttpClient",
    "TaskKind",
    "TaskRegistry",
    "TaskTool",
    "TaskView",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolUncertain",
    "TransientModelError",
    "WaitSignal",
    "tool",
]


def test_brainhands_exports_what_a_user_writes() -> None:
    assert brainhands.__all__ == EXPORTED
    for name in EXPORTED:
        home = importlib.import_module(brainhands._EXPORTS[name])
        assert getattr(brainhands, name) is getattr(home, name)
    assert set(EXPORTED) <= set(dir(brainhands))
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


@pytest.mark.parametrize("name", ["brain", "hands", "shared", "examples"])
def test_the_tests_see_only_the_installed_package(name: str) -> None:
    # The repository root is not on the path: code under test is imported as brainhands.*.
    assert importlib.util.find_spec(name) is None
    assert importlib.util.find_spec(f"brainhands.{name}") is not None


def test_the_wheel_installs_brainhands_alone(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    [wheel] = tmp_path.glob("brainhands-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"brainhands"}
    for module in ("brain/agent.py", "hands/worker.py", "shared/store/migrations/env.py"):
        assert f"brainhands/{module}" in names
    assert "brainhands/shared/lease_scripts/renew.lua" in names
    assert "brainhands/examples/notify/script.json" in names
