"""``HttpClient`` (and ``SyncHttpClient``, blocking): the client's verbs over the HTTP API,
with an API key.

An application that holds no store or broker credentials reaches a deployment through
``brainhands api``: it submits, waits, cancels, signals, approves and denies, reads sessions
and follows a session's events, as its key's tenant and within its key's scopes. Errors
come back as the API's problems, raised as the runtime's own exceptions: ``NotFoundError``
(404), ``DecisionRefused`` (409), ``InvalidRequest`` (422), ``ApiError`` otherwise.

Every id goes into a path as one segment, encoded (``path``): an id holding ``/``, ``..``,
``?`` or ``#`` names nothing but that id. A body no view could show again
(``shared/storable.py``) is refused before it is sent.
"""

# ``timeout`` as arq's ``Job.result`` and asyncio's ``wait_for`` name it.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, Unpack
from urllib.parse import quote

import httpx
from pydantic import TypeAdapter

from brainhands.client.approvals import Decision, PendingApproval
from brainhands.client.schedules import ScheduleOptions, ScheduleView
from brainhands.client.submission import Handle, SignalOptions, SubmitOptions
from brainhands.client.views import SessionView
from brainhands.client.workspaces import WorkspaceVersionView
from brainhands.shared.errors import (
    AnswerTimeout,
    BrainhandsError,
    DecisionRefused,
    InvalidRequest,
    NotFoundError,
    SessionRunning,
)
from brainhands.shared.statuses import FINAL_SUBMISSION_STATUSES
from brainhands.shared.storable import check_storable
from brainhands.shared.store import DocumentHistory, DocumentIncrement, DocumentRecord
from brainhands.shared.vocabulary import CompensationAction

T = TypeVar("T")
_SESSION = TypeAdapter(SessionView)
_PENDING = TypeAdapter(list[PendingApproval])
_DECISIONS = TypeAdapter(list[Decision])
_INCREMENTS = TypeAdapter(list[DocumentIncrement])
WAIT_MAX = 60.0
"""The longest wait the API holds one request for; longer waits take several."""


class ApiError(BrainhandsError):
    """The API refused a request or failed (``status``, and its problem as ``problem``)."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
        super().__init__(f"{status} {problem.get('title', '')}: {problem.get('detail', '')}")


@dataclass(frozen=True)
class SubmissionState:
    """A submission as the API shows it."""

    session_id: str
    request_id: str
    status: str
    answer: Any
    error: str | None


@dataclass(frozen=True)
class Event:
    """One event of a session's stream: a ``view`` (``id`` its version) or a live note."""

    event: str
    data: Any
    id: str | None = None


@dataclass(frozen=True)
class HttpSubmission(Handle["HttpClient"]):
    """A handle on one submission made through an ``HttpClient``."""

    async def status(self) -> SubmissionState:
        return await self.client.wait(self.session_id, self.request_id, timeout=0)


class HttpClient:
    """The client over HTTP: ``async with HttpClient(url, key) as client: ...``."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=httpx.Timeout(timeout, read=WAIT_MAX + timeout),
        )

    async def __aenter__(self) -> HttpClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, **options: Any) -> Any:
        if "json" in options:
            check_storable(options["json"], "body")
        response = await self._http.request(method, path, **options)
        if response.is_success:
            return response.json()
        raise _error(response)

    async def _download(self, path: str) -> bytes:
        response = await self._http.get(path)
        if response.is_success:
            return response.content
        raise _error(response)

    # Acts -----------------------------------------------------------------------------------

    async def submit(
        self,
        session_id: str,
        input: str | dict[str, Any],
        **options: Unpack[SubmitOptions],
    ) -> HttpSubmission:
        """Submit ``input`` (a message, for ``agent``, or an input as it is) once per
        ``request_id`` (random by default); its end is posted to ``callback_url``, signed,
        at least once."""
        body: dict[str, Any] = (
            {"text": input, "agent": options.get("agent")}
            if isinstance(input, str)
            else {"input": input}
        )
        for name in ("request_id", "callback_url", "budget"):
            if options.get(name) is not None:
                body[name] = options.get(name)
        made = await self._call("POST", _path("sessions", session_id, "submissions"), json=body)
        return HttpSubmission(self, session_id, made["request_id"], bool(made["created"]))

    def submission(self, session_id: str, request_id: str) -> HttpSubmission:
        """A handle on a submission made earlier."""
        return HttpSubmission(self, session_id, request_id, created=False)

    async def cancel(self, session_id: str, request_id: str) -> str:
        path = _path("sessions", session_id, "submissions", request_id, "cancel")
        said: str = (await self._call("POST", path))["status"]
        return said

    async def erase(self, session_id: str, *, cancel: bool = False) -> dict[str, Any]:
        """Erase the session and all it owns (``Client.erase``): what went, by table.
        ``SessionRunning`` (409) if it has work open and not ``cancel``."""
        path = _path("sessions", session_id)
        erased: dict[str, Any] = await self._call("DELETE", path, params={"cancel": cancel})
        return erased

    async def signal(
        self,
        session_id: str,
        name: str,
        payload: Any = None,
        **options: Unpack[SignalOptions],
    ) -> bool:
        """Send a signal; returns whether it is new (the same ``signal_id`` counts once)."""
        body = {
            "name": name,
            "payload": payload,
            "signal_id": options.get("signal_id"),
            "decision": options.get("decision", False),
        }
        sent = await self._call("POST", _path("sessions", session_id, "signals"), json=body)
        return bool(sent["created"])

    async def raise_budget(
        self, session_id: str, *, raise_id: str | None = None, **limits: float
    ) -> bool:
        """Raise the budget of the session's agent run (``tokens=``, ``cost=``,
        ``tool_calls=``, ``seconds=``): a run stopped at it resumes. Returns whether the
        raise is new (the same ``raise_id`` counts once); ``DecisionRefused`` (409) when no
        run of the session is stopped at its budget."""
        body = {**limits, "raise_id": raise_id}
        sent = await self._call("POST", _path("sessions", session_id, "budget"), json=body)
        return bool(sent["created"])

    async def set_tenant_budget(self, tenant: str, **limits: float) -> dict[str, Any]:
        """Set ``tenant``'s budget (``tokens=``, ``cost=``, ``tool_calls=``), with an
        ``operator`` key: its runs stopped at it resume. Returns the budget, what the tenant
        spent (``used``) and how many stopped runs were sent the raise (``resumed``)."""
        budget: dict[str, Any] = await self._call(
            "PUT", _path("tenants", tenant, "budget"), json=limits
        )
        return budget

    async def tenant_budget(self, tenant: str) -> dict[str, Any]:
        """``tenant``'s budget and what it spent, with an ``operator`` key; ``NotFoundError``
        when it has none."""
        budget: dict[str, Any] = await self._call("GET", _path("tenants", tenant, "budget"))
        return budget

    async def create_schedule(
        self, schedule_id: str, **options: Unpack[ScheduleOptions]
    ) -> ScheduleView:
        """Create a schedule of the key's tenant (``Client.create_schedule`` says what the
        options mean); ``InvalidRequest`` (422) with the reason for a bad cron expression,
        time zone or target, ``DecisionRefused`` (409) if the id is taken."""
        body = {"id": schedule_id, **options}
        return ScheduleView(**await self._call("POST", "/schedules", json=body))

    async def schedules(self) -> list[ScheduleView]:
        """The key's tenant's schedules, by id."""
        return [ScheduleView(**s) for s in await self._call("GET", "/schedules")]

    async def schedule(self, schedule_id: str) -> ScheduleView:
        return ScheduleView(**await self._call("GET", _path("schedules", schedule_id)))

    async def pause_schedule(self, schedule_id: str) -> ScheduleView:
        path = _path("schedules", schedule_id, "pause")
        return ScheduleView(**await self._call("POST", path))

    async def resume_schedule(self, schedule_id: str) -> ScheduleView:
        path = _path("schedules", schedule_id, "resume")
        return ScheduleView(**await self._call("POST", path))

    async def delete_schedule(self, schedule_id: str) -> None:
        response = await self._http.delete(_path("schedules", schedule_id))
        if not response.is_success:
            raise _error(response)

    async def create_workspace(
        self, session_id: str, name: str, tarball: bytes
    ) -> WorkspaceVersionView:
        """Give the session's workspace ``name`` its first version, the files of the tar
        archive ``tarball`` (``Client.create_workspace``)."""
        path = _path("sessions", session_id, "workspaces", name)
        headers = {"Content-Type": "application/octet-stream"}
        made = await self._call("PUT", path, content=tarball, headers=headers)
        return WorkspaceVersionView(**made)

    async def workspaces(self, session_id: str) -> list[WorkspaceVersionView]:
        """The latest version of each of the session's workspaces."""
        found = await self._call("GET", _path("sessions", session_id, "workspaces"))
        return [WorkspaceVersionView(**v) for v in found]

    async def workspace_versions(self, session_id: str, name: str) -> list[WorkspaceVersionView]:
        """Every version of the workspace, oldest first, with the call that made each."""
        path = _path("sessions", session_id, "workspaces", name, "versions")
        return [WorkspaceVersionView(**v) for v in await self._call("GET", path)]

    async def workspace_diff(
        self, session_id: str, name: str, before: int, after: int
    ) -> dict[str, str]:
        """Each path changed from ``before`` to ``after``: ``added``, ``removed``, ``changed``."""
        path = _path("sessions", session_id, "workspaces", name, "diff")
        found = await self._call("GET", path, params={"before": before, "after": after})
        return dict(found["paths"])

    async def workspace_file(self, session_id: str, name: str, version: int, path: str) -> bytes:
        """The content of the file ``path`` at ``version``."""
        where = ("sessions", session_id, "workspaces", name, "versions", str(version), "files")
        return await self._download(_path(*where, *path.split("/")))

    async def workspace_tarball(self, session_id: str, name: str, version: int) -> bytes:
        """The workspace's files at ``version``, as a gzipped tar archive."""
        where = ("sessions", session_id, "workspaces", name, "versions", str(version))
        return await self._download(_path(*where, "tarball"))

    async def act_on_compensation(
        self, session_id: str, task_id: str, action: CompensationAction, **act: str | None
    ) -> bool:
        """``retry`` or ``abandon`` (``reason=``, ``action_id=``) the failed undo task
        ``task_id`` waits with; whether the act is new (the same ``action_id`` counts once).
        ``DecisionRefused`` (409) when the task is not waiting for one."""
        path = _path("sessions", session_id, "compensations", task_id)
        return bool((await self._call("POST", path, json={"action": action, **act}))["created"])

    async def approve(
        self, session_id: str, approvals: str | Sequence[str], **decision: Any
    ) -> list[Decision]:
        """Approve the named calls (``by``, ``reason``, ``decision_id`` and, for one call,
        ``arguments``, its edit, as the API takes them)."""
        return await self._decide(session_id, approvals, "approve", decision)

    async def deny(
        self, session_id: str, approvals: str | Sequence[str], *, reason: str, **decision: Any
    ) -> list[Decision]:
        """Deny the named calls: the model reads ``reason``."""
        return await self._decide(session_id, approvals, "deny", {**decision, "reason": reason})

    async def _decide(
        self,
        session_id: str,
        approvals: str | Sequence[str],
        verdict: str,
        body: dict[str, Any],
    ) -> list[Decision]:
        """The decision that counts for each call, as ``Client.decide`` gives them."""
        ids = [approvals] if isinstance(approvals, str) else list(approvals)
        if not ids:
            raise InvalidRequest("name the calls to decide")
        made = [
            await self._call(
                "POST", _path("sessions", session_id, "approvals", i, verdict), json=body
            )
            for i in ids
        ]
        return _DECISIONS.validate_python(made)

    # Reading --------------------------------------------------------------------------------

    async def stream_token(self, session_id: str | None = None, *, ttl: int = 300) -> str:
        """A token that opens event streams (``?token=``) for ``ttl`` seconds, and reads
        nothing else: what a browser's ``EventSource`` is given instead of the key."""
        body = {"session_id": session_id, "ttl": ttl}
        minted: str = (await self._call("POST", "/stream-tokens", json=body))["token"]
        return minted

    async def wait(
        self, session_id: str, request_id: str, *, timeout: float | None = None
    ) -> SubmissionState:
        """The submission once it has ended (``AnswerTimeout`` after ``timeout`` s; 0:
        as it stands now, whatever its status)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        path = _path("sessions", session_id, "submissions", request_id)
        while True:
            left = WAIT_MAX if deadline is None else max(0.0, deadline - loop.time())
            got = await self._call("GET", path, params={"wait": min(WAIT_MAX, left)})
            record = _record(got)
            if record.status in FINAL_SUBMISSION_STATUSES or timeout == 0:
                return record
            if deadline is not None and loop.time() >= deadline:
                raise AnswerTimeout(record, timeout or 0.0)

    async def session(self, session_id: str) -> SessionView:
        """The session as it stands, as ``Client.session`` gives it (its rows name the
        session as the key's tenant does)."""
        return _SESSION.validate_python(await self._call("GET", _path("sessions", session_id)))

    async def document(self, session_id: str, name: str, *, history: int = 100) -> DocumentHistory:
        """The session's document ``name``: its latest value and its latest ``history``
        writes, oldest first, as ``Client.document`` gives them."""
        path = _path("sessions", session_id, "documents", name)
        got = await self._call("GET", path, params={"history": history})
        document = DocumentRecord(got["name"], got["version"], got["value"], got["kind_version"])
        return DocumentHistory(document, _INCREMENTS.validate_python(got["history"]))

    async def sessions(self, **filters: Any) -> AsyncIterator[dict[str, Any]]:
        """Every session of the key's tenant, newest first, page after page (``filters``:
        ``status``, ``needs_action``, ``compat``, ``updated_since``)."""
        after = None
        while True:
            params = {**filters, **({"after": after} if after else {})}
            page = await self._call("GET", "/sessions", params=params)
            for row in page["sessions"]:
                yield row
            after = page["next"]
            if after is None:
                return

    async def pending_approvals(self, session_id: str | None = None) -> list[PendingApproval]:
        """The calls waiting for a decision, oldest first (of one session, or of the key's
        tenant), as ``Client.pending_approvals`` gives them."""
        params = {"session_id": session_id} if session_id else {}
        return _PENDING.validate_python(await self._call("GET", "/approvals", params=params))

    async def stream(
        self, session_id: str, *, last_event_id: str | None = None
    ) -> AsyncIterator[Event]:
        """The session's events, for ever: its view now and at every commit, live notes
        between. A dropped connection is opened again from the last view seen
        (``Last-Event-ID``): nothing is missed, nothing repeated."""
        seen = last_event_id
        while True:
            headers = {"Last-Event-ID": seen} if seen is not None else {}
            path = _path("sessions", session_id, "events")
            try:
                async with self._http.stream(
                    "GET", path, headers=headers, timeout=httpx.Timeout(None)
                ) as response:
                    if not response.is_success:
                        await response.aread()
                        raise _error(response)
                    async for event in _events(response):
                        if event.id is not None:
                            seen = event.id
                        yield event
            except (httpx.TransportError, httpx.RemoteProtocolError):
                await asyncio.sleep(0.5)  # the API went away: open the stream again


def _path(*segments: str) -> str:
    """``/`` and the segments, each encoded whole: nothing in one (``/``, ``?``, ``#``,
    ``%``, a dot segment) can reach another route or another query."""
    encoded = (quote(s, safe="") for s in segments)
    return "/" + "/".join("%2E" * len(s) if s in (".", "..") else s for s in encoded)


async def _events(response: httpx.Response) -> AsyncIterator[Event]:
    fields: dict[str, str] = {}
    data: list[str] = []
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield Event(
                    fields.get("event", "message"), json.loads("\n".join(data)), fields.get("id")
                )
            fields, data = {}, []
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                data.append(value)
            else:
                fields[name] = value


def _record(got: dict[str, Any]) -> SubmissionState:
    return SubmissionState(
        got["session_id"], got["request_id"], got["status"], got.get("answer"), got.get("error")
    )


def _error(response: httpx.Response) -> BrainhandsError:
    try:
        problem = response.json()
    except ValueError:
        problem = {"title": response.reason_phrase, "detail": response.text[:500]}
    detail = str(problem.get("detail", ""))
    if response.status_code == 404:
        return NotFoundError(detail)
    if response.status_code == 409 and problem.get("title") == SessionRunning.title:
        return SessionRunning(detail)
    if response.status_code == 409:
        return DecisionRefused(detail)
    if response.status_code == 422:
        return InvalidRequest(detail)
    return ApiError(response.status_code, problem)


class SyncHttpClient:
    """``HttpClient`` for code that is not async: the same verbs, each blocking until done.
    Its requests run on an event loop of its own, in a thread it starts and ``close`` ends.

    ``with SyncHttpClient(url, key) as client: client.submit(...).result(timeout=60)``
    """

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._client: HttpClient = self._run(_make(base_url, api_key, timeout))

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()

    def __enter__(self) -> SyncHttpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._run(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def submit(
        self, session_id: str, input: str | dict[str, Any], **options: Unpack[SubmitOptions]
    ) -> SyncSubmission:
        return SyncSubmission(self, self._run(self._client.submit(session_id, input, **options)))

    def wait(
        self, session_id: str, request_id: str, *, timeout: float | None = None
    ) -> SubmissionState:
        return self._run(self._client.wait(session_id, request_id, timeout=timeout))

    def cancel(self, session_id: str, request_id: str) -> str:
        return self._run(self._client.cancel(session_id, request_id))

    def erase(self, session_id: str, *, cancel: bool = False) -> dict[str, Any]:
        return self._run(self._client.erase(session_id, cancel=cancel))

    def signal(
        self, session_id: str, name: str, payload: Any = None, **options: Unpack[SignalOptions]
    ) -> bool:
        return self._run(self._client.signal(session_id, name, payload, **options))

    def raise_budget(
        self, session_id: str, *, raise_id: str | None = None, **limits: float
    ) -> bool:
        return self._run(self._client.raise_budget(session_id, raise_id=raise_id, **limits))

    def set_tenant_budget(self, tenant: str, **limits: float) -> dict[str, Any]:
        return self._run(self._client.set_tenant_budget(tenant, **limits))

    def tenant_budget(self, tenant: str) -> dict[str, Any]:
        return self._run(self._client.tenant_budget(tenant))

    def create_schedule(self, schedule_id: str, **options: Unpack[ScheduleOptions]) -> ScheduleView:
        return self._run(self._client.create_schedule(schedule_id, **options))

    def schedules(self) -> list[ScheduleView]:
        return self._run(self._client.schedules())

    def schedule(self, schedule_id: str) -> ScheduleView:
        return self._run(self._client.schedule(schedule_id))

    def pause_schedule(self, schedule_id: str) -> ScheduleView:
        return self._run(self._client.pause_schedule(schedule_id))

    def resume_schedule(self, schedule_id: str) -> ScheduleView:
        return self._run(self._client.resume_schedule(schedule_id))

    def delete_schedule(self, schedule_id: str) -> None:
        self._run(self._client.delete_schedule(schedule_id))

    def create_workspace(self, session_id: str, name: str, tarball: bytes) -> WorkspaceVersionView:
        return self._run(self._client.create_workspace(session_id, name, tarball))

    def workspaces(self, session_id: str) -> list[WorkspaceVersionView]:
        return self._run(self._client.workspaces(session_id))

    def workspace_versions(self, session_id: str, name: str) -> list[WorkspaceVersionView]:
        return self._run(self._client.workspace_versions(session_id, name))

    def workspace_diff(self, session_id: str, name: str, before: int, after: int) -> dict[str, str]:
        return self._run(self._client.workspace_diff(session_id, name, before, after))

    def workspace_file(self, session_id: str, name: str, version: int, path: str) -> bytes:
        return self._run(self._client.workspace_file(session_id, name, version, path))

    def workspace_tarball(self, session_id: str, name: str, version: int) -> bytes:
        return self._run(self._client.workspace_tarball(session_id, name, version))

    def act_on_compensation(
        self, session_id: str, task_id: str, action: CompensationAction, **act: str | None
    ) -> bool:
        return self._run(self._client.act_on_compensation(session_id, task_id, action, **act))

    def approve(
        self, session_id: str, approvals: str | Sequence[str], **decision: Any
    ) -> list[Decision]:
        return self._run(self._client.approve(session_id, approvals, **decision))

    def deny(
        self, session_id: str, approvals: str | Sequence[str], *, reason: str, **decision: Any
    ) -> list[Decision]:
        return self._run(self._client.deny(session_id, approvals, reason=reason, **decision))

    def session(self, session_id: str) -> SessionView:
        return self._run(self._client.session(session_id))

    def document(self, session_id: str, name: str, *, history: int = 100) -> DocumentHistory:
        return self._run(self._client.document(session_id, name, history=history))

    def sessions(self, **filters: Any) -> list[dict[str, Any]]:
        """Every session of the key's tenant, newest first."""

        async def every() -> list[dict[str, Any]]:
            return [s async for s in self._client.sessions(**filters)]

        return self._run(every())

    def pending_approvals(self, session_id: str | None = None) -> list[PendingApproval]:
        return self._run(self._client.pending_approvals(session_id))

    def stream_token(self, session_id: str | None = None, *, ttl: int = 300) -> str:
        return self._run(self._client.stream_token(session_id, ttl=ttl))


@dataclass(frozen=True)
class SyncSubmission:
    """``HttpSubmission``, blocking."""

    client: SyncHttpClient = field(repr=False)
    handle: HttpSubmission

    @property
    def request_id(self) -> str:
        return self.handle.request_id

    @property
    def created(self) -> bool:
        return self.handle.created

    def status(self) -> SubmissionState:
        return self.client._run(self.handle.status())

    def result(self, timeout: float | None = None) -> Any:
        return self.client._run(self.handle.result(timeout=timeout))

    def cancel(self) -> str:
        return self.client._run(self.handle.cancel())


async def _make(base_url: str, api_key: str, seconds: float) -> HttpClient:
    """An ``HttpClient`` made on the loop that runs it (its connections belong there)."""
    return HttpClient(base_url, api_key, timeout=seconds)
