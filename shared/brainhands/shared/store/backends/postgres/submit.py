"""``store.submissions.submit`` on PostgreSQL: one statement in one hop, without BEGIN and
COMMIT -- the session's insert (a no-op when it exists), its key, the submission's insert
and the wake-up, as data-modifying ``WITH`` queries."""

from __future__ import annotations

from sqlalchemy import bindparam, insert, literal, select, true, union_all
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection

from brainhands.shared.store import schema
from brainhands.shared.store.draft import new_id
from brainhands.shared.store.handoff import Handoff
from brainhands.shared.store.hot import HotStatement, hot, run
from brainhands.shared.store.records import OutboxRow, SubmissionRecord
from brainhands.shared.store.submission_plan import SubmitPlan, Submitted, by_request_sync


def _submit_statement() -> HotStatement:
    """The session's insert (a no-op when it exists), its key, the submission's insert
    when the key is the caller's (a no-op for a request id seen before), and the wake-up
    for a submission inserted; one row, with the submission and the wake-up's id, unless
    the session is not in the statement's snapshot."""
    s, sub, ob = schema.session, schema.submission, schema.outbox
    now = bindparam("now", type_=s.c.created_at.type)
    sid = bindparam("sid", type_=s.c.id.type)
    tenant = bindparam("tenant", type_=s.c.tenant.type)
    created = (
        postgresql.insert(s)
        .values(
            id=sid,
            uid=bindparam("uid"),
            compat=bindparam("compat"),
            tenant=tenant,
            created_at=now,
            updated_at=now,
        )
        .on_conflict_do_nothing(index_elements=["id"])
        .returning(s.c.compat)
        .cte("created")
    )
    # One of the two has the session's row: the statement's snapshot does not see a row
    # its own insert wrote, and the insert writes none when the row was there.
    key = union_all(
        select(created.c.compat),
        select(s.c.compat).where(s.c.id == sid),
    ).cte("key")
    columns = (
        "id", "session_id", "request_id", "status", "input", "principal", "callback_url",
        "created_at", "updated_at",
    )  # fmt: skip
    submitted = (
        postgresql.insert(sub)
        .from_select(
            columns,
            select(
                bindparam("id", type_=sub.c.id.type),
                sid,
                bindparam("rid", type_=sub.c.request_id.type),
                literal("queued", sub.c.status.type),
                bindparam("input", type_=sub.c.input.type),
                bindparam("principal", type_=sub.c.principal.type),
                bindparam("callback_url", type_=sub.c.callback_url.type),
                now,
                now,
            ).where(key.c.compat == bindparam("compat", type_=s.c.compat.type)),
        )
        .on_conflict_do_nothing(index_elements=["session_id", "request_id"])
        .returning(*sub.c)
        .cte("submitted")
    )
    woken = (
        insert(ob)
        .from_select(
            ["session_id", "routing_key", "body", "headers", "created_at", "publish_after"],
            select(
                submitted.c.session_id,
                bindparam("routing_key", type_=ob.c.routing_key.type),
                bindparam("body", type_=ob.c.body.type),
                bindparam("headers", type_=ob.c.headers.type),
                now,
                bindparam("publish_after", type_=ob.c.publish_after.type),
            ),
        )
        .returning(ob.c.id)
        .cte("woken")
    )
    return hot(
        select(
            key.c.compat.label("key"),
            *(submitted.c[c.name] for c in sub.c),
            woken.c.id.label("outbox_id"),
        )
        .select_from(key)
        .outerjoin(submitted, true())
        .outerjoin(woken, true())
    )


_SUBMIT = _submit_statement()


def submit_in_one_statement(
    conn: Connection, plan: SubmitPlan, handoff: Handoff
) -> Submitted | None:
    """``plan`` as one statement (``_SUBMIT``), for a session new or of key ``plan.compat``:
    the submission and its wake-up, or, for a request id seen before, the original and
    nothing new. None when the statement wrote nothing and
    cannot tell why for sure (the session has another key, or was created by a transaction
    that committed after this statement's snapshot): the caller takes the longer way."""
    message, now = plan.wake, plan.now
    params = {
        "id": new_id(),
        "uid": new_id(),
        "sid": plan.session_id,
        "rid": plan.request_id,
        "compat": plan.compat,
        "tenant": plan.tenant,
        "input": plan.input,
        "principal": plan.principal,
        "callback_url": plan.callback_url,
        "now": now,
        "routing_key": message.routing_key,
        "body": message.body,
        "headers": message.headers,
        "publish_after": handoff.publish_after(now),
    }
    row = run(conn, _SUBMIT, params).one_or_none()
    if row is None or row.key != plan.compat:
        return None
    if row.outbox_id is None:  # seen before: the original, and no wake-up
        return by_request_sync(conn, plan.session_id, plan.request_id), ()
    fields = row._mapping
    record = SubmissionRecord(**{c.name: fields[c.name] for c in schema.submission.c})
    wake_row = OutboxRow(row.outbox_id, message.routing_key, message.body, message.headers)
    return record, (wake_row,)
