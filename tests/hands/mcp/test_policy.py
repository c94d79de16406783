"""The replay policy of an MCP tool, over the whole table (pure)."""

from __future__ import annotations

import pytest

from brainhands.hands.mcp import Hints, ToolOverride, annotated_policy, tool_policy

READ_ONLY = Hints(read_only=True)
IDEMPOTENT = Hints(idempotent=True, destructive=True)
ADDITIVE = Hints(destructive=False)
DESTRUCTIVE = Hints(destructive=True)


@pytest.mark.parametrize(
    ("hints", "lookup", "expected"),
    [
        (READ_ONLY, False, ("safe", False, "readOnlyHint")),
        (Hints(read_only=True, destructive=True), False, ("safe", False, "readOnlyHint")),
        (IDEMPOTENT, False, ("safe", False, "idempotentHint")),
        (ADDITIVE, True, ("query", False, "destructiveHint false, with a lookup tool")),
        (ADDITIVE, False, ("unsafe", False, "destructiveHint false, no lookup tool or Tasks")),
        (Hints(destructive=False, idempotent=True), False, ("safe", False, "idempotentHint")),
        (DESTRUCTIVE, True, ("unsafe", True, "destructiveHint")),
        (Hints(), False, ("unsafe", True, "no annotations")),
        (None, True, ("unsafe", True, "no annotations")),
    ],
)
def test_a_trusted_server_s_annotations_give_the_policy(
    hints: Hints | None, lookup: bool, expected: tuple[str, bool, str]
) -> None:
    got = annotated_policy(hints, trusted=True, lookup=lookup)
    assert (got.policy, got.approval, got.reason) == expected


@pytest.mark.parametrize("hints", [READ_ONLY, IDEMPOTENT, ADDITIVE, DESTRUCTIVE, None])
def test_an_untrusted_server_s_annotations_are_ignored(hints: Hints | None) -> None:
    got = annotated_policy(hints, trusted=False, lookup=True)
    assert (got.policy, got.approval) == ("unsafe", True)
    assert got.reason == "untrusted server: annotations ignored"


def test_the_configuration_overrides_policy_and_approval_and_says_so() -> None:
    plain = tool_policy(DESTRUCTIVE, trusted=True, override=ToolOverride())
    assert (plain.policy, plain.approval, plain.reason) == ("unsafe", True, "destructiveHint")

    no_approval = tool_policy(DESTRUCTIVE, trusted=True, override=ToolOverride(approval=False))
    assert (no_approval.policy, no_approval.approval) == ("unsafe", False)
    assert no_approval.reason == "configured (annotations: destructiveHint)"

    safe = tool_policy(None, trusted=False, override=ToolOverride(policy="safe", approval=False))
    assert (safe.policy, safe.approval) == ("safe", False)
    assert safe.reason == "configured (annotations: untrusted server: annotations ignored)"

    # A lookup tool makes an additive tool of a trusted server a query tool by itself.
    asked = tool_policy(ADDITIVE, trusted=True, override=ToolOverride(lookup="find"))
    assert (asked.policy, asked.reason) == ("query", "destructiveHint false, with a lookup tool")


@pytest.mark.parametrize(
    ("hints", "expected"),
    [
        (ADDITIVE, ("query", False, "destructiveHint false, followed as a task")),
        (READ_ONLY, ("safe", False, "readOnlyHint")),
        (DESTRUCTIVE, ("unsafe", True, "destructiveHint")),
    ],
)
def test_a_server_offering_tasks_makes_its_additive_tools_query_tools(
    hints: Hints, expected: tuple[str, bool, str]
) -> None:
    got = tool_policy(hints, trusted=True, override=ToolOverride(), tasks=True)
    assert (got.policy, got.approval, got.reason) == expected
    # An untrusted server's Tasks change nothing: its annotations are not believed.
    assert tool_policy(hints, trusted=False, override=ToolOverride(), tasks=True).policy == "unsafe"
