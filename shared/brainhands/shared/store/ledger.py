"""The operation ledger: Hands' record of every tool call, one row per ``operation_id``.

Only Hands write these rows, and every write after the claim is guarded by the writer's
fencing token, so a worker that lost its lease (paused, partitioned, slow) can change
nothing. Status meanings:

- ``intended``: no call is in flight (never started, or the last attempt failed and a retry
  is due at ``next_attempt_at``) -- or, for a call whose policy lets it go out with no
  ``started`` mark (``safe``, ``query``, straight from its holder's claim), one may be, if
  the row was claimed since its holders last settled it (``claims.OperationClaim``);
- ``started``: a call may be in flight; if its holder died, the effect may have happened
  (``unsafe`` calls are marked so before they go out, and every call whose start was
  deferred after its claim: a backoff, a query, a retry);
- ``succeeded | failed | uncertain | cancelled``: the outcome, final.

These writes are a Hands job's hot path, so each runs the way a Brain's commit does
(``Backend.write``): the whole transaction in one greenlet (PostgreSQL) or one worker
thread (SQLite), with statements built once;
each write is one statement whose ``RETURNING`` (or row count) answers what a read-back used
to. An outcome and its result event are one statement too where the backend chains writes
(PostgreSQL): the event is inserted from the guarded update's row, so a lone outcome is one
round trip without BEGIN and COMMIT. Outcomes ready together are group-committed as a
Brain's drafts are (``shared.store.group``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from sqlalchemy import Update, bindparam, exists, func, insert, null, select, true, update
from sqlalchemy.engine import Connection

from brainhands.shared.batch import Batcher
from brainhands.shared.errors import (
    BrainhandsError,
    CallCancelled,
    ConflictError,
    NotFoundError,
    StaleLeaseError,
    StoreError,
    WorkspaceMoved,
)
from brainhands.shared.store import claims, fence, schema
from brainhands.shared.store.backends.base import Backend
from brainhands.shared.store.commit import insert_outbox_sync
from brainhands.shared.store.draft import OutboxMessage, new_id
from brainhands.shared.store.group import GroupCommit
from brainhands.shared.store.handoff import Handoff
from brainhands.shared.store.hot import hot, run
from brainhands.shared.store.load import operation_record
from brainhands.shared.store.object_bytes import ObjectBytes
from brainhands.shared.store.records import (
    FINAL_OPERATION_STATUSES,
    CommitReceipt,
    OperationRecord,
    OperationStatus,
    OutboxRow,
)
from brainhands.shared.store.workspaces import WorkspaceAdvance, Workspaces, advance

_T = TypeVar("_T")
_o = schema.operation


def _guarded_update(**values: Any) -> Update:
    """``UPDATE operation SET ... WHERE operation_id = :w_id AND fence = :w_fence``."""
    return (
        update(_o)
        .where(_o.c.operation_id == bindparam("w_id"), _o.c.fence == bindparam("w_fence"))
        .values(**values)
    )


def _bound(column: str) -> Any:
    # Not named like the column: SQLAlchemy reserves that name for its own SET parameter.
    return bindparam(f"v_{column}", type_=_o.c[column].type)


_READ = select(_o).where(_o.c.operation_id == bindparam("operation_id"))
_FENCE = hot(select(_o.c.fence).where(_o.c.operation_id == bindparam("operation_id")))
_t = schema.task
# The Brain commits a cancel as its task's cancel_requested; a call checks it as it goes out.
_CANCEL_REQUESTED = exists().where(_t.c.id == _o.c.task_id, _t.c.cancel_requested.is_(true()))
_MARK_STARTED = hot(
    _guarded_update(
        status="started",
        attempts=_o.c.attempts + 1,
        started_at=_bound("started_at"),
        next_attempt_at=null(),
        unsettled_claims=0,
        updated_at=_bound("updated_at"),
    )
    .where(~_CANCEL_REQUESTED)
    .returning(*_o.c)
)
_INTERRUPTIONS = _o.c.interruptions + bindparam("v_interrupted", type_=_o.c.interruptions.type)
# An attempt that went out with no started mark is counted when its end is recorded.
_ATTEMPTS = _o.c.attempts + bindparam("v_attempted", type_=_o.c.attempts.type)
_SCHEDULE_RETRY = hot(
    _guarded_update(
        status="intended",
        error=_bound("error"),
        next_attempt_at=_bound("next_attempt_at"),
        interruptions=_INTERRUPTIONS,
        attempts=_ATTEMPTS,
        unsettled_claims=0,
        updated_at=_bound("updated_at"),
    )
)
_OUTCOME = _guarded_update(
    **{c: _bound(c) for c in ("status", "result", "error", "blob_id", "finished_at", "updated_at")},
    interruptions=_INTERRUPTIONS,
    attempts=_ATTEMPTS,
    started_at=func.coalesce(_bound("started_at"), _o.c.started_at),
)
_RECORD_OUTCOME = hot(_OUTCOME)
_NOTE_HANDLE = hot(_guarded_update(handle=_bound("handle"), updated_at=_bound("updated_at")))
_HANDLE = select(_o.c.handle).where(_o.c.operation_id == bindparam("operation_id"))
_ob = schema.outbox
_RECORDED = _OUTCOME.returning(_o.c.operation_id, _o.c.fence).cte("recorded")
# The outcome and its result event in one statement: the event row is inserted from the
# guarded update's row, so a refused guard writes neither (backends that chain writes). It
# answers the event's id with the operation it is for, so that the outcomes of a batch,
# sent in one round trip, are told apart.
_EVENT_COLUMNS = ("session_id", "routing_key", "body", "headers")
_EVENT = (
    insert(_ob)
    .from_select(
        [*_EVENT_COLUMNS, "created_at", "publish_after"],
        select(
            *(bindparam(f"e_{c}", type_=_ob.c[c].type) for c in _EVENT_COLUMNS),
            bindparam("v_updated_at", type_=_ob.c.created_at.type),
            bindparam("e_publish_after", type_=_ob.c.publish_after.type),
        ).select_from(_RECORDED),
    )
    .returning(_ob.c.id)
    .cte("event")
)
_RECORD_OUTCOME_AND_EVENT = hot(
    select(_EVENT.c.id, _RECORDED.c.operation_id, _RECORDED.c.fence).select_from(
        _EVENT.join(_RECORDED, true())
    )
)
_INSERT_BLOB = hot(insert(schema.blob))
_READ_BLOB = select(schema.blob.c.data).where(schema.blob.c.id == bindparam("id"))


class OperationLedger:
    """Reads and fenced writes of operation rows."""

    def __init__(
        self,
        backend: Backend,
        handoff: Handoff,
        notify: Callable[[CommitReceipt], None],
        workspace_objects: ObjectBytes | None = None,
    ) -> None:
        self._backend = backend
        self._notify = notify
        self._handoff = handoff
        self.workspaces = Workspaces(backend, workspace_objects)
        """The workspaces whose versions its outcomes commit (``record_outcome``)."""
        chained = backend.chains_writes
        self._outcomes: GroupCommit[_Outcome, tuple[OutboxRow, ...]] = GroupCommit(
            backend,
            apply_one=lambda conn, outcome: _record_outcome(conn, outcome, handoff, chained),
            apply_many=lambda conn, outcomes: _record_outcomes(conn, outcomes, handoff, chained),
            order=lambda outcome: str(outcome.params["w_id"]),
            what="outcomes",
            one_round_trip=lambda outcomes: _one_round_trip(outcomes, chained),
        )
        # Claims and starts asked for while one is on its way share the next round trip.
        self._claims: Batcher[fence.OperationFenceClaim, claims.OperationClaim] = Batcher(
            self._claim_batch, order=lambda claim: claim.operation_id, what="operation_claims"
        )
        self._starts: Batcher[tuple[str, int], OperationRecord] = Batcher(
            self._start_batch, order=lambda start: start[0], what="operation_starts"
        )

    async def claim(
        self, operation_id: str, token: int, *, intent: dict[str, Any]
    ) -> claims.OperationClaim:
        """Create the row or raise its fence to ``token``, and read it back in one go.

        Raises ``StaleLeaseError`` (with the stored fence) when ``token`` is not above it.
        The claim also says whether the call's task has a committed cancel request.
        """
        return await self._claims(fence.OperationFenceClaim(operation_id, token, intent))

    async def get(self, operation_id: str) -> OperationRecord:
        async with self._backend.snapshot() as conn:
            row = (await conn.execute(_READ, {"operation_id": operation_id})).one_or_none()
        if row is None:
            raise NotFoundError(f"operation {operation_id} does not exist")
        return operation_record(row)

    async def mark_started(self, operation_id: str, token: int) -> OperationRecord:
        """Record that a call is about to go out: ``started``, one more attempt.

        Raises ``CallCancelled`` when the task that made the call has a committed cancel
        request: checked in the same statement, so no call starts after its cancel. Only
        calls whose policy needs the mark come here (``hands.decide.marks_started``).
        """
        return await self._starts((operation_id, token))

    async def cancelled_tasks(self, task_ids: list[str]) -> set[str]:
        """Which of ``task_ids`` have a committed cancel request (read of Brain rows)."""
        if not task_ids:
            return set()
        async with self._backend.snapshot() as conn:
            rows = await conn.execute(claims.CANCELLED_TASKS, {"task_ids": task_ids})
        return {row.id for row in rows}

    async def schedule_retry(
        self,
        operation_id: str,
        token: int,
        *,
        error: dict[str, Any] | None,
        retry_at: float | None,
        interrupted: bool = False,
        attempted: bool = False,
    ) -> None:
        """The attempt failed (or, ``interrupted``, was cut short by its worker's death or a
        lost lease: counted apart) and may run again: back to ``intended`` until ``retry_at``.
        ``attempted``: the attempt went out with no ``started`` mark, and is counted now.

        It settles the row (``unsettled_claims``): the holder's next start, after whatever
        it waits for, is marked; a holder that dies before it interrupted nothing."""
        await self._write(
            lambda conn: _schedule_retry(
                conn, operation_id, token, error, retry_at, interrupted, attempted
            )
        )

    async def record_outcome(
        self,
        operation_id: str,
        token: int,
        *,
        status: OperationStatus,
        result: Any = None,
        error: dict[str, Any] | None = None,
        blob: bytes | None = None,
        notify: OutboxMessage | None = None,
        session_id: str | None = None,
        interrupted: bool = False,
        attempted: bool = False,
        started_at: float | None = None,
        workspace: WorkspaceAdvance | None = None,
    ) -> None:
        """Record the final outcome and, in the same transaction, the result event.

        Outcomes recorded meanwhile share that transaction (group commit), each guarded by
        its own token: a stale one is refused alone. A ``blob`` is stored once in its own
        row and referenced, instead of ``result``. ``interrupted``: the outcome follows an
        attempt cut short, which is counted. ``attempted``: the attempt it ends went out with
        no ``started`` mark (at ``started_at``), and is counted now. ``workspace``: the
        workspace version the call made, committed with the outcome in a transaction of
        their own, or ``WorkspaceMoved`` (and nothing written) if another call committed
        that workspace's next version first.
        """
        if status not in FINAL_OPERATION_STATUSES:
            raise ValueError(f"{status!r} is not an outcome")
        params = {
            "w_id": operation_id,
            "w_fence": token,
            "v_status": status,
            "v_result": result,
            "v_error": error,
            "v_interrupted": int(interrupted),
            "v_attempted": int(attempted),
            "v_started_at": started_at,
        }
        outcome = _Outcome(params, blob, notify, session_id, workspace)
        if workspace is None:
            rows = await self._outcomes.commit(outcome)
        else:
            rows = await self._record_with_workspace(outcome, workspace)
        if rows:
            self._notify(CommitReceipt(session_id or "", version=-1, entry_seqs=[], outbox=rows))

    async def _record_with_workspace(
        self, outcome: _Outcome, workspace: WorkspaceAdvance
    ) -> tuple[OutboxRow, ...]:
        """An outcome with the workspace version its call made, alone in a transaction: a
        refused guard or a moved workspace there writes neither."""
        try:
            return await self._write(
                lambda conn: _record_outcome(conn, outcome, self._handoff, chained=False)
            )
        except ConflictError:  # lost the race for the version to another call
            raise WorkspaceMoved(workspace.session_id, workspace.name, workspace.base) from None

    async def note_handle(self, operation_id: str, token: int, handle: str) -> None:
        """Keep ``handle``, the id an external system gave the work a call started, on the
        call's row (guarded by ``token``): whoever takes the call over reads it (``handle``)."""
        params = {"w_id": operation_id, "w_fence": token, "v_handle": handle}
        await self._write(lambda conn: _note_handle(conn, params), single=True)

    async def handle(self, operation_id: str) -> str | None:
        """The handle last noted for the call (``note_handle``), if any."""
        async with self._backend.snapshot() as conn:
            handle = (await conn.execute(_HANDLE, {"operation_id": operation_id})).scalar()
        return None if handle is None else str(handle)

    async def read_blob(self, blob_id: str) -> bytes:
        async with self._backend.snapshot() as conn:
            data = (await conn.execute(_READ_BLOB, {"id": blob_id})).scalar()
        if data is None:
            raise NotFoundError(f"blob {blob_id} does not exist")
        return bytes(data)

    async def _claim_batch(
        self, batch: list[fence.OperationFenceClaim]
    ) -> list[claims.OperationClaim | BaseException]:
        backend = self._backend
        return await self._write(
            lambda conn: claims.claim_operations(conn, backend.insert, batch), single=True
        )

    async def _start_batch(
        self, starts: list[tuple[str, int]]
    ) -> list[OperationRecord | BaseException]:
        return await self._write(lambda conn: _mark_started(conn, starts), single=True)

    async def _write(self, work: Callable[[Connection], _T], *, single: bool = False) -> _T:
        """Run ``work(conn)`` in a writing transaction of its own, in one hop
        (``single``: its one write needs no BEGIN/COMMIT around it)."""
        return await self._backend.write(work, single_statement=single)


def _mark_started(
    conn: Connection, starts: list[tuple[str, int]]
) -> list[OperationRecord | BaseException]:
    """Mark each ``(operation_id, token)`` started, all in one round trip where the backend
    pipelines: the row, or why it was refused."""
    now = time.time()
    params = [
        {"w_id": operation_id, "w_fence": token, "v_started_at": now, "v_updated_at": now}
        for operation_id, token in starts
    ]
    found = run(conn, _MARK_STARTED, params[0] if len(params) == 1 else params).all()
    started = fence.rows_for(found, starts, key=fence.operation_write)
    current = fence.operation_fences(
        conn, [op for (op, _), row in zip(starts, started, strict=True) if row is None]
    )
    out: list[OperationRecord | BaseException] = []
    for (operation_id, token), row in zip(starts, started, strict=True):
        if row is not None:
            out.append(operation_record(row))
        elif current.get(operation_id) == token:  # the guard held: the cancel check refused
            out.append(CallCancelled(operation_id))
        else:
            out.append(_refusal(operation_id, token, current.get(operation_id)))
    return out


def _schedule_retry(
    conn: Connection,
    operation_id: str,
    token: int,
    error: dict[str, Any] | None,
    retry_at: float | None,
    interrupted: bool,
    attempted: bool,
) -> None:
    params = {
        "w_id": operation_id,
        "w_fence": token,
        "v_error": error,
        "v_next_attempt_at": retry_at,
        "v_interrupted": int(interrupted),
        "v_attempted": int(attempted),
        "v_updated_at": time.time(),
    }
    if run(conn, _SCHEDULE_RETRY, params).rowcount != 1:
        _refuse(conn, operation_id, token)


def _note_handle(conn: Connection, params: dict[str, Any]) -> None:
    if run(conn, _NOTE_HANDLE, {**params, "v_updated_at": time.time()}).rowcount != 1:
        _refuse(conn, params["w_id"], params["w_fence"])


@dataclass(frozen=True)
class _Outcome:
    """An outcome to record: the guarded update's parameters (``w_id``, ``w_fence`` and the
    outcome's ``v_`` values), a large result's blob, and the result event."""

    params: dict[str, Any]
    blob: bytes | None
    notify: OutboxMessage | None
    session_id: str | None
    workspace: WorkspaceAdvance | None = None

    def one_statement(self, chained: bool) -> bool:
        """Whether one statement writes it (``chained``: on a backend that chains writes):
        no blob, no workspace version, and no event or one inserted from the guarded
        update's row."""
        plain = self.blob is None and self.workspace is None
        return plain and (self.notify is None or chained)

    def with_event(self, chained: bool) -> bool:
        """Whether it is written with its result event in one statement (``chained``: on a
        backend that chains writes)."""
        plain = self.blob is None and self.workspace is None
        return chained and plain and self.notify is not None


def _record_outcome(
    conn: Connection, outcome: _Outcome, handoff: Handoff, chained: bool
) -> tuple[OutboxRow, ...]:
    if outcome.with_event(chained):
        [recorded] = _record_chained(conn, [outcome], handoff)
        if isinstance(recorded, BaseException):
            raise recorded
        return recorded
    now = time.time()
    blob_id = None if outcome.blob is None else new_id()
    params = {**outcome.params, "v_blob_id": blob_id, "v_finished_at": now, "v_updated_at": now}
    # The guard goes first: a stale writer is refused before it sends a large blob, and a
    # refused outcome has written nothing (so a batch goes on without it).
    if run(conn, _RECORD_OUTCOME, params).rowcount != 1:
        _refuse(conn, params["w_id"], params["w_fence"])
    if outcome.blob is not None:
        run(conn, _INSERT_BLOB, {"id": blob_id, "data": outcome.blob, "created_at": now})
    if outcome.workspace is not None:
        advance(conn, outcome.workspace, params["w_id"], now)
    if outcome.notify is None:
        return ()
    return insert_outbox_sync(conn, outcome.session_id, [outcome.notify], now, handoff=handoff)


def _record_chained(
    conn: Connection, outcomes: Sequence[_Outcome], handoff: Handoff
) -> list[tuple[OutboxRow, ...] | BrainhandsError]:
    """Outcomes written with their result events in one statement each
    (``_Outcome.with_event``), all sent in one round trip: each one's result event row, or
    the error of its refused guard."""
    now = time.time()
    params = []
    for outcome in outcomes:
        event = outcome.notify
        assert event is not None
        params.append(
            {
                **outcome.params,
                "v_blob_id": None,
                "v_finished_at": now,
                "v_updated_at": now,
                "e_session_id": outcome.session_id,
                "e_routing_key": event.routing_key,
                "e_body": event.body,
                "e_headers": event.headers,
                "e_publish_after": handoff.publish_after(now),
            }
        )
    found = run(conn, _RECORD_OUTCOME_AND_EVENT, params[0] if len(params) == 1 else params)
    writes = [(p["w_id"], p["w_fence"]) for p in params]
    rows = fence.rows_for(found.all(), writes, key=fence.operation_write)
    current = fence.operation_fences(
        conn, [op for (op, _), row in zip(writes, rows, strict=True) if row is None]
    )
    out: list[tuple[OutboxRow, ...] | BrainhandsError] = []
    for outcome, (operation_id, token), row in zip(outcomes, writes, rows, strict=True):
        event = outcome.notify
        assert event is not None
        if row is None:
            out.append(_refusal(operation_id, token, current.get(operation_id)))
        else:
            out.append((OutboxRow(row.id, event.routing_key, event.body, event.headers),))
    return out


def _one_round_trip(outcomes: Sequence[_Outcome], chained: bool) -> bool:
    """Whether ``outcomes`` are written in one round trip, atomic without a transaction around
    it: a lone one as one statement, or each with its event by the one statement that writes
    both, pipelined for them all (``chained``: on a backend that chains writes)."""
    if len(outcomes) == 1:
        return outcomes[0].one_statement(chained)
    return all(outcome.with_event(chained) for outcome in outcomes)


def _record_outcomes(
    conn: Connection, outcomes: Sequence[_Outcome], handoff: Handoff, chained: bool
) -> list[tuple[OutboxRow, ...] | BrainhandsError]:
    one = [i for i, outcome in enumerate(outcomes) if outcome.with_event(chained)]
    recorded: dict[int, tuple[OutboxRow, ...] | BrainhandsError] = dict(
        zip(one, _record_chained(conn, [outcomes[i] for i in one], handoff), strict=True)
    )
    for i, outcome in enumerate(outcomes):
        if i in recorded:
            continue
        try:
            recorded[i] = _record_outcome(conn, outcome, handoff, chained)
        except (StaleLeaseError, NotFoundError) as refused:  # raised by the guard alone
            recorded[i] = refused
    return [recorded[i] for i in range(len(outcomes))]


def _refuse(conn: Connection, operation_id: str, token: int) -> NoReturn:
    """A guarded write matched no row: say whether the row is missing or the token stale."""
    raise _refusal(operation_id, token, run(conn, _FENCE, {"operation_id": operation_id}).scalar())


def _refusal(operation_id: str, token: int, current: int | None) -> StoreError:
    return fence.refusal("operation", operation_id, token, current)
