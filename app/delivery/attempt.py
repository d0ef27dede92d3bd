"""One attempt at one leased delivery: render, call the provider, classify what happened.

The provider gets the delivery id as its idempotency key on every attempt. What the answer
means is decided here: a send is SENT; a TRANSIENT failure is retried after the channel's
backoff while attempts and the TTL allow (never past the TTL: then it expires); anything
else, and a retry that is not allowed, fails the delivery into the dead-letter queue. An
exception no adapter should raise is a BUG: the worker survives it and the delivery fails.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import NamedTuple

import structlog

from app.catalog import Catalog, RetryPolicy
from app.delivery.provider_timeouts import ProviderTimeouts
from app.delivery.rendering import RenderError, render
from app.delivery.retry_policy import may_retry, retry_delay
from app.logging import mask
from app.providers.base import Message, Provider, ProviderError
from app.providers.inbox import InboxProvider
from app.unsubscribe import UnsubscribeLinks
from streams import delivery_outcomes
from streams.delivery_leases import LeasedDelivery
from streams.delivery_outcomes import MAX_ERROR_TEXT
from streams.delivery_store import Outcome
from streams.vocabulary import Channel, ErrorClass
from streams.work_items import WorkItem

log = structlog.get_logger(__name__)


class Attempted(NamedTuple):
    """An attempt's outcome, and what it says about the provider for its circuit breaker:
    True when it failed TRANSIENT, False when it answered, None when it was not called (or
    failed in a way that says nothing about it, a BUG)."""

    outcome: Outcome
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
            return Attempted(self._failed(leased, ErrorClass.PERMANENT, text, ""), None)
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
            return Attempted(self._failed(leased, ErrorClass.TRANSIENT, text, provider_name), True)
        except Exception as error:  # a bug, here or in the adapter: survive it
            log.exception("delivery.bug")
            text = error_text(f"{type(error).__name__}: {error}")
            attempts = leased.lease.attempts + 1
            outcome = delivery_outcomes.failed(
                leased, ErrorClass.BUG, text, self.now_ms(), attempts=attempts,
                provider=provider_name,
            )  # fmt: skip
            return Attempted(outcome, None)
        outcome = delivery_outcomes.sent(
            leased, provider_name, message_id, self.now_ms(), rendered.sms_segments
        )
        return Attempted(outcome, False)

    async def _to_inbox(
        self, leased: LeasedDelivery, provider: InboxProvider, message: Message
    ) -> Attempted:
        """The outcome of an IN_APP delivery through Clarion's own inbox: SENT, or FAILED
        when the inbox refuses the message (a link that is no safe action URL)."""
        try:
            return Attempted(provider.outcome(leased, message, self.now_ms()), False)
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
        text = error_text(error.message)
        if error.reason is not None:
            text = f"{error.reason}: {text}"[:MAX_ERROR_TEXT]
        log.info("delivery.attempt_failed", error_class=error.error_class, error=text)
        if error.invalid_address:
            await self.forget_address(leased.item, provider_name)
        transient = error.error_class is ErrorClass.TRANSIENT
        # Only a message that certainly never reached its provider may go to another one:
        # anything else might have been sent, and a second provider would send it again.
        fail_over = transient and error.not_accepted
        item = leased.item
        fail_over = fail_over and len(self.catalog.provider_order(item.channel, item.address)) > 1
        outcome = self._failed(
            leased, error.error_class, text, provider_name, error.retry_after, fail_over=fail_over
        )
        return Attempted(outcome, transient)

    def _failed(
        self,
        leased: LeasedDelivery,
        error_class: ErrorClass,
        error: str,
        provider: str,
        retry_after: float | None = None,
        *,
        fail_over: bool = False,
    ) -> Outcome:
        return failed_attempt(
            leased,
            error_class=error_class,
            error=error,
            policy=self.catalog.channels[leased.item.channel].retry,
            now_ms=self.now_ms(),
            retry_after=retry_after,
            provider=provider,
            fail_over=fail_over,
        )


def failed_attempt(
    leased: LeasedDelivery,
    *,
    error_class: ErrorClass,
    error: str,
    policy: RetryPolicy,
    now_ms: int,
    retry_after: float | None = None,
    provider: str = "",
    fail_over: bool = False,
) -> Outcome:
    """An attempt (at ``provider``) failed: retry a transient failure while attempts and
    the TTL allow (``fail_over``: through the channel's next provider), otherwise fail the
    delivery and dead-letter it."""
    attempt = leased.lease.attempts + 1
    text = error_text(error)
    if error_class is ErrorClass.TRANSIENT and may_retry(policy, attempt):
        due_ms = now_ms + round(retry_delay(policy, attempt, retry_after) * 1000)
        if due_ms >= leased.item.expires_ms:
            return delivery_outcomes.expired(leased, now_ms)  # never retry past the TTL
        return delivery_outcomes.retry_later(
            leased, error_class, text, due_ms, now_ms, provider=provider, fail_over=fail_over
        )
    return delivery_outcomes.failed(
        leased, error_class, text, now_ms, attempts=attempt, provider=provider
    )


def error_text(error: str) -> str:
    """An error text as it is stored: cut to length first (a provider's text may be of any
    size, and nothing should scan more of it than is kept), then masked, as it may quote the
    address. The cut keeps twice what is stored, so an address crossing the stored length is
    still whole when it is masked."""
    return mask(error[: 2 * MAX_ERROR_TEXT])[:MAX_ERROR_TEXT]
