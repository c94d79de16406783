"""``brainhands tenant budget set|show`` and ``brainhands webhook-secret show|rotate``, run
as an operator runs them: a real process, on the embedded store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from brainhands.shared.webhook_signing import tenant_secret
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


def test_an_operator_shows_and_rotates_a_tenants_webhook_secret(
    rabbitmq_url: str, namespace: str, tmp_path: Path
) -> None:
    key = "the-deployment-webhook-key"
    env = {"BRAINHANDS_RABBITMQ_URL": rabbitmq_url, "BRAINHANDS_NAMESPACE": namespace}
    assert brainhands("migrate", cwd=tmp_path, env=env).returncode == 0
    unset = brainhands("webhook-secret", "show", "acme", cwd=tmp_path, env=env)
    assert unset.returncode != 0 and "BRAINHANDS_WEBHOOK_SECRET" in unset.stderr

    env["BRAINHANDS_WEBHOOK_SECRET"] = key

    def secrets(*args: str) -> list[str]:
        done = brainhands("webhook-secret", *args, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        return [line.split()[0] for line in done.stdout.splitlines()]

    def of(tenant: str, generation: int) -> str:
        return tenant_secret(key.encode(), tenant, generation)

    assert secrets("show", "acme") == [of("acme", 0)]
    assert secrets("rotate", "acme", "--grace", "600") == [of("acme", 1), of("acme", 0)]
    assert secrets("show", "acme") == [of("acme", 1), of("acme", 0)]  # both, in the grace
    assert secrets("rotate", "acme", "--grace", "0") == [of("acme", 2)]
    assert secrets("show", "globex") == [of("globex", 0)]  # another tenant, untouched
