"""``brainhands schedule create|list|pause|resume|delete`` on the embedded store, the
command's ``main`` run in this process (a process per command costs seconds each); a bad
cron expression is refused with its reason."""

from __future__ import annotations

import json

import pytest

from brainhands.cli import main

pytestmark = pytest.mark.integration


@pytest.mark.usefixtures("embedded_deployment")
def test_a_schedule_is_created_listed_paused_resumed_and_deleted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def run(*args: str) -> tuple[int, str, str]:
        code = main(["schedule", *args, "--tenant", "acme"])
        said = capsys.readouterr()
        return code, said.out, said.err

    code, out, err = run(
        "create", "nightly", "--kind", "report", "--input", '{"scope": "all"}',
        "--cron", "0 3 * * *", "--tz", "Europe/Paris", "--missed", "run_one", "--json",
    )  # fmt: skip
    assert code == 0, err
    made = json.loads(out)
    assert (made["tenant"], made["input"], made["missed"]) == ("acme", {"scope": "all"}, "run_one")
    code, _, err = run("create", "bad", "--kind", "report", "--cron", "0 3 * *")
    assert code == 2 and "cron '0 3 * *'" in err
    code, out, _ = run("pause", "nightly")
    assert code == 0 and "nightly  paused  cron '0 3 * * *' Europe/Paris  kind report" in out
    code, out, _ = run("resume", "nightly")
    assert code == 0 and "nightly  active" in out
    code, out, _ = run("delete", "nightly")
    assert code == 0 and "schedule nightly deleted" in out
    code, out, _ = run("list")
    assert code == 0 and out == ""
