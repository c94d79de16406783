"""A webhook's signature: one secret per tenant, over the timestamp, the idempotency key and
the body, with the previous secret's signature as well during a rotation; and the
receiver's check that docs/api.md shows, run here over forged, moved and replayed posts."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from brainhands.shared.store import WebhookSecretState
from brainhands.shared.webhook_signing import (
    REPLAY_WINDOW,
    signature,
    signature_header,
    tenant_secret,
)
from tests.helpers.markdown import python_blocks

MASTER = b"the-deployment-key"
PAGE = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_each_tenant_and_generation_has_its_own_secret() -> None:
    secrets = {tenant_secret(MASTER, t, g) for t in ("acme", "globex") for g in (0, 1, 2)}
    assert len(secrets) == 6
    assert tenant_secret(MASTER, "acme", 0) == tenant_secret(MASTER, "acme", 0)  # derived
    assert tenant_secret(b"another-deployment", "acme", 0) != tenant_secret(MASTER, "acme", 0)
    assert all(s.startswith("whsec_") and len(s) == 6 + 64 for s in secrets)


def test_the_signature_covers_the_timestamp_the_key_and_the_body() -> None:
    secret, other_tenants = tenant_secret(MASTER, "acme", 0), tenant_secret(MASTER, "globex", 0)
    signed = signature(secret, 1700000000, "sub-1", b'{"status":"answered"}')
    assert len(signed) == 64
    for other in (
        signature(other_tenants, 1700000000, "sub-1", b'{"status":"answered"}'),
        signature(secret, 1700000001, "sub-1", b'{"status":"answered"}'),
        signature(secret, 1700000000, "sub-2", b'{"status":"answered"}'),  # body moved
        signature(secret, 1700000000, "sub-1", b'{"status":"failed"}'),
    ):
        assert other != signed


def test_the_header_carries_one_signature_per_valid_secret() -> None:
    old, new = tenant_secret(MASTER, "acme", 0), tenant_secret(MASTER, "acme", 1)
    header = signature_header([new, old], 1700000000, "sub-1", b"{}")
    assert header == (
        f"t=1700000000,v1={signature(new, 1700000000, 'sub-1', b'{}')},"
        f"v1={signature(old, 1700000000, 'sub-1', b'{}')}"
    )


def test_the_previous_secret_signs_during_the_grace_only() -> None:
    never = WebhookSecretState("acme")
    assert never.generations(time.time()) == [0]
    rotated = WebhookSecretState("acme", generation=3, previous_until=1000.0)
    assert rotated.generations(999.0) == [3, 2]
    assert rotated.generations(1000.0) == [3]
    assert WebhookSecretState("acme", generation=3).generations(0.0) == [3]


@pytest.fixture(scope="module")
def verified() -> Any:
    """The receiver's check as docs/api.md writes it (its first block that defines it)."""
    [block] = [b for b in python_blocks(PAGE) if "def verified(" in b.code]
    source = block.code[block.code.index("def verified(") :].split("\n\n\n")[0]
    namespace: dict[str, Any] = {}
    exec("import hashlib, hmac, time\n" + source, namespace)
    return namespace["verified"]


def post(secrets: list[str], at: int, key: str = "sub-1", body: bytes = b"{}") -> Any:
    headers = {
        "Idempotency-Key": key,
        "X-Brainhands-Signature": signature_header(secrets, at, key, body),
    }
    return headers, body


def test_the_documented_receiver_accepts_a_fresh_post_and_refuses_the_rest(
    verified: Any,
) -> None:
    acme, globex = tenant_secret(MASTER, "acme", 0), tenant_secret(MASTER, "globex", 0)
    now = int(time.time())
    headers, body = post([acme], now)
    assert verified(acme, headers, body)
    assert not verified(globex, headers, body)  # another tenant's receiver
    assert not verified(acme, headers, body + b" ")
    assert not verified(acme, {**headers, "Idempotency-Key": "sub-2"}, body)
    assert verified(acme, headers, body, now=now + REPLAY_WINDOW)
    assert not verified(acme, headers, body, now=now + REPLAY_WINDOW + 1)  # a replay
    assert not verified(acme, headers, body, now=now - REPLAY_WINDOW - 1)
    assert not verified(acme, {"Idempotency-Key": "sub-1"}, body)  # unsigned
    forged = {**headers, "X-Brainhands-Signature": f"t={now + 3600},v1=" + "0" * 64}
    assert not verified(acme, forged, body)


def test_a_receiver_on_either_secret_accepts_a_post_made_during_a_rotation(
    verified: Any,
) -> None:
    old, new = tenant_secret(MASTER, "acme", 0), tenant_secret(MASTER, "acme", 1)
    now = int(time.time())
    headers, body = post([new, old], now)
    assert verified(old, headers, body) and verified(new, headers, body)
    after, _ = post([new], now)  # the grace is over
    assert verified(new, after, body) and not verified(old, after, body)
