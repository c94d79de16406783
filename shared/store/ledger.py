"""The operation ledger: Hands' record of every tool call, one row per ``operation_id``.

Only Hands write these rows, and every write after the claim is guarded by the writer's
fencing token, so a worker that lost its lease (paused, partitioned, slow) can change
nothing. Status meanings:

- ``intended``: no call is in flight (never started, or the last attempt failed and a retry
  is due at ``next_attempt_at``);
- ``started``: a call may be in flight; if its holder died, the effect may have happened;
- ``succeeded | failed | uncertain | cancelled``: the outcome, final.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.errors import NotFoundError, StaleLeaseError
from shared.store import fence, schema
from shared.store.commit import insert_outbox
from shared.store.draft import OutboxMessage, new_id
from shared.store.engine import read_transaction, write_transaction
from shared.store.load import operation_record
from shared.store.records import CommitReceipt, OperationRecord, OperationStatus, OutboxRow
from shared.store.store import Store

FINAL_STATUSES: frozenset[OperationStatus] = frozenset(
    {"succeeded", "failed", "uncertain", "cancelled"}
)


@dataclass(frozen=True)
class OperationClaim:
    """The result of claiming an operation for a lease token."""

    fence: int
    operation: OperationRecord
    """The row as it stood right after the claim."""


class OperationLedger:
    """Reads and fenced writes of operation rows."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def claim(
        self, operation_id: str, token: int, *, intent: dict[str, Any]
    ) -> OperationClaim:
        """Create the row or raise its fence to ``token``, and read it back in one go.

        Raises ``StaleLeaseError`` (with the stored fence) when ``token`` is not above it.
        """
        async with write_transaction(self.store.engine) as conn:
            await fence.claim_operation_fence(conn, operation_id, token, intent=intent)
            return OperationClaim(token, await _read(conn, operation_id))

    async def get(self, operation_id: str) -> OperationRecord:
        async with read_transaction(self.store.engine) as conn:
            return await _read(conn, operation_id)

    async def mark_started(self, operation_id: str, token: int) -> OperationRecord:
        """Record that a call is about to go out: ``started``, one more attempt."""
        o = schema.operation
        now = time.time()
        async with write_transaction(self.store.engine) as conn:
            await _guarded(
                conn,
                operation_id,
                token,
                status="started",
                attempts=o.c.attempts + 1,
                started_at=now,
                next_attempt_at=None,
                updated_at=now,
            )
            return await _read(conn, operation_id)

    async def schedule_retry(
        self, operation_id: str, token: int, *, error: dict[str, Any], retry_at: float
    ) -> None:
        """The attempt failed and may be retried: back to ``intended`` until ``retry_at``."""
        async with write_transaction(self.store.engine) as conn:
            await _guarded(
                conn,
                operation_id,
                token,
                status="intended",
                error=error,
                next_attempt_at=retry_at,
                updated_at=time.time(),
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
    ) -> None:
        """Record the final outcome and, in the same transaction, the result event.

        A ``blob`` is stored once in its own row and referenced, instead of ``result``.
        """
        if status not in FINAL_STATUSES:
            raise ValueError(f"{status!r} is not an outcome")
        now = time.time()
        rows: tuple[OutboxRow, ...] = ()
        async with write_transaction(self.store.engine) as conn:
            blob_id = None
            if blob is not None:
                blob_id = new_id()
                await conn.execute(
                    insert(schema.blob).values(id=blob_id, data=blob, created_at=now)
                )
            await _guarded(
                conn,
                operation_id,
                token,
                status=status,
                result=result,
                error=error,
                blob_id=blob_id,
                finished_at=now,
                updated_at=now,
            )
            if notify is not None:
                rows = await insert_outbox(
                    conn, session_id, [notify], now, handoff=self.store.handoff
                )
        if rows:
            self.store.notify(
                CommitReceipt(session_id or "", version=-1, entry_seqs=[], outbox=rows)
            )

    async def read_blob(self, blob_id: str) -> bytes:
        b = schema.blob
        async with read_transaction(self.store.engine) as conn:
            data = (await conn.execute(select(b.c.data).where(b.c.id == blob_id))).scalar()
        if data is None:
            raise NotFoundError(f"blob {blob_id} does not exist")
        return bytes(data)


async def _read(conn: AsyncConnection, operation_id: str) -> OperationRecord:
    o = schema.operation
    row = (await conn.execute(select(o).where(o.c.operation_id == operation_id))).one_or_none()
    if row is None:
        raise NotFoundError(f"operation {operation_id} does not exist")
    return operation_record(row)


async def _guarded(conn: AsyncConnection, operation_id: str, token: int, **values: Any) -> None:
    o = schema.operation
    done = await conn.execute(
        update(o).where(o.c.operation_id == operation_id, o.c.fence == token).values(**values)
    )
    if done.rowcount == 1:
        return
    current = (
        await conn.execute(select(o.c.fence).where(o.c.operation_id == operation_id))
    ).scalar()
    if current is None:
        raise NotFoundError(f"operation {operation_id} does not exist")
    raise StaleLeaseError(f"operation:{operation_id}", token, int(current))
