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

# ``timeout`` as arq's ``Job.result`` and asyncio's ``wait_for`` name it: a caller's
# ``asyncio.timeout`` would cancel a read mid-way instead of raising AnswerTimeout.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any, Unpack

from brainhands.client.approvals import PendingApproval, pending_approvals
from brainhands.client.budgets import with_budget
from brainhands.client.four_eyes import check_four_eyes
from brainhands.client.operator import OperatorActs
from brainhands.client.schedules import ScheduleActs
from brainhands.client.submission import SignalOptions, Submission, SubmitOptions
from brainhands.client.views import SessionView, session_view
from brainhands.client.workspaces import WorkspaceActs
from brainhands.shared.broker import Broker
from brainhands.shared.config import CommonSettings
from brainhands.shared.errors import AnswerTimeout
from brainhands.shared.messages import SessionWake, encode
from brainhands.shared.relay import OutboxRelay
from brainhands.shared.startup import Startup, reach_broker, reach_store
from brainhands.shared.storable import check_storable
from brainhands.shared.store import (
    ANSWER_CHANNEL,
    FINAL_SUBMISSION_STATUSES,
    DocumentHistory,
    Erased,
    InboxReceipt,
    OutboxMessage,
    Store,
    SubmissionRecord,
)
from brainhands.shared.tenancy import DEFAULT_TENANT, check_tenant, session_key, split_key
from brainhands.shared.topology import QueueType, Topology
from brainhands.shared.tracing import current_carrier, tracer
from brainhands.shared.vocabulary import signal_name

POSTGRES_POLL = 1.0
"""Seconds between re-reads of a waited submission on PostgreSQL (notifications wake sooner)."""
SQLITE_POLL = 0.2
"""Seconds between re-reads on SQLite, which has no notifications."""


class Client(OperatorActs, ScheduleActs, WorkspaceActs):
    """Submits to sessions, waits for answers, cancels, reads sessions (and, as
    ``OperatorActs``, decides approvals and raises budgets; as ``ScheduleActs``, keeps the
    tenant's schedules; as ``WorkspaceActs``, makes and reads sessions' workspaces).

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
        store.handoff.begin(self._relay.handoff)
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
        queue_type: QueueType = "quorum",
        poll: float | None = None,
        tenant: str | None = DEFAULT_TENANT,
        principal: str = "client",
        startup: Startup | None = None,
        workspace_objects: str | None = None,
    ) -> Client:
        """Connect to the deployment's store and broker.

        ``database_url``: any form the workers take (``sqlite:///x.db``,
        ``postgresql://...``, or with a driver named: ``sqlite+aiosqlite://``,
        ``postgresql+asyncpg://``). ``poll``: seconds between fallback re-reads of a waited
        submission (default 1 s on PostgreSQL, where the answer's commit wakes the waiter;
        0.2 s on SQLite). ``delivery_limit`` and ``queue_type``: the workers' (the queues
        it declares must match theirs). ``tenant``: see ``Client``. ``principal``: who its acts are
        recorded as. ``startup``: wait for a store or broker that does not answer yet, as a
        starting process does (``shared.startup``); by default a connection that fails
        raises at once. ``workspace_objects``: the object store of the deployment's
        workspace objects, when it has one (``BRAINHANDS_WORKSPACE_OBJECTS``).
        """
        store = await reach_store(
            startup,
            database_url,
            db_schema=database_schema,
            pool_size=4,
            workspace_objects=workspace_objects,
        )
        try:
            topology = Topology(namespace, delivery_limit=delivery_limit, queue_type=queue_type)
            broker = await reach_broker(startup, rabbitmq_url, topology, name="client")
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
        startup: Startup | None = None,
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
            queue_type=settings.queue_type,
            poll=poll,
            tenant=None if operator else settings.tenant,
            principal=settings.identity,
            startup=startup,
            workspace_objects=settings.workspace_objects,
        )

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Publish (and mark sent) what is still handed over, then close the connections."""
        try:
            await self._relay.flush(marked=True)
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
        principal: str | None = None,
        **options: Unpack[SubmitOptions],
    ) -> Submission:
        """Submit ``input`` to ``session_id`` (created on first contact) and wake its Brains.

        A string becomes ``{"text": input}`` (with ``"agent": agent`` if given); a dict goes
        as it is. The same ``request_id`` (random by default) never starts a second run: the
        handle is then the original submission's (``created`` is False). ``principal``:
        who submits (default: the client's). ``callback_url``: where the submission's end
        is posted, signed, at least once (by the deployment's sweeper; see
        ``brain.callbacks``). ``budget``: limits of the agent's run (``brain.budget``).
        """
        key = self.key(session_id)
        agent = options.get("agent")
        if isinstance(input, str):
            payload: dict[str, Any] = {"text": input}
            if agent is not None:
                payload["agent"] = agent
        else:
            payload = input
        payload = with_budget(payload, options.get("budget"))
        check_storable(payload, "input")
        request_id = options.get("request_id") or uuid.uuid4().hex
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
                callback_url=options.get("callback_url"),
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

    async def erase(
        self, session_id: str, *, cancel: bool = False, principal: str | None = None
    ) -> Erased:
        """Erase the session and everything it owns (``store.erasures``), recorded as done by
        ``principal`` (default: this client's) without its content. ``SessionRunning`` if
        it has work open and not ``cancel``; ``NotFoundError`` for no such session. Its
        Redis keys go at the sweeper's next pass."""
        return await self.store.erasures.erase(
            self.key(session_id), principal=principal or self.principal, cancel=cancel
        )

    async def signal(
        self,
        session_id: str,
        name: str,
        payload: Any = None,
        *,
        principal: str | None = None,
        **options: Unpack[SignalOptions],
    ) -> InboxReceipt:
        """Send the signal ``name`` to ``session_id``: the task waiting for it
        (``WaitSignal``) resumes with ``payload``; with none waiting yet, it is kept until
        one does. The same ``signal_id`` (random by default) twice is one signal
        (``created`` False). ``decision``: for a wait declared a decision
        (``WaitSignal(..., decision=True)``), which no other signal of that name reaches;
        ``four_eyes``: a decision refused (``DecisionRefused``) to a principal that
        submitted to the session. ``principal``: who sends it (default: the client's).
        ``NotFoundError`` for an unknown session."""
        check_storable(payload, "payload")
        signal_id = options.get("signal_id") or uuid.uuid4().hex
        decision = options.get("decision", False)
        name = signal_name(name, signal_id, decision=decision)
        key = self.key(session_id)
        if decision and options.get("four_eyes", False):
            await check_four_eyes(self.store, key, principal or self.principal, "a decision")
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

    def _wake(self, session_id: str, reason: str) -> Callable[[str], OutboxMessage]:
        """Builds the session's wake-up for a request, given its compatibility key."""

        def wake(key: str) -> OutboxMessage:
            message = SessionWake(session_id=session_id, compat=key, reason=reason)
            return OutboxMessage(self.broker.topology.brain_queue(key), encode(message))

        return wake

    # Reading ------------------------------------------------------------------------------

    async def wait(
        self, session_id: str, request_id: str, *, timeout: float | None = None
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
        return session_view(await self.store.detail(self.key(session_id)))

    async def document(self, session_id: str, name: str, *, history: int = 100) -> DocumentHistory:
        """The session's document ``name`` (``NotFoundError`` if it has none): its latest
        value, and its latest ``history`` writes, oldest first."""
        return await self.store.document(self.key(session_id), name, history=history)

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
