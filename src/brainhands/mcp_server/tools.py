"""The MCP server's tools: ``run_<agent>`` for each agent the deployment's Brains declare,
``list_approvals``, ``approve`` and ``deny``.

Each tool is a thin door onto the operator's ``Client`` for the caller's tenant, as the
HTTP API's routes are: a run is a submission (the same session and request id never start
a second run), a decision is the inbox request a Brain carries out, and nothing a caller
sends reaches or reveals another tenant's sessions. A caller without the scope a tool
needs (``submit`` to run, ``read`` to list, ``approve`` to decide) is refused, and so is
anything the client refuses (an unknown approval, a second verdict), each with its reason.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict
from typing import Annotated, Any

from mcp.server.extension import Extension
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, InputRequiredResult, ToolAnnotations
from mcp.types import Tool as McpTool
from pydantic import Field

from brainhands.api.bodies import NAME
from brainhands.api.keys import Scope
from brainhands.api.known import KnownAgents
from brainhands.client.approvals import pending_approvals
from brainhands.client.direct import Client
from brainhands.mcp_server.callers import Caller, Identify
from brainhands.mcp_server.runs import RUN_PREFIX, RunOut, run_out, submit_only
from brainhands.shared.errors import AnswerTimeout, BrainhandsError
from brainhands.shared.store import SubmissionRecord
from brainhands.shared.tenancy import session_key, split_key
from brainhands.shared.vocabulary import Verdict

Ctx = Context[Any, Any]

Text = Annotated[str, Field(min_length=1, description="the message to the agent")]
SessionId = Annotated[
    str | None,
    Field(
        pattern=NAME,
        max_length=64,
        description="the session (your tenant's) to run in; default: the request id",
    ),
]
RequestId = Annotated[
    str | None,
    Field(
        pattern=NAME,
        max_length=128,
        description="the run's id: the same id (in the same session) is the same run, "
        "whose answer a second call collects; default: a new one",
    ),
]
OfSession = Annotated[
    str | None,
    Field(pattern=NAME, max_length=64, description="of this session only; default: all yours"),
]
Session = Annotated[str, Field(pattern=NAME, max_length=64, description="the session")]
Approval = Annotated[str, Field(pattern=NAME, max_length=64, description="the approval's id")]
DecisionId = Annotated[
    str | None,
    Field(pattern=NAME, max_length=128, description="the same decision id twice counts once"),
]
By = Annotated[str | None, Field(max_length=128, description="a name shown with the decision")]


class AgentServer(MCPServer[Any]):
    """An MCP server whose tools reach the deployment's agents through ``client`` (an
    operator's: each tool names sessions by its caller's tenant), for the callers
    ``identify`` recognises. ``wait``: seconds a run's tool waits for the answer.
    ``agents``: the declared agents, one ``run_`` tool each, learnt as Brains declare
    them. ``extensions``: the MCP extensions it serves (``mcp_server.tasks``)."""

    def __init__(
        self,
        client: Client,
        identify: Identify,
        *,
        agents: KnownAgents,
        wait: float,
        extensions: Sequence[Extension] = (),
    ) -> None:
        super().__init__(
            "brainhands",
            extensions=extensions,
            instructions="Each run_<agent> tool asks an agent of this deployment and answers "
            "with its reply; a run survives disconnection: call it again with the same "
            "session_id and request_id to collect the answer. Calls the agents make that "
            "need approval wait until approve or deny decides them (list_approvals).",
            warn_on_duplicate_tools=False,
        )
        self.client = client
        self.identify = identify
        self.agents = agents
        self.wait = wait
        self._served: set[str] = set()
        read_only = ToolAnnotations(read_only_hint=True)
        deciding = ToolAnnotations(destructive_hint=False, idempotent_hint=True)
        self.add_tool(self.list_approvals, name="list_approvals", annotations=read_only)
        self.add_tool(self.approve, name="approve", annotations=deciding)
        self.add_tool(self.deny, name="deny", annotations=deciding)

    # The agents' tools, kept in step with the declared agents -------------------------------

    async def list_tools(self) -> list[McpTool]:
        # A name already served: the agents are read again once their TTL has run out.
        await self._learn_agents(next(iter(self._served), ""))
        return await super().list_tools()

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        if name.startswith(RUN_PREFIX):  # an agent declared since the client listed tools
            await self._learn_agents(name.removeprefix(RUN_PREFIX))
        return await super().call_tool(name, arguments, context)

    async def _learn_agents(self, wanted: str) -> None:
        for agent in await self.agents.names(wanted) - self._served:
            self.add_tool(
                self._run_tool(agent),
                name=f"{RUN_PREFIX}{agent}",
                description=f"Ask the agent {agent!r}; answers with its reply once the run "
                "ends (a durable run: it goes on if this call is cut off).",
                annotations=ToolAnnotations(destructive_hint=True, open_world_hint=True),
            )
            self._served.add(agent)

    def _run_tool(self, agent: str) -> Callable[..., Awaitable[RunOut]]:
        async def run(
            text: Text, ctx: Ctx, session_id: SessionId = None, request_id: RequestId = None
        ) -> RunOut:
            return await self._run(ctx, agent, text, session_id, request_id)

        return run

    async def _run(
        self, ctx: Ctx, agent: str, text: str, session_id: str | None, request_id: str | None
    ) -> RunOut:
        who = await self._caller(ctx, "submit")
        request_id = request_id or uuid.uuid4().hex
        session_id = session_id or request_id
        key = session_key(who.principal.tenant, session_id)
        with _refusals():
            handle = await self.client.submit(
                key, text, request_id=request_id, agent=agent, principal=who.acting
            )
            try:
                record: SubmissionRecord = await self.client.wait(
                    key, request_id, timeout=0 if submit_only.get() else self.wait
                )
            except AnswerTimeout as exc:
                record = exc.record
        return run_out(record, session_id, created=handle.created)

    # Approvals ------------------------------------------------------------------------------

    async def list_approvals(self, ctx: Ctx, session_id: OfSession = None) -> list[dict[str, Any]]:
        """The calls your agents made that wait for a decision, oldest first: of one
        session, or of every session of yours."""
        who = await self._caller(ctx, "read")
        tenant, store = who.principal.tenant, self.client.store
        with _refusals():
            if session_id is not None:
                pending = await pending_approvals(store, session_key(tenant, session_id))
            else:
                pending = await pending_approvals(store, tenant=tenant)
        return [{**asdict(p), "session_id": split_key(p.session_id)[1]} for p in pending]

    async def approve(
        self,
        ctx: Ctx,
        session_id: Session,
        approval_id: Approval,
        by: By = None,
        reason: Annotated[str | None, Field(max_length=2000)] = None,
        decision_id: DecisionId = None,
        arguments: Annotated[
            dict[str, Any] | None,
            Field(description="run the call with these arguments instead (checked first)"),
        ] = None,
    ) -> dict[str, Any]:
        """Approve a call waiting for a decision: it is dispatched once, with ``arguments``
        when given (refused, the call still pending, when the tool's schema refuses them).
        The same decision twice counts once; approving a call already denied is refused."""
        return await self._decide(
            ctx, session_id, approval_id, "approved", by, reason, decision_id, arguments
        )

    async def deny(
        self,
        ctx: Ctx,
        session_id: Session,
        approval_id: Approval,
        reason: Annotated[str, Field(min_length=1, max_length=2000, description="why")],
        by: By = None,
        decision_id: DecisionId = None,
    ) -> dict[str, Any]:
        """Deny a call waiting for a decision: the tool never runs, the agent reads the
        refusal with its reason."""
        return await self._decide(ctx, session_id, approval_id, "denied", by, reason, decision_id)

    async def _decide(
        self,
        ctx: Ctx,
        session_id: str,
        approval_id: str,
        verdict: Verdict,
        by: str | None,
        reason: str | None,
        decision_id: str | None,
        arguments: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        who = await self._caller(ctx, "approve")
        with _refusals():
            [made] = await self.client.decide(
                session_key(who.principal.tenant, session_id),
                [approval_id],
                verdict,
                reason,
                by=by or who.principal.name,
                decision_id=decision_id,
                principal=who.acting,
                arguments=arguments,
            )
        return asdict(made)

    async def _caller(self, ctx: Ctx, scope: Scope) -> Caller:
        """The caller of this tool call, refused unless its key has ``scope``."""
        who = await self.identify(ctx.headers)
        if who is None:
            raise ToolError("an API key is needed: Authorization: Bearer bh_...")
        if not who.principal.may(scope):
            raise ToolError(f"this API key lacks the {scope!r} scope")
        return who


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """What the client refuses (an unknown approval, a second verdict, a bad id) is the
    caller's to read, as a tool error with the reason."""
    try:
        yield
    except BrainhandsError as exc:
        raise ToolError(str(exc)) from exc
