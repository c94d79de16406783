"""Task kinds for the kernel tests, declared with the public API."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from brainhands.brain import (
    Call,
    Child,
    Dispatch,
    Fail,
    Finish,
    First,
    Goto,
    JoinPolicy,
    Next,
    PhaseContext,
    Quorum,
    Sleep,
    Spawn,
    TaskKind,
    TaskRegistry,
    TaskView,
    WaitSignal,
)

registry = TaskRegistry()

steps = registry.add(TaskKind("steps", documents=("log",)))


@steps.phase("one")
async def one(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    docs["log"] = [*(docs["log"] or []), "one"]
    return Goto("two", state={"from": "one"})


@steps.phase("two")
async def two(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    docs["log"] = [*docs["log"], "two"]
    return Goto("three", state={**task.state, "then": "two"})


@steps.phase("three")
async def three(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Finish({"state": task.state, "input": task.input})


napper = registry.add(TaskKind("napper"))


@napper.phase("nap")
async def nap(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Sleep(then="wake", seconds=task.input["seconds"])


@napper.phase("wake")
async def wake(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Finish({"woke_at": ctx.now})


child = registry.add(TaskKind("child"))


@child.phase("work")
async def work(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    if task.input.get("fail"):
        return Fail({"child": task.input["n"], "why": "asked to fail"})
    if task.input.get("sleep"):
        return Sleep(then="done", seconds=task.input["sleep"])
    return Finish(task.input["n"] * 10)


@child.phase("done")
async def child_done(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Finish(task.input["n"] * 10)


parent = registry.add(TaskKind("parent"))


@parent.phase("spawn")
async def spawn(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    children = [Child("child", spec) for spec in task.input["children"]]
    join: JoinPolicy = task.input.get("join", "all_settled")
    if join in ("quorum", "first"):
        join = (Quorum if join == "quorum" else First)(task.input["k"])
    return Spawn(children, then="gather", join=join)


@parent.phase("gather")
async def gather(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Finish([[c.outcome, c.result] for c in task.children])


broken = registry.add(TaskKind("broken"))


@broken.phase("explode")
async def explode(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    raise RuntimeError("this phase always fails")


caller = registry.add(TaskKind("caller"))


@caller.phase("call")
async def call(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Dispatch(task.input["tool"], task.input["arguments"], then="read")


@caller.phase("read")
async def read(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    [outcome] = task.children
    return Finish({"outcome": outcome.outcome, "result": outcome.result, "error": outcome.error})


calls = registry.add(TaskKind("calls"))


@calls.phase("call")
async def make_calls(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    # Each of input["calls"]: {"tool", "arguments"} and, if the test chooses one, "operation_id".
    children = [Call(c["tool"], c["arguments"], c.get("operation_id")) for c in task.input["calls"]]
    return Spawn(children, then="read")


@calls.phase("read")
async def read_calls(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Finish([{"outcome": c.outcome, "result": c.result} for c in task.children])


long_call = registry.add(TaskKind("long_call"))


@long_call.phase("call")
async def call_and_wait(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Dispatch("wait_for_cancel", {}, then="read")


@long_call.phase("read")
async def read_long(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Finish(task.children[0].result)


family = registry.add(TaskKind("family"))


@family.phase("spawn")
async def spawn_family(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Spawn([Child("long_call", {}), Child("napper", {"seconds": 600})], then="gather")


@family.phase("gather")
async def gather_family(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return Finish([c.outcome for c in task.children])


chain = registry.add(TaskKind("chain"))


@chain.phase("note", light=True)
async def note(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    ctx.append_entry("note", {"text": task.input["text"]})
    return Goto("count")


@chain.phase("count", light=True)
async def count(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    # Reads the entry the phase before appended, in the same (not yet committed) draft.
    return Finish({"entries": [(e.seq, e.kind) for e in ctx.entries]})


fragile = registry.add(TaskKind("fragile"))


@fragile.phase("compute", light=True)
async def compute(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    raise RuntimeError("light and always fails")


slow = registry.add(TaskKind("slow", documents=("log",)))
"""Three phases, the middle one ``input["seconds"]`` long; each notes in the ``log`` document
which process ran it, and the middle one also in an entry and (as it starts) in the file
``input["marks"]``, so a test can pause the process while it runs."""


def _mark(path: Path) -> None:
    with path.open("a") as marks:
        marks.write(f"{os.getpid()}\n")


@slow.phase("first")
async def slow_first(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    docs["log"] = [*(docs["log"] or []), {"phase": "first", "pid": os.getpid()}]
    return Goto("slow")


@slow.phase("slow")
async def slow_middle(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    await asyncio.to_thread(_mark, Path(task.input["marks"]))
    docs["log"] = [*docs["log"], {"phase": "slow", "pid": os.getpid()}]
    ctx.append_entry("note", {"phase": "slow", "pid": os.getpid()})
    await asyncio.sleep(task.input["seconds"])
    return Goto("last")


@slow.phase("last")
async def slow_last(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    docs["log"] = [*docs["log"], {"phase": "last", "pid": os.getpid()}]
    return Finish({"log": docs["log"]})


listener = registry.add(TaskKind("listener"))
"""Waits for the signals named in ``input["names"]``, one after another (each for
``input["timeout"]`` seconds, if given), and answers with what each wait received."""


@listener.phase("listen")
async def listen(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    heard = list(task.state or [])
    if task.signal is not None:
        heard.append(
            {
                "name": task.signal.name,
                "payload": task.signal.payload,
                "signal_id": task.signal.signal_id,
                "timed_out": task.signal.timed_out,
            }
        )
    names = task.input["names"]
    if len(heard) == len(names):
        return Finish(heard)
    return WaitSignal(
        names[len(heard)],
        then="listen",
        timeout=task.input.get("timeout"),
        state=heard,
        decision=task.input.get("decision", False),
    )


forwarder = registry.add(TaskKind("forwarder"))
"""Waits for signal ``go``, then calls the tool its payload names: a phase resumed from a
signal that makes a call."""


@forwarder.phase("wait")
async def wait_for_go(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    return WaitSignal("go", then="call")


@forwarder.phase("call")
async def call_named(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    assert task.signal is not None, "call runs only after the wait"
    return Dispatch(task.signal.payload["tool"], task.signal.payload["arguments"], then="done")


@forwarder.phase("done")
async def forwarded(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
    [call] = task.children
    return Finish(call.outcome)
