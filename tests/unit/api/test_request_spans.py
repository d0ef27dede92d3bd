"""The SERVER span of a request that sends notifications: child of the producer's
``traceparent``, described by the ingest path, echoed in the answer; other routes untraced."""

from __future__ import annotations

import pytest
from litestar import Litestar, get, post
from litestar.middleware import DefineMiddleware
from litestar.testing import TestClient
from opentelemetry.trace import SpanKind, StatusCode

from app import tracing
from app.api.request_spans import RequestSpans
from tests.unit.tracing_support import ended, tracing_on

__all__ = ["tracing_on"]  # the fixture, used by name

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@post("/v1/notifications", status_code=202)
async def accept() -> dict[str, str]:
    # What the ingestor does on the request's span.
    tracing.note_ingest("shop", [("otp", "HIGH")], ["n-1"], 1)
    return {"id": "n-1", "traceparent_seen_inside": tracing.traceparent()}


@post("/v1/notifications/batch", status_code=200)
async def batch() -> None:
    raise RuntimeError("broken for +4915112345678")


@get("/v1/ops/health")
async def health() -> str:
    return tracing.traceparent()


def client() -> TestClient[Litestar]:
    app = Litestar(
        [accept, batch, health], middleware=[DefineMiddleware(RequestSpans)], debug=False
    )
    return TestClient(app, raise_server_exceptions=False)


@pytest.mark.usefixtures("tracing_on")
def test_a_request_span_continues_the_producers_trace_and_is_echoed() -> None:
    with client() as http:
        answer = http.post("/v1/notifications", headers={"traceparent": PARENT})
    assert answer.status_code == 202
    [span] = ended()
    assert (span.name, span.kind) == ("POST /v1/notifications", SpanKind.SERVER)
    assert f"{span.context.trace_id:032x}" == TRACE_ID
    assert span.parent is not None
    assert f"{span.parent.span_id:016x}" == "00f067aa0ba902b7"
    echoed = f"00-{TRACE_ID}-{span.context.span_id:016x}-01"
    assert answer.headers["traceparent"] == echoed
    assert answer.json()["traceparent_seen_inside"] == echoed  # what the work items get
    attributes = dict(span.attributes or {})
    assert attributes["http.response.status_code"] == 202
    assert attributes["clarion.notification.id"] == "n-1"


@pytest.mark.usefixtures("tracing_on")
def test_without_a_traceparent_the_request_starts_a_trace() -> None:
    with client() as http:
        http.post("/v1/notifications", headers={"traceparent": "not-one"})
    [span] = ended()
    assert span.parent is None


@pytest.mark.usefixtures("tracing_on")
def test_a_failed_request_is_an_error_without_its_text() -> None:
    with client() as http:
        assert http.post("/v1/notifications/batch").status_code == 500
    [span] = ended()
    assert span.status.status_code is StatusCode.ERROR
    assert not span.events
    assert "+4915112345678" not in repr(dict(span.attributes or {}))


@pytest.mark.usefixtures("tracing_on")
def test_other_routes_are_not_traced() -> None:
    with client() as http:
        answer = http.get("/v1/ops/health", headers={"traceparent": PARENT})
    assert answer.text == ""
    assert "traceparent" not in answer.headers
    assert ended() == []
