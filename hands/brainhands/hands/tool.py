"""The ``@tool`` decorator: how users declare a tool for a Hands pool."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from brainhands.shared.conditions import Condition
from brainhands.shared.tools import (
    QueryFunction,
    ReplayPolicy,
    RetryPolicy,
    SandboxDeclaration,
    ToolFunction,
    declare,
    registry,
)

F = TypeVar("F", bound=ToolFunction)


def tool(
    *,
    name: str | None = None,
    pool: str = "default",
    policy: ReplayPolicy = "safe",
    query: QueryFunction | None = None,
    timeout: float = 60.0,
    retry: RetryPolicy | None = None,
    description: str | None = None,
    approval: bool | Condition = False,
    compensate: str | None = None,
    rate: float | None = None,
    burst: int | None = None,
    concurrency: int | None = None,
    sandbox: SandboxDeclaration = None,
    workspace: str | None = None,
    workspace_read_only: bool = False,
) -> Callable[[F], F]:
    """Register ``async def fn(args: Model, ctx: ToolContext)`` as a tool.

    - ``pool``: the Hands pool (queue) whose workers run it.
    - ``policy``: what recovery may do when a call was interrupted and the effect may have
      happened: ``safe`` runs it again with the same arguments and key; ``query`` asks
      ``query(args, ctx)`` what happened and runs again only if nothing did; ``unsafe``
      records the outcome ``uncertain`` and never calls the tool again on its own.
    - ``timeout``: seconds before the call is cancelled.
    - ``retry``: how failures marked retryable are retried (attempts survive restarts).
    - ``description``: what the model is told (default: the docstring).
    - ``approval``: a model's call waits, with its arguments frozen, until a person or an
      application approves it (``Client.approve``, which may edit the arguments); a denial
      reaches the model as a refusal. True: every call; a condition on the arguments
      (``arg("amount") > 100``, see ``brainhands.shared.conditions``): the calls that meet
      it, decided by the Brain when it records the call.
    - ``compensate``: the tool that undoes a succeeded call when its task fails or is
      cancelled later (run once, most recent first, with ``{"operation_id", "arguments",
      "result"}`` of the call it undoes; see the README's "Compensation").
    - ``rate``, ``burst``, ``concurrency``: calls per second that may start (``burst`` of
      them at once after a quiet spell; 1 by default) and calls that may run at once,
      across every Hands of the deployment. A call over a limit waits, its job in hand,
      and its watchers see ``waiting for rate limit``; ``BRAINHANDS_TOOL_LIMITS`` may
      replace these (see the README's "Limits").
    - ``sandbox``: the tool runs commands (``await ctx.run([...])``) in a ``Sandbox`` with
      these limits: only its working directory writable, no network. ``"none"`` says
      explicitly that it is trusted to run them on the Hands itself. A Hands that cannot
      make a sandbox refuses to start rather than serve a sandboxed tool unsandboxed.
    - ``workspace``: the session's workspace the tool works in: each attempt starts in
      ``ctx.workdir`` holding the workspace's latest version (a sandbox's commands run
      there), and what the tool leaves there when it succeeds is the next version,
      committed with its outcome. A call that fails, times out, is cancelled or whose worker
      dies leaves the workspace as it was. Calls on one workspace are serialised by its
      version: one that ran on a version another call has moved past meanwhile is an
      interrupted attempt (a ``safe`` tool runs again on the new version). With
      ``workspace_read_only`` the calls run side by side and their changes are dropped.

    ``ctx.operation_id`` is the idempotency key: pass it to the external system.
    """

    def register(fn: F) -> F:
        registry.add(
            declare(
                fn,
                name=name,
                pool=pool,
                policy=policy,
                query=query,
                timeout=timeout,
                retry=retry,
                description=description,
                approval=approval,
                compensate=compensate,
                rate=rate,
                burst=burst,
                concurrency=concurrency,
                sandbox=sandbox,
                workspace=workspace,
                workspace_read_only=workspace_read_only,
            )
        )
        return fn

    return register
