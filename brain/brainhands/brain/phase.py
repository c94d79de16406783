"""Running one task phase: the task kind's handler, outside any transaction.

A phase gets a view of its task, copies of its kind's documents and the session's entries;
what it returns (or raises) is data for the scheduler, which commits it. A typed document
is read at its kind's version and checked after the phase (``brain.documents``): one that
cannot be read, or that the phase left holding a value its kind rejects, fails the phase.
Nothing here writes to the store.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from brainhands.brain.documents import DocumentValues
from brainhands.brain.registry import TaskKind
from brainhands.brain.task import (
    Call,
    ChildOutcome,
    Dispatch,
    Next,
    PhaseContext,
    ReceivedSignal,
    Spawn,
    TaskView,
)
from brainhands.shared.live import LivePublisher, TextStream
from brainhands.shared.store import EntryRecord, TaskRecord, ToolCatalog

log = logging.getLogger("brainhands.brain")

DECLARATION_RETRY = 1.0
"""Seconds a phase that called an undeclared tool sleeps before it runs again."""


@dataclass(frozen=True)
class RunAgain:
    """A phase's result set aside: the phase runs again after ``seconds``, as it stands
    (its signal, children and state kept), as if it had not run."""

    seconds: float


PhaseDone = tuple[
    TaskRecord, "Next | RunAgain | BaseException", dict[str, Any], list[tuple[str, Any]]
]
"""A finished phase: the task as it was, what the phase returned (or raised), its docs and
the entries it appended."""


@dataclass(frozen=True)
class PhaseRunner:
    """Runs the phases of one session's tasks for one pass."""

    session_id: str
    tools: ToolCatalog
    declaration_grace: float
    """Seconds a young task's call of an undeclared tool waits for its Hands to declare it."""
    live: LivePublisher | None
    """Where phases' live notes go (a model's text as it comes); None: nowhere."""

    async def run(
        self,
        task: TaskRecord,
        kind: TaskKind,
        *,
        compat: str,
        documents: DocumentValues,
        children: list[ChildOutcome],
        entries: list[EntryRecord],
    ) -> PhaseDone:
        """Run ``task``'s current phase with copies of the ``documents`` its kind names."""
        assert task.phase is not None
        handler = kind.phases.get(task.phase)
        if handler is None:
            missing = LookupError(f"{kind.name} v{kind.version} has no phase {task.phase!r}")
            return task, missing, {}, []
        docs: dict[str, Any] = {}
        view = TaskView(
            id=task.id,
            kind=task.kind,
            version=task.kind_version,
            session_id=task.session_id,
            parent_id=task.parent_id,
            input=task.input,
            state=task.state,
            phase=task.phase,
            attempt=task.attempt,
            restarts=task.restarts,
            children=children,
            signal=ReceivedSignal.from_row(task.signal),
        )
        text = TextStream(self.live, self.session_id, task.id)
        try:
            docs = documents.copies(kind.document_names)
            ctx = PhaseContext(self.session_id, compat, entries=entries, text_stream=text)
            result = await handler(view, docs, ctx)
            documents.check(docs)
        except Exception as exc:  # the phase's failure is data for the crash-loop rule
            return task, exc, docs, []
        finally:
            text.flush()
        if await self._awaits_declarations(task, result):
            return task, RunAgain(DECLARATION_RETRY), docs, []  # its entries and docs dropped
        return task, result, docs, ctx.appended

    async def _awaits_declarations(self, task: TaskRecord, result: Next) -> bool:
        """Whether ``result`` calls a tool no Hands pool has declared yet, within the grace
        a young task gets for its Hands to start (past it, the call fails as unknown)."""
        if isinstance(result, Dispatch):
            names = {result.tool}
        elif isinstance(result, Spawn):
            names = {c.tool for c in result.children if isinstance(c, Call)}
        else:
            return False
        missing = names - (await self.tools.lookup(names)).keys()
        if not missing or time.time() - task.created_at >= self.declaration_grace:
            return False
        log.info(
            "waiting for tools to be declared",
            extra={"event": "undeclared_tools", "task_id": task.id, "tools": sorted(missing)},
        )
        return True
