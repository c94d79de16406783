"""``brainhands session delete`` on the embedded store, the command's ``main`` run in this
process: a finished session is erased and says what went; one with work open is refused
with the reason unless ``--cancel``; an unknown one is named."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from brainhands.cli import main
from brainhands.shared.store import Store, schema

pytestmark = pytest.mark.integration


async def sessions(tmp_path: Path, open_work: str) -> None:
    store = await Store.open(f"sqlite:///{tmp_path}/brainhands.db", upgrade=True)
    try:
        for key in ("acme/done", open_work):
            await store.create_session(key, compat="v1")
        async with store.backend.transaction() as conn:
            await conn.execute(
                schema.submission.insert().values(
                    id="sub-1",
                    session_id=open_work,
                    request_id="r1",
                    status="queued",
                    input={"text": "hi"},
                    created_at=0.0,
                    updated_at=0.0,
                )
            )
    finally:
        await store.close()


def test_a_session_is_erased_from_the_command_line(
    embedded_deployment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(sessions(embedded_deployment, "acme/busy"))

    def run(*args: str) -> tuple[int, str, str]:
        code = main(["session", "delete", *args, "--tenant", "acme"])
        said = capsys.readouterr()
        return code, said.out, said.err

    code, out, err = run("done")
    assert code == 0, err
    assert out == "session done erased: 1 session\n"
    code, _, err = run("busy")
    assert code == 1 and "has work open" in err and "nothing erased" in err
    code, out, _ = run("busy", "--cancel")
    assert code == 0 and out == "session busy erased: 1 submission, 1 session\n"
    code, _, err = run("done")
    assert code != 0 and "done does not exist" in err
