"""Retention: how long finished sessions are kept, and the sweeper's erasure of those past it.

A session is finished when no task of it is open and no submission queued or running; it
is kept ``days`` after its last change (its tenant's own number, else the deployment's),
then erased with all it owns (``store.erasures``), recorded as ``expired`` by
``sweeper``. 0 days: kept for ever. The sweeper erases a batch a pass, so a backlog of
millions drains without one long transaction.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from brainhands.shared.errors import NotFoundError, SessionRunning
from brainhands.shared.store import Store
from brainhands.shared.tenancy import check_tenant

log = logging.getLogger(__name__)

BATCH = 200
"""Sessions erased a pass, at most."""


@dataclass(frozen=True)
class Retention:
    """Days a finished session is kept: ``days`` by default, ``tenants``' own otherwise
    (0: for ever)."""

    days: float = 0.0
    tenants: dict[str, float] = field(default_factory=dict)

    @property
    def keeps_all(self) -> bool:
        return not self.days and not any(self.tenants.values())


def tenant_days(value: str) -> dict[str, float]:
    """``acme=7,globex=0`` as days by tenant; ``ValueError`` naming a bad entry."""
    days: dict[str, float] = {}
    for entry in filter(None, (e.strip() for e in value.split(","))):
        tenant, equals, number = (part.strip() for part in entry.partition("="))
        try:
            check_tenant(tenant)
            kept = float(number)
        except ValueError:
            kept = math.nan
        if not equals or not 0 <= kept < math.inf:
            raise ValueError(f"{entry!r} is not tenant=days (days a number, 0 or more)")
        days[tenant] = kept
    return days


async def expire(store: Store, retention: Retention, *, limit: int = BATCH) -> int:
    """Erase up to ``limit`` sessions past their retention; how many."""
    if retention.keeps_all:
        return 0
    due = await store.erasures.expired(retention.days, retention.tenants, limit=limit)
    erased = 0
    for session_id in due:
        try:  # work may have come in since it was read: then it is not finished any more
            await store.erasures.erase(session_id, principal="sweeper", reason="expired")
        except (SessionRunning, NotFoundError):
            continue
        erased += 1
    if erased:
        log.info(
            "erased %d sessions past their retention",
            erased,
            extra={"event": "sessions_expired", "sessions": erased},
        )
    return erased
