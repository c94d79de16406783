"""``brainhands.Client``: submit work, wait for its answer, cancel it, read a session.

A client holds no lease and commits no draft. Every act is a durable request that a Brain
carries out: a submission (``submit``) or an inbox request (``cancel``), each written with
its wake-up in one transaction. The client publishes that wake-up itself, at once, with
publisher confirms (through the outbox relay's hand-off path, so a crash before the confirm
leaves the row to the deployment's relays); it never polls the outbox for anyone else.

Waiting is woken by the commit that ends the submission: on PostgreSQL that commit notifies
a channel the client listens on (``shared.store.answers``), and the client re-reads the
submission. A slow poll (``poll``) is only the fallback: for SQLite, which has no
notifications, and for a notification lost with its connection.

    async with await Client.connect(database_url=..., rabbitmq_url=...) as client:
        handle = await client.submit("s1", {"kind": "steps", "input": {}})
        answer = await handle.result(timeout=30)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from brainhands.client.approvals import (
    ALL,
    AllPending,
    Decision,
    PendingApproval,
    decide,
    pending_approvals,
    pending_of,
)
from brainhands.shared.broker import Broker
from brainhands.shared.config import CommonSettings
from brainhands.shared.errors import AnswerTimeout, InvalidRequest, SubmissionFailed
from brainhands.shared.messages import SessionWake, encode
from brainhands.shared.relay import OutboxRelay
from brainhands.shared.store import (
    ANSWER_CHANNEL,
    DECISION_SIGNAL,
    FINAL_SUBMISSION_STATUSES,
    EntryRecord,
    InboxReceipt,
    InboxRecord,
    OutboxMessage,
    SessionRecord,
    Store,
    SubmissionRecord,
)
from brainhands.shared.tenancy import DEFAULT_TENANT, check_tenant, session_key, split_key
from brainhands.shared.topology import Topology
from brainhands.shared.tracing import current_carrier, tracer
from brainhands.shared.vocabulary import SIGNAL_NAME_MAX, Verdict

POSTGRES_POLL = 1.0
"""Seconds between re-reads of a waited submission on PostgreSQL (notifications wake sooner)."""
SQLITE_POLL = 0.2
"""Seconds between re-reads on SQLite, which has no notifications."""


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

    @property
    def needs_action(self) -> bool:
        return bool(self.approvals)

    def children(self, task_id: str | None) -> list[TaskSummary]:
        """The tasks ``task_id`` owns (None: the root tasks, one per started submission)."""
        return [t for t in self.tasks if t.parent_id == task_id]


@dataclass(frozen=True)
class Submission:
    """A handle on one submission: ``result``, ``status``, ``cancel``."""

    client: Client = field(repr=False)
    session_id: str
    request_id: str
    created: bool
    """False when this request id was submitted before: the handle is the original's."""

    async def status(self) -> SubmissionRecord:
        """The submission as it stands now."""
        key = self.client.key(self.session_id)
        return await self.client.store.submissions.get(key, self.request_id)

    # ``timeout`` as arq's ``Job.result`` and asyncio's ``wait_for`` name it: a caller's
    # ``asyncio.timeout`` would cancel the read mid-way instead of raising AnswerTimeout.
    async def result(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        """Wait for the answer and return it.

        Raises ``SubmissionFailed`` (with the record) if the submission failed or was
        cancelled, ``AnswerTimeout`` (a ``TimeoutError``) if ``timeout`` seconds pass first.
        """
        record = await self.client.wait(self.session_id, self.request_id, timeout=timeout)
        if record.status != "answered":
            raise SubmissionFailed(record)
        return record.answer

    async def cancel(self) -> str:
        """Request the cancellation; see ``Client.cancel``."""
        return await self.client.cancel(self.session_id, self.request_id)


class Client:
    """Submits to sessions, waits for answers, cancels, reads sessions.

    Open with ``await Client.connect(...)`` or ``await Client.from_settings(settings)``;
    an async context manager (or call ``close``).

    A client acts for one tenant (``tenant``, default ``default``): the session ids it is
    given are that tenant's, and it reaches no other tenant's sessions. ``tenant=None`` is
    an operator's client: its ids are the store's keys (``<tenant>/<id>``, or the default
    tenant's id), every tenant's sessions.
    """

    def __init__(
        self,
        store: Store,
        broker: Broker,
        *,
        compat: str = "v1",
        poll: float | None = None,
        tenant: str | None = DEFAULT_TENANT,
        principal: str = "client",
    ) -> None:
        self.store = store
        self.broker = broker
        self.principal = principal
        """Who this client's acts are recorded as (each act may name another: the API's
        caller's key)."""
        self.tenant = None if tenant is None else check_tenant(tenant)
        """Whose sessions this client's ids name (None: every tenant's, by store key)."""
        self.compat = compat
        """The Brain build a new session is created for (an existing one keeps its own)."""
        self._poll = poll
        self._relay = OutboxRelay(store, broker)
        # The relay's hand-off path only: this client's own rows are published right after
        # its commits (others' rows are the deployment's relays' business).
        store.handoff = self._relay.handoff
        store.add_commit_listener(self._relay.wake)
        self._feed = store.listen(ANSWER_CHANNEL, self._heard)
        self._waiters: dict[str, set[asyncio.Event]] = {}

    @classmethod
    async def connect(
        cls,
        *,
        database_url: str,
        rabbitmq_url: str,
        namespace: str = "brainhands",
        compat: str = "v1",
        database_schema: str | None = None,
        delivery_limit: int = 5,
        poll: float | None = None,
        tenant: str | None = DEFAULT_TENANT,
        principal: str = "client",
    ) -> Client:
        """Connect to the deployment's store and broker.

        ``database_url``: any form the workers take (``sqlite:///x.db``,
        ``postgresql://...``, or with a driver named: ``sqlite+aiosqlite://``,
        ``postgresql+asyncpg://``). ``poll``: seconds between fallback re-reads of a waited
        submission (default 1 s on PostgreSQL, where the answer's commit wakes the waiter;
        0.2 s on SQLite). ``tenant``: see ``Client``. ``principal``: who its acts are
        recorded as.
        """
        store = await Store.open(database_url, pool_size=4, db_schema=database_schema)
        try:
            topology = Topology(namespace, delivery_limit=delivery_limit)
            broker = await Broker.connect(rabbitmq_url, topology, connection_name="client")
        except BaseException:
            await store.close()
            raise
        client = cls(store, broker, compat=compat, poll=poll, tenant=tenant, principal=principal)
        try:
            await client._feed.start()
        except BaseException:
            await client.close()
            raise
        return client

    @classmethod
    async def from_settings(
        cls,
        settings: CommonSettings,
        *,
        compat: str = "v1",
        poll: float | None = None,
        operator: bool = False,
    ) -> Client:
        """``connect`` with the URLs, namespace and tenant of ``settings`` (``operator``:
        for every tenant, by store key, whatever ``settings`` says)."""
        return await cls.connect(
            database_url=settings.database_url,
            rabbitmq_url=settings.rabbitmq_url,
            namespace=settings.namespace,
            compat=compat,
            database_schema=settings.database_schema,
            delivery_limit=settings.delivery_limit,
            poll=poll,
            tenant=None if operator else settings.tenant,
            principal=settings.identity,
        )

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Publish what is still handed over, then close the connections."""
        try:
            await self._relay.flush()
        finally:
            await self._feed.close()
            await self.broker.close()
            await self.store.close()

    @property
    def poll(self) -> float:
        if self._poll is not None:
            return self._poll
        return POSTGRES_POLL if self._feed.listening else SQLITE_POLL

    def key(self, session_id: str) -> str:
        """The store's key of this client's session ``session_id``."""
        return session_key(self.tenant, session_id)

    # Acts -----------------------------------------------------------------------------------

    async def submit(
        self,
        session_id: str,
        input: str | dict[str, Any],
        *,
        request_id: str | None = None,
        agent: str | None = None,
        principal: str | None = None,
        callback_url: str | None = None,
    ) -> Submission:
        """Submit ``input`` to ``session_id`` (created on first contact) and wake its Brains.

        A string becomes ``{"text": input}`` (with ``"agent": agent`` if given); a dict goes
        as it is. The same ``request_id`` (random by default) never starts a second run: the
        handle is then the original submission's (``created`` is False). ``principal``:
        who submits (default: the client's). ``callback_url``: where the submission's end
        is posted, signed, at least once (by the deployment's sweeper; see
        ``brain.callbacks``).
        """
        key = self.key(session_id)
        if isinstance(input, str):
            payload: dict[str, Any] = {"text": input}
            if agent is not None:
                payload["agent"] = agent
        else:
            payload = input
        request_id = request_id or uuid.uuid4().hex
        with tracer.start_as_current_span(
            "brainhands.submit", attributes={"session_id": session_id, "request_id": request_id}
        ):
            carrier = current_carrier()

            def wake(compat: str) -> OutboxMessage:
                message = SessionWake(
                    session_id=key, compat=compat, reason="submission", trace=carrier
                )
                return OutboxMessage(self.broker.topology.brain_queue(compat), encode(message))

            receipt = await self.store.submissions.submit(
                session_id=key,
                request_id=request_id,
                input=payload,
                compat=self.compat,
                wake=wake,
                principal=principal or self.principal,
                callback_url=callback_url,
            )
            await self._relay.flush()
        return Submission(self, session_id, request_id, receipt.created)

    def submission(self, session_id: str, request_id: str) -> Submission:
        """A handle on a submission made earlier (by any client)."""
        return Submission(self, session_id, request_id, created=False)

    async def cancel(self, session_id: str, request_id: str) -> str:
        """Request the cancellation of a submission; a Brain carries it out.

        Returns ``requested`` (a Brain will end it: before it starts, ``cancelled``; once
        started, its tasks wind down), or the submission's final status if it had already
        ended. The same cancel twice is one request. ``NotFoundError`` for an unknown
        submission.
        """
        key = self.key(session_id)
        record = await self.store.submissions.get(key, request_id)
        if record.status in FINAL_SUBMISSION_STATUSES:
            return record.status

        wake = self._wake(key, "cancel")
        await self.store.inbox.send_request(
            session_id=key, kind="cancel", key=request_id, wake=wake
        )
        await self._relay.flush()
        return "requested"

    async def signal(
        self,
        session_id: str,
        name: str,
        payload: Any = None,
        *,
        signal_id: str | None = None,
        decision: bool = False,
        principal: str | None = None,
    ) -> InboxReceipt:
        """Send the signal ``name`` to ``session_id``: the task waiting for it
        (``WaitSignal``) resumes with ``payload``; with none waiting yet, it is kept until
        one does. The same ``signal_id`` (random by default) twice is one signal
        (``created`` False). ``decision``: for a wait declared a decision
        (``WaitSignal(..., decision=True)``), which no other signal of that name reaches.
        ``principal``: who sends it (default: the client's). ``NotFoundError`` for an
        unknown session."""
        signal_id = signal_id or uuid.uuid4().hex
        if name.startswith(("decision:", "brainhands.", DECISION_SIGNAL)):
            raise InvalidRequest(
                f"signal names starting 'decision:', 'brainhands.' or {DECISION_SIGNAL!r} are "
                "the runtime's own (approvals: use approve and deny; a decision: decision=True)"
            )
        if decision:
            name = DECISION_SIGNAL + name
        for what, value in (("name", name), ("signal_id", signal_id)):
            if not 0 < len(value) <= SIGNAL_NAME_MAX:
                raise InvalidRequest(f"a signal's {what} has 1 to {SIGNAL_NAME_MAX} characters")
        key = self.key(session_id)
        receipt = await self.store.inbox.send_signal(
            session_id=key,
            name=name,
            signal_id=signal_id,
            payload=payload,
            wake=self._wake(key, "signal"),
            sender=principal or self.principal,
        )
        await self._relay.flush()
        return receipt

    async def approve(
        self,
        session_id: str,
        approvals: str | Sequence[str] | AllPending,
        *,
        by: str | None = None,
        reason: str | None = None,
        decision_id: str | None = None,
        principal: str | None = None,
        four_eyes: bool = False,
    ) -> list[Decision]:
        """Approve calls waiting in ``session_id`` (one id, several, or ``ALL``: every one
        pending now): each is dispatched once, by a Brain. See ``decide``."""
        return await self.decide(
            session_id, approvals, "approved", by, reason, decision_id, principal, four_eyes
        )

    async def deny(
        self,
        session_id: str,
        approvals: str | Sequence[str] | AllPending,
        *,
        reason: str,
        by: str | None = None,
        decision_id: str | None = None,
        principal: str | None = None,
        four_eyes: bool = False,
    ) -> list[Decision]:
        """Deny calls waiting in ``session_id``: the model reads the refusal, with ``reason``;
        the tool never runs. See ``decide``."""
        return await self.decide(
            session_id, approvals, "denied", by, reason, decision_id, principal, four_eyes
        )

    async def decide(
        self,
        session_id: str,
        approvals: str | Sequence[str] | AllPending,
        verdict: Verdict,
        by: str | None = None,
        reason: str | None = None,
        decision_id: str | None = None,
        principal: str | None = None,
        four_eyes: bool = False,
    ) -> list[Decision]:
        """Record one decision per approval, each kept with who, when and why: who as the
        decider's credential says (``principal``, default: the client's), and ``by``, a
        display name (default: the principal). ``four_eyes``: a principal that submitted
        to the session may not decide its calls (``DecisionRefused``).

        A decision counts once: the same one sent again (or a second decider's same
        verdict) returns the decision that counted (``new`` False); the other verdict
        after it, or any after the call expired, raises ``DecisionRefused``.
        ``NotFoundError`` for an approval the session does not have. Every pending call
        is decided only when asked for by ``ALL``, never by omission: a decision names
        what it decides.
        """
        key = self.key(session_id)
        if approvals is ALL:
            ids = [p.approval_id for p in await pending_approvals(self.store, key)]
        elif isinstance(approvals, str):
            ids = [approvals]
        elif isinstance(approvals, AllPending) or not approvals:
            raise InvalidRequest("name the calls to decide, or ALL for every pending one")
        else:
            ids = list(approvals)
        wake = self._wake(key, "decision")
        principal = principal or self.principal
        decisions = [
            await decide(
                self.store,
                session_id=key,
                approval_id=approval_id,
                verdict=verdict,
                by=by or principal,
                reason=reason,
                decision_id=decision_id,
                wake=wake,
                principal=principal,
                four_eyes=four_eyes,
            )
            for approval_id in ids
        ]
        await self._relay.flush()
        return decisions

    def _wake(self, session_id: str, reason: str) -> Callable[[str], OutboxMessage]:
        """Builds the session's wake-up for a request, given its compatibility key."""

        def wake(key: str) -> OutboxMessage:
            message = SessionWake(session_id=session_id, compat=key, reason=reason)
            return OutboxMessage(self.broker.topology.brain_queue(key), encode(message))

        return wake

    # Reading ------------------------------------------------------------------------------

    async def wait(
        self,
        session_id: str,
        request_id: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> SubmissionRecord:
        """Wait until the submission has ended (answered, failed or cancelled); return it.
        ``AnswerTimeout`` if ``timeout`` seconds pass first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        heard = asyncio.Event()
        key = self.key(session_id)
        # Listening before the first read: an answer committed in between still wakes us.
        self._waiters.setdefault(key, set()).add(heard)
        try:
            while True:
                heard.clear()
                record = await self.store.submissions.get(key, request_id)
                if record.status in FINAL_SUBMISSION_STATUSES:
                    return record
                wait = self.poll
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise AnswerTimeout(record, timeout or 0.0)
                    wait = min(wait, left)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(heard.wait(), wait)
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(heard)
                if not waiters:
                    del self._waiters[key]

    async def session(self, session_id: str) -> SessionView:
        """The session as it stands (``NotFoundError`` if there is none). Its rows name
        the session by its store key (``key``)."""
        detail = await self.store.detail(self.key(session_id))
        state, tasks, operations = detail.state, detail.tasks, detail.operations
        return SessionView(
            session=state.session,
            entries=state.entries,
            submissions=detail.submissions,
            tasks=[
                TaskSummary(
                    id=t.id,
                    kind=t.kind,
                    status=t.status,
                    phase=t.phase,
                    outcome=t.outcome,
                    parent_id=t.parent_id,
                    submission_id=t.submission_id,
                    cancel_requested=t.cancel_requested,
                    blocked_reason=t.blocked_reason,
                    error=t.error,
                    wait_signal=t.wait_signal,
                    wake_at=t.wake_at,
                )
                for t in tasks
            ],
            operations=[
                OperationSummary(
                    operation_id=o.operation_id,
                    task_id=o.task_id,
                    tool=o.tool,
                    status=o.status,
                    attempts=o.attempts,
                    interruptions=o.interruptions,
                    error=o.error,
                )
                for o in operations
            ],
            inbox=detail.inbox,
            approvals=[pending_of(task) for task in detail.waiting_approvals],
        )

    async def pending_approvals(self, session_id: str | None = None) -> list[PendingApproval]:
        """Tool calls waiting for a decision, of one session or of every one of the
        client's tenant, oldest first. Each names its session by its store key."""
        if session_id is not None:
            return await pending_approvals(self.store, self.key(session_id))
        return await pending_approvals(self.store, tenant=self.tenant)

    async def sessions_needing_action(self) -> list[str]:
        """The sessions with a call waiting for a decision, longest waiting first."""
        pending = await pending_approvals(self.store, tenant=self.tenant)
        seen = dict.fromkeys(self._own_id(p.session_id) for p in pending)
        return list(seen)

    def _own_id(self, key: str) -> str:
        """What this client calls the session of store key ``key``."""
        return key if self.tenant is None else split_key(key)[1]

    def _heard(self, session_id: str) -> None:
        for heard in self._waiters.get(session_id, ()):
            heard.set()
