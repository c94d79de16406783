"""Every error the API answers, as an ``application/problem+json`` body (RFC 9457) saying
what is wrong: the handlers that turn exceptions into problems, and their document."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from brainhands.api.keys import Principal
from brainhands.shared.errors import (
    DecisionRefused,
    InvalidRequest,
    NotFoundError,
    SessionRunning,
)
from brainhands.shared.storable import MAX_DEPTH

log = logging.getLogger("brainhands.api")

PROBLEM = "application/problem+json"


class Problem(BaseModel):
    """What is wrong with a request (RFC 9457 ``application/problem+json``)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    errors: list[dict[str, str]] | None = None
    """For invalid input: each field (``where``) and what is wrong with it."""


PROBLEMS: dict[int | str, dict[str, Any]] = {
    status: {"model": Problem, "content": {PROBLEM: {}}, "description": what}
    for status, what in (
        (400, "the body could not be read (not JSON, or not in the encoding it claims)"),
        (401, "no API key, or an unknown, revoked or malformed one"),
        (
            403,
            "the key lacks the scope this needs, the request's Host is not served, or "
            "(authentication off) a write came from another site's page",
        ),
        (404, "no such session, submission or approval (for this key's tenant)"),
        (
            409,
            "the call was already decided otherwise, or is no longer pending; or no run of "
            "the session is stopped at its budget; or a session to erase has work open",
        ),
        (413, "the request body is larger than the configured limit"),
        (
            422,
            "malformed JSON, unknown fields or invalid values; or a value no view could "
            f"show again: nested deeper than {MAX_DEPTH} levels, a lone surrogate, Infinity "
            "or NaN",
        ),
        (
            429,
            "the key (or, without a valid key, the client's address) is over its request "
            "rate, or the key over its open streams and waits (see Retry-After)",
        ),
        (500, "the API failed; the problem names the request to report"),
    )
}


def problem(status: int, title: str, detail: str, **extra: Any) -> JSONResponse:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, **extra}
    return JSONResponse(body, status_code=status, media_type=PROBLEM)


def answer_problems(app: FastAPI) -> None:
    """Have ``app`` answer every error with a problem: HTTP errors, invalid input, what the
    client refuses, and any failure (logged with an incident id the problem names)."""

    @app.exception_handler(HTTPException)
    async def http_problem(request: Request, exc: HTTPException) -> Response:
        titles = {
            400: "Bad Request",
            401: "Unauthorized",
            403: "Forbidden",
            404: "Not Found",
            405: "Not Allowed",
            413: "Payload Too Large",
            429: "Too Many Requests",
        }
        headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else {}
        headers.update(exc.headers or {})
        response = problem(exc.status_code, titles.get(exc.status_code, "Error"), str(exc.detail))
        response.headers.update(headers)
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        errors = [
            {"where": ".".join(str(p) for p in e["loc"]), "problem": e["msg"]} for e in exc.errors()
        ]
        detail = "; ".join(f"{e['where']}: {e['problem']}" for e in errors)
        return problem(422, "Invalid Request", detail, errors=errors)

    @app.exception_handler(NotFoundError)
    async def not_found(request: Request, exc: NotFoundError) -> Response:
        # Said of the store's key: said to the tenant of its own id.
        who: Principal | None = getattr(request.state, "principal", None)
        detail = str(exc) if who is None else str(exc).replace(f"{who.tenant}/", "")
        return problem(404, "Not Found", detail)

    @app.exception_handler(SessionRunning)
    async def running(request: Request, exc: SessionRunning) -> Response:
        who: Principal | None = getattr(request.state, "principal", None)
        detail = str(exc) if who is None else str(exc).replace(f"{who.tenant}/", "")
        return problem(409, SessionRunning.title, detail)

    @app.exception_handler(DecisionRefused)
    async def refused(request: Request, exc: DecisionRefused) -> Response:
        return problem(409, "Conflict", str(exc))

    @app.exception_handler(InvalidRequest)
    async def bad_request(request: Request, exc: InvalidRequest) -> Response:
        return problem(422, "Invalid Request", str(exc))

    @app.exception_handler(Exception)
    async def failed(request: Request, exc: Exception) -> Response:
        incident = uuid.uuid4().hex[:12]
        log.error(
            "request failed",
            exc_info=exc,
            extra={"event": "request_failed", "incident": incident, "path": request.url.path},
        )
        detail = f"the API failed on this request; report incident {incident}"
        return problem(500, "Internal Server Error", detail, incident=incident)
