"""What becomes of a leased delivery: pure decisions, no I/O (``streams.delivery.decisions``).

The worker and the attempt ask here and record the answer with one call
(``streams.delivery.outcomes.outcome``). A lease that says not to send ends the delivery
(or only acknowledges it); a delivery past its TTL expires before any provider is asked; one
without a provider or quota now is deferred; after a send it is SENT; after a failure a
TRANSIENT one is retried after the channel's backoff while attempts and the TTL allow (never
past the TTL: then it expires), and anything else, or a retry that is not allowed, fails the
delivery into the dead-letter queue.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from app.catalog.channels import RetryPolicy
from app.delivery.retry_policy import may_retry, retry_delay
from app.logging import mask
from app.providers.base import ProviderError
from streams.core.vocabulary import ErrorClass
from streams.delivery.decisions import (
    AcknowledgeOnly,
    Cancelled,
    Deferred,
    Expired,
    Failed,
    RetryAt,
)
from streams.delivery.leases import Lease, LeasedDelivery, LeaseVerdict
from streams.delivery.outcomes import MAX_ERROR_TEXT
from streams.delivery.work_items import WorkItem

Uniform = Callable[[float, float], float]


def not_to_send(lease: Lease, max_leases: int) -> AcknowledgeOnly | Cancelled | Failed:
    """A delivery whose lease says not to send it: a duplicate of one that already ended
    (TERMINAL) is only acknowledged; one of a cancelled campaign ends CANCELLED; one that
    workers keep dying on (POISON: leased more than ``max_leases`` times without an outcome)
    fails into the dead-letter queue, with the attempts made so far."""
    if lease.verdict is LeaseVerdict.TERMINAL:
        return AcknowledgeOnly()
    if lease.verdict is LeaseVerdict.CANCELLED:
        return Cancelled(lease.cancelled_by)
    reason = f"leased {max_leases + 1} times without an outcome: workers keep failing on it"
    return Failed(ErrorClass.POISON, reason, attempts=lease.attempts)


def expired_before(item: WorkItem, now_ms: int) -> Expired | None:
    """Expired when ``item``'s TTL has passed at ``now_ms``: nothing is sent after it."""
    return Expired() if now_ms >= item.expires_ms else None


def quota_wait(wait_s: float, now_ms: int) -> Deferred:
    """Deferred until the provider's quota grants the send, ``wait_s`` from now (at least a
    millisecond: a wait is never now)."""
    return Deferred(now_ms + max(1, round(wait_s * 1000)), "rate_limited")


def after_failure(
    leased: LeasedDelivery,
    *,
    error_class: ErrorClass,
    error: str,
    policy: RetryPolicy,
    now_ms: int,
    retry_after: float | None = None,
    provider: str = "",
    fail_over: bool = False,
    uniform: Uniform = random.uniform,
) -> RetryAt | Expired | Failed:
    """An attempt (at ``provider``) failed: retry a transient failure while attempts and
    the TTL allow (``fail_over``: through the channel's next provider; the delay drawn with
    ``uniform``, a provider's ``retry_after`` the least), otherwise fail the delivery."""
    attempt = leased.lease.attempts + 1
    text = error_text(error)
    if error_class is ErrorClass.TRANSIENT and may_retry(policy, attempt):
        due_ms = now_ms + round(retry_delay(policy, attempt, retry_after, uniform) * 1000)
        if due_ms >= leased.item.expires_ms:
            return Expired()  # never retry past the TTL
        return RetryAt(due_ms, error_class, text, provider=provider, fail_over=fail_over)
    return Failed(error_class, text, attempts=attempt, provider=provider)


def after_bug(leased: LeasedDelivery, error: Exception, provider: str) -> Failed:
    """An exception no adapter should raise: the delivery fails as a BUG, never retried."""
    text = error_text(f"{type(error).__name__}: {error}")
    return Failed(ErrorClass.BUG, text, attempts=leased.lease.attempts + 1, provider=provider)


def refusal_text(error: ProviderError) -> str:
    """A provider's refusal as it is stored: its reason, if it gave one, then its text."""
    text = error_text(error.message)
    if error.reason is not None:
        text = f"{error.reason}: {text}"[:MAX_ERROR_TEXT]
    return text


def may_fail_over(error: ProviderError, providers: int) -> bool:
    """Whether the retry after ``error`` goes to the channel's next of ``providers``: only a
    message that certainly never reached its provider may go to another one; anything else
    might have been sent, and a second provider would send it again."""
    return error.error_class is ErrorClass.TRANSIENT and error.not_accepted and providers > 1


def error_text(error: str) -> str:
    """An error text as it is stored: cut to length first (a provider's text may be of any
    size, and nothing should scan more of it than is kept), then masked, as it may quote the
    address. The cut keeps twice what is stored, so an address crossing the stored length is
    still whole when it is masked."""
    return mask(error[: 2 * MAX_ERROR_TEXT])[:MAX_ERROR_TEXT]
