"""Webhooks as an attacker with a ``submit`` key uses them: to reach the deployment's private
network, to learn what listens there from the failures, and to forge or replay posts to
another tenant's receiver. Each is refused."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from brainhands.api.views import session_document
from brainhands.shared.destinations import TOLD_REFUSED
from brainhands.shared.errors import RefusedDestination
from brainhands.shared.webhook_signing import signature_header, tenant_secret
from tests.helpers.api import key_for, start_api
from tests.helpers.brains import BrainHarness
from tests.helpers.polling import eventually
from tests.helpers.receivers import NotHttp, Receiver, closed_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SECRET = "the-deployment-webhook-key"

INTERNAL = [
    "http://127.0.0.1:{port}/",
    "http://localhost:{port}/",
    "http://0.0.0.0:{port}/",
    "http://[::1]:{port}/",
    "http://2130706433:{port}/",
    "http://127.1:{port}/",
    "http://0x7f.1:{port}/",
    "http://[::ffff:127.0.0.1]:{port}/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[fe80::1]/",
    "http://10.0.0.1:5432/",
    "http://192.168.1.1/",
    "http://[fd00::1]/",
    "http://224.0.0.1/",
    "http://0177.0.0.1:{port}/",
    "http://0:{port}/",
    "http://redis.localhost:{port}/",
]
"""Refused at submission: addresses in any spelling, and localhost. A name is resolved and
checked at each try to post (the next test)."""


async def test_an_internal_destination_is_refused_at_submission_in_any_spelling(
    brains: BrainHarness,
) -> None:
    with Receiver() as allowed, Receiver() as unlisted:
        api = await start_api(
            brains,
            BRAINHANDS_WEBHOOK_SECRET=SECRET,
            BRAINHANDS_WEBHOOK_ALLOW=f"127.0.0.1:{allowed.port}",
        )
        key = await key_for(brains, "acme", "read", "submit", "tasks")
        async with api.http(key) as http:
            for n, template in enumerate(INTERNAL):
                url = template.format(port=unlisted.port)
                body = {"input": {"kind": "steps", "input": {}}, "callback_url": url}
                answer = await http.post(f"/sessions/s{n}/submissions", json=body)
                assert answer.status_code == 422, (url, answer.text)
                # The same words whatever the address was, or whether it resolved at all.
                assert answer.json()["detail"] == TOLD_REFUSED, url
                assert (await http.get(f"/sessions/s{n}")).status_code == 404  # nothing kept
            body = {"input": {"kind": "steps", "input": {}}, "callback_url": allowed.url}
            answer = await http.post("/sessions/ok/submissions", json=body)
            assert answer.status_code == 200, answer.text  # the operator allows this one
        assert unlisted.posts == []


def statuses(document: dict[str, Any]) -> dict[str, Any]:
    [submission] = document["submissions"]
    return {k: submission[k] for k in ("callback_error", "callback_attempts")}


async def test_the_sweeper_posts_to_allowed_receivers_only_and_tells_the_tenant_no_more(
    brains: BrainHarness,
) -> None:
    with (
        Receiver() as allowed,
        Receiver() as unlisted,
        Receiver(status=500) as failing,
        NotHttp() as not_http,
    ):
        closed = closed_port()
        allow = ",".join(f"127.0.0.1:{p}" for p in (allowed.port, failing.port, not_http.port))
        brains.start_brain(
            BRAINHANDS_WEBHOOK_SECRET=SECRET, BRAINHANDS_WEBHOOK_ALLOW=f"{allow},127.0.0.1:{closed}"
        )
        # Submitted past the API's check (a name passes it, as one rebound later would), so
        # the sweeper's own check is what refuses.
        urls = {
            "allowed": allowed.url,
            "unlisted": unlisted.url,
            "spelled": f"http://2130706433:{unlisted.port}/",
            "mapped": f"http://[::ffff:127.0.0.1]:{unlisted.port}/",
            "named": f"http://localhost:{unlisted.port}/",  # resolved by the sweeper
            "unresolved": "http://no-such-service.invalid/",  # a cluster's name elsewhere
            "failing": failing.url,
            "not-http": f"http://127.0.0.1:{not_http.port}/",
            "closed": f"http://127.0.0.1:{closed}/",
        }
        async with brains.client(tenant="acme") as acme:
            handles = {
                name: await acme.submit(name, {"kind": "steps", "input": {}}, callback_url=url)
                for name, url in urls.items()
            }
            await asyncio.gather(*(h.result(timeout=60) for h in handles.values()))

            async def seen(name: str) -> dict[str, Any]:
                return session_document(await acme.session(name))

            async def all_tried() -> bool:
                docs = [await seen(name) for name in urls]
                return all(statuses(d)["callback_attempts"] >= 1 for d in docs)

            await eventually(all_tried, within=30, what="every webhook tried")
            told = {name: statuses(await seen(name))["callback_error"] for name in urls}
            assert told == {
                "allowed": None,
                "unlisted": RefusedDestination.TOLD,
                "spelled": RefusedDestination.TOLD,
                "mapped": RefusedDestination.TOLD,
                "named": RefusedDestination.TOLD,
                "unresolved": RefusedDestination.TOLD,  # as a private one: no DNS oracle
                "failing": "delivery failed (HTTP status 500)",
                "not-http": "delivery failed",  # open but not HTTP ...
                "closed": "delivery failed",  # ... and closed: alike
            }
            for name in urls:  # no transport error anywhere in the tenant's view
                document = json.dumps(await seen(name))
                for oracle in ("Error", "Connect", "Protocol", "answered 5", "loopback"):
                    assert oracle not in document, (name, oracle)
            refused = await seen("unlisted")
            assert statuses(refused)["callback_attempts"] == 1  # given up at once
        assert unlisted.posts == []
        [(_, body, _)] = allowed.posts
        assert json.loads(body)["session_id"] == "allowed"


async def test_each_tenant_signs_with_its_own_secret_and_both_sign_during_a_rotation(
    brains: BrainHarness,
) -> None:
    master = SECRET.encode()
    with Receiver() as acme_hook, Receiver() as globex_hook:
        brains.start_brain(
            BRAINHANDS_WEBHOOK_SECRET=SECRET, BRAINHANDS_WEBHOOK_ALLOW="127.0.0.1/32"
        )
        rotated = await brains.store.webhook_secrets.rotate("acme", grace=600, by="ops")
        assert rotated.generation == 1
        for tenant, hook in (("acme", acme_hook), ("globex", globex_hook)):
            async with brains.client(tenant=tenant) as client:
                handle = await client.submit(
                    "order-1", {"kind": "steps", "input": {}}, callback_url=hook.url
                )
                await handle.result(timeout=60)
        await eventually(lambda: bool(acme_hook.posts and globex_hook.posts), within=30)
    [(acme_headers, acme_body, _)] = acme_hook.posts
    [(globex_headers, globex_body, _)] = globex_hook.posts
    stamp = int(acme_headers["X-Brainhands-Signature"].split(",")[0].removeprefix("t="))
    key = acme_headers["Idempotency-Key"]
    new, old = tenant_secret(master, "acme", 1), tenant_secret(master, "acme", 0)
    # acme's post carries the new secret's signature and, in the grace, the old one's.
    assert acme_headers["X-Brainhands-Signature"] == signature_header(
        [new, old], stamp, key, acme_body
    )
    # globex's is signed with globex's secret only: acme's receiver would refuse it, and
    # acme, who knows its own secret, cannot sign a post globex's receiver accepts.
    stamp = int(globex_headers["X-Brainhands-Signature"].split(",")[0].removeprefix("t="))
    key = globex_headers["Idempotency-Key"]
    globex = tenant_secret(master, "globex", 0)
    assert globex_headers["X-Brainhands-Signature"] == signature_header(
        [globex], stamp, key, globex_body
    )
    assert globex not in (new, old)
    forged = signature_header([new, old], stamp, key, globex_body)
    assert forged != globex_headers["X-Brainhands-Signature"]
