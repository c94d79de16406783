"""The inbox: requests to a session that the Brain running it carries out.

A client never holds a session's lease or commits a draft: it inserts a request (a cancel,
keyed by the request id it cancels; a signal, keyed by its id) and the session's wake-up in
one transaction, and the Brain that next runs the session applies the request and marks it
applied in the commit that carries it out. ``(session, kind, key)`` is unique, so the same
request sent twice is one row and is applied once; a request whose wake-up was lost is
found by the sweeper. A signal stays unapplied until a task's wait receives it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from brainhands.shared.errors import NotFoundError
from brainhands.shared.store import schema
from brainhands.shared.store.backends.base import Backend
from brainhands.shared.store.commit import insert_outbox
from brainhands.shared.store.details import inbox_in
from brainhands.shared.store.draft import OutboxMessage
from brainhands.shared.store.handoff import Handoff
from brainhands.shared.store.records import JSON, CommitReceipt, InboxRecord, OutboxRow
from brainhands.shared.vocabulary import signal_id_of, signal_key


@dataclass(frozen=True)
class InboxReceipt:
    request: InboxRecord
    created: bool
    """False when the same request was made before: nothing new was written."""

    @property
    def signal_id(self) -> str:
        """For a signal: the id it was sent under (its key less its namespace)."""
        return signal_id_of(self.request.name or "", self.request.key)


class Inbox:
    """A session's inbox, reached as ``store.inbox``: requests a Brain carries out."""

    def __init__(
        self, backend: Backend, handoff: Handoff, notify: Callable[[CommitReceipt], None]
    ) -> None:
        self._backend = backend
        self._handoff = handoff
        self._notify = notify

    async def send_request(
        self,
        *,
        session_id: str,
        kind: str,
        key: str,
        body: JSON = None,
        name: str | None = None,
        wake: Callable[[str], OutboxMessage] | None,
    ) -> InboxReceipt:
        """Put a request in the session's inbox, once per ``(kind, key)``, with the session's
        wake-up (``wake(compat)`` builds it; None: the caller runs the session itself).
        ``NotFoundError`` for an unknown session."""
        now = time.time()
        rows: tuple[OutboxRow, ...] = ()
        i, s = schema.inbox, schema.session
        async with self._backend.transaction() as conn:
            compat = (await conn.execute(select(s.c.compat).where(s.c.id == session_id))).scalar()
            if compat is None:
                raise NotFoundError(f"session {session_id} does not exist")
            inserted = await conn.execute(
                self._backend.insert(i)
                .values(
                    session_id=session_id, kind=kind, key=key, body=body, name=name, created_at=now
                )
                .on_conflict_do_nothing(index_elements=["session_id", "kind", "key"])
            )
            created = inserted.rowcount == 1
            if created and wake is not None:
                rows = await insert_outbox(
                    conn, session_id, [wake(str(compat))], now, handoff=self._handoff
                )
            row = (
                await conn.execute(
                    select(i).where(i.c.session_id == session_id, i.c.kind == kind, i.c.key == key)
                )
            ).one()
        if rows:
            self._notify(CommitReceipt(session_id, version=-1, entry_seqs=[], outbox=rows))
        return InboxReceipt(InboxRecord(**dict(row._mapping)), created)

    async def of_session(self, session_id: str) -> list[InboxRecord]:
        """Every request made to ``session_id``, applied or not, oldest first."""
        async with self._backend.snapshot() as conn:
            return await inbox_in(conn, session_id)

    async def send_signal(
        self,
        *,
        session_id: str,
        name: str,
        signal_id: str,
        payload: JSON,
        wake: Callable[[str], OutboxMessage] | None,
        timed_out: bool = False,
        sender: str | None = None,
    ) -> InboxReceipt:
        """Keep a signal named ``name`` in the session's inbox until a wait receives it; the
        same ``signal_id`` twice is one signal. ``timed_out``: an exclusive wait's timeout, sent
        as its one signal. ``sender``: who sent it, as their credential says, kept with it.
        The id is kept in the namespace of the name's kind (``signal_key``): a plain signal
        never takes the key of a decision, a budget raise or an act on a failed undo."""
        body: dict[str, Any] = {"payload": payload}
        if timed_out:
            body["timed_out"] = True
        if sender is not None:
            body["sender"] = sender
        return await self.send_request(
            session_id=session_id,
            kind="signal",
            key=signal_key(name, signal_id),
            name=name,
            body=body,
            wake=wake,
        )
