"""Tracing's on/off decision from the standard variables, what turning it on starts (and
what staying off does not), and the W3C values that carry a trace across Redis."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from opentelemetry import trace

from app import tracing
from tests.conftest import REPO
from tests.unit.tracing_support import ended, tracing_on

__all__ = ["tracing_on"]  # the fixture, used by name

ENDPOINT = "http://127.0.0.1:4318"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "clarion"}, False),  # no endpoint: nowhere to send
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{ENDPOINT}/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": " TRUE "}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "false"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "console,otlp"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "zipkin"}, False),
    ],
)
def test_tracing_is_on_only_with_an_endpoint_and_nothing_turning_it_off(
    environ: dict[str, str], on: bool
) -> None:
    assert tracing.wanted(environ) is on


# Run in a fresh interpreter: what ``setup`` imports and starts is the process's for good.
PROBE = """
import sys, threading
from app import tracing
on = tracing.setup("worker")
sdk = "opentelemetry.sdk.trace" in sys.modules
print("probe:", on, tracing.ENABLED, sdk, threading.active_count())
if on:
    from opentelemetry import trace
    print("probe:", trace.get_tracer_provider().resource.attributes["service.name"])
"""


def probe(**variables: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | variables
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=environ, cwd=REPO, capture_output=True, check=True
    )
    # What it printed, not what it logged.
    lines = done.stdout.decode().splitlines()
    return [word for line in lines if line.startswith("probe: ") for word in line.split()[1:]]


def test_off_the_sdk_is_not_even_loaded_and_no_exporter_thread_starts() -> None:
    assert probe() == ["False", "False", "False", "1"]
    disabled = probe(OTEL_EXPORTER_OTLP_ENDPOINT=ENDPOINT, OTEL_SDK_DISABLED="true")
    assert disabled == ["False", "False", "False", "1"]


def test_on_the_exporter_thread_runs_and_the_process_names_the_service() -> None:
    # The main thread and the batch span processor's; nothing is sent before a span ends.
    assert probe(OTEL_EXPORTER_OTLP_ENDPOINT=ENDPOINT) == [
        "True", "True", "True", "2", "clarion-worker",
    ]  # fmt: skip
    named = probe(OTEL_EXPORTER_OTLP_ENDPOINT=ENDPOINT, OTEL_SERVICE_NAME="notify")
    assert named[-1] == "notify"


@pytest.mark.usefixtures("tracing_on")
def test_a_traceparent_names_the_parent_and_the_current_span_is_written_as_one() -> None:
    assert tracing.traceparent() == ""  # outside any span
    with tracing.tracer().start_as_current_span("s", context=tracing.context_of(TRACEPARENT)):
        written = tracing.traceparent()
        span_id = trace.get_current_span().get_span_context().span_id
    [span] = ended()
    assert span.parent is not None
    assert f"{span.parent.span_id:016x}" == "00f067aa0ba902b7"
    assert written == f"00-4bf92f3577b34da6a3ce929d0e0e4736-{span_id:016x}-01"


@pytest.mark.parametrize("value", ["", "garbage", "00-" + "0" * 32 + "-00f067aa0ba902b7-01"])
@pytest.mark.usefixtures("tracing_on")
def test_a_missing_or_malformed_traceparent_starts_a_new_trace(value: str) -> None:
    with tracing.tracer().start_as_current_span("s", context=tracing.context_of(value)):
        pass
    [span] = ended()
    assert span.parent is None


@pytest.mark.usefixtures("tracing_on")
def test_a_request_is_described_by_its_notifications() -> None:
    with tracing.tracer().start_as_current_span("single"):
        tracing.note_ingest("shop", [("otp", "HIGH")], ["n-1"], 1)
    with tracing.tracer().start_as_current_span("batch"):
        kinds = [("otp", "HIGH"), ("marketing", "LOW"), ("otp", "HIGH")]
        tracing.note_ingest("shop", kinds, ["n-1", "n-2"], 3)
    single, batch = ended()
    assert dict(single.attributes or {}) == {
        "clarion.producer": "shop",
        "clarion.notification.type": "otp",
        "clarion.notification.priority": "HIGH",
        "clarion.notification.count": 1,
        "clarion.notification.accepted": 1,
        "clarion.notification.id": "n-1",
    }
    assert dict(batch.attributes or {}) == {
        "clarion.producer": "shop",
        "clarion.notification.type": ("marketing", "otp"),
        "clarion.notification.priority": ("HIGH", "LOW"),
        "clarion.notification.count": 3,
        "clarion.notification.accepted": 2,
    }
