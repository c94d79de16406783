"""When a schedule's ticks fall and which a sweep submits (``shared.schedules``): pure."""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from brainhands.shared.errors import InvalidRequest
from brainhands.shared.schedules import (
    ScheduleSpec,
    check_missed,
    check_schedule_id,
    parse_spec,
    plan_firing,
    submission_input,
    tick_session_id,
)

PARIS = ZoneInfo("Europe/Paris")


def paris(*parts: int) -> float:
    return datetime(*parts, tzinfo=PARIS).timestamp()  # type: ignore[misc]


def test_an_interval_ticks_on_whole_multiples_since_the_epoch() -> None:
    spec = ScheduleSpec(every=10)
    assert spec.next_tick(1000) == 1010
    assert spec.next_tick(1003.5) == 1010
    assert spec.previous_tick(1010) == 1000
    assert spec.ticks(1000, 1030) == [1000, 1010, 1020, 1030]
    assert spec.ticks(1000.5, 1029.9) == [1010, 1020]


def test_a_cron_reads_its_hours_in_its_time_zone() -> None:
    spec = parse_spec(cron="0 9 * * 1-5", timezone="Europe/Paris", every=None)
    # Friday 2026-12-04 10:00 in Paris: the next weekday 09:00 is Monday's.
    assert spec.next_tick(paris(2026, 12, 4, 10, 0)) == paris(2026, 12, 7, 9, 0)
    # 09:00 in Paris is 08:00 UTC in winter.
    assert (
        datetime.fromtimestamp(spec.next_tick(paris(2026, 12, 7, 8, 0)), ZoneInfo("UTC")).hour == 8
    )


def test_a_tick_skipped_by_the_spring_change_runs_at_the_change_once() -> None:
    spec = ScheduleSpec(cron="30 2 * * *", timezone="Europe/Paris")
    # 2026-03-29: 02:00 becomes 03:00 in Paris; 02:30 does not exist that day.
    ticks = spec.ticks(paris(2026, 3, 28, 12, 0), paris(2026, 3, 30, 12, 0))
    assert ticks == [paris(2026, 3, 29, 3, 0), paris(2026, 3, 30, 2, 30)]


def test_a_tick_repeated_by_the_autumn_change_runs_once() -> None:
    spec = ScheduleSpec(cron="30 2 * * *", timezone="Europe/Paris")
    # 2026-10-25: 03:00 goes back to 02:00; 02:30 happens twice, and runs at the first.
    ticks = spec.ticks(paris(2026, 10, 24, 12, 0), paris(2026, 10, 26, 12, 0))
    assert len(ticks) == 2
    assert ticks[1] - ticks[0] == 25 * 3600  # the day of the change lasts 25 hours
    hourly = ScheduleSpec(cron="0 * * * *", timezone="Europe/Paris")
    day = hourly.ticks(paris(2026, 10, 25, 0, 0), paris(2026, 10, 25, 23, 59))
    assert len(day) == len(set(day)) == 25  # every real hour, none twice


def test_an_on_time_sweep_submits_the_due_ticks() -> None:
    spec = ScheduleSpec(every=1)
    firing = plan_firing(spec, "skip", due_at=100, now=102.4, late_after=60)
    assert firing.ticks == [100, 101, 102]
    assert firing.next_tick_at == 103


def test_skip_submits_no_tick_missed_while_nothing_ran() -> None:
    spec = ScheduleSpec(every=60)
    firing = plan_firing(spec, "skip", due_at=600, now=6040, late_after=30)
    assert firing.ticks == []
    assert firing.next_tick_at == 6060


def test_run_one_submits_the_latest_missed_tick_once() -> None:
    spec = ScheduleSpec(every=60)
    firing = plan_firing(spec, "run_one", due_at=600, now=6050, late_after=30)
    assert firing.ticks == [6000]  # 50 s late: missed, and the latest of those missed
    assert firing.next_tick_at == 6060
    on_time_too = plan_firing(spec, "run_one", due_at=600, now=6010, late_after=30)
    assert on_time_too.ticks == [5940, 6000]


def test_run_one_with_nothing_missed_is_an_on_time_firing() -> None:
    spec = ScheduleSpec(every=60)
    firing = plan_firing(spec, "run_one", due_at=6000, now=6001, late_after=30)
    assert firing.ticks == [6000]


def test_a_cron_missed_over_a_long_downtime_runs_its_latest_tick() -> None:
    spec = ScheduleSpec(cron="0 3 * * *", timezone="Europe/Paris")
    due = paris(2026, 12, 1, 3, 0)
    now = paris(2026, 12, 5, 12, 0)
    assert plan_firing(spec, "skip", due_at=due, now=now, late_after=60).ticks == []
    firing = plan_firing(spec, "run_one", due_at=due, now=now, late_after=60)
    assert firing.ticks == [paris(2026, 12, 5, 3, 0)]
    assert firing.next_tick_at == paris(2026, 12, 6, 3, 0)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"cron": "61 * * * *", "timezone": None, "every": None}, "cron '61 * * * *'"),
        ({"cron": "0 3 * *", "timezone": None, "every": None}, "cron '0 3 * *'"),
        ({"cron": "0 3 * * *", "timezone": "Mars/Olympus", "every": None}, "timezone"),
        ({"cron": None, "timezone": None, "every": 0}, "every 0"),
        ({"cron": None, "timezone": None, "every": 10**10}, "1 to 31622400"),
        ({"cron": "0 0 30 2 *", "timezone": None, "every": None}, "Bad day-of-month"),
        ({"cron": "* " * 200, "timezone": None, "every": None}, "at most 256"),
        ({"cron": None, "timezone": "UTC", "every": 5}, "timezone goes with"),
        ({"cron": None, "timezone": None, "every": None}, "either a cron"),
        ({"cron": "* * * * *", "timezone": None, "every": 5}, "either a cron"),
    ],
)
def test_a_bad_spec_is_refused_with_its_reason(fields: dict[str, object], reason: str) -> None:
    with pytest.raises(InvalidRequest, match=re.escape(reason)):
        parse_spec(**fields)  # type: ignore[arg-type]


def test_ids_targets_and_policies_are_checked() -> None:
    assert check_schedule_id("nightly-report") == "nightly-report"
    for bad in ("", "a/b", "a@b", "x" * 49, "-x"):
        with pytest.raises(InvalidRequest):
            check_schedule_id(bad)
    assert check_missed("run_one") == "run_one"
    with pytest.raises(InvalidRequest, match="one of skip, run_one"):
        check_missed("all")
    assert submission_input(agent="helper", kind=None, input="hi") == {
        "agent": "helper",
        "text": "hi",
    }
    assert submission_input(agent=None, kind="report", input={"n": 1}) == {
        "kind": "report",
        "input": {"n": 1},
    }
    with pytest.raises(InvalidRequest, match="either an agent or a task kind"):
        submission_input(agent="a", kind="k", input=None)
    with pytest.raises(InvalidRequest, match="1 to 128 characters"):
        submission_input(agent=None, kind="k" * 129, input=None)
    assert tick_session_id("nightly", 1765000000.0) == "nightly@1765000000"
