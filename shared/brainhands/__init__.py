"""brainhands: a durable execution runtime for tool-using AI agents.

Everything a user writes comes from this one module::

    from brainhands import Agent, Dispatch, Finish, TaskKind, TaskRegistry, ToolContext, tool

- tools (run by Hands): ``tool``, ``ToolContext``, ``ToolError``, ``ToolUncertain``,
  ``QueryAnswer``, ``RetryPolicy``, ``ReplayPolicy``, ``LeaseLost``, ``arg`` (a
  condition on a call's arguments under which it needs approval: ``arg("amount") > 100``),
  and for tools that run commands ``Sandbox`` (where they run, within which limits) and
  ``SandboxStopped``;
- durable tasks (run by Brains): ``TaskKind``, ``TaskRegistry``, ``TaskView``,
  ``PhaseContext``, ``ChildOutcome``, ``ReceivedSignal`` and the phase results ``Goto``,
  ``Sleep``, ``Spawn``, ``Child``, ``Call``, ``Dispatch``, ``WaitSignal``, ``Finish``,
  ``Fail`` (``Next`` is their union), ``JoinPolicy`` (how a wait for children ends, with
  ``Quorum`` and ``First``),
  ``DocumentKind`` (a typed session document: a pydantic model, a version, migrations);
- agents: ``Agent``, ``AgentRegistry``, ``TaskTool``, and for long runs ``ContextPolicy``
  (a prompt budget and its compaction), ``Budget`` and ``Price`` (what a run may spend);
- agents of other frameworks, hosted (``brainhands.shared.hosted.pydantic_ai`` hosts a
  Pydantic AI agent): ``ToolPolicy`` (what a hosted tool is declared with), ``tool_context``
  (the context of the hosted tool call running now: its operation id);
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

This module belongs to the ``brainhands-core`` distribution (``shared/``); the other
distributions add their packages beside it (``brainhands.brain``, ``.hands``, ``.client``,
``.api``, ``.cli``, ``.examples``). A name whose distribution is not installed, e.g.
``Agent`` in a Hands image, says which to install.
"""

# The star import below is for type checkers only; its names are the ones __all__ lists.
# ruff: noqa: F405

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

# The packages of the other distributions: in one installation they share this directory;
# in a checkout's editable install each lives under its own folder (brain/brainhands/...).
# Extended in place: the package's spec shares the list, so tools that read the spec (the
# import linter) see every folder too.
__path__.extend(p for p in pkgutil.extend_path(__path__, __name__) if p not in __path__)

if TYPE_CHECKING:
    from brainhands.brain.agent import Agent, AgentRegistry, TaskTool
    from brainhands.brain.budget import Budget, Price
    from brainhands.brain.context import ContextPolicy
    from brainhands.brain.documents import DocumentKind
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
    from brainhands.brain.registry import TaskKind, TaskRegistry
    from brainhands.brain.task import *  # noqa: F403 -- the rest of the Brain row of _HOMES
    from brainhands.client.approvals import ALL, Decision, PendingApproval
    from brainhands.client.direct import Client
    from brainhands.client.http import ApiError, HttpClient, HttpSubmission, SyncHttpClient
    from brainhands.client.submission import Submission
    from brainhands.client.views import SessionView
    from brainhands.hands import ToolContext, tool
    from brainhands.shared.conditions import arg
    from brainhands.shared.errors import (
        AnswerTimeout,
        BrainhandsError,
        DecisionRefused,
        InvalidRequest,
        LeaseLost,
        NotFoundError,
        SandboxStopped,
        SubmissionFailed,
        ToolError,
        ToolUncertain,
    )
    from brainhands.shared.hosted import ToolPolicy, tool_context
    from brainhands.shared.tools import QueryAnswer, ReplayPolicy, RetryPolicy, Sandbox

_HOMES: dict[str, tuple[str, ...]] = {
    "brainhands.client.approvals": ("ALL", "Decision", "PendingApproval"),
    "brainhands.brain": (
        "Call", "Child", "ChildOutcome", "Dispatch", "Fail", "Finish", "First", "Goto",
        "JoinPolicy", "Next", "PhaseContext", "Quorum", "ReceivedSignal", "Sleep", "Spawn",
        "TaskKind", "TaskRegistry", "TaskView", "WaitSignal",
    ),
    "brainhands.brain.agent": ("Agent", "AgentRegistry", "TaskTool"),
    "brainhands.brain.budget": ("Budget", "Price"),
    "brainhands.brain.context": ("ContextPolicy",),
    "brainhands.brain.documents": ("DocumentKind",),
    "brainhands.brain.models": (
        "AnthropicModel", "ModelAdapter", "ModelError", "ModelResponse", "ModelSettings",
        "OpenAIChatModel", "ScriptedModel", "ToolCall", "TransientModelError",
    ),
    "brainhands.client.direct": ("Client",),
    "brainhands.client.submission": ("Submission",),
    "brainhands.client.views": ("SessionView",),
    "brainhands.hands": ("ToolContext", "tool"),
    "brainhands.client.http": ("ApiError", "HttpClient", "HttpSubmission", "SyncHttpClient"),
    "brainhands.shared.errors": (
        "AnswerTimeout", "BrainhandsError", "DecisionRefused", "InvalidRequest", "LeaseLost",
        "NotFoundError", "SandboxStopped", "SubmissionFailed", "ToolError", "ToolUncertain",
    ),
    "brainhands.shared.conditions": ("arg",),
    "brainhands.shared.hosted": ("ToolPolicy", "tool_context"),
    "brainhands.shared.tools": ("QueryAnswer", "ReplayPolicy", "RetryPolicy", "Sandbox"),
}  # fmt: skip
_EXPORTS = {name: module for module, names in _HOMES.items() for name in names}
_DISTRIBUTIONS = {
    "brainhands.brain": "brainhands-brain",
    "brainhands.hands": "brainhands-hands",
    "brainhands.client": "brainhands",
}

__all__ = [
    "ALL",
    "Agent",
    "AgentRegistry",
    "AnswerTimeout",
    "AnthropicModel",
    "ApiError",
    "BrainhandsError",
    "Budget",
    "Call",
    "Child",
    "ChildOutcome",
    "Client",
    "ContextPolicy",
    "Decision",
    "DecisionRefused",
    "Dispatch",
    "DocumentKind",
    "Fail",
    "Finish",
    "First",
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
    "Price",
    "QueryAnswer",
    "Quorum",
    "ReceivedSignal",
    "ReplayPolicy",
    "RetryPolicy",
    "Sandbox",
    "SandboxStopped",
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
    "ToolPolicy",
    "ToolUncertain",
    "TransientModelError",
    "WaitSignal",
    "arg",
    "tool",
    "tool_context",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'brainhands' has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as missing:
        package = ".".join(module.split(".")[:2])
        if missing.name is None or not package.startswith(missing.name):
            raise
        needed = _DISTRIBUTIONS.get(package, package)
        raise ImportError(
            f"brainhands.{name} comes with {needed}, which is not installed"
        ) from None
    globals()[name] = value  # once loaded, a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
