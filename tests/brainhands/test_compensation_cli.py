"""``brainhands compensation retry|abandon``, run as an operator runs it: a real process, on
the embedded store, against a trip whose undo failed (made in-process as in
``tests.brain.test_undo_acts``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from brainhands.shared.store import Store
from brainhands.shared.vocabulary import compensation_signal
from tests.brain.test_undo_acts import Trip
from tests.brainhands.test_cli import brainhands

pytestmark = pytest.mark.integration


async def test_an_operator_retries_a_failed_undo_from_the_command_line(
    rabbitmq_url: str, namespace: str, tmp_path: Path
) -> None:
    env = {"BRAINHANDS_RABBITMQ_URL": rabbitmq_url, "BRAINHANDS_NAMESPACE": namespace}
    assert brainhands("migrate", cwd=tmp_path, env=env).returncode == 0
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'brainhands.db'}", upgrade=False)
    try:
        trip = Trip(store)
        root, _ = await trip.stuck()

        def compensation(*args: str) -> tuple[int, str, str]:
            done = brainhands("compensation", *args, cwd=tmp_path, env=env)
            return done.returncode, done.stdout, done.stderr

        code, _, err = compensation("retry", "s1", "no-such-task", "--reason", "fixed")
        assert code == 1 and "not waiting" in err and "nothing sent" in err
        code, _, err = compensation("retry", "s1", root.id)
        assert code == 2 and "--reason" in err  # the reason is required
        code, out, err = compensation("retry", "s1", root.id, "--reason", "fixed", "--id", "a1")
        assert code == 0, err
        assert f"retry of task {root.id}'s failed undo in session s1: sent" in out
        code, out, _ = compensation("retry", "s1", root.id, "--reason", "fixed", "--id", "a1")
        assert code == 0 and "already sent earlier: counted once" in out

        inbox = await store.inbox.of_session("s1")
        [act] = [r for r in inbox if r.name == compensation_signal(root.id)]  # one act, not two
        sent = act.body["payload"]
        assert (sent["action"], sent["reason"], sent["by"]) == ("retry", "fixed", "operator")
        await trip.passes()
        retried = await trip.hands.run_one()  # the failed undo, again, under a new id
        assert retried.operation_id.endswith("/compensate/retry-1")
    finally:
        await store.close()
