"""Delivery spans: an attempt joins the trace its work item names, the provider call is its
child, and neither says anything of the address or the provider's error text."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from app.catalog import Catalog, parse_catalog
from app.delivery.provider_timeouts import ProviderTimeouts
from app.delivery.tracing import TracedAttempts
from app.inbox.provider import InboxProvider
from app.providers.base import Message, ProviderError
from streams.core.vocabulary import ErrorClass
from streams.delivery.work_items import WorkItem
from tests.conftest import REPO
from tests.unit.delivery_examples import leased
from tests.unit.tracing_support import ended, tracing_on

__all__ = ["tracing_on"]  # the fixture, used by name

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
ADDRESS = "+4915112345678"  # the example item's
DATA = {"code": "4242"}


class Provider:
    """A provider that answers with ``behaviour``."""

    def __init__(self, behaviour: Any) -> None:
        self.name = "sandbox"
        self.behaviour = behaviour

    async def send(self, message: Message) -> str:
        if isinstance(self.behaviour, BaseException):
            raise self.behaviour
        return "provider-id-1"

    async def close(self) -> None:
        pass


@pytest.fixture
async def timeouts() -> AsyncIterator[ProviderTimeouts]:
    watchdog = ProviderTimeouts(tick_s=0.01)
    running = asyncio.create_task(watchdog.run())
    yield watchdog
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)


@pytest.fixture
def catalog() -> Catalog:
    return parse_catalog((REPO / "clarion.toml").read_text(), "t")


async def forget(work: WorkItem, provider_name: str) -> None:
    pass


def attempts(catalog: Catalog, timeouts: ProviderTimeouts, provider: Any) -> TracedAttempts:
    return TracedAttempts(catalog, {"sandbox": provider}, timeouts, lambda: 100_000, forget)


@pytest.mark.usefixtures("tracing_on")
async def test_an_attempt_is_a_child_of_the_request_that_made_its_work_item(
    catalog: Catalog, timeouts: ProviderTimeouts
) -> None:
    attempted = await attempts(catalog, timeouts, Provider("ok")).attempt(
        leased(attempts=1, trace=PARENT, data=DATA), "sandbox"
    )
    assert attempted.decision.status == "SENT"
    provider_span, attempt_span = ended()
    assert (attempt_span.name, attempt_span.kind) == ("deliver SMS", SpanKind.CONSUMER)
    assert attempt_span.parent is not None
    assert f"{attempt_span.context.trace_id:032x}" == TRACE_ID
    assert f"{attempt_span.parent.span_id:016x}" == "00f067aa0ba902b7"
    assert dict(attempt_span.attributes or {}) == {
        "clarion.delivery.id": "d",
        "clarion.notification.id": "n",
        "clarion.notification.type": "otp",
        "clarion.channel": "SMS",
        "clarion.priority": "HIGH",
        "clarion.attempt": 2,
        "clarion.provider": "sandbox",
        "clarion.outcome": "SENT",
    }
    assert (provider_span.name, provider_span.kind) == ("sandbox send", SpanKind.CLIENT)
    assert provider_span.parent is not None
    assert provider_span.parent.span_id == attempt_span.context.span_id
    assert dict(provider_span.attributes or {}) == {
        "clarion.provider": "sandbox",
        "clarion.provider.kind": "sandbox",
    }


@pytest.mark.usefixtures("tracing_on")
async def test_a_failed_call_names_its_error_class_and_never_its_text(
    catalog: Catalog, timeouts: ProviderTimeouts
) -> None:
    refused = ProviderError(ErrorClass.PERMANENT, f"400: {ADDRESS} is not a number")
    attempted = await attempts(catalog, timeouts, Provider(refused)).attempt(
        leased(attempts=0, trace=PARENT, data=DATA), "sandbox"
    )
    assert attempted.decision.status == "FAILED"
    provider_span, attempt_span = ended()
    for span in (provider_span, attempt_span):
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes is not None
        assert span.attributes["clarion.error_class"] == "PERMANENT"
        assert not span.events  # no exception recorded: its text quotes the address
        assert ADDRESS not in repr(dict(span.attributes)) + str(span.status.description)
    assert attempt_span.attributes is not None
    assert attempt_span.attributes["clarion.outcome"] == "FAILED"


@pytest.mark.usefixtures("tracing_on")
async def test_an_item_without_a_trace_starts_one(
    catalog: Catalog, timeouts: ProviderTimeouts
) -> None:
    await attempts(catalog, timeouts, Provider("ok")).attempt(
        leased(trace="", data=DATA), "sandbox"
    )
    _, attempt_span = ended()
    assert attempt_span.parent is None


def test_the_inbox_is_not_wrapped_as_no_call_leaves_the_process(
    catalog: Catalog, timeouts: ProviderTimeouts
) -> None:
    inbox = InboxProvider("inbox", catalog.providers["inbox"])
    traced = TracedAttempts(
        catalog, {"sandbox": Provider("ok"), "inbox": inbox}, timeouts, lambda: 0, forget
    )
    assert traced.providers["inbox"] is inbox
    assert traced.providers["sandbox"].name == "sandbox"
