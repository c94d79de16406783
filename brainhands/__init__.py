"""brainhands: a durable execution runtime for tool-using AI agents.

Everything a user writes comes from this one module::

    from brainhands import Agent, Dispatch, Finish, TaskKind, TaskRegistry, ToolContext, tool

- tools (run by Hands): ``tool``, ``ToolContext``, ``ToolError``, ``ToolUncertain``,
  ``QueryAnswer``, ``RetryPolicy``, ``ReplayPolicy``, ``LeaseLost``;
- durable tasks (run by Brains): ``TaskKind``, ``TaskRegistry``, ``TaskView``,
  ``PhaseContext``, ``ChildOutcome``, ``ReceivedSignal`` and the phase results ``Goto``,
  ``Sleep``, ``Spawn``, ``Child``, ``Call``, ``Dispatch``, ``WaitSignal``, ``Finish``,
  ``Fail`` (``Next`` is their union);
- agents: ``Agent``, ``AgentRegistry``, ``TaskTool``;
- models: ``ModelAdapter``, ``ModelResponse``, ``ToolCall``, ``ModelError``,
  ``TransientModelError``, ``OpenAIChatModel``, ``AnthropicModel``, ``ModelSettings``,
  ``ScriptedModel``;
- the client (submit, wait, cancel, read, signal, approve and deny): ``Client``,
  ``Submission``, ``SessionView``, ``PendingApproval``, ``Decision``, ``ALL`` (every call
  pending, for approve and deny); over the HTTP API, with a key: ``HttpClient``,
  ``HttpSubmission``, ``SyncHttpClient`` (blocking), ``ApiError``;
- errors: ``BrainhandsError`` (the root of every error brainhands raises), ``NotFoundError``,
  ``SubmissionFailed``, ``AnswerTimeout``, ``DecisionRefused``, ``InvalidRequest``.

Names are loaded on first use, so a Brain process that never touches a tool name never
imports ``brainhands.hands``, and a Hands process never imports the Brain.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from brainhands.approvals import ALL, Decision, PendingApproval
    from brainhands.brain import (
        Call,
        Child,
        ChildOutcome,
        Dispatch,
        Fail,
        Finish,
        Goto,
        JoinPolicy,
        Next,
        PhaseContext,
        ReceivedSignal,
        Sleep,
        Spawn,
        TaskKind,
        TaskRegistry,
        TaskView,
        WaitSignal,
    )
    from brainhands.brain.agent import Agent, AgentRegistry, TaskTool
    from brainhands.brain.models import (
        AnthropicModel,
        ModelAdapter,
        ModelError,
        ModelResponse,
        ModelSettings,
        OpenAIChatModel,
        ScriptedModel,
        ToolCall,
        TransientModelError,
    )
    from brainhands.client import Client, SessionView, Submission
    from brainhands.hands import ToolContext, tool
    from brainhands.http_client import ApiError, HttpClient, HttpSubmission, SyncHttpClient
    from brainhands.shared.errors import (
        AnswerTimeout,
        BrainhandsError,
        DecisionRefused,
        InvalidRequest,
        LeaseLost,
        NotFoundError,
        SubmissionFailed,
        ToolError,
        ToolUncertain,
    )
    from brainhands.shared.tools import QueryAnswer, ReplayPolicy, RetryPolicy

_HOMES: dict[str, tuple[str, ...]] = {
    "brainhands.approvals": ("ALL", "Decision", "PendingApproval"),
    "brainhands.brain": (
        "Call", "Child", "ChildOutcome", "Dispatch", "Fail", "Finish", "Goto", "JoinPolicy",
        "Next", "PhaseContext", "ReceivedSignal", "Sleep", "Spawn", "TaskKind", "TaskRegistry",
        "TaskView", "WaitSignal",
    ),
    "brainhands.brain.agent": ("Agent", "AgentRegistry", "TaskTool"),
    "brainhands.brain.models": (
        "AnthropicModel", "ModelAdapter", "ModelError", "ModelResponse", "ModelSettings",
        "OpenAIChatModel", "ScriptedModel", "ToolCall", "TransientModelError",
    ),
    "brainhands.client": ("Client", "SessionView", "Submission"),
    "brainhands.hands": ("ToolContext", "tool"),
    "brainhands.http_client": ("ApiError", "HttpClient", "HttpSubmission", "SyncHttpClient"),
    "brainhands.shared.errors": (
        "AnswerTimeout", "BrainhandsError", "DecisionRefused", "InvalidRequest", "LeaseLost",
        "NotFoundError", "SubmissionFailed", "ToolError", "ToolUncertain",
    ),
    "brainhands.shared.tools": ("QueryAnswer", "ReplayPolicy", "RetryPolicy"),
}  # fmt: skip
_EXPORTS = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'brainhands' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
