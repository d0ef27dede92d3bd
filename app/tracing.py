"""OpenTelemetry traces, from a producer's request to the provider call; off by default.

Tracing is on in a process only when its environment names an OTLP endpoint
(``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``), unless
``OTEL_SDK_DISABLED`` is ``true`` or ``OTEL_TRACES_EXPORTER`` is ``none`` (``wanted``). Each
process calls ``setup`` once at start; everything else the SDK reads from the standard
variables itself: the service name and resource attributes, the sampler, the batch span
processor's delays and sizes, the exporter's headers and timeout.

Off, nothing here is called on a hot path: callers look at ``ENABLED`` once per request, batch
or worker (even OpenTelemetry's no-op tracer costs microseconds per span), and the SDK is not
even imported. On, spans go through the SDK's ``BatchSpanProcessor`` to an OTLP/HTTP exporter
on a thread of its own; what is still queued is flushed when the process exits.

A notification's trace crosses Redis in its work items as a W3C ``traceparent`` value
(``streams.delivery.work_items.WorkItem.trace``): ``traceparent`` makes it, ``context_of`` reads it.
Span attributes carry ids, types, channels and outcomes, never an address, template data or
an API key.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import structlog
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = structlog.get_logger(__name__)

# True once ``setup`` turned tracing on in this process; read, never set, elsewhere.
ENABLED = False
TRACER_NAME = "clarion"
_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
_propagator = TraceContextTextMapPropagator()
_provider: Any = None  # the SDK's TracerProvider while tracing is on


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether these variables turn tracing on: an OTLP endpoint is named, the SDK is not
    disabled, and the traces exporter is OTLP (the default) or unset."""
    endpoint = environ.get(_TRACES_ENDPOINT, "").strip() or environ.get(_ENDPOINT, "").strip()
    if not endpoint:
        return False
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    return "otlp" in {name.strip() for name in exporters.split(",")}


def setup(process: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Turn tracing on for this process (``api``, ``worker``) if ``environ`` wants it; whether
    it is on. Call once, at start-up; the exporter reads its settings from ``os.environ``."""
    global ENABLED, _provider  # noqa: PLW0603 - set once, at start-up, read everywhere
    if ENABLED or not wanted(environ):
        return ENABLED
    # Imported only here: a process without tracing never loads the SDK or the exporter.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: PLC0415
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415

    resource = Resource.create({"clarion.process": process})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        # Neither OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES names the service.
        resource = resource.merge(Resource({SERVICE_NAME: f"clarion-{process}"}))
    # The provider reads OTEL_TRACES_SAMPLER(_ARG), the processor OTEL_BSP_*, the exporter
    # OTEL_EXPORTER_OTLP_*; the provider flushes and shuts down at exit (``shutdown`` too).
    _provider = TracerProvider(resource=resource)
    _provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(_provider)
    ENABLED = True
    log.info("tracing.on", process=process, service=resource.attributes.get(SERVICE_NAME))
    return True


def shutdown() -> None:
    """Export what is still queued and stop the exporter (a process's last step)."""
    global ENABLED, _provider
    if _provider is not None:
        _provider.shutdown()
    ENABLED, _provider = False, None


def tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


def context_of(traceparent: str, tracestate: str = "") -> Context:
    """The context a W3C ``traceparent`` (and ``tracestate``) names as parent; an empty one
    (a new trace) when the value is missing or malformed."""
    carrier = {"traceparent": traceparent, "tracestate": tracestate} if traceparent else {}
    return _propagator.extract(carrier)


def traceparent() -> str:
    """The current span as a W3C ``traceparent`` value; "" outside a (valid) span."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return ""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def note_ingest(
    producer: str, kinds: Iterable[tuple[str, str]], accepted_ids: Sequence[str], count: int
) -> None:
    """Describe the request being served on its span: the producer, the notifications'
    types and priorities (``kinds``), and the id of a single notification or the count of
    a batch's."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    types = sorted({kind for kind, _ in kinds})
    priorities = sorted({priority for _, priority in kinds})
    attributes: dict[str, Any] = {
        "clarion.producer": producer,
        "clarion.notification.type": types[0] if len(types) == 1 else types,
        "clarion.notification.priority": priorities[0] if len(priorities) == 1 else priorities,
        "clarion.notification.count": count,
        "clarion.notification.accepted": len(accepted_ids),
    }
    if count == 1 and accepted_ids:
        attributes["clarion.notification.id"] = accepted_ids[0]
    span.set_attributes(attributes)
