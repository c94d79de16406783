"""The replay policy of an MCP tool, read from its annotations when its server is trusted.

MCP has no request idempotency, and a broken response stream cannot be resumed: a
``tools/call`` whose answer was lost has an unknown outcome, exactly what a replay policy
decides (DESIGN §11). The annotations say what a tool does to the world, but the spec
says a client must ignore them unless it trusts the server; ignored, they take the spec's
defaults (not read-only, not idempotent, destructive), and so does a tool that has none:

================================  =========================================  ==========
annotations (trusted server)      policy                                     approval
================================  =========================================  ==========
``readOnlyHint``                  ``safe``                                   no
``idempotentHint``                ``safe`` (re-sent with the same arguments)  no
``destructiveHint: false``        ``query`` with a lookup tool or Tasks,     no
                                  else ``unsafe``
destructive, or none              ``unsafe``                                 yes
================================  =========================================  ==========

The configuration may override the policy and the approval of any tool. A ``query`` tool
asks its lookup tool or, on a server offering Tasks, follows the task its call committed.
"""

from __future__ import annotations

from dataclasses import dataclass

from brainhands.hands.mcp.config import ToolOverride
from brainhands.shared.tools import ReplayPolicy


@dataclass(frozen=True)
class Hints:
    """A tool's annotations that bear on replay (None: not given)."""

    read_only: bool | None = None
    idempotent: bool | None = None
    destructive: bool | None = None


@dataclass(frozen=True)
class McpPolicy:
    """The policy a tool got, whether its calls wait for approval, and why."""

    policy: ReplayPolicy
    approval: bool
    reason: str


def annotated_policy(
    hints: Hints | None, *, trusted: bool, lookup: bool, tasks: bool = False
) -> McpPolicy:
    """What the annotations allow (the table above); ``lookup``: the configuration names
    a tool that tells whether a call happened; ``tasks``: the server offers the Tasks
    extension, whose task ids a call commits and its successor follows."""
    if not trusted:
        return McpPolicy("unsafe", True, "untrusted server: annotations ignored")
    hints = hints or Hints()
    if hints.read_only:
        return McpPolicy("safe", False, "readOnlyHint")
    if hints.idempotent:
        return McpPolicy("safe", False, "idempotentHint")
    if hints.destructive is False:
        if lookup:
            return McpPolicy("query", False, "destructiveHint false, with a lookup tool")
        if tasks:
            return McpPolicy("query", False, "destructiveHint false, followed as a task")
        return McpPolicy("unsafe", False, "destructiveHint false, no lookup tool or Tasks")
    if hints.destructive:
        return McpPolicy("unsafe", True, "destructiveHint")
    return McpPolicy("unsafe", True, "no annotations")


def tool_policy(
    hints: Hints | None, *, trusted: bool, override: ToolOverride, tasks: bool = False
) -> McpPolicy:
    """The policy and approval of a tool: its annotations', then the configuration's word."""
    lookup = override.lookup is not None
    got = annotated_policy(hints, trusted=trusted, lookup=lookup, tasks=tasks)
    policy = override.policy or got.policy
    approval = got.approval if override.approval is None else override.approval
    if (policy, approval) == (got.policy, got.approval):
        return got
    return McpPolicy(policy, approval, f"configured (annotations: {got.reason})")
