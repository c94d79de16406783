"""Which statuses of a submission and of an operation are final: once there, the row's
outcome never changes again. The one definition: the store's records, its guard, the Brain,
the Hands, the Client and the operator's tools all read these sets, none keeps its own."""

from __future__ import annotations

from typing import Literal

SubmissionStatus = Literal["queued", "running", "answered", "failed", "cancelled"]
OperationStatus = Literal["intended", "started", "succeeded", "failed", "uncertain", "cancelled"]

OPEN_SUBMISSION_STATUSES: tuple[SubmissionStatus, ...] = ("queued", "running")
FINAL_SUBMISSION_STATUSES: frozenset[SubmissionStatus] = frozenset(
    {"answered", "failed", "cancelled"}
)
"""A submission in one of these has ended: its answer (or failure) is what the caller gets."""
FINAL_OPERATION_STATUSES: frozenset[OperationStatus] = frozenset(
    {"succeeded", "failed", "uncertain", "cancelled"}
)
"""An operation in one of these has its outcome, which never changes again."""

SessionStatus = Literal["idle", "running", "requires_action", "budget_exhausted"]
"""How a session stands, as its view says: ``budget_exhausted`` when its agent's run stopped
at its budget (it resumes when an operator raises it), ``requires_action`` when a call waits
for a decision or a task whose undo failed waits for an operator to retry or abandon it,
``running`` while any of its tasks is not terminal, else ``idle``. Both ``budget_exhausted``
and ``requires_action`` mean a person must act (``needs_action``)."""
