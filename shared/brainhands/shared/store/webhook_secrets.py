"""Tenants' webhook secrets as the store keeps them: which generation signs, not the secret.

The secret of a generation is derived from the deployment's key (``webhook_signing``), so
the store holds nothing a reader of it could sign with.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select

from brainhands.shared.store import schema
from brainhands.shared.store.backends.base import Backend

_w = schema.webhook_secret


@dataclass(frozen=True)
class WebhookSecretState:
    """Which of ``tenant``'s webhook secrets are valid: ``generation``, and until
    ``previous_until`` the one before it too."""

    tenant: str
    generation: int = 0
    previous_until: float | None = None
    rotated_by: str | None = None
    rotated_at: float | None = None

    def generations(self, now: float) -> list[int]:
        """The generations that sign a post at ``now``, the current first."""
        previous = self.previous_until is not None and now < self.previous_until
        return [self.generation, self.generation - 1] if previous else [self.generation]


class WebhookSecrets:
    """The tenants' webhook secret generations, reached as ``store.webhook_secrets``."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def rotate(self, tenant: str, *, grace: float, by: str) -> WebhookSecretState:
        """Make ``tenant``'s next secret the current one; its current one keeps signing for
        ``grace`` seconds more (0: it stops at once)."""
        now = time.time()
        until = now + grace if grace > 0 else None
        rotated = (
            self._backend.insert(_w)
            .values(
                tenant=tenant, generation=1, previous_until=until, rotated_by=by, rotated_at=now
            )
            .on_conflict_do_update(
                index_elements=[_w.c.tenant],
                set_={
                    "generation": _w.c.generation + 1,
                    "previous_until": until,
                    "rotated_by": by,
                    "rotated_at": now,
                },
            )
        )
        async with self._backend.transaction() as conn:
            await conn.execute(rotated)
        return (await self.states([tenant]))[tenant]

    async def states(self, tenants: Iterable[str]) -> dict[str, WebhookSecretState]:
        """Each of ``tenants``' state (generation 0 for a tenant never rotated)."""
        wanted = sorted(set(tenants))
        async with self._backend.snapshot() as conn:
            rows = await conn.execute(select(_w).where(_w.c.tenant.in_(wanted)))
            found = {row.tenant: WebhookSecretState(**dict(row._mapping)) for row in rows}
        return {tenant: found.get(tenant, WebhookSecretState(tenant)) for tenant in wanted}
