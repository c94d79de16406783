"""How a webhook is signed: per tenant, over a timestamp, the idempotency key and the body.

Each tenant has its own secret, so a tenant that receives webhooks cannot forge one to
another tenant's receiver. The secrets are not stored: a tenant's secret of generation
``g`` is derived from the deployment's ``BRAINHANDS_WEBHOOK_SECRET`` (``tenant_secret``),
and the store keeps only each tenant's generation (``store.webhook_secrets``). Rotating
bumps the generation; during the grace the operator gives, posts carry a signature under
the previous secret as well, so a receiver can switch at its own pace.

The header, ``X-Brainhands-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>]``: each ``v1``
is the HMAC-SHA256 under one valid secret of ``<t>.<Idempotency-Key>.<body>``. A receiver
accepts a post when one ``v1`` matches its secret and ``t`` is within ``REPLAY_WINDOW`` of
its clock: a captured post cannot be replayed later, nor its body moved under another key.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

SIGNATURE_HEADER = "X-Brainhands-Signature"
REPLAY_WINDOW = 300
"""Seconds a receiver accepts a post's timestamp from its own clock (docs/api.md)."""


def tenant_secret(master: bytes, tenant: str, generation: int) -> str:
    """``tenant``'s webhook secret of ``generation``, as the operator hands it over
    (``brainhands webhook-secret show``) and the sweeper signs with it."""
    derived = hmac.new(master, f"webhook:{tenant}:{generation}".encode(), hashlib.sha256)
    return f"whsec_{derived.hexdigest()}"


def signature(secret: str, timestamp: int, idempotency_key: str, body: bytes) -> str:
    """The hex HMAC-SHA256 under ``secret`` of ``<timestamp>.<idempotency_key>.<body>``."""
    signed = f"{timestamp}.{idempotency_key}.".encode() + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signature_header(
    secrets: Sequence[str], timestamp: int, idempotency_key: str, body: bytes
) -> str:
    """``t=<timestamp>,v1=<signature>`` with one ``v1`` per secret (the current first)."""
    signed = (f"v1={signature(s, timestamp, idempotency_key, body)}" for s in secrets)
    return ",".join((f"t={timestamp}", *signed))
