"""The protocol words the Brain, the Client and the API share: approval kinds, verdicts,
signal names and their limits.

They live in the core so that a Client or an API pod names an approval or checks a signal
without loading Brain code; the Brain reads them from here too.
"""

from __future__ import annotations

from typing import Literal

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
