"""What the HTTP API (``brainhands api``) adds: pushed session changes and submissions.

Everything runs on PostgreSQL (a fresh schema, dropped at the end), RabbitMQ and Redis under a
unique namespace; every process started is stopped and every queue deleted at the end. One
API process (``python -m brainhands api --port 0``), one Brain (``brain --compat v1 --agents
bench.roundtrip_agents``) and one Hands process (``hands --pool bench --tools
bench.roundtrip_tools``). Requests carry an API key (``--auth keys``, the API's default) made
with ``brainhands.api.keys.create_key``, or none (``--auth none``).

1. **Commit -> server-sent event.** W watchers (1, then ``--watchers``) stream ``GET
   /sessions/{id}/events`` of one session (or ``--watched`` sessions), each read off its
   socket by a lean reader (``EventReader``: httpx costs more per event than the API), in
   ``--watcher-procs`` processes of this benchmark (``python -m bench.api _watch``), opened
   ``--ramp`` at a time, each once the earlier ones had their first view. Then this
   process commits to the session(s) itself, a ``Draft`` with one small entry through
   ``Store.commit``, every ``--interval`` seconds (a fixed schedule, whatever the watchers
   do), ``--commits`` times after ``--warmup`` unmeasured commits. The commit's time is
   taken right after ``Store.commit`` returns (the notification is delivered at the
   transaction's COMMIT, a little earlier: the commit's own duration is printed too); an
   event's time is taken when its blank line has been read (the whole event is in).
   Both clocks are ``time.monotonic()``, one system-wide clock on Linux. A watcher fell
   behind if it never got an event whose id is a measured commit's version (the stream
   skips to the latest view when it lags) or got it more than 1 s late. The CPU the API
   process and the watcher processes used while the commits ran is printed: a watcher
   process near 100 % of a core is itself the bottleneck.
2. **Submit -> answered.** S sessions (``--sessions``) of each kind, one after another, each
   submitting ``ping`` to the scripted ``pinger`` agent (one no-op tool call, then an
   answer): over HTTP in one request (``POST /sessions/{id}/submissions?wait=30``), written
   and read by hand (``BareHttp``) and through httpx; over HTTP in two (that ``POST``
   without ``wait``, then ``GET .../submissions/{request_id}?wait=30``) through httpx; each
   HTTP client on one keep-alive connection; and through ``brainhands.Client`` in this
   process (``client.submit(...)`` then ``handle.result(timeout=30)``), taking turns so
   noise hits all alike. The difference at p50 between the bare request and the client is
   what the API adds; httpx adds its own cost on top, shown by ``GET /healthz`` both ways.

3. **Long polls.** ``--long-polls`` requests (``GET .../submissions/{id}?wait=60``, one
   per session, on submissions no Brain runs) held open: the store reads a second they
   cost, against none open (``bench.api_long_polls``, which also compares with an older
   commit's API: ``--before REF``). 0 skips it.

Targets: the API adds <= 2 ms at p50 to a submission's round trip; with 1,000 watchers the
commit -> event p50 is <= 50 ms and none falls behind.

    .venv/bin/python -m bench.api [--watchers N] [--commits C] [--sessions S] [--auth none]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import httpx

from bench._services import (
    ROOT,
    Workers,
    add_service_urls,
    clean_namespace,
    log_events,
    log_tail,
    new_parser,
    open_store,
    process_cpu,
    run_names,
    stop_on_sigterm,
    worker_env,
)
from bench._stats import machine, percentile, print_table
from bench.roundtrip_agents import AGENT, COMPAT
from bench.roundtrip_tools import POOL
from brainhands.api.keys import create_key
from brainhands.client.direct import Client
from brainhands.shared.config import normalize_database_url
from brainhands.shared.store import Draft, Store
from brainhands.shared.tenancy import DEFAULT_TENANT
from brainhands.shared.topology import Topology

TARGET_API_ADDS_MS = 2.0
TARGET_WATCHERS_P50_MS = 50.0
LATE = 1.0
"""Seconds after its commit past which an event counts as late (its watcher fell behind)."""
TENANT = DEFAULT_TENANT
"""The key's tenant: the default one, whose store keys are the sessions' ids."""
ms = 1000.0


# Watchers: a child process of this module ------------------------------------------------------


def parse_watch_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.api _watch")
    parser.add_argument("--url", required=True)
    parser.add_argument("--sessions", required=True, help="comma-separated session ids")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--offset", type=int, default=0, help="index of the first watcher")
    parser.add_argument("--ramp", type=int, default=50)
    parser.add_argument("--key", default="")
    parser.add_argument("--within", type=float, default=90.0)
    return parser.parse_args(argv)


class EventReader(asyncio.Protocol):
    """One event stream, read straight off its socket: an HTTP/1.1 response with a chunked
    body of server-sent events, each event's ``id`` handed to ``heard`` with the time its
    blank line came in. A thousand httpx streams cost this machine more CPU per event than
    the API spends sending them, so the watchers measured themselves; this reader costs a
    few microseconds per event."""

    def __init__(self, heard: Callable[[int, float], None]) -> None:
        self.heard = heard
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._raw = bytearray()
        self._body = bytearray()
        self._head = False

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        self._raw += data
        try:
            if not self._head and not self._read_head():
                return
            self._read_chunks(now)
        except Exception as exc:  # a malformed response: this stream is done
            self._finish(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish(exc or ConnectionError("the API closed the stream"))

    def _read_head(self) -> bool:
        end = self._raw.find(b"\r\n\r\n")
        if end < 0:
            return False
        head = bytes(self._raw[:end]).lower()
        del self._raw[: end + 4]
        status = head.split(b"\r\n", 1)[0]
        if status.split()[1:2] != [b"200"] or b"transfer-encoding: chunked" not in head:
            raise ValueError(f"not an event stream: {status.decode(errors='replace')}")
        self._head = True
        return True

    def _read_chunks(self, now: float) -> None:
        raw = self._raw
        while (line := raw.find(b"\r\n")) >= 0:
            size = int(raw[:line], 16)
            if len(raw) < line + 4 + size:
                return
            self._body += raw[line + 2 : line + 2 + size]
            del raw[: line + 4 + size]
            if size == 0:
                self._finish(ConnectionError("the API ended the stream"))
                return
            while (cut := self._body.find(b"\n\n")) >= 0:
                event = bytes(self._body[:cut])
                del self._body[: cut + 2]
                for field_line in event.split(b"\n"):
                    if field_line.startswith(b"id:"):
                        self.heard(int(field_line[3:]), now)

    def _finish(self, exc: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(exc)


async def watch(args: argparse.Namespace) -> None:
    """Open ``count`` event streams; print a ``ready`` line once each has its first view.
    Then read one line from stdin, ``{"final": {session: version}, "within": s}``, wait until
    every stream saw its session's final version (or ``within`` passed), and print what each
    stream received: ``[[version, monotonic time], ...]``."""
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    sessions = args.sessions.split(",")
    watched = [sessions[(args.offset + i) % len(sessions)] for i in range(args.count)]
    events: list[list[tuple[int, float]]] = [[] for _ in range(args.count)]
    first = [asyncio.Event() for _ in range(args.count)]
    heard = asyncio.Event()
    errors: list[str] = []
    opening = asyncio.Semaphore(args.ramp)
    url = httpx.URL(args.url)
    host, port = url.host, url.port or 80
    auth = f"Authorization: Bearer {args.key}\r\n" if args.key else ""

    async def stream(i: int) -> None:
        got = events[i]

        def on_event(version: int, at: float) -> None:
            got.append((version, at))
            heard.set()
            if not first[i].is_set():  # its first view: the next stream may open
                first[i].set()
                opening.release()

        await opening.acquire()
        transport: asyncio.BaseTransport | None = None
        try:
            transport, reader = await loop.create_connection(
                lambda: EventReader(on_event), host, port
            )
            assert isinstance(transport, asyncio.WriteTransport)
            request = (
                f"GET /sessions/{watched[i]}/events HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Accept: text/event-stream\r\n{auth}\r\n"
            )
            transport.write(request.encode())
            await reader.done
        except Exception as exc:  # reported to the parent, which fails the run
            errors.append(f"watcher {args.offset + i}: {exc!r}")
        finally:
            if transport is not None:
                transport.close()
            if not first[i].is_set():
                first[i].set()
                opening.release()

    started = time.monotonic()
    tasks = [asyncio.create_task(stream(i)) for i in range(args.count)]
    try:
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in first)), args.within)
        ready = {"ready": args.count, "ramp": time.monotonic() - started, "errors": errors}
        print(json.dumps(ready), flush=True)
        order = json.loads(await stdin.readline())
        final: dict[str, int] = order["final"]
        deadline = time.monotonic() + float(order["within"])
        while time.monotonic() < deadline and not all(
            got and got[-1][0] >= final[sid] for got, sid in zip(events, watched, strict=True)
        ):
            heard.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(heard.wait(), max(0.0, deadline - time.monotonic()))
        print(json.dumps({"events": events, "sessions": watched, "errors": errors}), flush=True)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@dataclass
class WatcherProcess:
    proc: asyncio.subprocess.Process
    log: Path
    ramp: float = 0.0


def log_file(path: Path) -> BinaryIO:
    return open(path, "wb")


async def start_watchers(
    url: str,
    sessions: Sequence[str],
    count: int,
    procs: int,
    key: str,
    args: argparse.Namespace,
    logs: Path,
    label: str,
) -> list[WatcherProcess]:
    """``count`` watchers over ``procs`` processes, each ready (every stream had its view)."""
    procs = max(1, min(procs, count))
    started: list[WatcherProcess] = []
    offset = 0
    for j in range(procs):
        n = count // procs + (1 if j < count % procs else 0)
        log = logs / f"watch-{label}-{j}.log"
        argv = [
            *("-m", "bench.api", "_watch", "--url", url, "--sessions", ",".join(sessions)),
            *("--count", str(n), "--offset", str(offset), "--ramp", str(args.ramp)),
            *("--key", key, "--within", str(args.timeout)),
        ]
        with log_file(log) as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                *argv,
                cwd=ROOT,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                limit=1 << 28,
            )
        started.append(WatcherProcess(proc, log))
        offset += n
    for w in started:
        ready = await read_line(w, args.timeout + 10, "open its streams")
        if ready["errors"]:
            raise RuntimeError(f"watchers failed to open: {ready['errors'][:3]}")
        w.ramp = ready["ramp"]
    return started


async def read_line(w: WatcherProcess, within: float, what: str) -> dict[str, Any]:
    assert w.proc.stdout is not None
    try:
        line = await asyncio.wait_for(w.proc.stdout.readline(), within)
    except TimeoutError:
        line = b""
    if not line:
        raise RuntimeError(f"watcher process {w.proc.pid} did not {what}:\n{log_tail(w.log)}")
    result: dict[str, Any] = json.loads(line)
    return result


async def stop_watchers(watchers: Sequence[WatcherProcess]) -> None:
    for w in watchers:
        if w.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                w.proc.terminate()
    for w in watchers:
        try:
            await asyncio.wait_for(w.proc.wait(), 10)
        except TimeoutError:
            w.proc.kill()
            await w.proc.wait()


# Part 1: commit -> event ----------------------------------------------------------------------


@dataclass
class Commit:
    session_id: str
    version: int
    before: float
    after: float
    """``time.monotonic()`` right after ``Store.commit`` returned."""


@dataclass
class WatchResult:
    watchers: int
    procs: int
    sessions: int
    commits: list[Commit] = field(default_factory=list)
    samples: list[float] = field(default_factory=list)
    """Seconds from a commit's return to a watcher having its event, for every pair."""
    expected: int = 0
    missed: int = 0
    late: int = 0
    behind: int = 0
    """Watchers that missed a measured version or got one more than ``LATE`` s late."""
    ramp: float = 0.0
    wall: float = 0.0
    api_cpu: float = 0.0
    watcher_cpu: list[float] = field(default_factory=list)


async def new_sessions(store: Store, prefix: str, n: int) -> list[str]:
    ids = [f"{prefix}-{i}" for i in range(n)]
    for session_id in ids:  # the default tenant's, as the key's
        await store.create_session(session_id, compat=COMPAT)
    return ids


async def drive(
    store: Store, ids: Sequence[str], versions: dict[str, int], n: int, interval: float
) -> list[Commit]:
    """``n`` commits, round robin over ``ids``, one every ``interval`` s on a fixed schedule."""
    commits = []
    start = time.monotonic()
    for i in range(n):
        delay = start + i * interval - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        session_id = ids[i % len(ids)]
        draft = Draft(session_id, version=versions[session_id], fence=0)
        draft.append_entry("note", {"n": i, "text": "a commit the watchers should hear of"})
        before = time.monotonic()
        receipt = await store.commit(draft)
        after = time.monotonic()
        versions[session_id] = receipt.version
        commits.append(Commit(session_id, receipt.version, before, after))
    return commits


async def wait_idle(pid: int, within: float) -> None:
    """Wait until process ``pid`` used under 10 % of a core over a quarter second (the API
    done with the warm-up commits' views), or ``within`` seconds passed."""
    deadline = time.monotonic() + within
    await asyncio.sleep(0.25)
    while time.monotonic() < deadline:
        before = process_cpu(pid)
        await asyncio.sleep(0.25)
        after = process_cpu(pid)
        if before is None or after is None or after - before < 0.025:
            return


async def watch_phase(
    args: argparse.Namespace,
    store: Store,
    workers: Workers,
    api_pid: int,
    url: str,
    key: str,
    watchers: int,
    procs: int,
    logs: Path,
) -> WatchResult:
    label = f"w{watchers}"
    watched = min(args.watched, watchers)
    ids = await new_sessions(store, label, watched)
    result = WatchResult(watchers, max(1, min(procs, watchers)), watched)
    children = await start_watchers(url, ids, watchers, procs, key, args, logs, label)
    try:
        result.ramp = max(w.ramp for w in children)
        versions = dict.fromkeys(ids, 0)
        await drive(store, ids, versions, args.warmup, args.interval)
        await wait_idle(api_pid, args.timeout)
        api_cpu, cpu = process_cpu(api_pid) or 0.0, [process_cpu(w.proc.pid) for w in children]
        started = time.monotonic()
        result.commits = await drive(store, ids, versions, args.commits, args.interval)
        order = json.dumps({"final": versions, "within": args.drain}) + "\n"
        for w in children:
            assert w.proc.stdin is not None
            w.proc.stdin.write(order.encode())
            await w.proc.stdin.drain()
        received = [
            await read_line(w, args.drain + args.timeout, "report its events") for w in children
        ]
        result.wall = time.monotonic() - started
        result.api_cpu = (process_cpu(api_pid) or 0.0) - api_cpu
        result.watcher_cpu = [
            (process_cpu(w.proc.pid) or 0.0) - (before or 0.0)
            for w, before in zip(children, cpu, strict=True)
        ]
        workers.check_alive()
    finally:
        await stop_watchers(children)
    errors = [e for r in received for e in r["errors"]]
    if errors:
        raise RuntimeError(f"{len(errors)} watcher streams failed: {errors[:3]}")
    by_session: dict[str, list[Commit]] = {}
    for c in result.commits:
        by_session.setdefault(c.session_id, []).append(c)
    for r in received:
        for got, session_id in zip(r["events"], r["sessions"], strict=True):
            at = {version: t for version, t in got}
            behind = False
            for c in by_session.get(session_id, []):
                result.expected += 1
                t = at.get(c.version)
                if t is None:
                    result.missed += 1
                    behind = True
                    continue
                result.samples.append(t - c.after)
                if t - c.after > LATE:
                    result.late += 1
                    behind = True
            result.behind += behind
    return result


# Part 2: submit -> answered ---------------------------------------------------------------------


@dataclass
class SubmitResult:
    bare: list[float] = field(default_factory=list)
    """One request, ``POST ...?wait=``, written and read by ``BareHttp``."""
    http: list[float] = field(default_factory=list)
    """The same request through httpx."""
    http_two: list[float] = field(default_factory=list)
    """Two requests through httpx: ``POST``, then ``GET .../{request_id}?wait=``."""
    client: list[float] = field(default_factory=list)
    health_bare: list[float] = field(default_factory=list)
    """``GET /healthz``, the least an HTTP request costs: by ``BareHttp``, and by httpx."""
    health_http: list[float] = field(default_factory=list)


class BareHttp:
    """HTTP/1.1 on one keep-alive connection, written and read by hand: what the API adds,
    without what a client library adds (httpx costs this machine more per request than
    the API does: compare the ``/healthz`` lines)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, url: str) -> BareHttp:
        where = httpx.URL(url)
        return cls(*await asyncio.open_connection(where.host, where.port))

    async def request(
        self, method: str, path: str, headers: dict[str, str], body: Any = None
    ) -> tuple[int, Any]:
        """The status and the decoded JSON body (or None) of one request."""
        data = b"" if body is None else json.dumps(body).encode()
        lines = [f"{method} {path} HTTP/1.1", "Host: bench"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if body is not None:
            lines += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
        self.writer.write("\r\n".join(lines).encode() + b"\r\n\r\n" + data)
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
        fields = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
        raw = await self.reader.readexactly(int(fields["content-length"]))
        is_json = "json" in fields.get("content-type", "")
        return int(head[0].split()[1]), json.loads(raw) if is_json else None

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


PING = {"text": "ping", "agent": AGENT, "request_id": "r1"}


async def over_bare_http(bare: BareHttp, headers: dict[str, str], session_id: str) -> float:
    started = time.monotonic()
    status, record = await bare.request(
        "POST", f"/sessions/{session_id}/submissions?wait=30", headers, PING
    )
    took = time.monotonic() - started
    if status != 200 or record["status"] != "answered":
        raise RuntimeError(f"session {session_id} over HTTP: {status} {record}")
    return took


async def over_http(http: httpx.AsyncClient, session_id: str) -> float:
    started = time.monotonic()
    got = await http.post(f"/sessions/{session_id}/submissions?wait=30", json=PING)
    return answered(got, session_id, started)


async def over_http_two(http: httpx.AsyncClient, session_id: str) -> float:
    started = time.monotonic()
    posted = await http.post(f"/sessions/{session_id}/submissions", json=PING)
    posted.raise_for_status()
    got = await http.get(f"/sessions/{session_id}/submissions/r1", params={"wait": 30})
    return answered(got, session_id, started)


def answered(got: httpx.Response, session_id: str, started: float) -> float:
    took = time.monotonic() - started
    got.raise_for_status()
    record = got.json()
    if record["status"] != "answered":
        raise RuntimeError(f"session {session_id} over HTTP: {record}")
    return took


async def through_client(client: Client, session_id: str) -> float:
    started = time.monotonic()
    handle = await client.submit(session_id, "ping", agent=AGENT, request_id="r1")
    await handle.result(timeout=30)
    return time.monotonic() - started


async def submit_phase(
    args: argparse.Namespace, client: Client, url: str, key: str, workers: Workers
) -> SubmitResult:
    result = SubmitResult()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    bare = await BareHttp.connect(url)
    try:
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:
            for i in range(args.warmup + args.sessions):
                # Taking turns, each going first, second, third and fourth as often.
                runs = [
                    (result.bare, over_bare_http(bare, headers, f"bare-{i:04d}")),
                    (result.http, over_http(http, f"http-{i:04d}")),
                    (result.http_two, over_http_two(http, f"http2-{i:04d}")),
                    (result.client, through_client(client, f"client-{i:04d}")),
                ]
                for samples, run in runs[i % 4 :] + runs[: i % 4]:
                    took = await run
                    if i >= args.warmup:
                        samples.append(took)
                workers.check_alive()
            for _ in range(10 * args.sessions):
                started = time.monotonic()
                await bare.request("GET", "/healthz", headers)
                result.health_bare.append(time.monotonic() - started)
                started = time.monotonic()
                (await http.get("/healthz")).raise_for_status()
                result.health_http.append(time.monotonic() - started)
    finally:
        await bare.close()
    return result


# The run ----------------------------------------------------------------------------------------


@dataclass
class Results:
    submits: SubmitResult | None = None
    watch: list[WatchResult] = field(default_factory=list)


async def wait_listening(workers: Workers, within: float = 60) -> int:
    [worker] = [w for w in workers.procs if w.role == "api"]
    deadline = time.monotonic() + within
    while True:
        for e in log_events(worker.log):
            if e.get("event") == "api_listening":
                return int(e["port"])
        if worker.proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the API did not start listening:\n{log_tail(worker.log)}")
        await asyncio.sleep(0.05)


async def run(args: argparse.Namespace, namespace: str, db_schema: str, logs: Path) -> Results:
    results = Results()
    async with contextlib.AsyncExitStack() as stack:
        store = await open_store(args.database_url, db_schema)
        stack.push_async_callback(store.close)
        key = ""
        if args.auth == "keys":
            _, key = await create_key(store, tenant=TENANT, scopes=["read", "submit"], name="bench")
        env = worker_env(
            args,
            namespace,
            db_schema,
            BRAINHANDS_API_AUTH=args.auth,
            # One key opens every watcher's stream and makes every request, by design.
            BRAINHANDS_API_MAX_STREAMS="100000",
            BRAINHANDS_API_RATE="100000",
            BRAINHANDS_API_BURST="100000",
        )
        workers = stack.enter_context(Workers(env, logs))
        workers.start("brain", "--compat", COMPAT, "--agents", "bench.roundtrip_agents")
        workers.start("hands", "--pool", POOL, "--tools", "bench.roundtrip_tools")
        await workers.wait_consuming()
        api = workers.start("api", "--port", "0")
        url = f"http://127.0.0.1:{await wait_listening(workers)}"
        client = await Client.connect(
            database_url=normalize_database_url(args.database_url),
            rabbitmq_url=args.rabbitmq_url,
            namespace=namespace,
            compat=COMPAT,
            database_schema=db_schema,
        )
        stack.push_async_callback(client.close)
        print(
            f"2. submit -> answered: {args.sessions} serial sessions over HTTP and through "
            f"brainhands.Client, taking turns (auth: {args.auth})",
            flush=True,
        )
        results.submits = await submit_phase(args, client, url, key, workers)
        for watchers, procs in ((1, 1), (args.watchers, args.watcher_procs)):
            print(
                f"1. commit -> event: {watchers} watcher(s) in {min(procs, watchers)} "
                f"process(es), {args.commits} commits every {args.interval} s",
                flush=True,
            )
            results.watch.append(
                await watch_phase(
                    args, store, workers, api.proc.pid, url, key, watchers, procs, logs
                )
            )
    return results


# Report -----------------------------------------------------------------------------------------


def fmt(samples: Sequence[float], p: float) -> str:
    return f"{percentile(samples, p) * ms:.1f}" if samples else "-"


def report(args: argparse.Namespace, r: Results) -> None:
    assert r.submits is not None
    rows: list[list[object]] = []
    for w in r.watch:
        where = f"{w.sessions} session" + ("s" if w.sessions > 1 else "")
        rows.append(
            [
                f"commit -> SSE event, {w.watchers} watcher(s) on {where}, {w.procs} watcher "
                f"process(es), {len(w.commits)} commits",
                fmt(w.samples, 50),
                fmt(w.samples, 99),
                f"{len(w.samples)}/{w.expected}",
                f"{w.behind} of {w.watchers} fell behind ({w.missed} missed, {w.late} late)",
            ]
        )
    sub = r.submits
    n = len(sub.client)
    rows += [
        [f"submit -> answered over HTTP, POST ?wait=, bare HTTP/1.1 ({n} serial)",
         fmt(sub.bare, 50), fmt(sub.bare, 99), str(n), f"auth: {args.auth}"],
        [f"submit -> answered over HTTP, POST ?wait=, httpx ({n} serial)",
         fmt(sub.http, 50), fmt(sub.http, 99), str(n), "one request"],
        [f"submit -> answered over HTTP, POST + GET ?wait=, httpx ({n} serial)",
         fmt(sub.http_two, 50), fmt(sub.http_two, 99), str(n), "two requests"],
        [f"submit -> answered through brainhands.Client ({n} serial)",
         fmt(sub.client, 50), fmt(sub.client, 99), str(n), "same run, taking turns"],
    ]  # fmt: skip
    for label, samples in (
        ("the API adds (POST ?wait=, bare - Client)", sub.bare),
        ("the API and httpx add (POST ?wait=, httpx - Client)", sub.http),
        ("... with two requests (POST + GET, httpx - Client)", sub.http_two),
    ):
        p50 = (percentile(samples, 50) - percentile(sub.client, 50)) * ms
        p99 = (percentile(samples, 99) - percentile(sub.client, 99)) * ms
        paired = percentile([a - b for a, b in zip(samples, sub.client, strict=True)], 50) * ms
        rows.append([label, f"{p50:+.1f}", f"{p99:+.1f}", "-", f"median of pairs {paired:+.1f}"])
    h = len(sub.health_bare)
    rows += [
        [f"GET /healthz, bare HTTP/1.1 ({h} serial)", fmt(sub.health_bare, 50),
         fmt(sub.health_bare, 99), str(h), "the least a request costs"],
        [f"GET /healthz, httpx ({h} serial)", fmt(sub.health_http, 50),
         fmt(sub.health_http, 99), str(h), "... with httpx's own cost"],
    ]  # fmt: skip
    adds = (percentile(sub.bare, 50) - percentile(sub.client, 50)) * ms
    print()
    print_table(["measure", "p50 ms", "p99 ms", "samples", "notes"], rows, align="<>>><")
    print()
    print(
        "commit -> SSE event: from Store.commit returning in this process to a watcher having "
        "read the event with that version id (time.monotonic in both); a watcher fell behind "
        f"if it missed a measured version or got it > {LATE:.0f} s late."
    )
    for w in r.watch:
        durations = [c.after - c.before for c in w.commits]
        cpu = ", ".join(f"{c / w.wall:.0%}" for c in w.watcher_cpu)
        print(
            f"{w.watchers} watcher(s): streams opened in {w.ramp:.1f} s; each commit took "
            f"{fmt(durations, 50)} ms at p50; while the commits ran and the streams drained "
            f"({w.wall:.1f} s) the API process used {w.api_cpu / w.wall:.0%} of a core "
            f"({w.api_cpu / max(1, len(w.commits)) * ms:.0f} ms CPU per commit), the watcher "
            f"process(es) {cpu} of a core each"
        )
    many = r.watch[-1]
    p50 = percentile(many.samples, 50) * ms if many.samples else float("inf")
    met = "MET" if p50 <= TARGET_WATCHERS_P50_MS and not many.behind else "NOT MET"
    print(
        f"target {many.watchers} watchers p50 <= {TARGET_WATCHERS_P50_MS:.0f} ms with none "
        f"behind: {p50:.1f} ms, {many.behind} behind: {met}"
    )
    met = "MET" if adds <= TARGET_API_ADDS_MS else "NOT MET"
    print(f"target the API adds <= {TARGET_API_ADDS_MS:.0f} ms at p50: {adds:+.1f} ms: {met}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    parser.add_argument("--watchers", type=int, default=1000, help="watchers (part 1)")
    parser.add_argument(
        "--watcher-procs", type=int, default=2, help="processes the watchers run in (part 1)"
    )
    parser.add_argument("--watched", type=int, default=1, help="sessions watched (part 1)")
    parser.add_argument("--commits", type=int, default=20, help="measured commits (part 1)")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between commits")
    parser.add_argument("--ramp", type=int, default=50, help="streams opening at once")
    parser.add_argument(
        "--drain", type=float, default=15.0, help="seconds the watchers may take after the last"
    )
    parser.add_argument("--sessions", type=int, default=30, help="serial sessions (part 2)")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured commits and sessions")
    parser.add_argument("--auth", choices=["keys", "none"], default="keys", help="API auth")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds a step may take")
    parser.add_argument("--long-polls", type=int, default=1000, help="waiters (part 3; 0: none)")
    parser.add_argument("--logs", help="keep the processes' logs in this directory")
    add_service_urls(parser, "postgres", "rabbitmq", "redis")
    args = parser.parse_args(argv)
    counts = (args.watchers, args.watcher_procs, args.watched, args.commits, args.sessions)
    if min(*counts, args.ramp) < 1 or args.warmup < 0 or args.interval <= 0:
        parser.error("counts must be positive, --warmup not negative, --interval above 0")
    return args


async def main(args: argparse.Namespace) -> None:
    stop_on_sigterm()
    _, namespace, db_schema = run_names("api")
    print(
        f"api bench on {machine()}; namespace {namespace}, PostgreSQL schema {db_schema}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="brainhands-bench-api-") as tmp:
        logs = Path(args.logs or tmp)  # Workers makes it
        try:
            results = await run(args, namespace, db_schema, logs)
        finally:
            topology = Topology(namespace)
            queues = [topology.hands_queue(POOL), *topology.brain_queues(COMPAT)]
            await clean_namespace(args, namespace, queues, [db_schema])
    report(args, results)
    if args.long_polls:
        await long_poll_row(args)
    print(f"({machine()})")


async def long_poll_row(args: argparse.Namespace) -> None:
    """Part 3, on a deployment of its own."""
    from bench import api_long_polls  # it imports this module's helpers

    print(f"\n3. long polls: {args.long_polls} waiters", flush=True)
    polls = argparse.Namespace(
        **vars(args),
        waiters=args.long_polls,
        window=20.0,
        settle=2 * api_long_polls.STATS_FLUSH + 1,
    )
    with tempfile.TemporaryDirectory(prefix="brainhands-bench-api-polls-") as tmp:
        found = await api_long_polls.measure(polls, Path(args.logs or tmp) / "long-polls", ROOT)
    print()
    print_table(["long polls", "this tree"], api_long_polls.rows(found), align="<>")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
        if sys.argv[1:2] == ["_watch"]:
            asyncio.run(watch(parse_watch_args(sys.argv[2:])))
        else:
            asyncio.run(main(parse_args()))
