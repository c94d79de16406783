"""One agent turn is one trace: the submission's trace context travels through the Brain,
the outbox, Hands and back, and the processes export their spans over OTLP/HTTP."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider

from brainhands.shared.relay import OutboxRelay
from tests.helpers.brains import BrainHarness
from tests.helpers.harness import start_email_service
from tests.helpers.polling import eventually
from tests.helpers.processes import spawn_email_hands
from tests.helpers.submitting import submit_input

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


class Collector(ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver on loopback: keeps (service, span name, trace id,
    the span's ``trigger`` attribute or "")."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Receive)
        self.spans: list[tuple[str, str, str, str]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Receive(BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            service = next(
                a.value.string_value
                for a in resource.resource.attributes
                if a.key == "service.name"
            )
            for scope in resource.scope_spans:
                for span in scope.spans:
                    trigger = next(
                        (a.value.string_value for a in span.attributes if a.key == "trigger"), ""
                    )
                    self.server.spans.append((service, span.name, span.trace_id.hex(), trigger))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


async def test_an_agent_turn_is_one_trace_across_processes(
    brains: BrainHarness, collector: Collector, tmp_path: Any
) -> None:
    service, email_url = await start_email_service(tmp_path)
    # The sweeper would wake the session too, with no trace: keep it out of the way, and
    # publish the submission's own wake-up at once.
    extra = {
        "BRAINHANDS_SWEEPER_PERIOD": "60",
        "BRAINHANDS_OTLP_ENDPOINT": collector.url,
        "TEST_EMAIL_URL": email_url,
        "TEST_MODEL_LOG": str(tmp_path / "model.jsonl"),
        # Slow enough that each pass has let go before its calls' results come back, so
        # results wake passes of their own (a pass that finds them already arrived goes on
        # in the same span).
        "TEST_ECHO_DELAY": "1.5",
    }
    try:
        # Declared before the Brain runs: no turn waits for the Hands' declarations (a
        # sleep woken by the Brain's own timer, outside the caller's trace).
        await brains.declare_tools()
        brains.start_brain(tasks=None, agents="tests.helpers.agents", **extra)
        brains.processes.append(
            spawn_email_hands(
                env=brains.settings(**extra),
                log=tmp_path / "hands.log",
            )
        )
        # The caller's own span: a local provider, so nothing global changes in this process.
        submit_span = TracerProvider().get_tracer("test").start_span("caller")
        with trace.use_span(submit_span, end_on_exit=True):
            await submit_input(
                brains.store,
                brains.env.topology,
                session_id="s1",
                request_id="r1",
                input={"agent": "echoer", "text": "go"},
                compat="v1",
            )
        await OutboxRelay(brains.store, brains.env.broker).drain_once()
        record = await brains.answer(within=60)
        assert record.status == "answered"

        trace_id = format(submit_span.get_span_context().trace_id, "032x")

        def named(name: str) -> list[tuple[str, str, str, str]]:
            return [s for s in collector.spans if s[1] == name]

        # Spans are exported in batches every half second: wait for the last ones.
        await eventually(
            lambda: (
                len(named("brainhands.hands.job")) >= 3
                and any(s[3] == "tool_result" for s in named("brainhands.brain.pass"))
            ),
            within=20,
            what="the Hands' three job spans and a pass woken by a result",
        )
    finally:
        service.kill()
        service.wait()

    ours = [s for s in collector.spans if s[2] == trace_id]
    services = {s[0] for s in ours}
    assert {"brainhands-brain", "brainhands-hands-email"} <= services
    assert sum(s[1] == "brainhands.hands.job" for s in ours) == 3  # the three echo calls
    passes = named("brainhands.brain.pass")
    # Every pass, the submission's and those woken by results, is in the caller's trace.
    assert passes and all(s[2] == trace_id for s in passes), passes
    assert {s[3] for s in passes} >= {"wake", "tool_result"}
