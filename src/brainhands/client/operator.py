"""What an operator (or an application acting for one) does to a running session through a
``Client``: decide the calls waiting for approval, raise a run's budget, retry or abandon a
failed undo. Each act is an inbox request with its wake-up, written in one transaction and
published at once, as a submission is (``client.direct``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, Unpack

from brainhands.client.approvals import AllPending, Decision, decide
from brainhands.client.budgets import TenantBudgetSet, raise_budget, set_tenant_budget
from brainhands.client.compensations import act_on_compensation
from brainhands.client.four_eyes import check_four_eyes
from brainhands.client.submission import DecidedBy
from brainhands.shared.relay import OutboxRelay
from brainhands.shared.storable import check_storable
from brainhands.shared.store import InboxReceipt, OutboxMessage, Store, TenantBudget
from brainhands.shared.vocabulary import CompensationAction, Verdict


class _Client(Protocol):
    """What the acts need of the ``Client`` they belong to."""

    store: Store
    principal: str
    _relay: OutboxRelay

    def key(self, session_id: str) -> str: ...
    def _wake(self, session_id: str, reason: str) -> Callable[[str], OutboxMessage]: ...
    async def decide(
        self,
        session_id: str,
        approvals: str | Sequence[str] | AllPending,
        verdict: Verdict,
        reason: str | None = None,
        *,
        arguments: dict[str, Any] | None = None,
        **decided_by: Unpack[DecidedBy],
    ) -> list[Decision]: ...


class OperatorActs:
    """The operator's acts of a ``Client``."""

    async def approve(
        self: _Client,
        session_id: str,
        approvals: str | Sequence[str] | AllPending,
        *,
        reason: str | None = None,
        arguments: dict[str, Any] | None = None,
        **decided_by: Unpack[DecidedBy],
    ) -> list[Decision]:
        """Approve calls waiting in ``session_id`` (one id, several, or ``ALL``: every one
        pending now): each is dispatched once, by a Brain. ``arguments``: the one call
        named runs with these instead of the arguments asked for. See ``decide``."""
        return await self.decide(
            session_id, approvals, "approved", reason, arguments=arguments, **decided_by
        )

    async def deny(
        self: _Client,
        session_id: str,
        approvals: str | Sequence[str] | AllPending,
        *,
        reason: str,
        **decided_by: Unpack[DecidedBy],
    ) -> list[Decision]:
        """Deny calls waiting in ``session_id``: the model reads the refusal, with ``reason``;
        the tool never runs. See ``decide``."""
        return await self.decide(session_id, approvals, "denied", reason, **decided_by)

    async def decide(
        self: _Client,
        session_id: str,
        approvals: str | Sequence[str] | AllPending,
        verdict: Verdict,
        reason: str | None = None,
        *,
        arguments: dict[str, Any] | None = None,
        **decided_by: Unpack[DecidedBy],
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

        ``arguments`` (an approval of one call): the call runs with these, checked against
        its tool's declared schema first (``InvalidRequest`` with the reason: nothing is
        recorded, the call stays pending); the decision keeps them beside the arguments
        asked for, and the model reads that the approver edited the call.
        """
        key = self.key(session_id)
        wake = self._wake(key, "decision")
        decisions = await decide(
            self.store,
            key,
            approvals,
            verdict,
            reason,
            decided_by,
            principal=self.principal,
            wake=wake,
            arguments=arguments,
        )
        await self._relay.flush()
        return decisions

    async def raise_budget(
        self: _Client,
        session_id: str,
        *,
        principal: str | None = None,
        raise_id: str | None = None,
        four_eyes: bool = False,
        **limits: float,
    ) -> InboxReceipt:
        """Raise the budget of ``session_id``'s run (``tokens=``, ``cost=``, ``tool_calls=``,
        ``seconds=``: the new limits): a run stopped at it resumes. The same ``raise_id``
        twice is one raise. A raise lifts only the stop it was sent for; one sent while no run
        is stopped is refused (``DecisionRefused``), as is one by a principal that submitted
        to the session when ``four_eyes``."""
        check_storable(limits, "limits")
        key = self.key(session_id)
        who, wake = principal or self.principal, self._wake(key, "budget")
        if four_eyes:
            await check_four_eyes(self.store, key, who, "a budget raise")
        receipt = await raise_budget(self.store, key, limits, wake, who, raise_id)
        await self._relay.flush()
        return receipt

    async def act_on_compensation(
        self: _Client,
        session_id: str,
        task_id: str,
        action: CompensationAction,
        *,
        reason: str,
        action_id: str | None = None,
        principal: str | None = None,
        four_eyes: bool = False,
    ) -> InboxReceipt:
        """Act on the failed undo task ``task_id`` of ``session_id`` waits with: ``retry``
        runs it again, under a new operation id, and the compensation goes on; ``abandon``
        ends the task failed, the effects not undone listed in its error with ``reason``.
        The same ``action_id`` twice is one act; ``DecisionRefused`` when the task is not
        waiting for one, or (``four_eyes``) when the principal submitted to the session.
        See ``client.compensations``."""
        key = self.key(session_id)
        who, wake = principal or self.principal, self._wake(key, "compensation")
        if four_eyes:
            await check_four_eyes(self.store, key, who, f"an act on task {task_id}'s undo")
        receipt = await act_on_compensation(
            self.store, key, task_id, action, reason, wake, who, action_id
        )
        await self._relay.flush()
        return receipt

    async def set_tenant_budget(
        self: _Client, tenant: str, *, principal: str | None = None, **limits: float
    ) -> TenantBudgetSet:
        """Make ``tokens=``, ``cost=``, ``tool_calls=`` ``tenant``'s budget (replacing the
        one it had; what it spent is kept: ``brain.tenant_budget``): its runs stopped at it
        resume, or stop again while still over. An operator's act: the tenant is named, not
        the client's."""
        check_storable(limits, "limits")
        who = principal or self.principal
        done = await set_tenant_budget(
            self.store, tenant, limits, lambda key: self._wake(key, "budget"), who
        )
        await self._relay.flush()
        return done

    async def tenant_budget(self: _Client, tenant: str) -> TenantBudget | None:
        """``tenant``'s budget and what its runs have spent (None: it has none)."""
        return await self.store.tenant_budgets.get(tenant)
