"""Delivery spans: each attempt joins its notification's trace, around each provider call.

Used only while tracing is on (``app.tracing.ENABLED`` when the worker is built): the worker
then makes its attempts with ``TracedAttempts`` instead of ``Attempts``, so the send path
of a worker without tracing has not one more call. An attempt is a CONSUMER span whose
parent is the ``traceparent`` its work item carries (the API request that accepted the
notification), or a new trace for an item without one. The provider call inside it is a
CLIENT span. Attributes name ids, the channel, the provider and what happened, never the
address or the message: exceptions are not recorded (their text may quote an address),
only their class.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import Span, SpanKind, StatusCode

from app import tracing
from app.catalog import Catalog
from app.delivery.attempt import Attempted, Attempts
from app.inbox.provider import InboxProvider
from app.providers.base import Message, Provider, ProviderError
from streams.delivery.leases import LeasedDelivery


class TracedAttempts(Attempts):
    """``Attempts`` whose every attempt and provider call is a span."""

    def __init__(self, catalog: Catalog, *args: Any, **kwargs: Any) -> None:
        super().__init__(catalog, *args, **kwargs)
        self.providers = {
            name: provider
            if isinstance(provider, InboxProvider)  # no call leaves the process
            else TracedProvider(provider, catalog.providers[name].kind)
            for name, provider in self.providers.items()
        }

    async def attempt(self, leased: LeasedDelivery, provider_name: str = "") -> Attempted:
        item = leased.item
        attributes: dict[str, Any] = {
            "clarion.delivery.id": item.delivery_id,
            "clarion.notification.id": item.notification_id,
            "clarion.notification.type": item.notification_type,
            "clarion.channel": str(item.channel),
            "clarion.priority": str(item.priority),
            "clarion.attempt": leased.lease.attempts + 1,
        }
        if provider_name:
            attributes["clarion.provider"] = provider_name
        with tracing.tracer().start_as_current_span(
            f"deliver {item.channel}",
            context=tracing.context_of(item.trace),
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            # An exception's text may quote an address: the span gets its class only.
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                attempted = await super().attempt(leased, provider_name)
            except BaseException as error:  # a cancellation (the worker stopping)
                _failed(span, type(error).__name__)
                raise
            decision = attempted.decision
            span.set_attribute("clarion.outcome", str(decision.status or ""))
            error_class = decision.error_class
            if error_class:
                span.set_attribute("clarion.error_class", str(error_class))
                _failed(span, str(error_class))
            return attempted


class TracedProvider:
    """A provider whose every send is a CLIENT span, child of the attempt's."""

    def __init__(self, provider: Provider, kind: str) -> None:
        self.provider = provider
        self.name = provider.name
        self.kind = kind

    async def send(self, message: Message) -> str:
        attributes = {"clarion.provider": self.name, "clarion.provider.kind": self.kind}
        with tracing.tracer().start_as_current_span(
            f"{self.name} send",
            kind=SpanKind.CLIENT,
            attributes=attributes,
            # An exception's text may quote an address: the span gets its class only.
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                return await self.provider.send(message)
            except ProviderError as error:
                span.set_attribute("clarion.error_class", str(error.error_class))
                _failed(span, str(error.error_class))
                raise
            except BaseException as error:  # a timeout's cancellation, or a bug
                _failed(span, type(error).__name__)
                raise

    async def close(self) -> None:
        await self.provider.close()


def _failed(span: Span, error_type: str) -> None:
    span.set_attribute("error.type", error_type)
    span.set_status(StatusCode.ERROR, error_type)
