"""A trip booked in three steps, each a call of ``book`` (``tests.helpers.booking_tools``):
a step that fails fails the trip, and the trip's kind undoes the bookings made by then with
``cancel_booking``, the most recent first (``TaskKind.compensate``)."""

from __future__ import annotations

from typing import Any

from brainhands.brain import (
    Call,
    Dispatch,
    Fail,
    Finish,
    Next,
    PhaseContext,
    TaskKind,
    TaskRegistry,
    TaskView,
)

registry = TaskRegistry()
trip = registry.add(TaskKind("trip"))
STEPS = ("hotel", "flight", "car")


def cancel(arguments: dict[str, Any], result: Any) -> Call:
    """The undo of a booking: cancel it by the key it was booked under."""
    return Call("cancel_booking", {"booking": result["key"], "item": arguments["item"]})


trip.compensate("book", cancel)


def _step(n: int) -> Any:
    async def step(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        if n > 0 and task.children[-1].outcome != "succeeded":
            return Fail({"reason": f"{STEPS[n - 1]} not booked", "step": STEPS[n - 1]})
        if n == len(STEPS):
            return Finish({"booked": list(STEPS)})
        item = STEPS[n]
        arguments = {"trip": task.input["trip"], "item": item}
        arguments["fail"] = item in task.input.get("fail", [])
        then = STEPS[n + 1] if n + 1 < len(STEPS) else "done"
        return Dispatch("book", arguments, then=then)

    return step


for _n, _name in enumerate((*STEPS, "done")):
    trip.phase(_name)(_step(_n))
