"""The limits per tool as pure data: what a limit may say, how the operator's rules read,
which limits a call falls under, and how long a refused call sleeps."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from brainhands.hands import tool
from brainhands.hands.settings import HandsSettings
from brainhands.shared.config import load_settings
from brainhands.shared.errors import ConfigurationError
from brainhands.shared.limits import (
    LATE_AT_MOST,
    RATE_WAKE_MAX,
    SLOT_POLL,
    Limit,
    LimitRules,
    Scope,
    limits_of,
    make_limit,
    parse_limit_rules,
    rate_scopes,
    wake_in,
)
from brainhands.shared.tools import registry


class Nothing(BaseModel):
    pass


def test_a_limit_says_a_rate_or_a_concurrency() -> None:
    # A turn every 1/rate, 5% more: calls up to LATE_AT_MOST late stay within the rate.
    assert LATE_AT_MOST == 0.05
    assert Limit(rate=20).interval_ms == pytest.approx(52.5)
    assert Limit(rate=10, burst=3).tolerance_ms == pytest.approx(2 * 105)  # two turns ahead
    assert Limit(concurrency=3).interval_ms == 0
    with pytest.raises(ValueError, match="needs a rate, a concurrency, or both"):
        Limit()
    with pytest.raises(ValueError, match="a burst needs a rate"):
        Limit(concurrency=2, burst=4)
    with pytest.raises(ValueError, match="greater than 0"):
        Limit(rate=0)
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        Limit(concurrency=0)


def test_a_tool_declares_its_limit_and_a_bad_one_is_refused_naming_the_tool(
    own_registry: None,
) -> None:
    assert make_limit(rate=None, burst=None, concurrency=None, what="t") is None

    @tool(pool="limited", rate=5, burst=2, concurrency=3)
    async def throttled(args: Nothing, ctx: Any) -> None: ...

    assert registry.get("throttled").limit == Limit(rate=5, burst=2, concurrency=3)
    with pytest.raises(ValueError, match=r"tool .*too_fast: rate: Input should be greater than 0"):

        @tool(rate=-1)
        async def too_fast(args: Nothing, ctx: Any) -> None: ...


def test_the_operators_rules_read_tools_pools_and_tenants_shares() -> None:
    rules = parse_limit_rules(
        '{"tool:send": {"rate": 10, "burst": 2}, "pool:email": {"concurrency": 20},'
        ' "tenant:acme/tool:send": {"rate": 1}, "tool:mail.send": {"concurrency": 1}}'
    )
    assert rules.tools == {"send": Limit(rate=10, burst=2), "mail.send": Limit(concurrency=1)}
    assert rules.pools == {"email": Limit(concurrency=20)}
    assert rules.tenant_tools == {("acme", "send"): Limit(rate=1)}
    assert parse_limit_rules("  ") == LimitRules()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{", "not JSON"),
        ("[]", "must be a JSON object"),
        ('{"send": {"rate": 1}}', "'send': a key is tool:NAME, pool:NAME or tenant:"),
        ('{"tenant:acme/send": {"rate": 1}}', "a key is tool:NAME"),
        ('{"tenant:a/b/tool:send": {"rate": 1}}', "a key is tool:NAME"),
        ('{"tool:send": {}}', "'tool:send': .*needs a rate, a concurrency, or both"),
        ('{"tool:send": {"rate": 1, "per": 2}}', "'tool:send': per: Extra inputs"),
    ],
)
def test_a_wrong_rule_says_which_key_and_why(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_limit_rules(text)


def test_invalid_limits_fail_at_start_up_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BRAINHANDS_TOOL_LIMITS", '{"tool:send": {"rate": "fast"}}')
    with pytest.raises(ConfigurationError, match=r"BRAINHANDS_TOOL_LIMITS: .*'tool:send': rate"):
        load_settings(HandsSettings)
    monkeypatch.setenv("BRAINHANDS_TOOL_LIMITS", '{"pool:email": {"concurrency": 4}}')
    monkeypatch.setenv("BRAINHANDS_LIMIT_WAITING", "-1")
    with pytest.raises(ConfigurationError, match="BRAINHANDS_LIMIT_WAITING"):
        load_settings(HandsSettings)
    monkeypatch.setenv("BRAINHANDS_LIMIT_WAITING", "8")
    assert load_settings(HandsSettings).limit_rules.pools == {"email": Limit(concurrency=4)}


def test_a_call_falls_under_its_tools_pools_and_tenants_limits() -> None:
    declared = Limit(rate=5)
    rules = LimitRules(
        pools={"email": Limit(concurrency=20)},
        tenant_tools={("acme", "send"): Limit(rate=1)},
    )
    assert limits_of("send", "email", "acme", declared=declared, rules=rules) == [
        Scope("tool:send", declared),
        Scope("pool:email", Limit(concurrency=20)),
        Scope("tenant:acme/tool:send", Limit(rate=1)),
    ]
    # Another tenant has no share of its own; another pool no pool limit.
    assert limits_of("send", "other", "zed", declared=declared, rules=rules) == [
        Scope("tool:send", declared)
    ]
    # The operator's word replaces the tool's own.
    replaced = LimitRules(tools={"send": Limit(concurrency=2)})
    assert limits_of("send", "email", "acme", declared=declared, rules=replaced) == [
        Scope("tool:send", Limit(concurrency=2))
    ]
    assert limits_of("free", "email", "acme", declared=None, rules=LimitRules()) == []


def test_a_later_attempt_passes_the_rates_only() -> None:
    scopes = [
        Scope("tool:send", Limit(rate=5, burst=2, concurrency=3)),
        Scope("pool:email", Limit(concurrency=20)),
    ]
    assert rate_scopes(scopes) == [Scope("tool:send", Limit(rate=5, burst=2))]


def test_a_refused_call_sleeps_until_the_next_free_time_bounded() -> None:
    assert wake_in("rate", 37) == pytest.approx(0.037)
    assert wake_in("rate", 60_000) == RATE_WAKE_MAX
    assert wake_in("concurrency", 9_000) == SLOT_POLL  # a slot freed elsewhere sends no word
    assert wake_in("rate", 0) == 0.001  # never a tight loop
