"""The agent loop's test rig: a Brain harness, the email service as the judge of effects,
and the scripted model's own log of the requests it answered."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from brainhands.examples.notify.email_client import EmailClient
from brainhands.shared.store import SubmissionRecord
from tests.helpers.brains import BrainHarness
from tests.helpers.harness import start_email_service
from tests.helpers.processes import spawn_email_hands
from tests.helpers.submitting import submit_input


@dataclass
class AgentRun:
    brains: BrainHarness
    email: EmailClient
    model_log: Path
    extra: dict[str, str]

    def start_brain(
        self, die_rule: str | None = None, tasks: str | None = None, **env: str
    ) -> subprocess.Popen[bytes]:
        return self.brains.start_brain(
            tasks=tasks,
            agents="tests.helpers.agents",
            die_rule=die_rule,
            **{**self.extra, **env},
        )

    def start_hands(self) -> subprocess.Popen[bytes]:
        n = len(self.brains.processes)
        proc = spawn_email_hands(
            env=self.brains.settings(**self.extra),
            log=self.brains.tmp_path / f"hands{n}.log",
        )
        self.brains.processes.append(proc)
        return proc

    async def submit(self, agent: str, *, session_id: str = "s1") -> None:
        await submit_input(
            self.brains.store,
            self.brains.env.topology,
            session_id=session_id,
            request_id="r1",
            input={"agent": agent, "text": "please do the errand"},
            compat="v1",
        )

    async def ask(self, agent: str) -> SubmissionRecord:
        await self.submit(agent)
        return await self.brains.answer(within=90)

    async def service_has_sends(self, count: int) -> bool:
        return len((await self.email.ledger())["sends"]) >= count

    def requests(self) -> list[str]:
        """The model's own record of every request it answered, one JSON line each."""
        return self.model_log.read_text().splitlines() if self.model_log.exists() else []

    def turns_asked(self) -> list[int]:
        return [json.loads(line)["turn"] for line in self.requests()]


@pytest.fixture
async def agent_run(brains: BrainHarness, tmp_path: Path) -> AsyncIterator[AgentRun]:
    service, url = await start_email_service(tmp_path)
    log = tmp_path / "model.jsonl"
    try:
        yield AgentRun(
            brains, EmailClient(url), log, {"TEST_EMAIL_URL": url, "TEST_MODEL_LOG": str(log)}
        )
    finally:
        service.kill()
        service.wait()
