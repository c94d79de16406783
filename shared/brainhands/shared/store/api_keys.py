"""API keys as the store keeps them: each bound to a tenant and to scopes, with the hash of
its secret (never the secret). What a key means, and how a request's key is checked, is the
API's business (``brainhands.api.keys``); this is only where the rows live.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import insert, select, update

from brainhands.shared.store import schema
from brainhands.shared.store.backends.base import Backend

_k = schema.api_key


@dataclass(frozen=True)
class ApiKeyRecord:
    id: str
    tenant: str
    name: str
    scopes: list[str]
    created_at: float
    revoked_at: float | None


class ApiKeys:
    """The API keys, reached as ``store.api_keys``."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def add(self, record: ApiKeyRecord, *, secret_hash: str) -> None:
        """Keep a new key, by the hash of its secret."""
        async with self._backend.transaction() as conn:
            await conn.execute(
                insert(_k).values(
                    id=record.id,
                    tenant=record.tenant,
                    name=record.name,
                    scopes=record.scopes,
                    secret_hash=secret_hash,
                    created_at=record.created_at,
                )
            )

    async def all(self) -> list[ApiKeyRecord]:
        """Every key, revoked ones too, by tenant then age."""
        query = select(_k.c.id, _k.c.tenant, _k.c.name, _k.c.scopes, _k.c.created_at)
        query = query.add_columns(_k.c.revoked_at).order_by(_k.c.tenant, _k.c.created_at)
        async with self._backend.snapshot() as conn:
            rows = await conn.execute(query)
            return [
                ApiKeyRecord(r.id, r.tenant, r.name, list(r.scopes), r.created_at, r.revoked_at)
                for r in rows
            ]

    async def revoke(self, key_id: str) -> bool:
        """Revoke the key ``key_id``; False if there is no such key still active."""
        async with self._backend.transaction() as conn:
            done = await conn.execute(
                update(_k)
                .where(_k.c.id == key_id, _k.c.revoked_at.is_(None))
                .values(revoked_at=time.time())
            )
        return done.rowcount == 1

    async def active(self) -> list[tuple[ApiKeyRecord, str]]:
        """Every key not revoked, each with the hash of its secret."""
        query = select(_k).where(_k.c.revoked_at.is_(None))
        async with self._backend.snapshot() as conn:
            rows = (await conn.execute(query)).all()
        return [
            (
                ApiKeyRecord(r.id, r.tenant, r.name, list(r.scopes), r.created_at, None),
                r.secret_hash,
            )
            for r in rows
        ]
