"""``brainhands tenant budget set|show``, run as an operator runs it: a real process, on
the embedded store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.brainhands.test_cli import brainhands

pytestmark = pytest.mark.integration


def test_an_operator_sets_and_shows_a_tenants_budget(
    rabbitmq_url: str, namespace: str, tmp_path: Path
) -> None:
    env = {"BRAINHANDS_RABBITMQ_URL": rabbitmq_url, "BRAINHANDS_NAMESPACE": namespace}
    assert brainhands("migrate", cwd=tmp_path, env=env).returncode == 0
    none = brainhands("tenant", "budget", "show", "acme", cwd=tmp_path, env=env)
    assert none.returncode == 1 and "tenant acme has no budget" in none.stderr

    made = brainhands(
        "tenant", "budget", "set", "acme", "--tokens", "1000", "--tool-calls", "5",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert 'budget {"tokens": 1000, "tool_calls": 5}' in made.stdout
    assert "stopped runs sent the raise: 0" in made.stdout

    shown = brainhands("tenant", "budget", "show", "acme", "--json", cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    budget = json.loads(shown.stdout)
    assert budget["limits"] == {"tokens": 1000, "tool_calls": 5}
    assert budget["used"] == {"tokens": 0, "cost": 0.0, "tool_calls": 0}

    empty = brainhands("tenant", "budget", "set", "acme", cwd=tmp_path, env=env)
    assert empty.returncode == 2 and "at least one limit" in empty.stderr
    seconds = brainhands("tenant", "budget", "set", "acme", "--seconds", "5", cwd=tmp_path, env=env)
    assert seconds.returncode == 2  # a tenant's budget has no wall-clock limit

    key = brainhands("keys", "create", "--tenant", "ops", "--scope", "operator", cwd=tmp_path)
    assert key.returncode == 0, key.stderr
