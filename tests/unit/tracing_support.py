"""Spans kept in memory for the unit tests of ``app.tracing``'s callers: the SDK's own
provider and in-memory exporter, installed once per test process as the global provider
(OpenTelemetry allows one), with ``app.tracing.ENABLED`` on for the test only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app import tracing

_exporter = InMemorySpanExporter()
_provider: TracerProvider | None = None


@pytest.fixture
def tracing_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tracing on for this test; ``ended`` says which spans it ended."""
    global _provider  # noqa: PLW0603 - one provider per process, made on first use
    if _provider is None:
        _provider = TracerProvider()
        _provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(_provider)
    _exporter.clear()
    monkeypatch.setattr(tracing, "ENABLED", True)
    yield
    _exporter.clear()


def ended() -> list[ReadableSpan]:
    """The spans ended so far in this test."""
    return list(_exporter.get_finished_spans())
