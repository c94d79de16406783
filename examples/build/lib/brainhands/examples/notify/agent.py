"""The notify example's agent: turns "send the approved notice to these five customers and
summarize" into one call of the batch task, then answers with the summary.

The model is scripted (``script.json``, or the file ``NOTIFY_SCRIPT`` names), so the
example runs with no network; point
``BRAINHANDS_MODEL_*`` at a real chat-completions server and swap in ``OpenAIChatModel`` to
drive it with a real model.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field

from brainhands.brain.agent import Agent, AgentRegistry, TaskTool
from brainhands.brain.models.scripted import ScriptedModel


class NoticeBatch(BaseModel):
    recipients: list[str] = Field(description="approved recipient addresses")
    subject: str
    body: str = Field(description="the approved notice, verbatim")


agents = AgentRegistry()
agents.add(
    Agent(
        name="notifier",
        model=ScriptedModel(
            os.environ.get("NOTIFY_SCRIPT") or Path(__file__).with_name("script.json"),
            log_path=os.environ.get("NOTIFY_MODEL_LOG") or None,
        ),
        system=(
            "You send approved customer notices. Use send_notice_batch with the approved "
            "recipients and text; never change the text. Then summarize what was sent."
        ),
        task_tools=(
            TaskTool(
                name="send_notice_batch",
                kind="notice-batch",
                args_model=NoticeBatch,
                description="Send one approved notice to each recipient, exactly once each.",
            ),
        ),
        # ``brainhands demo --approve``: the batch waits until a person approves it.
        approval=("send_notice_batch",) if os.environ.get("NOTIFY_APPROVE") else (),
    )
)
