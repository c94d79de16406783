"""docs/api.md cannot rot: its Python blocks run, in order, in one namespace, against a real
``brainhands api`` in front of real Brain and Hands processes, with only the names the page
says the reader supplies."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest

from brainhands.shared.webhook_signing import tenant_secret
from tests.helpers.agent_run import AgentRun, agent_run
from tests.helpers.api import key_for, start_api
from tests.helpers.markdown import python_blocks

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
__all__ = ["agent_run"]  # the fixture

PAGE = Path(__file__).resolve().parents[2] / "docs" / "api.md"
SECRET = "webhook-secret-of-the-docs"


def test_the_page_has_a_block_for_each_of_its_topics() -> None:
    blocks = python_blocks(PAGE)
    text = "".join(b.code for b in blocks)
    assert len(blocks) >= 8
    for shown in ("globex", "decision=True", "approve(", "stream_token(", "last_event_id=",
                  "callback_url=", "problem+json"):  # fmt: skip
        assert shown in text, f"docs/api.md shows no {shown!r}"


async def test_every_block_of_docs_api_runs_against_a_live_deployment(
    agent_run: AgentRun,
) -> None:
    brains = agent_run.brains
    # The page's receiver listens on loopback: the operator allows it.
    webhooks = {"BRAINHANDS_WEBHOOK_SECRET": SECRET, "BRAINHANDS_WEBHOOK_ALLOW": "127.0.0.1/32"}
    agent_run.start_brain(tasks="tests.helpers.kinds", **webhooks)
    agent_run.start_hands()
    api = await start_api(brains, **webhooks)
    namespace: dict[str, Any] = {
        "__name__": "docs_api",
        "API": api.url,
        "ACME_APP": await key_for(brains, "acme", "read", "submit", "tasks", "signal"),
        "ACME_OPS": await key_for(brains, "acme", "read", "signal", "approve"),
        "GLOBEX_APP": await key_for(brains, "globex", "read", "submit", "tasks"),
        "ACME_WEBHOOK_SECRET": tenant_secret(SECRET.encode(), "acme", 0),
    }
    for block in python_blocks(PAGE):
        source = "\n" * (block.line - 1) + block.code  # tracebacks name the page's lines
        code = compile(source, str(PAGE), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        ran = eval(code, namespace)
        if inspect.iscoroutine(ran):
            await ran
