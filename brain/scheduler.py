"""The scheduler: advances one session's tasks while its lease is held.

It reads the session once, then loops: decide for every open task (``brain.decide``), run
the phases that are ready concurrently (outside any transaction), and commit each result as
it comes -- commits are serialized by a lock, each guarded by the session version and the
lease's fence. The loop ends when nothing is runnable and no new tool outcome has arrived.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from brain.decide import (
    TOOL_KIND,
    Block,
    Facts,
    Idle,
    Run,
    Settle,
    WindDown,
    failed_phase_error,
    next_action,
    settle_changes,
    transition,
    wind_down_changes,
)
from brain.registry import TaskKind, TaskRegistry
from brain.task import Call, Child, ChildOutcome, Dispatch, Next, PhaseContext, Spawn, TaskView
from shared import metrics
from shared.errors import UnknownToolError
from shared.messages import ToolJob, encode
from shared.store import Draft, Store, SubmissionRecord, TaskRecord
from shared.store.queries import operations_by_ids, tasks_by_ids
from shared.store.records import (
    CommitReceipt,
    DocumentRecord,
    EntryRecord,
    OperationRecord,
    TaskStatus,
)
from shared.tools import ToolRegistry
from shared.topology import Topology
from shared.tracing import current_carrier

log = logging.getLogger("brainhands.brain")

StartSubmission = Callable[[SubmissionRecord], Child]
PhaseDone = tuple[TaskRecord, "Next | BaseException", dict[str, Any], list[tuple[str, Any]]]
"""A finished phase: the task as it was, what the phase returned (or raised), its docs."""


def start_from_input(submission: SubmissionRecord) -> Child:
    """Default: a submission's input names the task to start: ``{"kind", "input"}``."""
    data = submission.input
    if not isinstance(data, dict) or "kind" not in data:
        raise ValueError("a submission's input must be {'kind': ..., 'input': ...}")
    return Child(kind=data["kind"], input=data.get("input"), version=data.get("version"))


@dataclass
class RunSummary:
    phases: int = 0
    commits: int = 0
    settled: list[str] = field(default_factory=list)
    next_wake: float | None = None
    cancelled_calls: list[str] = field(default_factory=list)
    foreign: str | None = None
    """The session belongs to Brains of this other compatibility key: nothing was done."""
    """Operation ids of tool calls cancelled in this pass: Hands should hear of them."""


class SessionRunner:
    """One pass over a session, for the holder of its lease token ``fence``."""

    def __init__(
        self,
        *,
        store: Store,
        tasks: TaskRegistry,
        tools: ToolRegistry,
        topology: Topology,
        session_id: str,
        fence: int,
        max_restarts: int = 5,
        start_submission: StartSubmission = start_from_input,
        compats: frozenset[str] | None = None,
    ) -> None:
        self.store = store
        self.tasks = tasks
        self.tools = tools
        self.topology = topology
        self.session_id = session_id
        self.fence = fence
        self.max_restarts = max_restarts
        self.start_submission = start_submission
        self.compats = compats
        self.rows: dict[str, TaskRecord] = {}
        self.operations: dict[str, OperationRecord] = {}
        self.documents: dict[str, DocumentRecord] = {}
        self.entries: list[EntryRecord] = []
        self.version = 0
        self.compat = ""
        self.summary = RunSummary()
        self._lock = asyncio.Lock()
        self._entered: set[str] = set()

    async def run(self) -> RunSummary:
        """Advance the session until nothing is runnable; return what was done."""
        state = await self.store.load(self.session_id)
        self.version, self.compat = state.session.version, state.session.compat
        if self.compats is not None and self.compat not in self.compats:
            # Another build's session: touch nothing (this build may not read its state).
            self.summary.foreign = self.compat
            return self.summary
        self.documents = dict(state.documents)
        self.entries = list(state.entries)
        self.rows = {t.id: t for t in state.open_tasks}
        for submission in state.open_submissions:
            if submission.status == "queued":
                await self._accept(submission)
        await self._read_waits()
        await self._upgrade_versions()
        running: dict[str, asyncio.Task[PhaseDone]] = {}
        try:
            while True:
                progressed, idle_until = await self._decide_and_start(running)
                if running:
                    done, _ = await asyncio.wait(
                        running.values(), return_when=asyncio.FIRST_COMPLETED
                    )
                    for finished in done:
                        task, result, docs, appended = finished.result()
                        running.pop(task.id)
                        await self._after_phase(task, result, docs, appended)
                    continue
                if progressed:
                    continue
                # Nothing runnable: before letting go, look once more for tool outcomes
                # that arrived meanwhile (their wake-up may be waiting on our lease).
                if not await self._read_waits():
                    self.summary.next_wake = idle_until
                    return self.summary
        finally:
            for pending in running.values():
                pending.cancel()
            await asyncio.gather(*running.values(), return_exceptions=True)

    # Deciding ------------------------------------------------------------------------------

    async def _decide_and_start(
        self, running: dict[str, asyncio.Task[PhaseDone]]
    ) -> tuple[bool, float | None]:
        """Act on every open task once; return whether anything changed, and the next timer."""
        now = time.time()
        enter: list[TaskRecord] = []
        wakes: list[float] = []
        progressed = False
        for task_id in [t.id for t in self.open_tasks()]:
            task = self.rows[task_id]  # as updated by earlier actions of this round
            if task.id in running or task.status == "terminal":
                continue
            action = next_action(self._facts(task, now))
            progressed |= not isinstance(action, Idle)
            if isinstance(action, Run):
                if task.id in self._entered and task.status == "running":
                    running[task.id] = self._start(task)
                else:
                    enter.append(task)
            elif isinstance(action, Settle):
                await self._settle(task, action)
            elif isinstance(action, WindDown):
                await self._wind_down(task, action)
            elif isinstance(action, Block):
                await self._block(task, action.reason)
            elif isinstance(action, Idle) and action.until is not None:
                wakes.append(action.until)
        if enter:
            await self._enter(enter)
            for task in enter:
                running[task.id] = self._start(self.rows[task.id])
        return progressed, (min(wakes) if wakes else None)

    def open_tasks(self) -> list[TaskRecord]:
        return [t for t in self.rows.values() if t.status != "terminal"]

    def _facts(self, task: TaskRecord, now: float) -> Facts:
        waited = [self.rows[i] for i in (task.wait_for or []) if i in self.rows]
        return Facts(
            task=task,
            now=now,
            has_handler=self._kind(task) is not None,
            max_restarts=self.max_restarts,
            waited=waited,
            operation=self.operations.get(task.operation_id) if task.operation_id else None,
            entered_here=task.id in self._entered,
        )

    def _kind(self, task: TaskRecord) -> TaskKind | None:
        return self.tasks.resolve(task.kind, task.kind_version)

    async def _read_waits(self) -> bool:
        """Fetch the rows open tasks wait for; return whether anything new arrived."""
        waited = {i for t in self.open_tasks() for i in (t.wait_for or [])} - set(self.rows)
        fresh = await tasks_by_ids(self.store.engine, sorted(waited))
        op_ids = [
            t.operation_id
            for t in self.open_tasks()
            if t.kind == TOOL_KIND and t.operation_id and t.status == "waiting"
        ]
        ops = await operations_by_ids(self.store.engine, op_ids)
        changed = bool(fresh) or any(
            ops[i].status != (self.operations[i].status if i in self.operations else None)
            for i in ops
        )
        self.rows.update(fresh)
        self.operations.update(ops)
        return changed

    # Running phases ------------------------------------------------------------------------

    def _start(self, task: TaskRecord) -> asyncio.Task[PhaseDone]:
        return asyncio.create_task(self._run_phase(task), name=f"phase:{task.id}")

    async def _run_phase(self, task: TaskRecord) -> PhaseDone:
        kind = self._kind(task)
        assert kind is not None and task.phase is not None
        handler = kind.phases.get(task.phase)
        if handler is None:
            missing = LookupError(f"{kind.name} v{kind.version} has no phase {task.phase!r}")
            return task, missing, {}, []
        docs = {name: copy.deepcopy(self._doc_body(name)) for name in kind.documents}
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
            children=self._children(task),
        )
        try:
            ctx = PhaseContext(self.session_id, self.compat, entries=self.entries)
            result = await handler(view, docs, ctx)
        except Exception as exc:  # the phase's failure is data for the crash-loop rule
            return task, exc, docs, []
        return task, result, docs, ctx.appended

    def _doc_body(self, name: str) -> Any:
        doc = self.documents.get(name)
        return doc.body if doc is not None else None

    def _children(self, task: TaskRecord) -> list[ChildOutcome]:
        out = []
        for child_id in task.wait_for or []:
            row = self.rows.get(child_id)
            if row is not None and row.status == "terminal" and row.outcome is not None:
                out.append(
                    ChildOutcome(row.id, row.kind, row.input, row.outcome, row.result, row.error)
                )
        return out

    async def _after_phase(
        self,
        task: TaskRecord,
        result: Next | BaseException,
        docs: dict[str, Any],
        appended: list[tuple[str, Any]],
    ) -> None:
        self.summary.phases += 1
        metrics.PHASES_RUN.labels(task.kind).inc()
        if isinstance(result, BaseException):
            log.warning(
                "phase failed",
                extra={
                    "event": "phase_failed",
                    "task_id": task.id,
                    "phase": task.phase,
                    "error": repr(result),
                },
            )
            await self._commit(lambda d: self._phase_failed(d, task, result))
            return
        receipt = await self._commit(lambda d: self._apply(d, task, result, docs, appended))
        now = time.time()
        self.entries.extend(
            EntryRecord(seq, kind, body, now)
            for seq, (kind, body) in zip(receipt.entry_seqs, appended, strict=True)
        )

    # Building commits ----------------------------------------------------------------------

    async def _commit(self, build: Callable[[Draft], list[TaskRecord]]) -> CommitReceipt:
        """Build a draft against the current version and commit it; adopt the new rows."""
        async with self._lock:
            draft = Draft(self.session_id, version=self.version, fence=self.fence)
            updated = build(draft)
            receipt = await self.store.commit(draft)
            self.version = receipt.version
            self.summary.commits += 1
            for row in updated:
                self.rows[row.id] = row
                if row.status == "terminal":
                    self.summary.settled.append(row.id)
            return receipt

    def _update(self, draft: Draft, task: TaskRecord, **changes: Any) -> TaskRecord:
        draft.update_task(task.id, **changes)
        return dataclasses.replace(task, **changes, updated_at=time.time())

    def _new_id(self, n: int) -> str:
        # Derived from the commit that creates it: stable if the phase runs again before
        # its result is committed, unique forever after (versions only grow).
        return uuid.uuid5(uuid.NAMESPACE_URL, f"{self.session_id}/{self.version + 1}/{n}").hex

    async def _enter(self, tasks: list[TaskRecord]) -> None:
        def build(draft: Draft) -> list[TaskRecord]:
            rows = []
            for task in tasks:
                attempt = task.attempt + 1 if task.status == "running" else 1
                rows.append(
                    self._update(
                        draft,
                        task,
                        status="running",
                        attempt=attempt,
                        restarts=task.restarts + (task.status == "running"),
                    )
                )
            return rows

        await self._commit(build)
        self._entered.update(t.id for t in tasks)

    def _apply(
        self,
        draft: Draft,
        task: TaskRecord,
        result: Next,
        docs: dict[str, Any],
        appended: list[tuple[str, Any]],
    ) -> list[TaskRecord]:
        kind = self._kind(task)
        assert kind is not None
        for entry_kind, body in appended:
            draft.append_entry(entry_kind, body)
        for name in kind.documents:
            if docs.get(name) != self._doc_body(name):
                current = self.documents.get(name)
                draft.put_document(
                    name, docs[name], expected_version=current.version if current else None
                )
                self.documents[name] = DocumentRecord(
                    name, (current.version if current else 0) + 1, docs[name]
                )
        rows: list[TaskRecord] = []
        spawned: list[str] = []
        if isinstance(result, Dispatch):
            result = Spawn(
                [Call(result.tool, result.arguments, result.operation_id)],
                then=result.then,
                state=result.state,
            )
        if isinstance(result, Spawn):
            for n, child in enumerate(result.children):
                if isinstance(child, Call):
                    spawned.append(self._call(draft, rows, task, child, n))
                else:
                    spawned.append(self._spawn(draft, rows, child, parent=task.id, n=n))
        changes = transition(result, now=time.time(), spawned=spawned)
        updated = self._update(draft, task, **changes)
        rows.append(updated)
        if updated.status == "terminal":
            self._answer(draft, updated)
        return rows

    def _spawn(
        self,
        draft: Draft,
        rows: list[TaskRecord],
        child: Child,
        *,
        parent: str | None,
        n: int,
        submission_id: str | None = None,
    ) -> str:
        kind = (
            self.tasks.resolve(child.kind, child.version)
            if child.version
            else self.tasks.newest(child.kind)
        )
        version = child.version or (kind.version if kind else 1)
        task_id = self._new_id(n)
        phase = kind.first_phase if kind else None
        self._create(
            draft,
            rows,
            task_id=task_id,
            kind=child.kind,
            kind_version=version,
            input=child.input,
            parent_id=parent,
            phase=phase,
            submission_id=submission_id,
        )
        return task_id

    def _call(
        self, draft: Draft, rows: list[TaskRecord], task: TaskRecord, call: Call, n: int
    ) -> str:
        task_id = self._new_id(n)
        operation_id = call.operation_id or f"op-{task_id}"
        try:
            pool = self.tools.get(call.tool).pool
        except UnknownToolError as exc:
            # Recorded as a failed call the phase will see; nothing is sent.
            error = {"status": "failed", "error": {"type": "UnknownToolError", "message": str(exc)}}
            self._create(
                draft,
                rows,
                task_id=task_id,
                kind=TOOL_KIND,
                kind_version=1,
                input={"tool": call.tool, "arguments": call.arguments},
                parent_id=task.id,
                status="terminal",
                outcome="failed",
                error=error,
                operation_id=operation_id,
            )
            return task_id
        tool_input = {"tool": call.tool, "arguments": call.arguments, "pool": pool}
        self._create(
            draft,
            rows,
            task_id=task_id,
            kind=TOOL_KIND,
            kind_version=1,
            input=tool_input,
            parent_id=task.id,
            status="waiting",
            operation_id=operation_id,
        )
        job = ToolJob(
            operation_id=operation_id,
            tool=call.tool,
            arguments=call.arguments,
            session_id=self.session_id,
            task_id=task_id,
            compat=self.compat,
            pool=pool,
            trace=current_carrier(),
        )
        draft.add_outbox(self.topology.hands_queue(pool), encode(job))
        return task_id

    def _create(
        self,
        draft: Draft,
        rows: list[TaskRecord],
        *,
        task_id: str,
        kind: str,
        kind_version: int,
        input: Any,
        status: TaskStatus = "pending",
        **fields: Any,
    ) -> None:
        """Create a task in ``draft`` and keep its row as the commit will leave it."""
        draft.add_task(
            task_id=task_id,
            kind=kind,
            kind_version=kind_version,
            input=input,
            status=status,
            **fields,
        )
        rows.append(
            TaskRecord.new(
                id=task_id,
                session_id=self.session_id,
                kind=kind,
                kind_version=kind_version,
                input=input,
                status=status,
                **fields,
            )
        )

    def _answer(self, draft: Draft, task: TaskRecord) -> None:
        if task.submission_id is None:
            return
        if task.outcome == "succeeded":
            draft.update_submission(task.submission_id, status="answered", answer=task.result)
        else:
            status = "cancelled" if task.outcome == "cancelled" else "failed"
            draft.update_submission(task.submission_id, status=status, error=str(task.error))

    async def _upgrade_versions(self) -> None:
        """Tasks of an old version this build can migrate are upgraded before they run."""
        upgrades = []
        for task in self.open_tasks():
            if task.kind == TOOL_KIND or self._kind(task) is not None:
                continue
            path = self.tasks.upgrade_path(task.kind, task.kind_version)
            if path:
                upgrades.append((task, path))
        if not upgrades:
            return

        def build(draft: Draft) -> list[TaskRecord]:
            rows = []
            for task, path in upgrades:
                input_, state = task.input, task.state
                for step in path:
                    input_, state = step(input_, state)
                rows.append(
                    self._update(
                        draft,
                        task,
                        kind_version=task.kind_version + len(path),
                        input=input_,
                        state=state,
                        blocked_reason=None,
                    )
                )
                log.info(
                    "task upgraded",
                    extra={
                        "event": "upgraded",
                        "task_id": task.id,
                        "to_version": task.kind_version + len(path),
                    },
                )
            return rows

        await self._commit(build)

    async def _accept(self, submission: SubmissionRecord) -> None:
        def build(draft: Draft) -> list[TaskRecord]:
            rows: list[TaskRecord] = []
            try:
                child = self.start_submission(submission)
                self._spawn(draft, rows, child, parent=None, n=0, submission_id=submission.id)
            except Exception as exc:  # bad input is the submitter's problem, reported to it
                draft.update_submission(submission.id, status="failed", error=str(exc))
                return rows
            draft.update_submission(submission.id, status="running")
            return rows

        await self._commit(build)

    async def _settle(self, task: TaskRecord, action: Settle) -> None:
        if action.notify_cancel and task.operation_id:
            self.summary.cancelled_calls.append(task.operation_id)

        def build(draft: Draft) -> list[TaskRecord]:
            updated = self._update(draft, task, **settle_changes(action))
            self._answer(draft, updated)
            return [updated]

        await self._commit(build)

    async def _wind_down(self, task: TaskRecord, action: WindDown) -> None:
        log.info(
            "winding down",
            extra={"event": "completing", "task_id": task.id, "cancel": action.cancel},
        )

        def build(draft: Draft) -> list[TaskRecord]:
            rows = [self._update(draft, task, **wind_down_changes(action))]
            for child_id in action.cancel:
                child = self.rows[child_id]
                if not child.cancel_requested:
                    rows.append(self._update(draft, child, cancel_requested=True))
            return rows

        await self._commit(build)

    async def _block(self, task: TaskRecord, reason: str) -> None:
        log.warning(
            "task blocked", extra={"event": "blocked", "task_id": task.id, "reason": reason}
        )
        await self._commit(lambda d: [self._update(d, task, blocked_reason=reason)])

    def _phase_failed(self, draft: Draft, task: TaskRecord, exc: BaseException) -> list[TaskRecord]:
        if task.attempt >= self.max_restarts:
            updated = self._update(
                draft, task, **settle_changes(Settle("failed", error=failed_phase_error(task, exc)))
            )
            self._answer(draft, updated)
            return [updated]
        return [self._update(draft, task, attempt=task.attempt + 1)]
