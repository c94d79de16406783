"""Tracing: W3C trace context carried in every message's ``trace`` field, so one agent turn
-- submission, Brain passes, outbox, Hands, result, next pass -- is one trace.

Spans are exported over OTLP/HTTP when ``BRAINHANDS_OTLP_ENDPOINT`` is set (or wherever a
tracer provider the application set sends them); otherwise no span is made.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from opentelemetry import context, trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

tracer = trace.get_tracer("brainhands")
_PROPAGATOR = TraceContextTextMapPropagator()


def configure_tracing(service: str, endpoint: str | None) -> None:
    """Export this process's spans to ``endpoint`` (an OTLP/HTTP collector), if given."""
    if not endpoint:
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=500))
    trace.set_tracer_provider(provider)


def flush_tracing() -> None:
    """Send buffered spans before the process exits."""
    provider = trace.get_tracer_provider()
    force_flush = getattr(provider, "force_flush", None)
    if force_flush is not None:
        force_flush(5000)


def current_carrier() -> dict[str, str]:
    """The current trace context, ready to travel in a message."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier


def context_from(carrier: dict[str, str]) -> context.Context:
    """The trace context a message carried (empty: a new trace starts)."""
    return _PROPAGATOR.extract(carrier)


def message_span(
    name: str, carrier: dict[str, str], attributes: Mapping[str, Any]
) -> contextlib.AbstractContextManager[object]:
    """A span for the work a message asks for, in the trace the message carried (``carrier``).

    With no tracer provider set and no trace carried there is nothing to record or pass on,
    and nothing is done: the API's no-op span would still cost 5-10 us a message (1-2% of a
    worker's CPU in a burst). A carried trace is always made current, so that the messages
    this work sends carry it on to processes that do record it."""
    if not carrier and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return contextlib.nullcontext()
    return tracer.start_as_current_span(
        name, context=context_from(carrier), attributes=dict(attributes)
    )
