"""Limits per tool: how many calls may run at once and how fast they may start, across every
Hands of a deployment.

A limit has a rate (calls per second, with a burst: how many may start together after a
quiet spell) and a concurrency (calls running at once), either or both. A tool declares one
(``hands.tool(rate=..., burst=..., concurrency=...)``); the operator's settings
(``BRAINHANDS_TOOL_LIMITS``, ``parse_limit_rules``) replace a tool's own, and add limits of a
whole pool and of one tenant's calls of a tool. A call falls under every limit that applies
to it (``limits_of``) and starts only when each of them grants it (``shared.limiter``, in
Redis); until then its job waits in its Hands' hand (``hands.gate``).

This module is pure: what the limits are, and which apply to a call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from brainhands.shared.tenancy import NAME

WaitReason = Literal["rate", "concurrency"]

LATE_AT_MOST = 0.05
"""Seconds a call may go out after its turn under a rate; later (its process was starved of
CPU, its lease was still an earlier holder's) it is granted another turn. The rate's turns
are spaced by this share of a second more than ``1 / rate`` (5%): ``rate`` turns then span
one second and this, so calls each late by no more than it never start more than ``rate``
times within a second -- as the limited system counts them."""

WAITING_NOTES: dict[WaitReason, str] = {
    "rate": "waiting for rate limit",
    "concurrency": "waiting for a concurrency slot",
}
"""What a call's watchers are told while it waits, by what holds it back."""


class Limit(BaseModel):
    """A rate and/or a concurrency limit.

    ``rate``: calls that may start per second, on average. ``burst``: how many may start
    at once after a quiet spell (1: each call waits ``1 / rate`` after the previous one).
    ``concurrency``: calls that may run at once.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    rate: float | None = Field(default=None, gt=0)
    burst: int = Field(default=1, ge=1)
    concurrency: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _says_something(self) -> Limit:
        if self.rate is None and self.concurrency is None:
            raise ValueError("a limit needs a rate, a concurrency, or both")
        if self.rate is None and self.burst != 1:
            raise ValueError("a burst needs a rate")
        return self

    @property
    def interval_ms(self) -> float:
        """Milliseconds between two turns at the sustained rate (0: no rate): ``1 / rate``
        and ``LATE_AT_MOST`` of it more, so that calls each going out up to
        ``LATE_AT_MOST`` seconds after their turns never put more than ``rate`` starts in
        any one second."""
        return 0.0 if self.rate is None else 1000.0 * (1 + LATE_AT_MOST) / self.rate

    @property
    def tolerance_ms(self) -> float:
        """How far ahead of the sustained rate a burst may run (GCRA's tolerance)."""
        return self.interval_ms * (self.burst - 1)

    def rate_only(self) -> Limit | None:
        """This limit without its concurrency (None when it has no rate): what a later
        attempt of a call that holds its slots already must pass."""
        return None if self.rate is None else Limit(rate=self.rate, burst=self.burst)


def make_limit(
    *, rate: float | None, burst: int | None, concurrency: int | None, what: str
) -> Limit | None:
    """The limit a tool declares (None when it declares none); ``ValueError`` naming
    ``what`` when the values do not make one."""
    if rate is None and burst is None and concurrency is None:
        return None
    try:
        return Limit(rate=rate, burst=1 if burst is None else burst, concurrency=concurrency)
    except ValidationError as exc:
        raise ValueError(f"{what}: {_problems(exc)}") from None


@dataclass(frozen=True)
class Scope:
    """One limit a call falls under, and the name its state has in Redis (``tool:send``,
    ``pool:email``, ``tenant:acme/tool:send``)."""

    name: str
    limit: Limit


@dataclass(frozen=True)
class LimitRules:
    """The operator's limits: per tool (replacing the tool's own), per pool, and per
    (tenant, tool)."""

    tools: dict[str, Limit] = field(default_factory=dict)
    pools: dict[str, Limit] = field(default_factory=dict)
    tenant_tools: dict[tuple[str, str], Limit] = field(default_factory=dict)


def parse_limit_rules(text: str) -> LimitRules:
    """Read ``BRAINHANDS_TOOL_LIMITS``: a JSON object whose keys say what is limited --
    ``tool:NAME``, ``pool:NAME`` or ``tenant:TENANT/tool:NAME`` -- and whose values are
    limits (``{"rate": 10, "burst": 2, "concurrency": 5}``). Empty: no rules.
    ``ValueError`` saying which key is wrong and why."""
    if not text.strip():
        return LimitRules()
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ValueError('must be a JSON object, e.g. {"tool:send_email": {"rate": 10}}')
    rules = LimitRules()
    for key, value in raw.items():
        try:
            limit = Limit.model_validate(value)
        except ValidationError as exc:
            raise ValueError(f"{key!r}: {_problems(exc)}") from None
        kind, name = _selector(key)
        if kind == "tool":
            rules.tools[name] = limit
        elif kind == "pool":
            rules.pools[name] = limit
        else:
            tenant, _, tool = name.partition("/")
            rules.tenant_tools[(tenant, tool)] = limit
    return rules


def _selector(key: str) -> tuple[str, str]:
    """What ``key`` limits: ("tool", name), ("pool", name) or ("tenant", "TENANT/TOOL")."""
    kind, _, name = key.partition(":")
    if kind in ("tool", "pool") and name:
        return kind, name
    tenant, slash, rest = name.partition("/")
    if kind == "tenant" and slash and NAME.fullmatch(tenant) and rest.startswith("tool:"):
        tool = rest.removeprefix("tool:")
        if tool:
            return "tenant", f"{tenant}/{tool}"
    raise ValueError(f"{key!r}: a key is tool:NAME, pool:NAME or tenant:TENANT/tool:NAME")


def limits_of(
    tool: str, pool: str, tenant: str, *, declared: Limit | None, rules: LimitRules
) -> list[Scope]:
    """Every limit a call of ``tool`` (served by ``pool``, for ``tenant``) falls under: the
    tool's (the operator's, else its own ``declared``), the pool's, and the tenant's share
    of the tool. Empty: the call goes out at once."""
    scopes: list[Scope] = []
    own = rules.tools.get(tool, declared)
    if own is not None:
        scopes.append(Scope(f"tool:{tool}", own))
    if (pooled := rules.pools.get(pool)) is not None:
        scopes.append(Scope(f"pool:{pool}", pooled))
    if (share := rules.tenant_tools.get((tenant, tool))) is not None:
        scopes.append(Scope(f"tenant:{tenant}/tool:{tool}", share))
    return scopes


def rate_scopes(scopes: list[Scope]) -> list[Scope]:
    """``scopes`` that have a rate, with no concurrency: what another attempt of a call
    already holding its slots passes (each attempt is a call the limited system sees)."""
    kept = []
    for scope in scopes:
        limit = scope.limit.rate_only()
        if limit is not None:
            kept.append(Scope(scope.name, limit))
    return kept


RATE_WAKE_MAX = 1.0
"""Longest sleep of a call waiting for a rate grant before it asks again."""
SLOT_POLL = 0.1
"""Longest sleep of a call waiting for a concurrency slot: a slot freed in another Hands
sends no word (one freed in this Hands wakes its waiters at once)."""


def wake_in(reason: WaitReason, wait_ms: float) -> float:
    """Seconds a refused call sleeps before it asks again: until the limiter's next free
    time (``wait_ms``, by Redis's clock), at most ``RATE_WAKE_MAX`` for a rate and
    ``SLOT_POLL`` for a slot; never less than a millisecond (no tight loop)."""
    bound = RATE_WAKE_MAX if reason == "rate" else SLOT_POLL
    return max(0.001, min(bound, wait_ms / 1000))


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'limit'}: {e['msg']}"
        for e in exc.errors(include_url=False)
    )
