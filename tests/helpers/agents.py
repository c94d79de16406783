"""Agents for the agent-loop tests: scripted models, the test tools, a request log; and
agents on the chat-completions adapter, served by the test's ``ChatServer`` at
``TEST_MODEL_URL``; and one that names no model, for the Brain's ``BRAINHANDS_MODEL_*``."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel

from brainhands.brain.agent import Agent, AgentRegistry, TaskTool
from brainhands.brain.models.openai import OpenAIChatModel
from brainhands.brain.models.scripted import ScriptedModel

SCRIPTS = Path(__file__).with_name("scripts")
LOG = os.environ.get("TEST_MODEL_LOG") or None
HTTP_MODEL_URL = os.environ.get("TEST_MODEL_URL", "http://127.0.0.1:9/v1")


class ChildArgs(BaseModel):
    n: int


agents = AgentRegistry()
agents.add(
    Agent(
        name="errand",
        model=ScriptedModel(SCRIPTS / "errand.json", log_path=LOG),
        system="You send emails with the tools you have.",
        tools=("send_safe", "send_query", "send_unsafe"),
    )
)
agents.add(
    Agent(
        name="rogue",
        model=ScriptedModel(SCRIPTS / "rogue.json", log_path=LOG),
        system="You send emails with the tools you have.",
        tools=("send_safe",),
    )
)
agents.add(
    Agent(
        name="hopeful",
        model=ScriptedModel(SCRIPTS / "hopeful.json", log_path=LOG),
        system="You send emails with the tools you have.",
        tools=("send_safe", "shred_files"),  # no Hands pool declares shred_files
    )
)
agents.add(
    Agent(
        name="guarded",  # its grant of send_safe requires approval
        model=ScriptedModel(SCRIPTS / "guarded.json", log_path=LOG),
        system="You send emails once they are approved.",
        tools=("send_safe",),
        approval=("send_safe",),
    )
)
agents.add(
    Agent(
        name="gated",  # send_gated is declared as needing approval; this agent's expire
        model=ScriptedModel(SCRIPTS / "gated.json", log_path=LOG),
        system="You send emails once they are approved.",
        tools=("send_gated",),
        approval_expiry=float(os.environ.get("TEST_APPROVAL_EXPIRY", "3")),
    )
)
agents.add(
    Agent(
        name="invoicer",  # send_invoice needs approval of an amount over 100 only
        model=ScriptedModel(SCRIPTS / "invoicer.json", log_path=LOG),
        system="You send invoices.",
        tools=("send_invoice",),
    )
)
agents.add(
    Agent(
        name="patient",  # one slow send, then an answer: messages arrive while it runs
        model=ScriptedModel(SCRIPTS / "patient.json", log_path=LOG),
        system="You send emails and read what you are told meanwhile.",
        tools=("send_safe",),
    )
)
agents.add(
    Agent(
        name="echoer",
        model=ScriptedModel(SCRIPTS / "echoer.json", log_path=LOG),
        system="You repeat things.",
        tools=("echo",),
    )
)
agents.add(
    Agent(
        name="delegator",
        model=ScriptedModel(SCRIPTS / "delegator.json", log_path=LOG),
        system="You hand work to child tasks.",
        task_tools=(
            TaskTool(
                name="delegate",
                kind="child",  # tests.helpers.kinds: answers n * 10
                args_model=ChildArgs,
                description="Run a child task for n.",
            ),
        ),
    )
)
agents.add(
    Agent(
        name="payer",
        model=ScriptedModel(SCRIPTS / "payer.json", log_path=LOG),
        system="You make payments with the tool you have.",
        tools=("pay_unsafe",),
    )
)
agents.add(
    Agent(
        name="http_retrier",
        model=OpenAIChatModel(HTTP_MODEL_URL, "test-model", None, timeout=5),
        system="You answer briefly.",
        model_attempts=4,
        retry_delay=0.5,
    )
)
agents.add(
    Agent(
        name="http_giving_up",
        model=OpenAIChatModel(HTTP_MODEL_URL, "test-model", None, timeout=5),
        system="You answer briefly.",
        model_attempts=3,
        retry_delay=0.75,
    )
)
agents.add(
    Agent(
        name="by_settings",  # names no model: the Brain's BRAINHANDS_MODEL_* settings give one
        system="You repeat things.",
        tools=("echo",),
    )
)
agents.add(
    Agent(
        name="banker",  # tools of the tests' MCP ledger server, served by a Hands pool
        model=ScriptedModel(SCRIPTS / "banker.json", log_path=LOG),
        system="You move money with the bank's tools.",
        tools=("bank.deposit", "bank.balance"),
    )
)
