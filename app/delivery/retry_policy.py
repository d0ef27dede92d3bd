"""When to try a failed delivery again: exponential backoff with full jitter, bounded."""

from __future__ import annotations

import random
from collections.abc import Callable

from app.catalog.channels import RetryPolicy


def backoff_ceiling(policy: RetryPolicy, attempt: int) -> float:
    """The longest wait after failed attempt number ``attempt`` (1-based), in seconds."""
    return min(policy.max_seconds, policy.base_seconds * 2.0 ** (attempt - 1))


def retry_delay(
    policy: RetryPolicy,
    attempt: int,
    retry_after: float | None = None,
    uniform: Callable[[float, float], float] = random.uniform,
) -> float:
    """Seconds to wait before the next attempt: full jitter below the ceiling.

    Full jitter spreads the retries of many deliveries that failed together (a provider
    outage) instead of sending them back in waves. A provider's Retry-After is honoured as
    the least wait.
    """
    delay = uniform(0.0, backoff_ceiling(policy, attempt))
    return max(delay, retry_after) if retry_after is not None else delay


def may_retry(policy: RetryPolicy, attempts_made: int) -> bool:
    """True while another attempt is allowed after ``attempts_made`` attempts."""
    return attempts_made < policy.max_attempts
