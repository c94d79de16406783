"""The API fuzzed from its own OpenAPI document (schemathesis): whatever a client sends that
the document describes, or gets wrong, the answer is never a server error and always what
the document says it can be; and every body field given a value the store would keep but
no view could show again (too deep, a lone surrogate, Infinity or NaN) is refused with a
4xx."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import hypothesis.errors
import pytest
import schemathesis
from schemathesis.generation.case import Case
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from brainhands.api.settings import ApiSettings
from tests.helpers.processes import spawn_module

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def fuzzed_api(
    rabbitmq_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """A ``brainhands api`` process on a SQLite store of its own, and an admin key that is
    an operator's too."""
    where = tmp_path_factory.mktemp("fuzz")
    env = {
        "BRAINHANDS_DATABASE_URL": f"sqlite:///{where / 'store.db'}",
        "BRAINHANDS_RABBITMQ_URL": rabbitmq_url,
        "BRAINHANDS_NAMESPACE": f"fuzz{uuid.uuid4().hex[:8]}",
        "BRAINHANDS_API_RATE": "100000",  # hundreds of requests a second, by design
        "BRAINHANDS_API_BURST": "100000",
        "BRAINHANDS_WEBHOOK_SECRET": "fuzz",  # a callback_url the document allows is taken,
        "BRAINHANDS_WEBHOOK_ALLOW": "0.0.0.0/0,::/0",  # to any address (tests/security's)
        "BRAINHANDS_API_DOCS": "true",  # the document, for a key
    }
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "brainhands",
            "keys",
            "create",
            "--tenant",
            "fuzz",
            "--scope",
            "admin",
            "--scope",
            "operator",  # the tenants' routes too
        ],
        cwd=where,
        env={**_clean_env(), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    key = made.stdout.splitlines()[-1]
    log = where / "api.log"
    proc = spawn_module("brainhands", "api", "--port", "0", env=env, log=log)
    try:
        yield f"http://127.0.0.1:{_port(proc, log)}", key
    finally:
        proc.kill()
        proc.wait()


MAX_BODY = ApiSettings.model_fields["api_max_body"].default


def _body_size(body: object) -> int:
    """About the bytes a case's body is sent as (JSON, escaped as ASCII: the longest)."""
    if isinstance(body, bytes | str):
        return len(body)
    try:
        return len(json.dumps(body))
    except (TypeError, ValueError):  # not JSON (a form): never large here
        return 0


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("BRAINHANDS_")}


def _port(proc: subprocess.Popen[bytes], log: Path) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines() if log.exists() else []:
            if '"api_listening"' in line:
                return int(json.loads(line)["port"])
        assert proc.poll() is None, log.read_text()
        time.sleep(0.1)
    raise AssertionError(f"the API did not listen within 30 s:\n{log.read_text()}")


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_request_the_document_allows_or_forbids_gets_a_server_error(
    fuzzed_api: tuple[str, str], mode: GenerationMode
) -> None:
    """Every operation, with requests the document allows (positive) and ones it forbids
    (negative); each answer is checked against the document (status, content type,
    schema) and must not be a 5xx. The event streams never end: ``test_api`` has them."""
    url, key = fuzzed_api
    auth = {"Authorization": f"Bearer {key}"}
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", headers=auth)
    fuzzed, failures = [], []
    for found in schema.get_all_operations():
        operation = found.ok()
        if operation.path.endswith("events"):
            continue

        @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
        @hypothesis.settings(
            max_examples=25,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(hypothesis.HealthCheck),
        )
        def fuzz(case: Case) -> None:
            declared = {p.name for p in case.operation.query}
            wait = (case.query or {}).get("wait")
            if isinstance(wait, int | float) and not isinstance(wait, bool) and wait > 0.05:
                case.query["wait"] = 0.05  # no Brain runs here: a valid wait would only wait
            # The API ignores query parameters it does not know (a browser's ``?_=123``):
            # a case made negative by one is answered as the same case without it.
            extra = set(case.query or {}) - declared
            skip = [negative_data_rejection] if extra else []
            if case.operation.path == "/schedules" and case.method == "POST":
                # A cron expression's and a time zone's grammar is beyond JSON Schema: a
                # schema-valid one may still be refused, with a 422 naming why.
                skip.append(positive_data_acceptance)
            if case.operation.path.endswith("/workspaces/{name}") and case.method == "PUT":
                # So is a tar archive's: any bytes are schema-valid, few are an archive.
                skip.append(positive_data_acceptance)
            if _body_size(case.body) > MAX_BODY:
                # Refused whole (413) before it is read, valid or not: the document says
                # what a body may hold, not how many bytes the API takes.
                skip += [positive_data_acceptance, negative_data_rejection]
            case.call_and_validate(base_url=url, headers=auth, excluded_checks=skip)

        name = f"{operation.method.upper()} {operation.path}"
        try:
            fuzz()
        except hypothesis.errors.Unsatisfiable:
            assert mode == GenerationMode.NEGATIVE, name  # no input there to get wrong
            continue
        except Exception as exc:  # gathered, so that every operation's failure is reported
            failures.append(f"{name}: {exc}")
        fuzzed.append(name)
    assert len(fuzzed) >= 9, fuzzed
    assert not failures, "\n\n".join(failures)


HOSTILE = {
    "nested too deep": "[" * 600 + "]" * 600,
    "a lone surrogate": '"\\ud800"',
    "a lone surrogate in a key": '{"\\udfff": 1}',
    "Infinity": "Infinity",
    "-Infinity": "-Infinity",
    "NaN": "NaN",
    "a number too large for a float": "1e999",
}
"""JSON values the store would keep and no view could show again (each as raw JSON text)."""


def test_every_body_field_refuses_what_no_view_could_show_with_a_4xx(
    fuzzed_api: tuple[str, str],
) -> None:
    """Each hostile value in each field of each operation's body (and as a whole body):
    every answer a 4xx problem, never a server error."""
    url, key = fuzzed_api
    auth = {"Authorization": f"Bearer {key}"}
    document = httpx.get(f"{url}/openapi.json", headers=auth).json()
    tried = 0
    with httpx.Client(base_url=url, headers=auth, timeout=30) as http:
        for path, item in document["paths"].items():
            for method, operation in item.items():
                fields = _body_fields(document, operation)
                if fields is None:
                    continue
                target = path.replace("{session_id}", "s1").replace("{tenant}", "fuzz")
                target = target.replace("{approval_id}", "a1").replace("{task_id}", "t1")
                for field in [*fields, None]:
                    for what, value in HOSTILE.items():
                        body = value if field is None else f'{{"{field}": {value}}}'
                        answer = http.request(
                            method.upper(),
                            target,
                            content=body.encode(),
                            headers={"content-type": "application/json"},
                        )
                        tried += 1
                        where = f"{method.upper()} {path} {field}: {what}"
                        assert 400 <= answer.status_code < 500, (where, answer.text)
                        assert answer.headers["content-type"] == "application/problem+json"
    assert tried >= 100, tried


def _body_fields(document: dict[str, Any], operation: dict[str, Any]) -> list[str] | None:
    """The top-level fields of an operation's JSON body (None: it takes none)."""
    content = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if content is None:
        return None
    fields: set[str] = set()
    pending = [content["schema"]]
    while pending:
        schema = pending.pop()
        if "$ref" in schema:
            schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        pending.extend(schema.get("anyOf", []) + schema.get("oneOf", []))
        fields.update(schema.get("properties", {}))
    return sorted(fields)
