"""An operator's acts on a tenant: set its budget (its runs stopped at it resume), show it."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from datetime import UTC, datetime

from brainhands.client.direct import Client
from brainhands.shared.config import CommonSettings, load_settings
from brainhands.shared.store import TenantBudget
from brainhands.shared.vocabulary import TENANT_BUDGET_LIMITS


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
