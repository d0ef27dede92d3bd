"""One attempt at one leased delivery: render, call the provider, classify what happened.

The provider gets the delivery id as its idempotency key on every attempt. What the answer
means is decided here: a send is SENT; a TRANSIENT failure is retried after the channel's
backoff while attempts and the TTL allow (never past the TTL: then it expires); anything
else, and a retry that is not allowed, fails the delivery into the dead-letter queue. An
exception no adapter should raise is a BUG: the worker survives it and the delivery fails.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import structlog

from app.catalog import Catalog, RetryPolicy
from app.delivery.provider_timeouts import ProviderTimeouts
from app.delivery.rendering import RenderError, render
from app.delivery.retry_policy import may_retry, retry_delay
from app.logging import mask
from app.providers.base import Message, Provider, ProviderError
from streams import delivery_outcomes
from streams.delivery_outcomes import MAX_ERROR_TEXT, LeasedDelivery
from streams.delivery_store import Outcome
from streams.vocabulary import ErrorClass
from streams.work_items import WorkItem

log = structlog.get_logger(__name__)


class Attempts:
    """Makes attempts with a catalog's providers, each within its provider's time limit."""

    def __init__(
        self,
        catalog: Catalog,
        providers: Mapping[str, Provider],
        timeouts: ProviderTimeouts,
        now_ms: Callable[[], int],
        forget_address: Callable[[WorkItem], Awaitable[None]],
    ) -> None:
        self.catalog = catalog
        self.providers = providers
        self.timeouts = timeouts
        self.now_ms = now_ms
        # Called when a provider says an address is dead (e.g. an invalid push token).
        self.forget_address = forget_address

    async def attempt(self, leased: LeasedDelivery) -> Outcome:
        """Make one attempt; its outcome, ready to record."""
        item = leased.item
        provider_name = self.catalog.channels[item.channel].provider
        policy = self.catalog.channels[item.channel].retry
        try:
            title, body = render(self.catalog, item, leased.data)
        except RenderError as error:
            log.warning("delivery.render_failed", error=str(error))
            return self._failed_attempt(leased, ErrorClass.PERMANENT, str(error), policy)
        message = Message(
            delivery_id=item.delivery_id,
            idempotency_key=item.delivery_id,
            channel=item.channel,
            address=item.address,
            title=title,
            body=body,
            attempt=leased.lease.attempts + 1,
            data=leased.data or {},
        )
        timeout = self.catalog.providers[provider_name].timeout_seconds
        try:
            message_id = await self.timeouts.limit(
                timeout, self.providers[provider_name].send(message)
            )
        except ProviderError as error:
            text = error_text(error.message)
            log.info("delivery.attempt_failed", error_class=error.error_class, error=text)
            if error.invalid_address:
                await self.forget_address(item)
            return self._failed_attempt(leased, error.error_class, text, policy, error.retry_after)
        except TimeoutError:
            text = f"{provider_name}: no answer within {timeout:g} s"
            return self._failed_attempt(leased, ErrorClass.TRANSIENT, text, policy)
        except Exception as error:  # a bug, here or in the adapter: survive it
            log.exception("delivery.bug")
            text = error_text(f"{type(error).__name__}: {error}")
            attempts = leased.lease.attempts + 1
            return delivery_outcomes.failed(
                leased, ErrorClass.BUG, text, self.now_ms(), attempts=attempts
            )
        return delivery_outcomes.sent(leased, provider_name, message_id, self.now_ms())

    def _failed_attempt(
        self,
        leased: LeasedDelivery,
        error_class: ErrorClass,
        error: str,
        policy: RetryPolicy,
        retry_after: float | None = None,
    ) -> Outcome:
        return failed_attempt(
            leased,
            error_class=error_class,
            error=error,
            policy=policy,
            now_ms=self.now_ms(),
            retry_after=retry_after,
        )


def failed_attempt(
    leased: LeasedDelivery,
    *,
    error_class: ErrorClass,
    error: str,
    policy: RetryPolicy,
    now_ms: int,
    retry_after: float | None = None,
) -> Outcome:
    """An attempt failed: retry a transient failure while attempts and the TTL allow,
    otherwise fail the delivery and dead-letter it."""
    attempt = leased.lease.attempts + 1
    text = error_text(error)
    if error_class is ErrorClass.TRANSIENT and may_retry(policy, attempt):
        due_ms = now_ms + round(retry_delay(policy, attempt, retry_after) * 1000)
        if due_ms >= leased.item.expires_ms:
            return delivery_outcomes.expired(leased, now_ms)  # never retry past the TTL
        return delivery_outcomes.retry_later(leased, error_class, text, due_ms, now_ms)
    return delivery_outcomes.failed(leased, error_class, text, now_ms, attempts=attempt)


def error_text(error: str) -> str:
    """An error text as it is stored: cut to length first (a provider's text may be of any
    size, and nothing should scan more of it than is kept), then masked, as it may quote the
    address. The cut keeps twice what is stored, so an address crossing the stored length is
    still whole when it is masked."""
    return mask(error[: 2 * MAX_ERROR_TEXT])[:MAX_ERROR_TEXT]
