"""Agents for the compaction kill test (``test_context_kill``): one agent whose context
policy has its summaries written by a second scripted model. Both scripts are in
``TEST_CONTEXT_DIR`` (``main.json``, ``summary.json``); each model logs the requests it
answers (``TEST_MODEL_LOG``, ``TEST_SUMMARY_LOG``)."""

from __future__ import annotations

import os
from pathlib import Path

from brainhands.brain.agent import Agent, AgentRegistry
from brainhands.brain.context import ContextPolicy
from brainhands.brain.models.scripted import ScriptedModel

SCRIPTS = Path(os.environ.get("TEST_CONTEXT_DIR", "."))
BUDGET = 400
"""The agent's prompt budget, in estimated tokens."""

agents = AgentRegistry()
if (SCRIPTS / "main.json").exists():
    agents.add(
        Agent(
            name="compacting",
            model=ScriptedModel(SCRIPTS / "main.json", log_path=os.environ.get("TEST_MODEL_LOG")),
            system="You note errands.",
            context=ContextPolicy(
                max_prompt_tokens=BUDGET,
                keep_tokens=150,
                summary_model=ScriptedModel(
                    SCRIPTS / "summary.json", log_path=os.environ.get("TEST_SUMMARY_LOG")
                ),
            ),
        )
    )
