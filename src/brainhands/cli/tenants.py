"""An operator's acts on a tenant: set its budget (its runs stopped at it resume), show it;
show or rotate its webhook secret."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime

from brainhands.client.direct import Client
from brainhands.shared.config import CommonSettings, load_settings
from brainhands.shared.errors import ConfigurationError
from brainhands.shared.store import TenantBudget
from brainhands.shared.tenancy import check_tenant
from brainhands.shared.vocabulary import TENANT_BUDGET_LIMITS
from brainhands.shared.webhook_signing import tenant_secret


async def budget(args: argparse.Namespace) -> int:
    async with await Client.from_settings(load_settings(CommonSettings), operator=True) as client:
        resumed = None
        if args.action == "set":
            limits = {n: getattr(args, n) for n in TENANT_BUDGET_LIMITS}
            done = await client.set_tenant_budget(
                args.tenant, **{n: v for n, v in limits.items() if v is not None}
            )
            found: TenantBudget | None = done.budget
            resumed = done.resumed
        else:
            found = await client.tenant_budget(args.tenant)
    if found is None:
        print(f"tenant {args.tenant} has no budget", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(asdict(found), indent=2))
    else:
        since = datetime.fromtimestamp(found.created_at, UTC).isoformat(timespec="seconds")
        print(f"tenant {found.tenant}: budget {json.dumps(found.limits)} (set by {found.set_by})")
        print(f"  used since {since}: {json.dumps(found.used)}")
    if resumed is not None:
        print(f"  stopped runs sent the raise: {resumed}")
    return 0


async def webhook_secret(args: argparse.Namespace) -> int:
    """Print the tenant's valid webhook secrets (the current first) for its receiver, after
    a rotation if asked: what the operator hands the tenant."""
    settings = load_settings(CommonSettings)
    if settings.webhook_secret is None:
        raise ConfigurationError("BRAINHANDS_WEBHOOK_SECRET is not set: no webhooks are posted")
    if args.grace < 0:
        print("--grace: seconds, 0 or more", file=sys.stderr)
        return 2
    tenant = check_tenant(args.tenant)
    master = settings.webhook_secret.get_secret_value().encode()
    async with await Client.from_settings(settings, operator=True) as client:
        secrets = client.store.webhook_secrets
        if args.action == "rotate":
            state = await secrets.rotate(tenant, grace=args.grace, by=settings.identity)
        else:
            state = (await secrets.states([tenant]))[tenant]
    now = time.time()
    for generation in state.generations(now):
        current = generation == state.generation
        until = "" if current else f" (previous: signs until {_iso(state.previous_until)})"
        print(f"{tenant_secret(master, tenant, generation)}{until}")
    return 0


def _iso(at: float | None) -> str:
    return "" if at is None else datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")
