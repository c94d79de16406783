"""Task and operation ids are rooted in the session's random uid: two deployments serving the
same session id never hand an external service the same key."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from brainhands.brain import Call, Dispatch
from brainhands.brain.ids import CHOSEN_OPERATION_ID_MAX, derive_operation_id, derive_task_id
from brainhands.examples.notify.email_client import EmailClient
from tests.helpers.brains import BrainHarness
from tests.helpers.harness import start_email_service
from tests.helpers.processes import spawn_email_hands

UID, OTHER_UID = "a" * 32, "b" * 32
RECIPIENTS = ["ana@example.com", "bo@example.com"]
PAYMENTS = {
    "calls": [
        {"tool": "send_safe", "arguments": {"to": RECIPIENTS[0]}},
        {"tool": "send_safe", "arguments": {"to": RECIPIENTS[1]}, "operation_id": "pay-1"},
    ]
}
"""Two calls to the email service: one under the default key, one under a key the phase chose."""


def test_task_ids_differ_between_sessions_and_repeat_for_the_same_commit() -> None:
    ids = {
        derive_task_id(uid, version, n)
        for uid in (UID, OTHER_UID)
        for version, n in [(1, 0), (1, 1), (2, 0)]
    }

    assert len(ids) == 6
    assert derive_task_id(UID, 2, 1) == derive_task_id(UID, 2, 1)


def test_task_ids_are_the_uuid5_earlier_builds_derived() -> None:
    # A phase run again after a deploy must derive the ids its first run's build derived.
    for uid in (UID, OTHER_UID, uuid.uuid4().hex):
        for version, n in [(1, 0), (17, 3), (123456, 250)]:
            name = f"{uid}/{version}/{n}"
            assert derive_task_id(uid, version, n) == uuid.uuid5(uuid.NAMESPACE_URL, name).hex


def test_a_chosen_operation_id_is_scoped_by_the_session_uid() -> None:
    assert derive_operation_id(UID, "t1") == "op-t1"
    assert derive_operation_id(UID, "t1", "pay-1") == f"{UID}:pay-1"
    assert derive_operation_id(OTHER_UID, "t2", "pay-1") == f"{OTHER_UID}:pay-1"


@pytest.mark.parametrize("chosen", ["", "x" * (CHOSEN_OPERATION_ID_MAX + 1)])
def test_a_chosen_operation_id_that_cannot_be_kept_scoped_is_refused(chosen: str) -> None:
    with pytest.raises(ValueError, match="operation_id"):
        Call("send_safe", {}, operation_id=chosen)
    with pytest.raises(ValueError, match="operation_id"):
        Dispatch("send_safe", {}, then="read", operation_id=chosen)
    # Scoped, the longest one allowed fills the store's 64-character key exactly.
    assert len(derive_operation_id(UID, "t", "x" * CHOSEN_OPERATION_ID_MAX)) == 64


@pytest.mark.integration
@pytest.mark.timeout(120)
async def test_two_deployments_serving_one_session_id_send_distinct_keys(
    brains: BrainHarness, other_brains: BrainHarness, tmp_path: Path
) -> None:
    # Each deployment has its own store and namespace, Brain and Hands; both serve a session
    # "cust-42" and make the same two calls to one shared email service.
    service, email_url = await start_email_service(tmp_path)
    deployments = [brains, other_brains]
    try:
        for deployment in deployments:
            deployment.start_brain()
            deployment.processes.append(
                spawn_email_hands(
                    env=deployment.settings(TEST_EMAIL_URL=email_url),
                    log=deployment.tmp_path / "hands.log",
                )
            )
            await deployment.submit("calls", PAYMENTS, session_id="cust-42")
        answers = [await d.answer(session_id="cust-42", within=60) for d in deployments]
        ledger = await EmailClient(email_url).ledger()
    finally:
        service.kill()
        service.wait()

    # Four calls, four keys, four emails: nothing was deduplicated into another's send.
    sends = {s["key"]: s for s in ledger["sends"]}
    assert len(sends) == 4 and all(s["attempts"] == 1 for s in sends.values())
    keys_by_deployment = []
    for deployment, answer in zip(deployments, answers, strict=True):
        assert answer.status == "answered"
        uid = (await deployment.store.load("cust-42")).session.uid
        _, operations = await deployment.store.queries.history("cust-42")
        keys = {o.operation_id for o in operations}
        assert f"{uid}:pay-1" in keys and len(keys) == 2
        assert keys <= sends.keys()
        # Each deployment got the receipts of its own sends.
        receipts = [call["result"]["result"]["receipt"] for call in answer.answer]
        assert {sends[k]["recipient"]: sends[k]["receipt"] for k in keys} == dict(
            zip(RECIPIENTS, receipts, strict=True)
        )
        keys_by_deployment.append(keys)
    assert not keys_by_deployment[0] & keys_by_deployment[1]
