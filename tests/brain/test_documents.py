"""Typed documents in Brain passes, on each backend: a phase reads a document at its kind's
version (migrated from the one it was written at), and a value its kind rejects fails the
phase, naming the document and the field, with nothing of it written."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import BaseModel

from brainhands.brain import Finish, Next, PhaseContext, TaskKind, TaskRegistry, TaskView
from brainhands.brain.agent import Agent, AgentRegistry, TaskTool, agent_kinds, start_agent_or_task
from brainhands.brain.context import DOCUMENTS_HEADING, ContextPolicy, show_documents
from brainhands.brain.documents import DocumentConflict, DocumentKind, DocumentRejected, Documents
from brainhands.brain.scheduler import SessionRunner
from brainhands.shared.errors import ConfigurationError
from brainhands.shared.store import DocumentRecord, Store
from brainhands.shared.store.catalog import ToolCatalog
from brainhands.shared.topology import Topology
from tests.brain import agent_passes
from tests.brain.agent_passes import BilledModel, calls
from tests.helpers.submitting import submit_input

pytestmark = pytest.mark.integration

TOPOLOGY = Topology("kernel")


class PlanV1(BaseModel):
    steps: list[str]


class Step(BaseModel):
    title: str
    done: bool = False


class PlanV2(BaseModel):
    steps: list[Step]


PLAN_V1 = DocumentKind("plan", PlanV1)
PLAN_V2 = DocumentKind("plan", PlanV2, version=2)


@PLAN_V2.migration(1)
def titled(value: Any) -> Any:
    return {"steps": [{"title": s} for s in value["steps"]]}


def planner(plan: DocumentKind) -> TaskRegistry:
    """A registry whose one kind, ``plan.write``, sets the plan to its input (None: adds a
    step to it) and answers with the plan it read."""
    registry = TaskRegistry()
    kind = registry.add(TaskKind("plan.write", documents=(plan,)))

    @kind.phase("write")
    async def write(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        read = copy.deepcopy(docs["plan"])
        if task.input is not None:
            docs["plan"] = task.input
        else:
            docs["plan"]["steps"].append({"title": "added"})
        return Finish({"read": read})

    return registry


async def run_once(store: Store, registry: TaskRegistry, value: Any, request_id: str) -> Any:
    """Submit ``value`` to ``plan.write`` and run one Brain pass; the submission's record."""
    await submit_input(
        store,
        TOPOLOGY,
        session_id="s1",
        request_id=request_id,
        input={"kind": "plan.write", "input": value},
        compat="v1",
    )
    token = (await store.load("s1")).session.fence + 1
    await store.claim_session_fence("s1", token)
    await SessionRunner(
        store=store,
        tasks=registry,
        tools=ToolCatalog(store),
        topology=TOPOLOGY,
        session_id="s1",
        fence=token,
        max_restarts=0,
        declaration_grace=0.0,
    ).run()
    return await store.submissions.get("s1", request_id)


async def test_a_document_written_at_v1_is_read_migrated_at_v2(store: Store) -> None:
    first = await run_once(store, planner(PLAN_V1), {"steps": ["a", "b"]}, "r1")
    assert first.status == "answered", first.error
    doc = (await store.load("s1")).documents["plan"]
    assert (doc.kind_version, doc.body) == (1, {"steps": ["a", "b"]})

    # A build with version 2 of the kind: the phase reads the value migrated, and its write
    # is at version 2, a new baseline.
    second = await run_once(store, planner(PLAN_V2), None, "r2")
    assert second.status == "answered", second.error
    migrated = [{"title": "a", "done": False}, {"title": "b", "done": False}]
    assert second.answer == {"read": {"steps": migrated}}
    doc = (await store.load("s1")).documents["plan"]
    assert (doc.version, doc.baseline, doc.kind_version) == (2, 2, 2)
    assert doc.body == {"steps": [*migrated, {"title": "added", "done": False}]}
    history = (await store.document("s1", "plan")).history
    assert [(i.version, i.kind_version) for i in history] == [(1, 1), (2, 2)]


async def test_a_value_the_kind_rejects_fails_the_phase_and_writes_nothing(
    store: Store,
) -> None:
    ok = await run_once(store, planner(PLAN_V2), {"steps": [{"title": "a"}]}, "r1")
    assert ok.status == "answered", ok.error

    bad = await run_once(store, planner(PLAN_V2), {"steps": [{"done": True}]}, "r2")

    assert bad.status == "failed"
    assert "document 'plan' (kind version 2) rejected: steps.0.title: Field required" in bad.error
    doc = (await store.load("s1")).documents["plan"]
    assert (doc.version, doc.body) == (1, {"steps": [{"title": "a", "done": False}]})


def test_a_kind_reads_through_its_migrations_and_refuses_what_it_cannot_read() -> None:
    assert PLAN_V2.read({"steps": ["x"]}, 1) == {"steps": [{"title": "x", "done": False}]}
    assert PLAN_V2.read({"steps": ["x"]}, None) == {"steps": [{"title": "x", "done": False}]}
    assert PLAN_V2.check(PlanV2(steps=[Step(title="y")])) == {
        "steps": [{"title": "y", "done": False}]
    }
    with pytest.raises(DocumentRejected, match="written at version 3 of its kind"):
        PLAN_V2.read({"steps": []}, 3)
    with pytest.raises(DocumentRejected, match="no migration from it"):
        DocumentKind("plan", PlanV2, version=3).read({"steps": []}, 1)


def test_a_registry_reads_a_document_with_the_newest_kind_it_was_given() -> None:
    registry = planner(PLAN_V1)
    registry.add(TaskKind("plan.review", documents=(PLAN_V2,)))
    assert registry.document_kinds == {"plan": PLAN_V2}
    with pytest.raises(ValueError, match="document kind plan v2 is registered twice"):
        registry.add_document(DocumentKind("plan", PlanV2, version=2))


def test_a_context_policy_shows_its_documents_within_their_share_of_the_prompt() -> None:
    policy = ContextPolicy(max_prompt_tokens=400, documents=("plan", "notes", "missing"))
    docs = {"plan": {"steps": [{"title": "a"}]}, "notes": "x" * 2000, "other": 1}

    shown = show_documents("Be brief.", policy, docs)

    assert shown.startswith("Be brief." + DOCUMENTS_HEADING)
    lines = shown.removeprefix("Be brief." + DOCUMENTS_HEADING + "\n").split("\n")
    assert lines[0] == 'plan: {"steps": [{"title": "a"}]}'
    # ``notes`` would pass the documents' 100 tokens: named, not shown; ``other`` is not
    # the policy's to show; a document not written yet shows as null.
    assert lines[1].startswith("notes: (left out: about 5") and "x" not in lines[1]
    assert lines[2:] == ["missing: null"]
    assert show_documents("Be brief.", None, docs) == "Be brief."
    with pytest.raises(ConfigurationError, match="document_tokens"):
        ContextPolicy(max_prompt_tokens=400, document_tokens=400)


class NoArgs(BaseModel):
    pass


async def test_an_agent_whose_policy_shows_a_document_sees_its_latest_value(
    store: Store,
) -> None:
    # The model calls a task tool whose task writes the plan; its next request shows it.
    model = BilledModel(calls("set_plan", 1, then="planned"), usage=(10, 2))
    agents = AgentRegistry()
    agents.add(
        Agent(
            name="planner",
            system="You plan.",
            model=model,
            task_tools=(TaskTool("set_plan", "plan.set", NoArgs, "Set the plan."),),
            context=ContextPolicy(max_prompt_tokens=4000, keep_tokens=1000, documents=("plan",)),
        )
    )
    registry = agent_kinds(agents, ToolCatalog(store))
    setter = registry.add(TaskKind("plan.set", documents=(PLAN_V1,)))

    @setter.phase("write")
    async def write(task: TaskView, docs: dict[str, Any], ctx: PhaseContext) -> Next:
        docs["plan"] = {"steps": ["book", "pay"]}
        return Finish({"set": True})

    await agent_passes.submit(store, "s1", "r1", {"agent": "planner", "text": "Plan a trip."})
    for _ in range(6):
        fence = (await store.load("s1")).session.fence + 1
        claimed = await store.claim_session("s1", fence)
        await SessionRunner(
            store=store,
            tasks=registry,
            tools=ToolCatalog(store),
            topology=agent_passes.TOPOLOGY,
            session_id="s1",
            fence=fence,
            start_submission=start_agent_or_task,
        ).run(claimed)
        if (await store.submissions.get("s1", "r1")).status == "answered":
            break
    assert (await store.submissions.get("s1", "r1")).status == "answered"

    first, second = (asked[0]["content"] for asked in model.asked)
    assert first == f"You plan.{DOCUMENTS_HEADING}\nplan: null"
    assert second == f'You plan.{DOCUMENTS_HEADING}\nplan: {{"steps": ["book", "pay"]}}'


def test_a_phase_changes_a_document_as_it_read_it_and_others_writes_meanwhile_are_kept() -> None:
    read = DocumentRecord("notes", 3, {"a": 1, "b": 1})
    documents = Documents({"notes": read}, {})
    untouched, edited, clashing = (documents.snapshot().copies(["notes"]) for _ in range(3))
    # Another task's write lands while the phases run: b is 2 now.
    documents.records["notes"] = DocumentRecord("notes", 4, {"a": 1, "b": 2})
    done = Finish({})

    # A copy left as it was read is not written back over the newer value.
    assert documents.changes(["notes"], untouched, done) == (done, {})
    # A change to another field applies to the new value: neither write is lost.
    edited["notes"]["a"] = 5
    assert documents.changes(["notes"], edited, done) == (done, {"notes": {"a": 5, "b": 2}})
    # A change to what the other write changed does not apply: the phase fails, to run again.
    clashing["notes"] = {"a": 1}
    documents.records["notes"] = DocumentRecord("notes", 5, {"c": 3})
    failed, written = documents.changes(["notes"], clashing, done)
    assert isinstance(failed, DocumentConflict) and written == {}
    assert "went from version 3 to 5" in str(failed)
