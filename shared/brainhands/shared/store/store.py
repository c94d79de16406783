"""The session store: the one source of truth every recovery decision reads."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import exists, func, insert, or_, select, text

from brainhands.shared.batch import Batcher
from brainhands.shared.config import normalize_database_url
from brainhands.shared.store import fence, migrate, schema
from brainhands.shared.store.api_keys import ApiKeys
from brainhands.shared.store.backends import Backend, open_backend
from brainhands.shared.store.commit import apply_draft_sync, apply_drafts_sync, one_round_trip
from brainhands.shared.store.declarations import Declarations
from brainhands.shared.store.details import (
    SessionDetail,
    read_session_detail,
    waiting_approvals_in,
)
from brainhands.shared.store.documents import history_sync
from brainhands.shared.store.draft import Draft, new_id
from brainhands.shared.store.erasures import Erasures
from brainhands.shared.store.group import GroupCommit
from brainhands.shared.store.handoff import Handoff
from brainhands.shared.store.inbox import Inbox
from brainhands.shared.store.ledger import OperationLedger
from brainhands.shared.store.listings import Listings
from brainhands.shared.store.load import (
    SessionClaim,
    arrivals_sync,
    claim_sessions_sync,
    load_session_sync,
    operations_by_ids_sync,
    tasks_by_ids_sync,
)
from brainhands.shared.store.notifications import NotificationFeed
from brainhands.shared.store.object_bytes import ObjectBytes
from brainhands.shared.store.outbox import Outbox
from brainhands.shared.store.queries import Queries
from brainhands.shared.store.records import (
    OPEN_SUBMISSION_STATUSES,
    ClaimedSession,
    CommitReceipt,
    DocumentHistory,
    InboxRecord,
    OperationRecord,
    SessionRecord,
    SessionState,
    SubmissionRecord,
    TaskRecord,
)
from brainhands.shared.store.schedules import Schedules
from brainhands.shared.store.submissions import Submissions
from brainhands.shared.store.tenant_budgets import TenantBudgets
from brainhands.shared.store.webhook_secrets import WebhookSecrets
from brainhands.shared.tenancy import split_key

log = logging.getLogger("brainhands.store")

CommitListener = Callable[[CommitReceipt], None]


class Store:
    """Async access to the session store: the one door to it from outside this package.

    ``commit`` is the only way session state changes; listeners run after each successful
    commit (the outbox relay uses one to publish without a polling delay). What else the
    store keeps is reached through its parts, one per kind of row: ``submissions``,
    ``inbox``, ``ledger`` (operations), ``outbox``, ``declarations``, ``api_keys``,
    ``queries`` (reads across sessions), ``listings`` (sessions as lists show them),
    ``tenant_budgets``, ``webhook_secrets``, ``schedules``, ``workspaces`` and ``erasures``.
    """

    def __init__(
        self,
        backend: Backend,
        handoff: Handoff | None = None,
        workspace_objects: ObjectBytes | None = None,
    ) -> None:
        self.backend = backend
        """The one door to the database, PostgreSQL or SQLite."""
        self._listeners: list[CommitListener] = []
        self._handoff = Handoff() if handoff is None else handoff
        self.document_increments = False
        """Whether a document write keeps the whole value only at its baselines (every
        ``COMPACT_AFTER`` increments), as ``BRAINHANDS_DOCUMENT_INCREMENTS`` says. Off (the
        default, and while any build older than increments reads the store): every write
        rewrites the whole value as well, its increment kept as history."""
        notify, chained = backend.notifies, backend.chains_writes
        self._drafts: GroupCommit[Draft, CommitReceipt] = GroupCommit(
            backend,
            apply_one=lambda conn, draft: apply_draft_sync(
                conn, draft, notify=notify, chained=chained, handoff=self._handoff
            ),
            apply_many=lambda conn, drafts: apply_drafts_sync(
                conn, drafts, notify=notify, chained=chained, handoff=self._handoff
            ),
            order=lambda draft: draft.session_id,
            what="drafts",
            one_round_trip=lambda drafts: one_round_trip(drafts, chained=chained, notify=notify),
        )
        self._claims: Batcher[SessionClaim, ClaimedSession] = Batcher(
            self._claim_batch, order=lambda claim: claim.session_id, what="session_claims"
        )
        self._arrivals: Batcher[
            tuple[str, bool], tuple[list[InboxRecord], list[SubmissionRecord]]
        ] = Batcher(
            lambda asks: backend.read(lambda conn: arrivals_sync(conn, asks, backend.rows)),
            what="arrivals",
        )
        self.submissions = Submissions(backend, self._handoff, self.notify)
        self.inbox = Inbox(backend, self._handoff, self.notify)
        self.queries = Queries(backend)
        self.declarations = Declarations(backend)
        self.outbox = Outbox(backend)
        self.listings = Listings(backend)
        self.api_keys = ApiKeys(backend)
        self.tenant_budgets = TenantBudgets(backend)
        self.webhook_secrets = WebhookSecrets(backend)
        self.schedules = Schedules(backend)
        self.erasures = Erasures(backend)
        self.ledger = OperationLedger(backend, self._handoff, self.notify, workspace_objects)
        self.workspaces = self.ledger.workspaces
        """The operation ledger: what Hands claim and record (Brains only read it)."""
        self._rows: Batcher[
            tuple[list[str], list[str]],
            tuple[dict[str, TaskRecord], dict[str, OperationRecord]],
        ] = Batcher(self._rows_batch, what="rows")

    @property
    def handoff(self) -> Handoff:
        """Begun by a relay running in this process: its commits' outbox rows are left to it
        alone for a while (it publishes them right after each commit)."""
        return self._handoff

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        upgrade: bool | None = None,
        pool_size: int = 10,
        db_schema: str | None = None,
        workspace_objects: ObjectBytes | None = None,
    ) -> Store:
        """Open the store at ``url``: any form ``normalize_database_url`` takes (a
        ``ValueError`` saying which otherwise). ``workspace_objects``: the object store
        that holds workspace objects' bytes (None: the store's rows do).

        ``upgrade`` migrates the schema to head first; by default only the embedded SQLite
        store does so on first use (a server database is migrated by ``brainhands migrate``).
        """
        try:
            url = normalize_database_url(url)
        except ValueError as exc:
            raise ValueError(f"database URL: {exc}") from None
        backend = await open_backend(url, pool_size=pool_size, db_schema=db_schema)
        if backend.embedded if upgrade is None else upgrade:
            await migrate.upgrade(backend)
        return cls(backend, workspace_objects=workspace_objects)

    async def close(self) -> None:
        await self.backend.close()

    def add_commit_listener(self, listener: CommitListener) -> None:
        self._listeners.append(listener)

    def listen(self, channel: str, on_session: Callable[[str], None]) -> NotificationFeed:
        """A feed calling ``on_session(session_id)`` for each commit notified on ``channel``
        (``ANSWER_CHANNEL``, ``SESSION_CHANNEL``) once it is started; where the database
        sends no notifications, its ``start`` says so and the caller polls."""
        return NotificationFeed(self.backend, channel, on_session)

    async def upgrade(self, revision: str = "head") -> None:
        """Migrate the schema up to ``revision``."""
        await migrate.upgrade(self.backend, revision)

    async def downgrade(self, revision: str) -> None:
        """Migrate the schema down to ``revision``."""
        await migrate.downgrade(self.backend, revision)

    async def revision(self) -> str | None:
        """The schema revision the database is at (None before the first migration)."""
        return await migrate.current_revision(self.backend)

    async def create_session(self, session_id: str, *, compat: str) -> SessionRecord:
        """Create an empty session that Brains of ``compat`` can run."""
        now = time.time()
        values: dict[str, Any] = {
            "id": session_id,
            "uid": new_id(),
            "compat": compat,
            "version": 0,
            "fence": 0,
            "status": "active",
            "entry_count": 0,
            "created_at": now,
            "updated_at": now,
            "tenant": split_key(session_id)[0],
        }
        async with self.backend.transaction() as conn:
            await conn.execute(insert(schema.session).values(**values))
        return SessionRecord(**values)

    async def commit(self, draft: Draft) -> CommitReceipt:
        """Apply ``draft`` atomically, in a transaction with the drafts of other sessions
        that wait meanwhile (``shared.store.group``).

        Raises ``ConflictError`` if the session moved past ``draft.version`` and
        ``StaleLeaseError`` if its fence moved past ``draft.fence``; either way nothing of
        the draft is written, and the other drafts are not affected.
        """
        if not self.document_increments:
            draft.documents = [dataclasses.replace(w, rebase=True) for w in draft.documents]
        receipt = await self._drafts.commit(draft)
        self.notify(receipt)
        return receipt

    def notify(self, receipt: CommitReceipt) -> None:
        """Tell the commit listeners about a transaction that committed (outbox rows...)."""
        for listener in self._listeners:
            listener(receipt)

    async def load(self, session_id: str) -> SessionState:
        """Read the session's state in one snapshot and a fixed number of queries."""
        async with self.backend.snapshot() as conn:
            return await conn.run_sync(load_session_sync, session_id, self.backend.rows)

    async def document(self, session_id: str, name: str, *, history: int = 100) -> DocumentHistory:
        """The session's document ``name`` (its latest value: baseline and increments
        folded) and its latest ``history`` writes, in one snapshot; ``NotFoundError`` if the
        session has no such document."""
        async with self.backend.snapshot() as conn:
            return await conn.run_sync(history_sync, session_id, name, history)

    async def detail(self, session_id: str) -> SessionDetail:
        """The session as people look at it, in one snapshot (``NotFoundError`` if there is
        none): its state, its whole task and operation history, its submissions, its inbox
        and its approvals waiting for a decision."""
        return await read_session_detail(self.backend, session_id)

    async def waiting_approvals(
        self, session_id: str | None = None, *, tenant: str | None = None, limit: int = 1000
    ) -> list[TaskRecord]:
        """The approval tasks waiting for a decision, of one session, of ``tenant``'s or of
        all, oldest first."""
        async with self.backend.snapshot() as conn:
            return await waiting_approvals_in(conn, session_id, tenant=tenant, limit=limit)

    async def claim_session(
        self,
        session_id: str,
        token: int,
        known: SessionState | None = None,
        *,
        defer: bool = False,
    ) -> ClaimedSession:
        """Claim the session for lease ``token`` and read its state, in one hop shared with
        the claims asked for meanwhile (``shared.batch``); with ``defer``, only check that
        ``token`` is above the fence, for the holder's first commit to claim it
        (``Draft.claims_fence``).

        ``known`` (the state kept from an earlier pass) is reused if the session is still at
        its version; then only what arrives without a commit is read again: its open
        submissions, its inbox and the operations its waiting calls refer to. Raises
        ``StaleLeaseError`` if ``token`` is not above the fence.
        """
        return await self._claims(SessionClaim(session_id, token, known, defer))

    async def _claim_batch(
        self, claims: list[SessionClaim]
    ) -> list[ClaimedSession | BaseException]:
        # Without BEGIN on PostgreSQL: once the claims are in, no older holder can commit,
        # and the reads see each session as the last commit before it left it.
        return await self.backend.write(
            lambda conn: claim_sessions_sync(conn, claims, self.backend.rows), single_statement=True
        )

    async def arrivals(
        self, session_id: str, *, queued: bool
    ) -> tuple[list[InboxRecord], list[SubmissionRecord]]:
        """What reached ``session_id`` without a commit: its inbox requests not applied yet,
        and (``queued``) its submissions waiting for their turn, oldest first; read in one hop
        shared with the reads of other sessions asked for meanwhile."""
        return await self._arrivals((session_id, queued))

    async def rows(
        self, task_ids: list[str], operation_ids: list[str]
    ) -> tuple[dict[str, TaskRecord], dict[str, OperationRecord]]:
        """The tasks and operations of these ids that exist, read in one hop shared with the
        reads asked for meanwhile."""
        if not task_ids and not operation_ids:
            return {}, {}
        return await self._rows((task_ids, operation_ids))

    async def _rows_batch(
        self, asks: list[tuple[list[str], list[str]]]
    ) -> list[tuple[dict[str, TaskRecord], dict[str, OperationRecord]]]:
        task_ids = sorted({i for ids, _ in asks for i in ids})
        op_ids = sorted({i for _, ids in asks for i in ids})
        tasks, ops = await self.backend.read(
            lambda conn: (tasks_by_ids_sync(conn, task_ids), operations_by_ids_sync(conn, op_ids))
        )
        return [
            ({i: tasks[i] for i in t if i in tasks}, {i: ops[i] for i in o if i in ops})
            for t, o in asks
        ]

    async def claim_session_fence(self, session_id: str, token: int) -> int:
        """Claim the session for lease ``token``; ``StaleLeaseError`` if not above the fence."""
        await self.backend.write(
            lambda conn: fence.claim_session_fence(conn, session_id, token),
            single_statement=True,
        )
        return token

    async def ping(self) -> bool:
        """Whether the store answers a trivial query."""
        async with self.backend.snapshot() as conn:
            await conn.execute(text("SELECT 1"))
        return True

    async def status(self) -> dict[str, Any]:
        """Schema revision, row counts, and sessions with open work (tasks not terminal or
        submissions not answered) per compatibility key, for ``brainhands status``."""
        counts: dict[str, Any] = {"revision": await migrate.current_revision(self.backend)}
        async with self.backend.snapshot() as conn:
            tables = {
                "sessions": schema.session,
                "tasks": schema.task,
                "operations": schema.operation,
                "outbox_rows": schema.outbox,
            }
            for label, table in tables.items():
                total = await conn.execute(select(func.count()).select_from(table))
                counts[label] = total.scalar_one()
            unsent = await conn.execute(
                select(func.count())
                .select_from(schema.outbox)
                .where(schema.outbox.c.sent_at.is_(None))
            )
            counts["outbox_unsent"] = unsent.scalar_one()
            s, t, sub = schema.session, schema.task, schema.submission
            open_work = or_(
                exists().where(t.c.session_id == s.c.id, t.c.status != "terminal"),
                exists().where(
                    sub.c.session_id == s.c.id, sub.c.status.in_(OPEN_SUBMISSION_STATUSES)
                ),
            )
            by_key = await conn.execute(
                select(s.c.compat, func.count()).where(open_work).group_by(s.c.compat)
            )
            counts["open_sessions_by_compat"] = {key: n for key, n in by_key}
        return counts
