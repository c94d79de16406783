"""API keys: each bound to a tenant and to scopes, kept hashed.

A key reads ``bh_<id>_<secret>``; the store keeps the id, the tenant, the scopes and the
SHA-256 of the secret, never the secret (a 32-byte random secret needs no slow hash). The
key is shown once, when it is created.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Literal

from brainhands.shared.errors import NotFoundError
from brainhands.shared.store import ApiKeyRecord, Store
from brainhands.shared.tenancy import check_tenant

Scope = Literal["read", "submit", "tasks", "signal", "approve", "admin", "operator"]
SCOPES: tuple[Scope, ...] = (
    "read",
    "submit",
    "tasks",
    "signal",
    "approve",
    "admin",
    "operator",
)
"""``read`` sessions, ``submit`` (and cancel) submissions, ``tasks``: with ``submit``,
submit a task kind's raw ``input`` (an agent-only key sends messages to agents alone),
``signal`` a waiting task,
``approve`` (or deny) calls and decide signals declared as decisions, ``admin``: all of
them. ``operator``: acts on tenants rather than within one (a tenant's budget) and reads
the deployment's metrics: a tenant's own keys, ``admin`` ones too, never may."""

TENANT_SCOPES = frozenset(SCOPES) - {"operator"}
"""What a tenant's ``admin`` key may do: everything within its tenant."""
PREFIX = "bh_"


@dataclass(frozen=True)
class Principal:
    """Who a request acts for."""

    key_id: str
    tenant: str
    name: str
    scopes: frozenset[str]
    expires_at: float | None = None
    """When the credential it was read from ends (a stream token's), besides its key."""

    def may(self, scope: Scope) -> bool:
        return scope in self.scopes or ("admin" in self.scopes and scope in TENANT_SCOPES)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


async def create_key(
    store: Store, *, tenant: str, scopes: list[Scope], name: str
) -> tuple[ApiKeyRecord, str]:
    """A new key for ``tenant``; returns its record and the key itself (shown only now)."""
    check_tenant(tenant)
    unknown = set(scopes) - set(SCOPES)
    if unknown or not scopes:
        raise ValueError(f"scopes must be some of {', '.join(SCOPES)}, not {sorted(unknown)}")
    key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    record = ApiKeyRecord(key_id, tenant, name, sorted(set(scopes)), time.time(), None)
    await store.api_keys.add(record, secret_hash=_digest(secret))
    return record, f"{PREFIX}{key_id}_{secret}"


async def list_keys(store: Store) -> list[ApiKeyRecord]:
    return await store.api_keys.all()


async def revoke_key(store: Store, key_id: str) -> None:
    if not await store.api_keys.revoke(key_id):
        raise NotFoundError(f"no active API key {key_id!r}")


class VerifiedKeys:
    """Every key's record, read from the store at most once per ``ttl`` seconds for the
    whole process, so that checking a request's key reads nothing: a revoked key stops
    working within ``ttl``, a new one works within ``ttl``, and keys that do not exist
    (random ``bh_x_y`` tokens sent in bulk) cost no store read and push nothing out."""

    def __init__(self, store: Store, ttl: float = 2.0) -> None:
        self.store = store
        self.ttl = ttl
        self._records: dict[str, tuple[Principal, str]] = {}
        self._read_at = -float("inf")
        self._reading: asyncio.Lock = asyncio.Lock()

    async def verify(self, key: str) -> Principal | None:
        """The principal of ``key``, or None for a malformed, unknown or revoked key."""
        key_id, _, secret = key.removeprefix(PREFIX).partition("_")
        if not key.startswith(PREFIX) or not key_id or not secret:
            return None
        if time.monotonic() - self._read_at >= self.ttl:
            await self._refresh()
        found = self._records.get(key_id)
        if found is None or not hmac.compare_digest(found[1], _digest(secret)):
            return None
        return found[0]

    async def active(self, key_id: str) -> Principal | None:
        """The principal of the key ``key_id`` if it is active (a stream token's key)."""
        if time.monotonic() - self._read_at >= self.ttl:
            await self._refresh()
        found = self._records.get(key_id)
        return None if found is None else found[0]

    async def _refresh(self) -> None:
        async with self._reading:  # one read for every request that found the table old
            if time.monotonic() - self._read_at < self.ttl:
                return
            self._records = {
                r.id: (Principal(r.id, r.tenant, r.name, frozenset(r.scopes)), secret_hash)
                for r, secret_hash in await self.store.api_keys.active()
            }
            self._read_at = time.monotonic()
