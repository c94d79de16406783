"""What a reader sees of a session: its task tree and tool calls, summarized from the
store's rows, with the calls waiting for a decision."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from brainhands.client.approvals import PendingApproval, pending_of
from brainhands.client.budgets import BudgetStop, budget_stop_of, session_usage
from brainhands.client.compensations import CompensationStop, compensation_stops_of
from brainhands.shared.statuses import SessionStatus
from brainhands.shared.store import (
    DocumentRecord,
    EntryRecord,
    InboxRecord,
    SessionDetail,
    SessionRecord,
    SubmissionRecord,
)


@dataclass(frozen=True)
class TaskSummary:
    """A task of a session, as a reader sees it."""

    id: str
    kind: str
    status: str
    phase: str | None
    outcome: str | None
    parent_id: str | None
    submission_id: str | None
    cancel_requested: bool
    blocked_reason: str | None
    error: Any
    wait_signal: str | None = None
    """The signal it waits for (status ``waiting``), if any."""
    wake_at: float | None = None
    """When it wakes (a sleep), or when its signal wait times out."""


@dataclass(frozen=True)
class OperationSummary:
    """A tool call of a session, as Hands record it."""

    operation_id: str
    task_id: str | None
    tool: str
    status: str
    attempts: int
    interruptions: int
    error: Any


@dataclass(frozen=True)
class SessionView:
    """A session as it stands: its entries, submissions, task tree, tool calls and the
    requests made to it (``inbox``)."""

    session: SessionRecord
    entries: list[EntryRecord]
    submissions: list[SubmissionRecord]
    tasks: list[TaskSummary]
    operations: list[OperationSummary]
    inbox: list[InboxRecord]
    approvals: list[PendingApproval] = field(default_factory=list)
    """Tool calls waiting for a decision: the session needs action while there are any."""
    budget_exhausted: BudgetStop | None = None
    """Where its agent's run stopped at its budget (None: it has not): it needs action,
    a raise of the budget (``Client.raise_budget``)."""
    usage: dict[str, float] = field(default_factory=dict)
    """What its model answers spent (tokens, cost, model calls), added up from its entries;
    ``resent``: the model calls sent again because a Brain died waiting for their answer
    (paid twice; in ``model_calls`` and the tokens too)."""
    documents: dict[str, DocumentRecord] = field(default_factory=dict)
    """Its documents, by name: each one's latest value (``body``), version and kind version
    (their histories: ``Client.document``)."""
    compensations: list[CompensationStop] = field(default_factory=list)
    """Tasks whose undo failed, waiting for an operator to retry or abandon it
    (``Client.act_on_compensation``): the session needs action while there are any."""

    @property
    def needs_action(self) -> bool:
        return bool(self.approvals or self.compensations) or self.budget_exhausted is not None

    @property
    def status(self) -> SessionStatus:
        if self.budget_exhausted is not None:
            return "budget_exhausted"
        if self.approvals or self.compensations:
            return "requires_action"
        return "running" if any(t.status != "terminal" for t in self.tasks) else "idle"

    def children(self, task_id: str | None) -> list[TaskSummary]:
        """The tasks ``task_id`` owns (None: the root tasks, one per started submission)."""
        return [t for t in self.tasks if t.parent_id == task_id]


def session_view(detail: SessionDetail) -> SessionView:
    """The view of a session read in full (``Store.detail``)."""
    return SessionView(
        session=detail.state.session,
        entries=detail.state.entries,
        submissions=detail.submissions,
        tasks=[_summary(TaskSummary, t) for t in detail.tasks],
        operations=[_summary(OperationSummary, o) for o in detail.operations],
        inbox=detail.inbox,
        approvals=[pending_of(task) for task in detail.waiting_approvals],
        budget_exhausted=budget_stop_of(detail.tasks),
        usage=session_usage(detail.state.entries),
        documents=detail.state.documents,
        compensations=compensation_stops_of(detail.tasks, detail.state.documents),
    )


S = TypeVar("S", TaskSummary, OperationSummary)


def _summary(summary: type[S], row: object) -> S:
    """A summary of ``row``: each of the summary's fields, from the row's field of that name."""
    return summary(**{f.name: getattr(row, f.name) for f in fields(summary)})
