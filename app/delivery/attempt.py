"""One attempt at one leased delivery: render, call the provider, decide what happened.

The provider gets the delivery id as its idempotency key on every attempt. What its answer
means is decided in ``decide``: a send is SENT; a TRANSIENT failure is retried after the
channel's backoff while attempts and the TTL allow; anything else fails the delivery into
the dead-letter queue. An exception no adapter should raise is a BUG: the worker survives it
and the delivery fails. The attempt returns its decision; the worker records it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import NamedTuple

import structlog

from app.catalog import Catalog
from app.delivery import decide
from app.delivery.provider_timeouts import ProviderTimeouts
from app.delivery.rendering import RenderError, render
from app.inbox.provider import InboxProvider
from app.providers.base import Message, Provider, ProviderError
from app.unsubscribe import UnsubscribeLinks
from streams.core.vocabulary import Channel, ErrorClass
from streams.delivery.decisions import Decision, Sent
from streams.delivery.leases import LeasedDelivery
from streams.delivery.work_items import WorkItem

log = structlog.get_logger(__name__)


class Attempted(NamedTuple):
    """An attempt's decision, when it was made (ms), and what it says about the provider for
    its circuit breaker: True when it failed TRANSIENT, False when it answered, None when it
    was not called (or failed in a way that says nothing about it, a BUG)."""

    decision: Decision
    at_ms: int
    provider_failed: bool | None


class Attempts:
    """Makes attempts with a catalog's providers, each within its provider's time limit."""

    def __init__(
        self,
        catalog: Catalog,
        providers: Mapping[str, Provider],
        timeouts: ProviderTimeouts,
        now_ms: Callable[[], int],
        forget_address: Callable[[WorkItem, str], Awaitable[None]],
        *,
        links: UnsubscribeLinks | None = None,
    ) -> None:
        self.catalog = catalog
        self.providers = providers
        self.timeouts = timeouts
        self.now_ms = now_ms
        # Called when a provider says an address is dead (e.g. an invalid push token).
        self.forget_address = forget_address
        # Makes one-click unsubscribe links; None without CLARION_PUBLIC_URL.
        self.unsubscribe_links = links

    async def attempt(self, leased: LeasedDelivery, provider_name: str = "") -> Attempted:
        """Make one attempt through ``provider_name`` (default: the channel's first)."""
        item = leased.item
        provider_name = provider_name or self.catalog.provider_order(item.channel, item.address)[0]
        try:
            rendered = render(self.catalog, item, leased.data)
        except RenderError as error:
            log.warning("delivery.render_failed", error=str(error))
            text = f"template: {error}"
            return self._failed(leased, ErrorClass.PERMANENT, text, "", provider_failed=None)
        message = Message(
            delivery_id=item.delivery_id,
            idempotency_key=item.delivery_id,
            channel=item.channel,
            address=item.address,
            title=rendered.title,
            body=rendered.body,
            attempt=leased.lease.attempts + 1,
            data=leased.data or {},
            html=rendered.html,
            notification_id=item.notification_id,
            notification_type=item.notification_type,
            sms_encoding=rendered.sms_encoding,
            sms_segments=rendered.sms_segments,
            priority=item.priority,
            expires_ms=item.expires_ms,
            push=rendered.push,
            unsubscribe_url=self._unsubscribe_url(item),
        )
        provider = self.providers[provider_name]
        if isinstance(provider, InboxProvider):
            return await self._to_inbox(leased, provider, message)
        timeout = self.catalog.providers[provider_name].timeout_seconds
        try:
            message_id = await self.timeouts.limit(timeout, provider.send(message))
        except ProviderError as error:
            return await self._refused(leased, provider_name, error)
        except TimeoutError:
            text = f"{provider_name}: no answer within {timeout:g} s"
            return self._failed(
                leased, ErrorClass.TRANSIENT, text, provider_name, provider_failed=True
            )
        except Exception as error:  # a bug, here or in the adapter: survive it
            log.exception("delivery.bug")
            return Attempted(decide.after_bug(leased, error, provider_name), self.now_ms(), None)
        sent = Sent(provider_name, message_id, rendered.sms_segments)
        return Attempted(sent, self.now_ms(), False)

    async def _to_inbox(
        self, leased: LeasedDelivery, provider: InboxProvider, message: Message
    ) -> Attempted:
        """An IN_APP delivery through Clarion's own inbox: SENT, or FAILED when the inbox
        refuses the message (a link that is no safe action URL)."""
        try:
            now_ms = self.now_ms()
            return Attempted(provider.decision(leased, message, now_ms), now_ms, False)
        except ProviderError as error:
            return await self._refused(leased, provider.name, error)

    def _unsubscribe_url(self, item: WorkItem) -> str:
        """The one-click unsubscribe link of an EMAIL of a type recipients may switch off,
        made at each attempt (so a retry's link lasts as long as the first one's); ""
        otherwise."""
        type_config = self.catalog.types.get(item.notification_type)
        links = self.unsubscribe_links
        if links is None or item.channel != Channel.EMAIL or not type_config:
            return ""
        if not type_config.opt_out:
            return ""  # an OTP or a security alert: nothing to unsubscribe from
        now_s = self.now_ms() / 1000
        url = links.url(item.recipient_id, item.notification_type, item.channel, now_s)
        if not url:
            log.warning(
                "delivery.unsubscribe_link_too_long", recipient_id_chars=len(item.recipient_id)
            )
        return url

    async def _refused(
        self, leased: LeasedDelivery, provider_name: str, error: ProviderError
    ) -> Attempted:
        """The provider refused or failed: classify, and fail over when that is safe."""
        text = decide.refusal_text(error)
        log.info("delivery.attempt_failed", error_class=error.error_class, error=text)
        if error.invalid_address:
            await self.forget_address(leased.item, provider_name)
        item = leased.item
        providers = len(self.catalog.provider_order(item.channel, item.address))
        return self._failed(
            leased, error.error_class, text, provider_name, error.retry_after,
            fail_over=decide.may_fail_over(error, providers),
            provider_failed=error.error_class is ErrorClass.TRANSIENT,
        )  # fmt: skip

    def _failed(
        self,
        leased: LeasedDelivery,
        error_class: ErrorClass,
        error: str,
        provider: str,
        retry_after: float | None = None,
        *,
        fail_over: bool = False,
        provider_failed: bool | None,
    ) -> Attempted:
        """The decision after a failed attempt, with what it says about the provider."""
        now_ms = self.now_ms()
        decision = decide.after_failure(
            leased,
            error_class=error_class,
            error=error,
            policy=self.catalog.channels[leased.item.channel].retry,
            now_ms=now_ms,
            retry_after=retry_after,
            provider=provider,
            fail_over=fail_over,
        )
        return Attempted(decision, now_ms, provider_failed)
