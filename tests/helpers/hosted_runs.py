"""Running a hosted agent's module (``tests.helpers.hosted_agent``,
``tests.helpers.hosted_oai_agent``, ``tests.helpers.hosted_as_agent``) in real Brain and
Hands processes, its tools' ledgers in the deployment's ``tmp_path``
(``tests.helpers.ledgers``, read by the test too)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from dataclasses import dataclass
from typing import Any

import pytest

from brainhands import PendingApproval
from brainhands.shared.errors import DecisionRefused
from brainhands.shared.store import SubmissionRecord
from tests.helpers.brains import BrainHarness
from tests.helpers.polling import eventually
from tests.helpers.processes import spawn_module
from tests.helpers.submitting import submit_input


def start_hands(
    brains: BrainHarness, pool: str, tools: str, *, victim: bool = False, **env: str
) -> subprocess.Popen[bytes]:
    """A Hands for ``pool`` serving the tools of the module ``tools``; a ``victim`` dies as
    its first tool call returns (``tests.helpers.hands_victim``'s ``after-effect``)."""
    args = ["hands", "--pool", pool, "--tools", tools]
    module, argv = (
        ("tests.helpers.hands_victim", ["after-effect", *args]) if victim else ("brainhands", args)
    )
    log = brains.tmp_path / f"hands{len(brains.processes)}.log"
    proc = spawn_module(module, *argv, env=brains.settings(**env), log=log)
    brains.processes.append(proc)
    return proc


@dataclass(frozen=True)
class HostedApp:
    """The agent ``agent`` of the module ``module``, its tools on the Hands pool ``pool``."""

    module: str
    agent: str
    pool: str

    def env(self, brains: BrainHarness) -> dict[str, str]:
        return {"HOSTED_LEDGERS": str(brains.tmp_path)}

    def start_brain(self, brains: BrainHarness, **kwargs: Any) -> subprocess.Popen[bytes]:
        return brains.start_brain(tasks=None, agents=self.module, **kwargs, **self.env(brains))

    def start_hands(self, brains: BrainHarness, victim: bool = False) -> subprocess.Popen[bytes]:
        """A Hands for the agent's pool; a ``victim`` dies as its first tool call returns."""
        return start_hands(brains, self.pool, self.module, victim=victim, **self.env(brains))

    async def submit(
        self,
        brains: BrainHarness,
        text: str,
        session: str = "s1",
        request: str = "r1",
        **more: Any,
    ) -> None:
        await submit_input(
            brains.store,
            brains.env.topology,
            session_id=session,
            request_id=request,
            input={"agent": self.agent, "text": text, **more},
            compat="v1",
        )

    async def ask(self, brains: BrainHarness, text: str, session: str = "s1") -> SubmissionRecord:
        await self.submit(brains, text, session)
        return await brains.answer(session_id=session, within=45)


@dataclass(frozen=True)
class TwoDecisions:
    """What ``decide_two_calls`` saw: the two calls, whether each racing approval of the
    first was the one that counted, and the run's answer."""

    approved: PendingApproval
    denied: PendingApproval
    counted: list[bool]
    answer: SubmissionRecord


async def decide_two_calls(app: HostedApp, brains: BrainHarness) -> TwoDecisions:
    """Run the agent's ``approve`` script, whose two calls (amounts 7 and 8) wait for
    approval: two clients approve the first at once, one denies the second and the other's
    approval of it after that is refused; then the run is answered."""
    app.start_hands(brains)
    app.start_brain(brains)
    await app.submit(brains, "approve")
    async with brains.client() as ana, brains.client() as bo:

        async def both_pending() -> bool:
            return len(await ana.pending_approvals("s1")) == 2

        await eventually(both_pending, within=30, what="two calls waiting for approval")
        seven, eight = sorted(
            await ana.pending_approvals("s1"), key=lambda a: a.arguments["amount"]
        )
        [by_ana], [by_bo] = await asyncio.gather(
            ana.approve("s1", seven.approval_id, by="ana"),
            bo.approve("s1", seven.approval_id, by="bo"),
        )
        await ana.deny("s1", eight.approval_id, by="ana", reason="too much")
        with pytest.raises(DecisionRefused, match="already denied by ana"):
            await bo.approve("s1", eight.approval_id, by="bo")
    answer = await brains.answer(within=45)
    return TwoDecisions(seven, eight, sorted([by_ana.new, by_bo.new]), answer)


async def contexts_around_a_kill(
    app: HostedApp, brains: BrainHarness, script: str
) -> tuple[list[str], list[str]]:
    """The requests the model was sent running ``script`` in s1 with a Brain killed holding
    the model's first answer (before it was committed), then in s2 with no kill."""
    app.start_hands(brains)
    brain = app.start_brain(brains, die_rule="before-entry:hosted_model")
    await app.submit(brains, script)
    await died(brain, "the Brain's death")
    app.start_brain(brains)
    await brains.answer(session_id="s1", within=45)
    log = brains.tmp_path / "requests.jsonl"
    with_kill = log.read_text().splitlines()
    log.unlink()
    await app.ask(brains, script, session="s2")
    return with_kill, log.read_text().splitlines()


@dataclass
class Running:
    """What a Hands hands a tool of the call it runs (``hands.ToolContext``'s face), for a
    hosted tool called in the test's own process."""

    operation_id: str
    fence: int = 1
    attempt: int = 1

    async def progress(self, message: str, **data: Any) -> None:
        return None

    def cancelled(self) -> bool:
        return False


def requests(brains: BrainHarness) -> list[str]:
    """The requests the model was sent, each once, in order."""
    lines = (brains.tmp_path / "requests.jsonl").read_text().splitlines()
    return list(dict.fromkeys(lines))


def sent(brains: BrainHarness) -> list[Any]:
    return [json.loads(line) for line in requests(brains)]


async def died(proc: subprocess.Popen[bytes], what: str) -> None:
    await eventually(lambda: proc.poll() is not None, within=30, what=what)
    assert proc.returncode == 9  # its own exit, at the kill point


async def waited_for_declarations(brains: BrainHarness) -> bool:
    tasks, _ = await brains.store.queries.history("s1")
    return any(t.kind == "hosted.session" and t.state.get("waited") for t in tasks)
