"""The history of ``bench.history``: N finished one-call agent sessions, written with bulk SQL.

Each session is shaped like what a ``pinger`` session of ``bench/roundtrip_agents.py`` leaves
once it is answered (read off a real one): the session row (version 4, fence 2, 4 entries,
status ``active``: a session's status never changes when its work ends), its 4 entries (user,
model with a tool call, tool result, final model turn), 4 terminal tasks (the
``agent.session`` root, two ``agent.generate`` turns, the ``brainhands.tool`` call with its
``operation_id``), the answered submission, the ``succeeded`` operation and 3 sent outbox
rows (the submission's wake-up, the job, the result event).

One ``INSERT ... SELECT FROM generate_series`` per table, so a million sessions take minutes,
not the hours the runtime itself would. The sessions' times are spread over the
``HISTORY_SPAN`` seconds before the prefill: all within the relays' retention of sent outbox
rows (an hour), so no prune removes them while the run measures. The outbox is then as large
as the relays' pruning lets it grow at a pace of N sessions per ``HISTORY_SPAN`` (a million
in half an hour: more than 500 sessions/s).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import asyncpg

from bench.roundtrip_agents import COMPAT
from bench.roundtrip_tools import POOL
from brainhands.shared.topology import Topology

HISTORY_SPAN = 1800.0
"""Seconds before the prefill over which the history's sessions are spread."""
HISTORY_PREFIX = "hist-"
TABLES = ("session", "entry", "task", "submission", "operation", "outbox")
"""The tables the history fills, in the order the foreign keys need."""

# Every row of a session is relative to its start ``h.t``, with the offsets (seconds) a real
# one had. ``h`` holds one history session per row: its number, id, start and ids of its rows.
_SESSIONS = f"""
    SELECT g,
           '{HISTORY_PREFIX}' || lpad(g::text, 7, '0') AS sid,
           $2::float8 + g * $3::float8 AS t,
           md5('uid' || g) AS uid,
           md5('submission' || g) AS submission,
           md5('root' || g) AS root,
           md5('turn1' || g) AS turn1,
           md5('tool' || g) AS tool,
           md5('turn2' || g) AS turn2
    FROM generate_series(1, $1::int) AS g
"""

_CALL = '{"id": "call_0_0", "type": "function", "function": {"name": "ping", "arguments": "{}"}}'
_USAGE = '"usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}'
_CALLING = f'{{"role": "assistant", "content": null, "tool_calls": [{_CALL}]}}'
_ANSWERING = '{"role": "assistant", "content": "Pinged."}'


def _raw(n: int, message: str, finish: str) -> str:
    return (
        f'{{"id": "scripted-{n}", "object": "chat.completion", "created": 0, "model": '
        f'"scripted", "choices": [{{"index": 0, "message": {message}, "finish_reason": '
        f'"{finish}"}}], {_USAGE}}}'
    )


_RAW_CALLING = _raw(0, _CALLING, "tool_calls")
_RAW_ANSWERING = _raw(1, _ANSWERING, "stop")
_MODEL_CALLING = f'{{"raw": {_RAW_CALLING}, "model": "scripted", "message": {_CALLING}}}'
_MODEL_ANSWERING = f'{{"raw": {_RAW_ANSWERING}, "model": "scripted", "message": {_ANSWERING}}}'
_TOOL_RESULT = '{"call_id": "call_0_0", "name": "ping", "status": "succeeded", "result": {}}'
_TURN2_STATE = f'{{"upto": 3, "model": "scripted", "attempt": 0, "raw": {_RAW_ANSWERING}}}'
_INPUT = '{"agent": "pinger", "text": "ping, then say so"}'
_ANSWER = '{"text": "Pinged.", "turns": 2}'

INSERTS: dict[str, str] = {
    "session": f"""
        INSERT INTO session (id, uid, compat, version, fence, status, entry_count,
                             created_at, updated_at, tenant)
        SELECT h.sid, h.uid, '{COMPAT}', 4, 2, 'active', 4, h.t, h.t + 0.075, 'default'
        FROM ({_SESSIONS}) AS h
    """,
    "entry": f"""
        INSERT INTO entry (session_id, seq, kind, body, created_at)
        SELECT h.sid, v.seq, v.kind, v.body::json, h.t + v.at
        FROM ({_SESSIONS}) AS h,
        LATERAL (VALUES
            (1, 'user', '{{"text": "ping, then say so"}}', 0.026::float8),
            (2, 'model', '{_MODEL_CALLING}', 0.033),
            (3, 'tool_result', '{_TOOL_RESULT}', 0.066),
            (4, 'model', '{_MODEL_ANSWERING}', 0.075)
        ) AS v(seq, kind, body, at)
    """,
    "task": f"""
        INSERT INTO task (id, session_id, parent_id, kind, kind_version, input, state,
                          submission_id, status, phase, wake_at, wait_for, join_policy,
                          operation_id, outcome, result, error, attempt, restarts,
                          cancel_requested, blocked_reason, wait_signal, wait_exclusive,
                          signal, created_at, updated_at)
        SELECT v.id, h.sid, v.parent_id, v.kind, 1, v.input::json, v.state::json,
               v.submission_id, 'terminal', v.phase, NULL::float8, v.wait_for::json,
               NULL::text, v.operation_id, 'succeeded', v.result::json, v.error::json,
               v.attempt, 0, false, NULL::text, NULL::text, false, v.signal::json,
               h.t + v.created, h.t + v.updated
        FROM ({_SESSIONS}) AS h,
        LATERAL (VALUES
            (h.root, NULL::text, 'agent.session', '{_INPUT}',
             '{{"turn": 2, "final": "Pinged.", "joined": 0}}', h.submission, 'absorb',
             'null', NULL::text, '{_ANSWER}', NULL::text, 1, 'null', 0.026::float8,
             0.075::float8),
            (h.turn1, h.root, 'agent.generate', '{{"agent": "pinger", "turn": 1}}',
             '{{"plan": [{{"call_id": "call_0_0", "name": "ping", "refused": null}}]}}',
             NULL, 'apply', 'null', NULL, '{{"continue": true}}', NULL, 1, 'null', 0.026,
             0.066),
            (h.tool, h.turn1, 'brainhands.tool',
             '{{"tool": "ping", "arguments": {{}}, "pool": "{POOL}"}}', NULL, NULL, NULL, NULL,
             'op-' || h.tool, '{{"status": "succeeded", "result": {{}}}}', 'null', 0, NULL,
             0.033, 0.066),
            (h.turn2, h.root, 'agent.generate', '{{"agent": "pinger", "turn": 2}}',
             '{_TURN2_STATE}',
             NULL, 'tools', 'null', NULL, '{{"final": "Pinged."}}', NULL, 1, 'null', 0.066,
             0.075)
        ) AS v(id, parent_id, kind, input, state, submission_id, phase, wait_for,
               operation_id, result, error, attempt, signal, created, updated)
    """,
    "submission": f"""
        INSERT INTO submission (id, session_id, request_id, status, input, answer, error,
                                task_id, created_at, updated_at)
        SELECT h.submission, h.sid, 'r1', 'answered', '{_INPUT}'::json, '{_ANSWER}'::json,
               NULL, h.root, h.t, h.t + 0.075
        FROM ({_SESSIONS}) AS h
    """,
    "operation": f"""
        INSERT INTO operation (operation_id, session_id, task_id, tool, pool, arguments,
                               arguments_blob_id, status, attempts, interruptions, fence,
                               result, error, blob_id, next_attempt_at, created_at,
                               started_at, finished_at, updated_at)
        SELECT 'op-' || h.tool, h.sid, h.tool, 'ping', '{POOL}', '{{}}'::json, NULL,
               'succeeded', 1, 0, 1, '{{}}'::json, 'null'::json, NULL, NULL, h.t + 0.047,
               h.t + 0.051, h.t + 0.055, h.t + 0.055
        FROM ({_SESSIONS}) AS h
    """,
    # $4, $5, $6: the routing keys of the wake-up, the job and the result event.
    "outbox": f"""
        INSERT INTO outbox (session_id, routing_key, body, headers, created_at, sent_at,
                            publish_after)
        SELECT h.sid, v.routing_key, convert_to(v.body, 'UTF8'), 'null'::json,
               h.t + v.created, h.t + v.sent, h.t + v.created + 5.0
        FROM ({_SESSIONS}) AS h,
        LATERAL (VALUES
            ($4::text, '{{"schema_version":1,"trace":{{}},"type":"wake","session_id":"'
                 || h.sid || '","compat":"{COMPAT}","reason":"submission"}}',
             0.0::float8, 0.013::float8),
            ($5::text, '{{"schema_version":1,"trace":{{}},"type":"tool_job","operation_id":'
                 || '"op-' || h.tool || '","tool":"ping","arguments":{{}},"session_id":"'
                 || h.sid || '","task_id":"' || h.tool || '","compat":"{COMPAT}","pool":'
                 || '"{POOL}","deadline":null}}', 0.033, 0.044),
            ($6::text, '{{"schema_version":1,"trace":{{}},"type":"tool_result",'
                 || '"operation_id":"op-' || h.tool || '","session_id":"' || h.sid
                 || '","task_id":"' || h.tool || '","compat":"{COMPAT}","status":'
                 || '"succeeded"}}', 0.055, 0.061)
        ) AS v(routing_key, body, created, sent)
    """,
}


@dataclass
class Prefill:
    sessions: int
    start: float
    """When the history's first session started (epoch seconds); the last one started
    ``HISTORY_SPAN`` later, a minute before the prefill."""
    seconds: dict[str, float]
    """Per table, the seconds its ``INSERT`` took; ``vacuum analyze`` the statistics after."""

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


async def prefill(db: asyncpg.Connection, topology: Topology, sessions: int) -> Prefill:
    """Write ``sessions`` finished sessions into the schema ``db`` is on, then ``VACUUM
    ANALYZE`` the tables: the planner sees the history, and the autovacuum a bulk insert
    would trigger does not run in the middle of the measurements instead."""
    step = HISTORY_SPAN / max(sessions, 1)
    base = time.time() - HISTORY_SPAN - 60.0
    keys = (
        topology.brain_queue(COMPAT),
        topology.hands_queue(POOL),
        topology.results_queue(COMPAT),
    )
    seconds: dict[str, float] = {}
    for table in TABLES:
        start = time.monotonic()
        params = (sessions, base, step, *keys) if table == "outbox" else (sessions, base, step)
        await db.execute(INSERTS[table], *params)
        seconds[table] = time.monotonic() - start
        print(f"  {table}: {seconds[table]:.1f} s", flush=True)
    start = time.monotonic()
    await db.execute("VACUUM ANALYZE " + ", ".join(f'"{t}"' for t in TABLES))
    seconds["vacuum analyze"] = time.monotonic() - start
    print(f"  vacuum analyze: {seconds['vacuum analyze']:.1f} s", flush=True)
    return Prefill(sessions, base, seconds)


@dataclass(frozen=True)
class TableSize:
    table: str
    rows: int
    total: int
    """Bytes with indexes and TOAST (``pg_total_relation_size``)."""
    indexes: int


async def table_sizes(db: asyncpg.Connection, db_schema: str, *, exact: bool) -> list[TableSize]:
    """The size of every table in ``db_schema``, largest first; the rows counted when
    ``exact``, else the planner's count (exact after ``VACUUM ANALYZE``, and free)."""
    found = await db.fetch(
        "SELECT c.relname, greatest(c.reltuples, 0)::bigint AS rows, "
        "pg_total_relation_size(c.oid) AS total, pg_indexes_size(c.oid) AS indexes "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY total DESC, c.relname",
        db_schema,
    )
    sizes = []
    for r in found:
        rows = r["rows"]
        if exact:
            rows = await db.fetchval(f'SELECT count(*) FROM "{db_schema}"."{r["relname"]}"')
        sizes.append(TableSize(r["relname"], rows, r["total"], r["indexes"]))
    return sizes
