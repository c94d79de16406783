"""A message's span: made in the trace the message carried once a tracer provider is set
(by the worker's OTLP configuration or by the application); before that, a carried trace is
still passed on, and a message that carries none costs no span at all."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# In a fresh interpreter: the global tracer provider can be set once per process.
SCRIPT = textwrap.dedent(
    """
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from brainhands.shared.tracing import current_carrier, message_span

    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    with message_span("before", {}, {"k": "v"}):
        assert trace.get_current_span() is trace.INVALID_SPAN, "a span with no provider"
    with message_span("before", carrier, {"k": "v"}):  # passed on to what this work sends
        assert current_carrier() == carrier

    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    trace.set_tracer_provider(provider)
    with message_span("after", carrier, {"k": "v"}):
        assert trace.get_current_span().is_recording()
    [span] = exported.get_finished_spans()
    assert span.name == "after" and dict(span.attributes) == {"k": "v"}
    assert format(span.context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    assert format(span.parent.span_id, "016x") == "b7ad6b7169203331"
    print("ok")
    """
)


def test_a_message_span_is_recorded_once_a_tracer_provider_is_set() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
