"""An agent's context: the chat rebuilt from a session's entries, and its compaction.

The messages a model request carries are a fold of the session's entries (``build_messages``).
A **checkpoint** entry holds that fold as it stood when the checkpoint was made (its
``messages``, after the system prompt) and restarts the fold there: whatever came before it
is read no more. So the context rebuilt from the latest checkpoint and the entries after it
is the one rebuilt from every entry, byte for byte, and a Brain's claim reads only those
(``brainhands.shared.store``): a pass costs what the context costs, not what the history does.
The entries before a checkpoint stay in the store, and in every view of the session.

A checkpoint is made by compaction, which an agent asks for with a ``ContextPolicy``: when a
request's prompt would pass ``max_prompt_tokens`` (estimated cheaply), the older turns are
summarised, by the model or by a function of the agent's, and only the summary and the
latest turns (``keep_tokens`` of them) are sent on. Compaction is a durable step of the model
turn, in phases of its own (``compaction_phases``): ``compact`` asks for the summary and
commits it with the task's state; ``checkpoint`` appends it as a checkpoint entry; only then
does ``request`` send the smaller prompt. A Brain that dies in ``compact`` re-runs ``compact``
alone (the summary asked again, nothing else); one that dies after it finds the summary
committed and never asks for it again.

A policy may show the model session documents (``documents``): each one's latest value, as
JSON, after the system prompt (``show_documents``), within a share of the prompt budget of
their own (``document_tokens``); one that does not fit is named and left out, so the
documents never crowd out the conversation however they grow.

A summary written by a model is a model call of the turn: its usage (``brain.budget``) is
committed with the summary, kept in the checkpoint entry (the session's usage adds it up)
and charged to the run's budget with the turn's answer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from brainhands.brain.budget import Price, Usage, response_usage
from brainhands.brain.models.base import Json, ModelAdapter, ModelError, TransientModelError
from brainhands.brain.registry import TaskKind
from brainhands.brain.task import Fail, Goto, Next, PhaseContext, Sleep, TaskView
from brainhands.shared.errors import ConfigurationError
from brainhands.shared.store import CHECKPOINT_KIND, EntryRecord

if TYPE_CHECKING:
    from brainhands.brain.agent import AgentRegistry

log = logging.getLogger("brainhands.brain")

CHECKPOINT = CHECKPOINT_KIND
"""The kind of a checkpoint entry: the store reads a claimed session's entries from the
latest entry of this kind on."""
SUMMARY_PREFIX = "Summary of the conversation so far:\n"
"""How the summary of the older turns opens, as the user message that replaces them."""
SUMMARY_INSTRUCTIONS = (
    "You compact a conversation between a user, an assistant and its tools. Summarise the "
    "transcript you are given, one JSON message a line, so that the assistant can go on "
    "without it: the user's goals and requests, decisions made, facts learnt from tools "
    "(names, ids, numbers), work done and work still open. Be brief; leave nothing out "
    "that the assistant would need."
)
"""The system prompt of a summary asked of a model."""
COMPACTING = "compaction_usage"
"""The key, in a generation task's state, of what its compactions' summaries spent."""

Compactor = Callable[[list[Json]], Awaitable[str]]
"""``async def compact(messages) -> str``: the summary of ``messages`` (the older turns,
chat-completions messages, a previous summary among them)."""
Estimator = Callable[[list[Json], list[Json]], int]
"""``estimate(messages, tools) -> int``: a prompt's size in tokens."""


def estimate_tokens(messages: list[Json], tools: list[Json]) -> int:
    """A cheap estimate of a prompt's tokens: its JSON's characters / 4 (about right for
    English text with any common tokenizer, and costless)."""
    return (len(json.dumps(messages)) + len(json.dumps(tools)) + 3) // 4


KNOWN_WINDOWS: dict[str, int] = {
    "gpt-4o": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-5": 400_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "claude": 200_000,
    "gemini-1.5": 1_048_576,
    "gemini-2": 1_048_576,
    "llama3.1": 131_072,
    "llama3.2": 131_072,
    "llama3.3": 131_072,
    "qwen2.5": 32_768,
    "qwen3": 40_960,
    "mistral": 32_768,
}
"""The context windows, in tokens, of the models known by name (the longest prefix of the
name after any ``provider/``): an agent with no ``ContextPolicy`` gets one sized from its
model's (``default_policy``)."""
PROMPT_SHARE = 0.75
"""What of a window a default policy lets the prompt take: the rest is for the answer."""


def context_window(model_name: str) -> int | None:
    """The known context window of the model ``model_name`` (None: not known)."""
    name = model_name.rsplit("/", 1)[-1].lower()
    known = [prefix for prefix in KNOWN_WINDOWS if name.startswith(prefix)]
    return KNOWN_WINDOWS[max(known, key=len)] if known else None


def default_policy(window: int) -> ContextPolicy:
    """The policy of an agent that has none, for a model whose window is ``window`` tokens:
    its prompt compacted past ``PROMPT_SHARE`` of the window (by its own model), so a long
    session never sends a prompt the model refuses."""
    return ContextPolicy(max_prompt_tokens=max(2, int(window * PROMPT_SHARE)))


@dataclass(frozen=True)
class ContextPolicy:
    """How big an agent's prompt may grow, and how it is made smaller (``Agent.context``)."""

    max_prompt_tokens: int
    """A request whose prompt (system, messages, tool schemas) is estimated above this is
    compacted first."""
    keep_tokens: int | None = None
    """The latest messages kept verbatim by a compaction, up to this many tokens (None: half
    of ``max_prompt_tokens``); the ones before them are summarised."""
    compact: Compactor | None = None
    """The agent's own summary of the older messages; None: a model writes it."""
    summary_model: ModelAdapter | None = None
    """The model that summarises when ``compact`` is None; None: the agent's own."""
    estimate: Estimator = estimate_tokens
    documents: tuple[str, ...] = ()
    """Session documents the model is shown, in this order: each one's latest value, as
    JSON, after the system prompt."""
    document_tokens: int | None = None
    """What the shown documents may take of the prompt (None: a quarter of
    ``max_prompt_tokens``)."""

    def __post_init__(self) -> None:
        if self.max_prompt_tokens < 1 or not 0 < self.kept < self.max_prompt_tokens:
            raise ConfigurationError(
                "a context policy needs max_prompt_tokens > keep_tokens > 0, not "
                f"{self.max_prompt_tokens} and {self.keep_tokens}"
            )
        if not 0 < self.shown_tokens < self.max_prompt_tokens:
            raise ConfigurationError(
                "a context policy needs max_prompt_tokens > document_tokens > 0, not "
                f"{self.max_prompt_tokens} and {self.document_tokens}"
            )

    @property
    def shown_tokens(self) -> int:
        return (
            max(1, self.max_prompt_tokens // 4)
            if self.document_tokens is None
            else self.document_tokens
        )

    @property
    def kept(self) -> int:
        return self.max_prompt_tokens // 2 if self.keep_tokens is None else self.keep_tokens

    def over_budget(self, messages: list[Json], tools: list[Json]) -> bool:
        return self.estimate(messages, tools) > self.max_prompt_tokens

    def split(self, messages: list[Json]) -> int:
        """How many of ``messages`` (no system prompt) to summarise: all but the latest that
        fit in ``keep_tokens``, never cutting between a call and its results (the kept part
        does not start with a tool message)."""
        cut, size = len(messages), 0
        while cut > 0:
            size += self.estimate([messages[cut - 1]], [])
            if size > self.kept:
                break
            cut -= 1
        while cut < len(messages) and messages[cut].get("role") == "tool":
            cut += 1
        return cut


def fold(entries: Sequence[EntryRecord]) -> list[Json]:
    """The chat messages (no system prompt) that ``entries`` make, in order: a checkpoint
    restarts the fold with the messages it holds."""
    messages: list[Json] = []
    for entry in entries:
        body = entry.body
        if entry.kind == CHECKPOINT:
            messages = list(body["messages"])
        elif entry.kind in ("user", "continuation"):
            messages.append({"role": "user", "content": body["text"]})
        elif entry.kind == "model":
            if "message" in body:
                messages.append(body["message"])
            else:  # saved by a build that stored chat-completions answers alone
                said = body["raw"]["choices"][0]["message"]
                message = {"role": "assistant", "content": said.get("content")}
                if said.get("tool_calls"):
                    message["tool_calls"] = said["tool_calls"]
                messages.append(message)
        elif entry.kind == "tool_result":
            content = {k: v for k, v in body.items() if k not in ("call_id", "name")}
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": body["call_id"],
                    "content": json.dumps(content, sort_keys=True),
                }
            )
    return messages


DOCUMENTS_HEADING = "\n\nSession documents (their latest values, JSON):"
"""What opens the documents a policy shows, after the system prompt."""


def show_documents(system: str, policy: ContextPolicy | None, docs: Mapping[str, Any]) -> str:
    """``system`` followed by the documents ``policy`` shows (their values in ``docs``, a
    phase's), one a line as ``name: JSON``, each while the shown ones fit in the policy's
    ``document_tokens``; one that would not is named, with its size, and left out."""
    if policy is None or not policy.documents:
        return system
    lines, size = [DOCUMENTS_HEADING], 0
    for name in policy.documents:
        line = f"{name}: {json.dumps(docs.get(name), sort_keys=True)}"
        tokens = policy.estimate([{"role": "system", "content": line}], [])
        if size + tokens > policy.shown_tokens:
            line = f"{name}: (left out: about {tokens} tokens, past the documents' share)"
        else:
            size += tokens
        lines.append(line)
    return system + "\n".join(lines)


def build_messages(system: str, entries: Sequence[EntryRecord]) -> list[Json]:
    """The chat messages for a model request, rebuilt from entries alone: the same from the
    latest checkpoint on as from the first entry."""
    return [{"role": "system", "content": system}, *fold(entries)]


async def summarise(
    policy: ContextPolicy, model: ModelAdapter, messages: list[Json], price: Price | None
) -> tuple[str, Usage | None]:
    """The summary of ``messages``: the policy's function's (which spends nothing a budget
    counts: None), or the model's answer to them as a transcript (no tools offered), with
    what that answer spent at ``price``."""
    if policy.compact is not None:
        return await policy.compact(messages), None
    transcript = "\n".join(json.dumps(m, sort_keys=True) for m in messages)
    request = [
        {"role": "system", "content": SUMMARY_INSTRUCTIONS},
        {"role": "user", "content": transcript},
    ]
    response = await (policy.summary_model or model).complete(request, [])
    return response.text or "", response_usage(response, price)


def compacting(state: dict[str, Any]) -> Usage:
    """What the summaries made for a turn (its generation task's ``state``) spent: charged
    to the run with the turn's answer."""
    return Usage.from_json(state.get(COMPACTING))


def wants_compaction(
    policy: ContextPolicy | None, state: dict[str, Any], messages: list[Json], tools: list[Json]
) -> bool:
    """Whether a turn's request (``messages``, ``tools``) is compacted first: over budget,
    and not compacted already at this context position (a context whose latest turns alone
    pass the budget is sent as it is, rather than compacted again and again)."""
    if policy is None or state.get("compacted") == state["upto"]:
        return False
    return policy.over_budget(messages, tools)


def compaction_phases(
    generate: TaskKind, agents: AgentRegistry, model_of: Callable[[Any], ModelAdapter]
) -> None:
    """Add compaction's phases to the ``agent.generate`` task kind: ``compact`` (summary,
    heavy) and ``checkpoint`` (its entry, light), entered from ``request`` when
    ``wants_compaction``, and leading back to it; and the documents the agents' policies
    show to the ones it reads (``show_documents``)."""
    shown = (a.context.documents for a in agents.agents.values() if a.context is not None)
    generate.documents = (*generate.documents, *dict.fromkeys(n for names in shown for n in names))

    @generate.phase("compact")
    async def compact(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        agent = agents.get(task.input["agent"])
        policy = agent.context
        state = dict(task.state)
        messages = fold([e for e in ctx.entries if e.seq <= state["upto"]])
        cut = policy.split(messages) if policy is not None else 0
        if cut == 0:  # nothing older than what is kept: send it as it is
            return Goto(
                "request",
                state={**state, "compacted": state["upto"], "restarts": task.restarts},
            )
        assert policy is not None
        try:
            summary, usage = await summarise(policy, model_of(agent), messages[:cut], agent.price)
        except TransientModelError as exc:
            attempt = state.get("compact_attempt", 0) + 1
            if attempt >= agent.model_attempts:
                return Fail({"reason": "compaction failed", "error": str(exc)})
            delay = exc.retry_after or agent.retry_delay * 2 ** (attempt - 1)
            return Sleep(then="compact", seconds=delay, state={**state, "compact_attempt": attempt})
        except ModelError as exc:
            return Fail({"reason": "compaction failed", "error": str(exc)})
        spent = {"summary_usage": usage.to_json()} if usage is not None else {}
        return Goto("checkpoint", state={**state, "summary": summary, "cut": cut, **spent})

    @generate.phase("checkpoint", light=True)
    async def checkpoint(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        made = ("summary", "cut", "summary_usage")
        state = {k: v for k, v in task.state.items() if k not in made}
        summary, cut = task.state["summary"], task.state["cut"]
        # Entries appended after ``upto`` (none in an agent's own loop) are kept after the
        # summary: the checkpoint stands for every entry before it.
        messages = fold(ctx.entries)
        covers = ctx.entries[-1].seq if ctx.entries else 0
        body = {
            "messages": [{"role": "user", "content": SUMMARY_PREFIX + summary}, *messages[cut:]],
            "summary": summary,
            "summarised": cut,
            "covers": covers,
        }
        usage = task.state.get("summary_usage")
        if usage is not None:  # the turn's answer charges it to the run (``compacting``)
            body["usage"] = usage
            state[COMPACTING] = (Usage.from_json(usage) + compacting(state)).to_json()
        ctx.append_entry(CHECKPOINT, body)
        log.info(
            "context compacted",
            extra={"event": "compacted", "task_id": task.id, "summarised": cut, "seq": covers + 1},
        )
        entered = {"upto": covers + 1, "compacted": covers + 1, "restarts": task.restarts}
        return Goto("request", state={**state, **entered})
