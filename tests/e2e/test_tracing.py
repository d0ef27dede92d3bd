"""Traces from real processes: ``clarion api`` and ``clarion worker`` export over OTLP/HTTP
to a receiver in the test, which decodes what arrives as a collector would."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.conftest import REPO, unlink_prefix
from tests.e2e.api_service import _prepare_database
from tests.e2e.service_support import CLARION, Lines, service_env, wait_healthy
from tests.pg import TEST_SERVER_URL, drop_database, throwaway_name, with_database
from tests.servers import free_port, wait_for_port

pytestmark = pytest.mark.timeout(120)

SEND = {"Authorization": "Bearer shop-secret-key"}
EMAIL = "ada.tracing@example.com"
PHONE = "+4915123456789"
ORDER = "order-secret-4711"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


class Receiver:
    """An OTLP/HTTP traces endpoint on 127.0.0.1: every span it was sent, with its
    resource's service name."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, Span]] = []
        self.posts = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.posts += 1
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource_spans in request.resource_spans:
                    names = [
                        a.value.string_value
                        for a in resource_spans.resource.attributes
                        if a.key == "service.name"
                    ]
                    for scope_spans in resource_spans.scope_spans:
                        receiver.spans += [(names[0], span) for span in scope_spans.spans]
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def attributes(span: Span) -> dict[str, Any]:
    """A span's attributes as Python values."""
    found: dict[str, Any] = {}
    for attribute in span.attributes:
        value = attribute.value
        kind = value.WhichOneof("value")
        found[attribute.key] = (
            [v.string_value for v in value.array_value.values]
            if kind == "array_value"
            else getattr(value, kind)
        )
    return found


@contextmanager
def clarion(**extra: str) -> Iterator[str]:
    """A running API and worker on a fresh key prefix and read-model database, with ``extra``
    variables; the API's URL. Afterwards neither may have logged a traceback."""
    prefix = f"trace-{uuid.uuid4().hex[:8]}"
    database = throwaway_name()
    database_url = with_database(TEST_SERVER_URL, database)
    asyncio.run(_prepare_database(database_url))
    port = free_port()
    env = service_env(prefix, port, CLARION_DATABASE_URL=database_url)
    # Only the variables given here: none of the SDK's from the environment the test runs in.
    env = {name: value for name, value in env.items() if not name.startswith("OTEL_")} | extra
    api = subprocess.Popen(
        [*CLARION, "api", "--workers", "1"], env=env, cwd=REPO, stderr=subprocess.PIPE
    )
    worker = subprocess.Popen([*CLARION, "worker"], env=env, cwd=REPO, stderr=subprocess.PIPE)
    assert api.stderr is not None
    assert worker.stderr is not None
    logs = [Lines(api.stderr), Lines(worker.stderr)]
    try:
        wait_for_port(port, timeout=20)
        wait_healthy(f"http://127.0.0.1:{port}")
        yield f"http://127.0.0.1:{port}"
    finally:
        for process in (api, worker):
            process.terminate()
            process.wait(timeout=30)
        for lines in logs:
            lines.wait_closed()
        unlink_prefix(prefix)
        asyncio.run(drop_database(database))
        logged = "\n".join(line for lines in logs for line in lines.lines)
        assert "Traceback" not in logged, logged[-3000:]


def send_and_wait(url: str, headers: dict[str, str]) -> dict[str, Any]:
    """POST an order confirmation (email and phone given) and wait until its EMAIL and
    IN_APP deliveries ended; its status."""
    body = {
        "recipient": {"id": "user-trace", "email": EMAIL, "phone": PHONE},
        "type": "order_confirmed",
        "data": {"order_id": ORDER},
    }
    answer = httpx.post(
        f"{url}/v1/notifications",
        json=body,
        headers={**SEND, "Idempotency-Key": uuid.uuid4().hex, **headers},
    )
    assert answer.status_code == 202, answer.text
    notification_id = answer.json()["id"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = httpx.get(f"{url}/v1/notifications/{notification_id}", headers=SEND).json()
        ended = {d["channel"]: d["status"] for d in status["deliveries"]}
        if ended.get("EMAIL") == "SENT" and ended.get("IN_APP") == "SENT":
            return {**status, "traceparent": answer.headers.get("traceparent")}
        time.sleep(0.1)
    raise AssertionError(f"not delivered within 30 s: {status}")


def wait_for_spans(receiver: Receiver, names: set[str], within: float = 30) -> None:
    deadline = time.monotonic() + within
    while not names <= {span.name for _, span in receiver.spans}:
        assert time.monotonic() < deadline, [span.name for _, span in receiver.spans]
        time.sleep(0.1)


def test_one_trace_runs_from_the_producers_request_to_the_provider_call() -> None:
    receiver = Receiver()
    try:
        with clarion(
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, OTEL_BSP_SCHEDULE_DELAY="100"
        ) as url:
            status = send_and_wait(url, {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
            wait_for_spans(
                receiver,
                {"POST /v1/notifications", "deliver EMAIL", "deliver IN_APP", "sandbox send"},
            )
    finally:
        receiver.close()
    spans = {span.name: (service, span) for service, span in receiver.spans}
    notification_id = status["id"]
    email_delivery = next(d["id"] for d in status["deliveries"] if d["channel"] == "EMAIL")

    service, request = spans["POST /v1/notifications"]
    assert service == "clarion-api"
    assert (request.trace_id.hex(), request.parent_span_id.hex()) == (TRACE_ID, PARENT_ID)
    assert request.kind == Span.SPAN_KIND_SERVER
    assert attributes(request) | {
        "clarion.notification.id": notification_id,
        "clarion.notification.type": "order_confirmed",
        "clarion.notification.priority": "NORMAL",
        "clarion.producer": "shop",
        "http.response.status_code": 202,
    } == attributes(request)
    # The answer names the request's span, for the producer to find the trace.
    assert status["traceparent"] == f"00-{TRACE_ID}-{request.span_id.hex()}-01"

    service, attempt = spans["deliver EMAIL"]
    assert (service, attempt.kind) == ("clarion-worker", Span.SPAN_KIND_CONSUMER)
    assert attempt.trace_id.hex() == TRACE_ID
    assert attempt.parent_span_id == request.span_id  # carried by the work item
    assert attributes(attempt) | {
        "clarion.delivery.id": email_delivery,
        "clarion.notification.id": notification_id,
        "clarion.channel": "EMAIL",
        "clarion.priority": "NORMAL",
        "clarion.attempt": 1,
        "clarion.outcome": "SENT",
    } == attributes(attempt)
    _, in_app = spans["deliver IN_APP"]
    assert in_app.parent_span_id == request.span_id

    _, provider = spans["sandbox send"]
    assert (provider.kind, provider.trace_id.hex()) == (Span.SPAN_KIND_CLIENT, TRACE_ID)
    assert provider.parent_span_id == attempt.span_id
    assert attributes(provider)["clarion.provider"] == "sandbox"

    recorded = json.dumps(
        [
            [span.name, str(attributes(span)), [e.name for e in span.events]]
            for _, span in receiver.spans
        ]
    )
    for secret in (EMAIL, PHONE, ORDER, "shop-secret-key"):
        assert secret not in recorded


def test_without_an_endpoint_nothing_is_exported_and_no_exporter_runs() -> None:
    receiver = Receiver()
    try:
        # The receiver's address is there, but under no variable the SDK reads.
        with clarion(
            CLARION_TEST_UNUSED_ENDPOINT=receiver.url, OTEL_BSP_SCHEDULE_DELAY="100"
        ) as url:
            status = send_and_wait(url, {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
            time.sleep(1)  # ten schedule delays: an exporter would have sent by now
    finally:
        receiver.close()
    assert status["traceparent"] is None  # no request span to echo
    assert receiver.posts == 0
