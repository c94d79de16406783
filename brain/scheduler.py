"""The scheduler: advances one session's tasks while its lease is held.

It reads the session once, then loops: decide for every open task (``brain.decide``), run
the phases that are ready concurrently (outside any transaction), and commit each result as
it comes -- commits are serialized, each guarded by the session version and the lease's
fence. The loop ends when nothing is runnable and no new tool outcome has arrived.

Every commit carries the kernel's consequences of its own changes: before a draft is
committed, the decisions it makes possible (settling a tool task whose outcome is in,
entering a parent whose join is now satisfied, a child spawned ready to run) are taken on
the rows as the draft leaves them and added to it, until nothing more follows. A settled
tool call and the entry of the phase that applies it are one commit, as are a spawn and the
entry of the child it starts; entries are still durable before their phase runs.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from brainhands.brain.decide import (
    TOOL_KIND,
    Block,
    Expire,
    Facts,
    Idle,
    Receive,
    Run,
    Settle,
    WindDown,
    failed_phase_error,
    may_join,
    next_action,
    settle_changes,
    transition,
    wind_down_changes,
)
from brainhands.brain.ids import derive_operation_id, derive_task_id
from brainhands.brain.registry import TaskKind, TaskRegistry
from brainhands.brain.task import (
    FOLLOW_UP,
    Call,
    Child,
    ChildOutcome,
    Dispatch,
    Next,
    PhaseContext,
    ReceivedSignal,
    Spawn,
    TaskView,
    WaitSignal,
)
from brainhands.shared import metrics
from brainhands.shared.errors import UnknownToolError
from brainhands.shared.live import LivePublisher, TextStream
from brainhands.shared.messages import MAX_INLINE_JSON, ToolJob, encode
from brainhands.shared.store import Draft, Store, SubmissionRecord, TaskRecord
from brainhands.shared.store.declarations import ToolCatalog
from brainhands.shared.store.inbox import send_signal
from brainhands.shared.store.load import arrivals
from brainhands.shared.store.queries import tasks_and_operations
from brainhands.shared.store.records import (
    ClaimedSession,
    CommitReceipt,
    DocumentRecord,
    EntryRecord,
    InboxRecord,
    OperationRecord,
    SessionState,
    TaskStatus,
)
from brainhands.shared.topology import Topology
from brainhands.shared.tracing import current_carrier

log = logging.getLogger("brainhands.brain")

LEASE_WAIT_MARGIN = 1.0
"""Seconds past the lease's time a pass waits for a busy session before it leaves the session
to the holder (which looks again for what came meanwhile before it lets go)."""

StartSubmission = Callable[[SubmissionRecord], Child]


@dataclass(frozen=True)
class RunAgain:
    """A phase's result set aside: the phase runs again after ``seconds``, as it stands
    (its signal, children and state kept), as if it had not run."""

    seconds: float


PhaseDone = tuple[
    TaskRecord, "Next | RunAgain | BaseException", dict[str, Any], list[tuple[str, Any]]
]
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
    """Operation ids of tool calls cancelled in this pass: Hands should hear of them."""
    foreign: str | None = None
    """The session belongs to Brains of this other compatibility key: nothing was done."""


MAX_DECISION_ROUNDS = 100
"""Rounds of decisions one commit may take before the rules are deemed not to converge."""

DECLARATION_RETRY = 1.0
"""Seconds a phase that called an undeclared tool sleeps before it runs again."""


class SessionRunner:
    """One pass over a session, for the holder of its lease token ``fence``."""

    def __init__(
        self,
        *,
        store: Store,
        tasks: TaskRegistry,
        tools: ToolCatalog,
        topology: Topology,
        session_id: str,
        fence: int,
        max_restarts: int = 5,
        declaration_grace: float = 30.0,
        start_submission: StartSubmission = start_from_input,
        compats: frozenset[str] | None = None,
        live: LivePublisher | None = None,
    ) -> None:
        self.store = store
        self.tasks = tasks
        self.tools = tools
        self.topology = topology
        self.session_id = session_id
        self.fence = fence
        self.max_restarts = max_restarts
        self.declaration_grace = declaration_grace
        self.start_submission = start_submission
        self.compats = compats
        self.live = live
        """Where phases' live notes go (a model's text as it comes); None: nowhere."""
        self.rows: dict[str, TaskRecord] = {}
        self.operations: dict[str, OperationRecord] = {}
        self.documents: dict[str, DocumentRecord] = {}
        self.entries: list[EntryRecord] = []
        self.version = 0
        self.compat = ""
        self.summary = RunSummary()
        self._entered: set[str] = set()
        self.signals: list[InboxRecord] = []
        """The session's signals not received yet (none received in this pass)."""
        self._timed_out: list[TaskRecord] = []
        """Exclusive signal waits whose timeout must be sent before they can go on."""
        self._wait_entered = False
        """A task began a signal wait since the signals were last read."""
        self._signals_read = False
        """The signals were read from the store in this pass."""
        self.queued: list[SubmissionRecord] | None = None
        """Submissions waiting for their turn (None: not read in this pass)."""
        self._queued_read_at: float | None = None
        """When (monotonic) the waiting submissions were last read, if in this pass."""
        self._root_ended = False

    async def run(self, claimed: ClaimedSession | None = None) -> RunSummary:
        """Advance the session until nothing is runnable; return what was done.

        ``claimed`` is what the fence claim read (``Store.claim_session``); without it the
        session is loaded here.
        """
        if claimed is None:
            claimed = ClaimedSession(await self.store.load(self.session_id))
            reads = True
        else:
            reads = False
        state = claimed.state
        self.session = state.session
        self.version, self.compat = state.session.version, state.session.compat
        if self.compats is not None and self.compat not in self.compats:
            # Another build's session: touch nothing (this build may not read its state).
            self.summary.foreign = self.compat
            return self.summary
        self.documents = dict(state.documents)
        self.entries = list(state.entries)
        self.rows = {**state.settled, **{t.id: t for t in state.open_tasks}}
        self.operations = dict(claimed.operations)
        self.signals = [r for r in state.inbox if r.kind == "signal"]
        if reads:
            await self._read_waits()
        running: dict[str, asyncio.Task[PhaseDone]] = {}
        try:
            draft = self._draft()
            cancels = self._cancels(draft, state)
            queued = [
                s
                for s in state.open_submissions
                if s.status == "queued" and s.request_id not in cancels
            ]
            self.queued = queued or None
            self._queued_read_at = time.monotonic() if claimed.submissions_read else None
            self._start_next_submission(draft)
            self._upgrade_versions(draft)
            while True:
                progressed, idle_until = await self._decide_and_commit(draft, running)
                if running:
                    done, _ = await asyncio.wait(
                        running.values(), return_when=asyncio.FIRST_COMPLETED
                    )
                    for finished in done:
                        task, result, docs, appended = finished.result()
                        running.pop(task.id)
                        await self._after_phase(task, result, docs, appended, running)
                elif not progressed and not await self._read_waits():
                    if await self._next_turn(draft):
                        continue
                    # Nothing runnable, and no tool outcome arrived meanwhile (its wake-up
                    # may be waiting on our lease): let go.
                    self.summary.next_wake = idle_until
                    return self.summary
                draft = self._draft()
        finally:
            for pending in running.values():
                pending.cancel()
            await asyncio.gather(*running.values(), return_exceptions=True)

    # Deciding ------------------------------------------------------------------------------

    async def _decide_and_commit(
        self, draft: Draft, running: dict[str, asyncio.Task[PhaseDone]]
    ) -> tuple[bool, float | None]:
        """Add the kernel's decisions to ``draft``, commit it (if it changes anything), then
        start the phases that are ready; return whether anything changed, and the next timer.

        No phase starts before the commit that records its entry (or the result of the phase
        before it) is durable -- except light phases: they run right here, and their entry
        and result go into ``draft`` together, with whatever follows from them.
        """
        progressed = False
        ready: list[str] = []
        while True:
            if self._wait_entered:
                # A signal sent before the wait is received at once (the claim may not have
                # read the inbox: a pass for a tool result does not).
                self._wait_entered = False
                await self._read_signals(draft)
            decided, idle_until = self._decide(draft, running, ready)
            progressed |= decided
            if self._timed_out:
                await self._send_timeouts(draft)
                continue
            light = [i for i in ready if self._is_light(self.rows[i])]
            if not light:
                break
            for task_id in light:
                ready.remove(task_id)
                self._entered.add(task_id)
                self._record(draft, *(await self._run_phase(self.rows[task_id])))
        if draft.has_changes():
            receipt = await self._commit(draft)
            provisional = [e.seq for e in self.entries[len(self.entries) - len(draft.entries) :]]
            if receipt.entry_seqs != provisional:
                raise RuntimeError(
                    f"session {self.session_id}: entries numbered {receipt.entry_seqs}, "
                    f"expected {provisional}"
                )
        self._entered.update(ready)
        for task_id in ready:
            running[task_id] = self._start(self.rows[task_id])
        return progressed or draft.has_changes(), idle_until

    def _is_light(self, task: TaskRecord) -> bool:
        kind = self._kind(task)
        return kind is not None and task.phase in kind.light

    def _decide(
        self, draft: Draft, running: dict[str, asyncio.Task[PhaseDone]], ready: list[str]
    ) -> tuple[bool, float | None]:
        """Decide for every open task until no decision changes anything more.

        Kernel changes go into ``draft`` (and into ``self.rows`` at once, so that the next
        decisions see them). Tasks whose phase is ready to run (entered in ``draft`` or
        earlier in this pass) are added to ``ready``; returns whether anything was decided,
        and the next timer.
        """
        now = time.time()
        progressed = False
        for _ in range(MAX_DECISION_ROUNDS):
            changed = False
            wakes: list[float] = []
            for task_id in [t.id for t in self.open_tasks()]:
                task = self.rows[task_id]  # as updated by earlier decisions
                if task.id in running or task.id in ready or task.status == "terminal":
                    continue
                action = next_action(self._facts(task, now))
                if isinstance(action, Idle):
                    if action.until is not None:
                        wakes.append(action.until)
                    continue
                progressed = True
                if isinstance(action, Run):
                    ready.append(task.id)
                    if task.id in self._entered and task.status == "running":
                        continue  # entered earlier in this pass: its next phase is ready
                    self._enter(draft, task)
                elif isinstance(action, Settle):
                    self._settle(draft, task, action)
                elif isinstance(action, WindDown):
                    self._wind_down(draft, task, action)
                elif isinstance(action, Block):
                    self._block(draft, task, action.reason)
                elif isinstance(action, Receive):
                    self._receive(draft, task, action)
                elif isinstance(action, Expire):
                    self._timed_out.append(task)
                    continue
                changed = True
            if not changed:
                return progressed, (min(wakes) if wakes else None)
        raise RuntimeError(
            f"session {self.session_id}: decisions still changing after "
            f"{MAX_DECISION_ROUNDS} rounds"
        )

    def snapshot(self) -> SessionState:
        """The session as this pass left it (for the next pass, if the version still holds)."""
        open_tasks = self.open_tasks()
        waited = {i for t in open_tasks for i in (t.wait_for or [])}
        return SessionState(
            session=dataclasses.replace(
                self.session, version=self.version, entry_count=len(self.entries)
            ),
            entries=list(self.entries),
            documents=dict(self.documents),
            open_tasks=open_tasks,
            settled={
                i: row
                for i in waited
                if (row := self.rows.get(i)) is not None and row.status == "terminal"
            },
        )

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
            signals=self.signals if task.wait_signal is not None else [],
            signals_read=self._signals_read,
            follow_ups=self._follow_ups(task) if task.wait_signal == FOLLOW_UP else [],
        )

    def _follow_ups(self, task: TaskRecord) -> list[tuple[SubmissionRecord, Any]]:
        out = []
        for submission in self.queued or []:
            try:
                child = self.start_submission(submission)
            except Exception:
                continue
            if child.kind == task.kind and may_join(child.input, task.input):
                out.append((submission, child.input))
        return out

    def _kind(self, task: TaskRecord) -> TaskKind | None:
        return self.tasks.resolve(task.kind, task.kind_version)

    async def _read_waits(self) -> bool:
        """Fetch the rows open tasks wait for; return whether anything new arrived."""
        waited = {i for t in self.open_tasks() for i in (t.wait_for or [])} - set(self.rows)
        op_ids = [
            t.operation_id
            for t in self.open_tasks()
            if t.kind == TOOL_KIND and t.operation_id and t.status == "waiting"
        ]
        fresh, ops = await tasks_and_operations(self.store.engine, sorted(waited), op_ids)
        changed = bool(fresh) or any(
            ops[i].status != (self.operations[i].status if i in self.operations else None)
            for i in ops
        )
        self.rows.update(fresh)
        self.operations.update(ops)
        return changed or await self._signal_arrived()

    async def _signal_arrived(self) -> bool:
        """Whether a signal some open task waits for came in (its wake-up may be waiting
        on our lease, or have been dropped): read when a task waits for one."""
        waited = {t.wait_signal for t in self.open_tasks() if t.wait_signal is not None}
        if not waited:
            return False
        known = {r.id for r in self.signals}
        await self._read_signals(self._draft())
        return any(r.name in waited and r.id not in known for r in self.signals)

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
            signal=ReceivedSignal.from_row(task.signal),
        )
        text = TextStream(self.live, self.session_id, task.id)
        try:
            ctx = PhaseContext(self.session_id, self.compat, entries=self.entries, text_stream=text)
            result = await handler(view, docs, ctx)
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
        result: Next | RunAgain | BaseException,
        docs: dict[str, Any],
        appended: list[tuple[str, Any]],
        running: dict[str, asyncio.Task[PhaseDone]],
    ) -> None:
        draft = self._draft()
        self._record(draft, task, result, docs, appended)
        await self._decide_and_commit(draft, running)

    def _record(
        self,
        draft: Draft,
        task: TaskRecord,
        result: Next | RunAgain | BaseException,
        docs: dict[str, Any],
        appended: list[tuple[str, Any]],
    ) -> None:
        """Put a finished phase's result (or its failure) into ``draft``."""
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
        # The row as it stands now: decisions taken while the phase ran (a cancel request
        # from a parent winding down) are kept.
        current = self.rows[task.id]
        if isinstance(result, RunAgain):
            self._update(draft, current, status="sleeping", wake_at=time.time() + result.seconds)
        elif isinstance(result, BaseException):
            self._phase_failed(draft, current, result)
        else:
            self._apply(draft, current, result, docs, appended)

    # Building commits ----------------------------------------------------------------------

    def _draft(self) -> Draft:
        return Draft(self.session_id, version=self.version, fence=self.fence)

    async def _commit(self, draft: Draft) -> CommitReceipt:
        """Commit ``draft``, built against the current version (its rows are adopted)."""
        receipt = await self.store.commit(draft)
        self.version = receipt.version
        self.summary.commits += 1
        return receipt

    def _update(self, draft: Draft, task: TaskRecord, **changes: Any) -> TaskRecord:
        """Change ``task`` in ``draft`` and adopt the row as the commit will leave it."""
        draft.update_task(task.id, **changes)
        return self._adopt(dataclasses.replace(task, **changes, updated_at=time.time()))

    def _adopt(self, row: TaskRecord) -> TaskRecord:
        self.rows[row.id] = row
        if row.status == "terminal":
            self.summary.settled.append(row.id)
        return row

    def _new_id(self, draft: Draft) -> str:
        # The commit that creates it and the task's place in it, under the session's uid.
        return derive_task_id(self.session.uid, draft.version + 1, len(draft.new_tasks))

    def _enter(self, draft: Draft, task: TaskRecord) -> None:
        """Record the entry into the task's phase (counted: a crash loop ends in failure)."""
        self._update(
            draft,
            task,
            status="running",
            attempt=task.attempt + 1 if task.status == "running" else 1,
            restarts=task.restarts + (task.status == "running"),
        )

    def _apply(
        self,
        draft: Draft,
        task: TaskRecord,
        result: Next,
        docs: dict[str, Any],
        appended: list[tuple[str, Any]],
    ) -> None:
        kind = self._kind(task)
        assert kind is not None
        now = time.time()
        for entry_kind, body in appended:
            # Numbered now, as the commit will number them (gap-free after the last one):
            # a light phase run before the commit already reads them.
            draft.append_entry(entry_kind, body)
            seq = self.entries[-1].seq + 1 if self.entries else 1
            self.entries.append(EntryRecord(seq, entry_kind, body, now))
        for name in kind.documents:
            if docs.get(name) != self._doc_body(name):
                current = self.documents.get(name)
                draft.put_document(
                    name, docs[name], expected_version=current.version if current else None
                )
                self.documents[name] = DocumentRecord(
                    name, (current.version if current else 0) + 1, docs[name]
                )
        spawned: list[str] = []
        if isinstance(result, Dispatch):
            result = Spawn(
                [Call(result.tool, result.arguments, result.operation_id)],
                then=result.then,
                state=result.state,
            )
        if isinstance(result, Spawn):
            for child in result.children:
                if isinstance(child, Call):
                    spawned.append(self._call(draft, task, child))
                else:
                    spawned.append(self._spawn(draft, child, parent=task.id))
        self._wait_entered |= isinstance(result, WaitSignal)
        changes = transition(result, now=time.time(), spawned=spawned)
        updated = self._update(draft, task, **changes)
        if updated.status == "terminal":
            self._answer(draft, updated)

    def _spawn(
        self,
        draft: Draft,
        child: Child,
        *,
        parent: str | None,
        submission_id: str | None = None,
    ) -> str:
        kind = (
            self.tasks.resolve(child.kind, child.version)
            if child.version
            else self.tasks.newest(child.kind)
        )
        version = child.version or (kind.version if kind else 1)
        task_id = self._new_id(draft)
        phase = kind.first_phase if kind else None
        self._create(
            draft,
            task_id=task_id,
            kind=child.kind,
            kind_version=version,
            input=child.input,
            parent_id=parent,
            phase=phase,
            submission_id=submission_id,
        )
        return task_id

    def _call(self, draft: Draft, task: TaskRecord, call: Call) -> str:
        task_id = self._new_id(draft)
        operation_id = derive_operation_id(self.session.uid, task_id, call.operation_id)
        try:
            pool = self.tools.get(call.tool).pool
        except UnknownToolError as exc:
            # Recorded as a failed call the phase will see; nothing is sent.
            error = {"status": "failed", "error": {"type": "UnknownToolError", "message": str(exc)}}
            self._create(
                draft,
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
        # Arguments too large to go inline are stored once, in this commit, and the task and
        # the job both refer to them.
        arguments: dict[str, Any] = {"arguments": call.arguments}
        encoded = json.dumps(call.arguments).encode()
        if len(encoded) > MAX_INLINE_JSON:
            arguments = {"arguments": {}, "arguments_blob_id": draft.add_blob(encoded)}
        tool_input = {"tool": call.tool, **arguments, "pool": pool}
        self._create(
            draft,
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
            **arguments,
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
        self._adopt(
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
        """A root task ended: its submission, and those that joined it, are answered."""
        if task.submission_id is None:
            return
        self._root_ended = True
        if task.outcome == "succeeded":
            ending: dict[str, Any] = {"status": "answered", "answer": task.result}
        else:
            status = "cancelled" if task.outcome == "cancelled" else "failed"
            ending = {"status": status, "error": str(task.error)}
        draft.update_submission(task.submission_id, **ending)
        draft.answer_joined(task.id, **ending)

    def _upgrade_versions(self, draft: Draft) -> None:
        """Tasks of an old version this build can migrate are upgraded before they run."""
        for task in self.open_tasks():
            if task.kind == TOOL_KIND or self._kind(task) is not None:
                continue
            path = self.tasks.upgrade_path(task.kind, task.kind_version)
            if not path:
                continue
            input_, state = task.input, task.state
            for step in path:
                input_, state = step(input_, state)
            self._update(
                draft,
                task,
                kind_version=task.kind_version + len(path),
                input=input_,
                state=state,
                blocked_reason=None,
            )
            log.info(
                "task upgraded",
                extra={
                    "event": "upgraded",
                    "task_id": task.id,
                    "to_version": task.kind_version + len(path),
                },
            )

    def _cancels(self, draft: Draft, state: SessionState) -> set[str]:
        """Carry out the inbox's cancel requests in ``draft`` (each marked applied in it);
        return the request ids of the queued submissions they end before they start.

        A running submission's root task gets ``cancel_requested`` (the kernel winds it
        down); one that has not started ends ``cancelled``; one already ended, or unknown,
        leaves the request applied with nothing to do.
        """
        ended: set[str] = set()
        by_request = {s.request_id: s for s in state.open_submissions}
        for request in state.inbox:
            if request.kind != "cancel":
                continue  # a kind this build does not know: left for one that does
            draft.mark_applied(request.id)
            submission = by_request.get(request.key)
            if submission is None:
                continue
            # A follow-up that joined a loop is that loop's (its text shapes the work now).
            root = next(
                (
                    t
                    for t in self.open_tasks()
                    if t.submission_id == submission.id or t.id == submission.task_id
                ),
                None,
            )
            if root is None:
                draft.update_submission(submission.id, status="cancelled", error="cancelled")
                ended.add(submission.request_id)
            elif not root.cancel_requested:
                self._update(draft, root, cancel_requested=True)
            log.info(
                "cancel requested",
                extra={
                    "event": "cancel_requested",
                    "session_id": self.session_id,
                    "request_id": request.key,
                    "started": root is not None,
                },
            )
        return ended

    def _accept(self, draft: Draft, submission: SubmissionRecord) -> None:
        try:
            child = self.start_submission(submission)
            root = self._spawn(draft, child, parent=None, submission_id=submission.id)
        except Exception as exc:  # bad input is the submitter's problem, reported to it
            draft.update_submission(submission.id, status="failed", error=str(exc))
            self._root_ended = True  # the next one may start
            return
        draft.update_submission(submission.id, status="running", task_id=root)

    def _settle(self, draft: Draft, task: TaskRecord, action: Settle) -> None:
        if action.notify_cancel and task.operation_id:
            self.summary.cancelled_calls.append(task.operation_id)
        self._answer(draft, self._update(draft, task, **settle_changes(action)))

    def _wind_down(self, draft: Draft, task: TaskRecord, action: WindDown) -> None:
        log.info(
            "winding down",
            extra={"event": "completing", "task_id": task.id, "cancel": action.cancel},
        )
        self._update(draft, task, **wind_down_changes(action))
        for child_id in action.cancel:
            child = self.rows[child_id]
            if not child.cancel_requested:
                self._update(draft, child, cancel_requested=True)

    def _receive(self, draft: Draft, task: TaskRecord, action: Receive) -> None:
        """End a signal wait: the signal (or its timeout) is the task's, its request applied
        in the same commit, and the phase after the wait is ready."""
        if action.inbox_id is not None:
            draft.mark_applied(action.inbox_id)
            self.signals = [r for r in self.signals if r.id != action.inbox_id]
        if action.submission_id is not None:
            draft.update_submission(action.submission_id, status="running", task_id=task.id)
            self.queued = [s for s in self.queued or [] if s.id != action.submission_id]
        self._update(
            draft,
            task,
            status="pending",
            signal=action.signal,
            wait_signal=None,
            wait_exclusive=False,
            wake_at=None,
        )
        log.info(
            "signal received",
            extra={
                "event": "signal_received",
                "task_id": task.id,
                "signal": action.signal["name"],
                "signal_id": action.signal["signal_id"],
                "timed_out": action.signal["timed_out"],
            },
        )

    async def _send_timeouts(self, draft: Draft) -> None:
        """Read the session's signals again for the waits whose timeout is due, after
        sending each exclusive one's timeout as its one signal (unless a sender was first:
        then that is the one)."""
        for task in self._timed_out:
            assert task.wait_signal is not None
            if not task.wait_exclusive:
                continue
            await send_signal(
                self.store,
                session_id=self.session_id,
                name=task.wait_signal,
                signal_id=task.wait_signal,
                payload=None,
                wake=None,
                timed_out=True,
            )
        await self._read_signals(draft)
        names = {r.name for r in self.signals}
        for task in self._timed_out:
            if task.wait_exclusive and task.wait_signal not in names:
                # Its one signal was received before (by an earlier wait of this name).
                error = {
                    "reason": "exclusive signal reused",
                    "message": f"exclusive signal {task.wait_signal!r} was received before: "
                    "an exclusive name can be waited for once",
                }
                updated = self._update(draft, task, **settle_changes(Settle("failed", error=error)))
                self._answer(draft, updated)
        self._timed_out.clear()

    async def _read_signals(self, draft: Draft) -> None:
        """Read the session's signals not received yet (nor in ``draft``), and, when a task
        waits for a follow-up, the submissions waiting for their turn (one hop)."""
        self._signals_read = True
        received = set(draft.applied_inbox)
        follow_up = any(t.wait_signal == FOLLOW_UP for t in self.open_tasks())
        fresh, queued = await arrivals(self.store.engine, self.session_id, queued=follow_up)
        self.signals = [r for r in fresh if r.kind == "signal" and r.id not in received]
        if follow_up:
            self._keep_queued(draft, queued)

    def _keep_queued(self, draft: Draft, queued: list[SubmissionRecord]) -> None:
        taken = {u.submission_id for u in draft.submission_updates}
        self.queued = [s for s in queued if s.id not in taken]
        self._queued_read_at = time.monotonic()

    def _start_next_submission(self, draft: Draft) -> bool:
        """Start the oldest submission waiting for its turn, if no root task is open: a
        session runs one submission's task at a time (later ones wait, or join it as
        follow-ups)."""
        if not self.queued or any(t.parent_id is None for t in self.open_tasks()):
            return False
        self._accept(draft, self.queued.pop(0))
        return True

    async def _next_turn(self, draft: Draft) -> bool:
        """At the end of a pass in which a root task ended: start the next submission.

        The waiting ones are read again unless this pass read them less than
        ``LEASE_WAIT_MARGIN`` ago: a submission that came after that read has a wake-up of
        its own, which waits for this lease longer than that, and gets the next pass."""
        if not self._root_ended:
            return False
        self._root_ended = False
        read_at = self._queued_read_at
        if read_at is None or time.monotonic() - read_at >= LEASE_WAIT_MARGIN:
            _, queued = await arrivals(self.store.engine, self.session_id, queued=True)
            self._keep_queued(draft, queued)
        return self._start_next_submission(draft)

    def _block(self, draft: Draft, task: TaskRecord, reason: str) -> None:
        log.warning(
            "task blocked", extra={"event": "blocked", "task_id": task.id, "reason": reason}
        )
        self._update(draft, task, blocked_reason=reason)

    def _phase_failed(self, draft: Draft, task: TaskRecord, exc: BaseException) -> None:
        if task.attempt >= self.max_restarts:
            updated = self._update(
                draft, task, **settle_changes(Settle("failed", error=failed_phase_error(task, exc)))
            )
            self._answer(draft, updated)
            return
        self._update(draft, task, attempt=task.attempt + 1)
