"""The protocol words the Brain, the Client and the API share: approval kinds, verdicts,
signal names and their limits.

They live in the core so that a Client or an API pod names an approval or checks a signal
without loading Brain code; the Brain reads them from here too.
"""

from __future__ import annotations

from typing import Literal

from brainhands.shared.errors import InvalidRequest

APPROVAL_KIND = "agent.approval"
"""The task kind of an approval gate: a tool call waiting for a decision."""

Verdict = Literal["approved", "denied"]
"""What a decision on an approval says."""

DECISION_PREFIX = "decision:"
"""The start of the name of every approval's decision signal."""

SIGNAL_NAME_MAX = 128
"""The longest signal name (and signal id) a session accepts."""


def decision_signal(approval_id: str) -> str:
    """The name (and the id) of the one signal that decides approval ``approval_id``."""
    return DECISION_PREFIX + approval_id


DECISION_SIGNAL = "approval:"
"""Prefix of a signal declared a decision (``WaitSignal(..., decision=True)``): through
the API, only a key that may approve sends one."""


def signal_name(name: str, signal_id: str, *, decision: bool) -> str:
    """The stored name of a signal a client sends as ``name`` (``decision``: to a wait
    declared a decision); ``InvalidRequest`` for a name the runtime keeps for its own
    signals, or a name or id of no length or longer than ``SIGNAL_NAME_MAX``."""
    if name.startswith((DECISION_PREFIX, "brainhands.", DECISION_SIGNAL)):
        raise InvalidRequest(
            f"signal names starting {DECISION_PREFIX!r}, 'brainhands.' or {DECISION_SIGNAL!r} "
            "are the runtime's own (approvals: use approve and deny; a decision: decision=True)"
        )
    stored = DECISION_SIGNAL + name if decision else name
    for what, value in (("name", stored), ("signal_id", signal_id)):
        if not 0 < len(value) <= SIGNAL_NAME_MAX:
            raise InvalidRequest(f"a signal's {what} has 1 to {SIGNAL_NAME_MAX} characters")
    return stored
