"""A draft written as one statement, on a backend that chains writes (PostgreSQL).

The guard (``guard.GUARD``) is a data-modifying ``WITH`` query, and every other write of the
draft -- entries, blobs, documents, new tasks and submissions, task and submission updates,
joined answers, inbox marks, outbox rows -- is one more, each selecting ``FROM`` the
guard's row. A refused guard returns no row, so nothing else is written. A draft committed
alone adds its tenant charge (``tenant_budgets``) in its statement too. A check that must
fail the whole commit (a task no longer in the status the draft expects, a document no
longer at the version the draft read, an update that finds no row) calls
``brainhands_refuse`` (migration 0010), which raises: the statement, and the commit with it,
is undone, and the error is the one the transaction of several statements would raise
(``backends.postgres.engine.REFUSALS``).

Sent alone, without BEGIN and COMMIT, the commit is one round trip instead of one per
statement plus two; in a group commit, the drafts of one shape share one round trip (their
statements pipelined). The sub-statements see one
snapshot and their order is the planner's, so a draft whose writes would depend on each
other's is written the old way (``chainable``). Statements are built per shape (how many rows
of each kind, which columns) and kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from sqlalchemy import (
    Integer,
    String,
    Table,
    bindparam,
    case,
    func,
    insert,
    literal,
    literal_column,
    select,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ColumnElement

from brainhands.shared.store import schema
from brainhands.shared.store.backends.postgres.engine import CONFLICT, MISSING
from brainhands.shared.store.charges import adding, charge_params
from brainhands.shared.store.documents import conflict
from brainhands.shared.store.draft import Draft
from brainhands.shared.store.fence import rows_for
from brainhands.shared.store.guard import GUARD, ends_submission, guard_params, notifications
from brainhands.shared.store.hot import HotStatement, hot, run
from brainhands.shared.store.records import CommitReceipt, OutboxRow

STATEMENTS_KEPT = 256
"""Shapes whose statement is kept (building one costs a few milliseconds)."""

_s, _t, _sub = schema.session, schema.task, schema.submission
_STAMPS = ("created_at", "updated_at")
"""Set to the commit's time on every row it inserts (whatever a new row's fields said)."""


class _Shape(NamedTuple):
    entries: int
    blobs: int
    documents: tuple[tuple[bool, bool], ...]
    """Each document write: whether it replaces a version (else it creates the document), and
    whether it rewrites the baseline."""
    new_tasks: tuple[tuple[str, ...], ...]
    task_updates: tuple[tuple[tuple[str, ...], bool], ...]
    """Each update's columns, and whether it expects a status."""
    new_submissions: tuple[tuple[str, ...], ...]
    submission_updates: tuple[tuple[str, ...], ...]
    joined_answers: tuple[tuple[str, ...], ...]
    inbox: int
    outbox: int
    notify: tuple[bool, bool] | None
    """None, or (True, whether ``ANSWER_CHANNEL`` too)."""
    charge: bool = False
    """Whether it adds the draft's tenant charge (``tenant_budgets``)."""


def one_shape(drafts: Sequence[Draft], *, notify: bool) -> bool:
    """Whether ``drafts`` (each ``chainable``) are written by one statement, pipelined for
    all of them in one round trip: atomic together, as one execution is."""
    if len(drafts) == 1:
        return True  # its shape is found once, where it is written (``write_chained``)
    return len({_shape(draft, notify) for draft in drafts}) == 1


def chainable(draft: Draft) -> bool:
    """Whether ``draft`` can be one statement: no two writes of it that the one snapshot
    would see wrongly (a row written twice, or a joined answer that would, in order, also
    end a submission the draft keeps running)."""
    documents = [d.name for d in draft.documents]
    if len(set(documents)) != len(documents):
        return False
    tasks = [u.task_id for u in draft.task_updates]
    if len(set(tasks)) != len(tasks) or not set(tasks).isdisjoint(t["id"] for t in draft.new_tasks):
        return False
    subs = [u.submission_id for u in draft.submission_updates]
    new_subs = (s["id"] for s in draft.new_submissions)
    if len(set(subs)) != len(subs) or not set(subs).isdisjoint(new_subs):
        return False
    # A joined answer leaves out the submissions the draft updates; that is what the order
    # of statements would do only if none of them is left running.
    return not draft.joined_answers or all(
        u.changes.get("status", "running") != "running" for u in draft.submission_updates
    )


def write_chained(
    conn: Connection,
    drafts: Sequence[Draft],
    now: float,
    *,
    notify: bool,
    publish_after: float | None,
    charges: bool = False,
) -> list[CommitReceipt | None]:
    """Write each of ``drafts`` (``chainable``) as one statement; None for one whose guard
    was refused (nothing of it written). Drafts of one shape share one round trip (pipelined,
    in the caller's transaction if any); the rows they return say which draft each is for.
    ``charges``: each statement adds its draft's tenant charge too (else the caller does).
    """
    by_statement: dict[HotStatement, list[int]] = {}
    params = []
    for i, draft in enumerate(drafts):
        shape = _shape(draft, notify, charge=charges and draft.charge is not None)
        by_statement.setdefault(_statement(shape), []).append(i)
        params.append(_params(draft, now, publish_after, shape.charge))
    out: list[CommitReceipt | None] = [None] * len(drafts)
    for statement, group in by_statement.items():
        sent = [params[i] for i in group]
        found = run(conn, statement, sent[0] if len(sent) == 1 else sent).all()
        writes = [(drafts[i].session_id, drafts[i].version + 1) for i in group]
        rows = rows_for(found, writes, key=lambda row: (row[1], row[2]))
        for i, row in zip(group, rows, strict=True):
            out[i] = None if row is None else _receipt(drafts[i], row)
    return out


def _shape(draft: Draft, notify: bool, *, charge: bool = False) -> _Shape:
    return _Shape(
        entries=len(draft.entries),
        blobs=len(draft.blobs),
        documents=tuple((d.expected_version is not None, d.rebase) for d in draft.documents),
        new_tasks=tuple(tuple(sorted(t.keys() - _STAMPS)) for t in draft.new_tasks),
        task_updates=tuple(
            (tuple(sorted(u.changes)), u.expected_status is not None) for u in draft.task_updates
        ),
        new_submissions=tuple(tuple(sorted(s.keys() - _STAMPS)) for s in draft.new_submissions),
        submission_updates=tuple(tuple(sorted(u.changes)) for u in draft.submission_updates),
        joined_answers=tuple(tuple(sorted(j.changes)) for j in draft.joined_answers),
        inbox=len(draft.applied_inbox),
        outbox=len(draft.outbox),
        notify=(True, ends_submission(draft)) if notify else None,
        charge=charge,
    )


def _receipt(draft: Draft, row: Any) -> CommitReceipt:
    """What ``row`` (the guard's entry count, session and version first, the outbox ids
    last) says ``draft``'s statement made durable."""
    entry_count = row[0]
    first_outbox = len(row) - len(draft.outbox)
    first_seq = entry_count - len(draft.entries) + 1
    return CommitReceipt(
        session_id=draft.session_id,
        version=draft.version + 1,
        entry_seqs=list(range(first_seq, entry_count + 1)),
        outbox=tuple(
            OutboxRow(row[first_outbox + i], m.routing_key, m.body, m.headers)
            for i, m in enumerate(draft.outbox)
        ),
    )


def _params(draft: Draft, now: float, publish_after: float | None, charge: bool) -> dict[str, Any]:
    sid = draft.session_id
    params = guard_params(draft, now)
    if charge and draft.charge is not None:
        params.update(charge_params(sid, draft.charge, "c_"))
    for i, e in enumerate(draft.entries):
        params[f"e{i}_kind"] = e.kind
        params[f"e{i}_body"] = e.body
    for i, (blob_id, data) in enumerate(draft.blobs.items()):
        params[f"b{i}_id"] = blob_id
        params[f"b{i}_data"] = data
    for i, doc in enumerate(draft.documents):
        params[f"d{i}_name"] = doc.name
        params[f"d{i}_version"] = doc.version
        params[f"d{i}_patch"] = doc.increment
        params[f"d{i}_kind_version"] = doc.kind_version
        if doc.rebase:
            params[f"d{i}_body"] = doc.body
        if doc.expected_version is not None:
            params[f"d{i}_expected"] = doc.expected_version
            params[f"d{i}_refusal"] = conflict(doc, sid)
    for i, task in enumerate(draft.new_tasks):
        params.update({f"t{i}_{c}": v for c, v in task.items()})
    for i, change in enumerate(draft.task_updates):
        params.update({f"u{i}_v_{c}": v for c, v in change.changes.items()})
        params[f"u{i}_id"] = change.task_id
        params[f"u{i}_status"] = change.expected_status
        params[f"u{i}_refusal"] = (
            f"task {change.task_id} of session {sid} is missing or no longer "
            f"{change.expected_status}"
        )
    for i, sub in enumerate(draft.new_submissions):
        params.update({f"n{i}_{c}": v for c, v in sub.items()})
    for i, sub_change in enumerate(draft.submission_updates):
        params.update({f"s{i}_v_{c}": v for c, v in sub_change.changes.items()})
        params[f"s{i}_id"] = sub_change.submission_id
        params[f"s{i}_refusal"] = f"submission {sub_change.submission_id} not found"
    for i, joined in enumerate(draft.joined_answers):
        params.update({f"j{i}_v_{c}": v for c, v in joined.changes.items()})
        params[f"j{i}_task_id"] = joined.task_id
    for i, inbox_id in enumerate(draft.applied_inbox):
        params[f"i{i}_id"] = inbox_id
    for i, m in enumerate(draft.outbox):
        params[f"o{i}_routing_key"] = m.routing_key
        params[f"o{i}_body"] = m.body
        params[f"o{i}_headers"] = m.headers
    params["o_publish_after"] = publish_after
    return params


def _bound(table: Table, prefix: str, column: str) -> Any:
    return bindparam(f"{prefix}{column}", type_=table.c[column].type)


def _refused_unless_one(cte: Any, code: str, message: str) -> ColumnElement[Any]:
    """0 if ``cte`` returned one row; else a call that raises ``code`` with the bound
    ``message``."""
    matched = select(func.count()).select_from(cte).scalar_subquery()
    refuse = func.brainhands_refuse(literal(code), bindparam(message, type_=String()))
    return case((matched != 1, refuse), else_=literal_column("0", Integer))


@lru_cache(maxsize=STATEMENTS_KEPT)
def _statement(shape: _Shape) -> HotStatement:
    returning = [_s.c.id, _s.c.entry_count, _s.c.version]
    if shape.notify is not None:
        returning += notifications(shape.notify[1])
    g = GUARD.returning(*returning).cte("g")
    now = bindparam("g_now", type_=_s.c.updated_at.type)
    writes: list[Any] = []
    columns: list[Any] = [g.c.entry_count, g.c.id, g.c.version]
    if shape.notify is not None:
        columns += [c for c in g.c if c.name.startswith("n_")]

    def inserted(table: Table, prefix: str, names: tuple[str, ...], stamps: tuple[str, ...]) -> Any:
        """``INSERT`` of one row of ``names`` (bound as ``<prefix><name>``) from the guard's
        row, with ``stamps`` set to now."""
        values = [g.c.id if c == "session_id" else _bound(table, prefix, c) for c in names]
        return insert(table).from_select(
            [*names, *stamps], select(*values, *(now for _ in stamps)).select_from(g)
        )

    e = schema.entry
    for i in range(shape.entries):
        seq = g.c.entry_count - literal_column(str(shape.entries - 1 - i), Integer)
        writes.append(
            insert(e)
            .from_select(
                ["session_id", "seq", "kind", "body", "created_at"],
                select(
                    g.c.id, seq, _bound(e, f"e{i}_", "kind"), _bound(e, f"e{i}_", "body"), now
                ).select_from(g),
            )
            .cte(f"e{i}")
        )
    b = schema.blob
    for i in range(shape.blobs):
        writes.append(
            insert(b)
            .from_select(
                ["id", "data", "created_at"],
                select(_bound(b, f"b{i}_", "id"), _bound(b, f"b{i}_", "data"), now).select_from(g),
            )
            .cte(f"b{i}")
        )
    d, di = schema.document, schema.document_increment
    for i, (replaces, rebase) in enumerate(shape.documents):
        name, version = _bound(d, f"d{i}_", "name"), _bound(d, f"d{i}_", "version")
        kind_version = _bound(d, f"d{i}_", "kind_version")
        writes.append(
            insert(di)
            .from_select(
                ["session_id", "name", "version", "patch", "kind_version", "at"],
                select(
                    g.c.id, name, version, _bound(di, f"d{i}_", "patch"), kind_version, now
                ).select_from(g),
            )
            .cte(f"di{i}")
        )
        if not replaces:
            writes.append(
                insert(d)
                .from_select(
                    [
                        "session_id",
                        "name",
                        "version",
                        "body",
                        "updated_at",
                        "baseline",
                        "kind_version",
                    ],
                    select(
                        g.c.id,
                        name,
                        version,
                        _bound(d, f"d{i}_", "body"),
                        now,
                        version,
                        kind_version,
                    ).select_from(g),
                )
                .cte(f"d{i}")
            )
            continue
        moved: dict[str, Any] = {"version": version, "updated_at": now}
        if rebase:
            moved.update(
                body=_bound(d, f"d{i}_", "body"), baseline=version, kind_version=kind_version
            )
        cte = (
            update(d)
            .where(
                d.c.session_id == g.c.id,
                d.c.name == name,
                d.c.version == bindparam(f"d{i}_expected", type_=d.c.version.type),
            )
            .values(moved)
            .returning(d.c.name)
            .cte(f"d{i}")
        )
        writes.append(cte)
        columns.append(_refused_unless_one(cte, CONFLICT, f"d{i}_refusal").label(f"c_d{i}"))
    for table, prefix, rows in ((_t, "t", shape.new_tasks), (_sub, "n", shape.new_submissions)):
        for i, names in enumerate(rows):
            stamped = inserted(table, f"{prefix}{i}_", (*names, "session_id"), _STAMPS)
            writes.append(stamped.cte(f"{prefix}{i}"))
    for i, (names, expects) in enumerate(shape.task_updates):
        stmt = update(_t).where(_t.c.id == bindparam(f"u{i}_id"), _t.c.session_id == g.c.id)
        if expects:
            stmt = stmt.where(_t.c.status == bindparam(f"u{i}_status"))
        values = {_t.c[c]: _bound(_t, f"u{i}_v_", c) for c in names}
        cte = stmt.values({**values, _t.c.updated_at: now}).returning(_t.c.id).cte(f"u{i}")
        writes.append(cte)
        columns.append(_refused_unless_one(cte, CONFLICT, f"u{i}_refusal").label(f"c_u{i}"))
    for i, names in enumerate(shape.submission_updates):
        values = {_sub.c[c]: _bound(_sub, f"s{i}_v_", c) for c in names}
        cte = (
            update(_sub)
            .where(_sub.c.id == bindparam(f"s{i}_id"), _sub.c.session_id == g.c.id)
            .values({**values, _sub.c.updated_at: now})
            .returning(_sub.c.id)
            .cte(f"s{i}")
        )
        writes.append(cte)
        columns.append(_refused_unless_one(cte, MISSING, f"s{i}_refusal").label(f"c_s{i}"))
    updated: list[Any] = [bindparam(f"s{i}_id") for i in range(len(shape.submission_updates))]
    for i, names in enumerate(shape.joined_answers):
        values = {_sub.c[c]: _bound(_sub, f"j{i}_v_", c) for c in names}
        stmt = update(_sub).where(
            _sub.c.session_id == g.c.id,
            _sub.c.task_id == bindparam(f"j{i}_task_id"),
            _sub.c.status == "running",
        )
        if updated:  # written by the draft's own updates, which come first in order
            stmt = stmt.where(_sub.c.id.not_in(updated))
        writes.append(stmt.values({**values, _sub.c.updated_at: now}).cte(f"j{i}"))
    if shape.inbox:
        i_ = schema.inbox
        ids = [bindparam(f"i{k}_id", type_=i_.c.id.type) for k in range(shape.inbox)]
        writes.append(
            update(i_)
            .where(i_.c.id.in_(ids), i_.c.session_id == g.c.id)
            .values(applied_at=now)
            .cte("i")
        )
    o = schema.outbox
    for i in range(shape.outbox):
        row = [
            g.c.id,
            *(_bound(o, f"o{i}_", c) for c in ("routing_key", "body", "headers")),
            now,
            bindparam("o_publish_after", type_=o.c.publish_after.type),
        ]
        cte = (
            insert(o)
            .from_select(
                ["session_id", "routing_key", "body", "headers", "created_at", "publish_after"],
                select(*row).select_from(g),
            )
            .returning(o.c.id)
            .cte(f"o{i}")
        )
        writes.append(cte)
        columns.append(select(cte.c.id).scalar_subquery().label(f"o{i}"))
    if shape.charge:
        writes.append(adding("c_").where(select(g.c.id).exists()).cte("c"))
    return hot(select(*columns).select_from(g).add_cte(*writes))
