"""When a call is tried again, and after how long.

Clarion answers 409 (a request with the same idempotency key is in flight), 429 (over the
ingest quota) and 503 (Redis or PostgreSQL unavailable) with ``Retry-After`` in seconds;
nothing of such a request was written, or what was is answered again for the same key. A
call that got no answer at all (refused, reset, timed out) is tried again too: it carries
the same idempotency key, so a request that did arrive is not accepted twice. Any other
error answer is final.

Creating and starting a campaign take no idempotency key: they are tried again only when
the connection was never made, or after a 429 with ``Retry-After`` (over the ingest quota:
nothing was done), and a 409 there is the campaign's state, not a key in flight. A 429
without ``Retry-After`` (too many open campaigns) is final.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class Retried:
    """What a kind of call is tried again after: these answers, these failures."""

    statuses: frozenset[int]
    failures: tuple[type[Exception], ...]
    # Answers tried again only when they say when (``Retry-After``).
    when_told: frozenset[int] = frozenset()

    def again(self, status: int, retry_after: float | None) -> bool:
        """Whether an answer of ``status`` (with that ``Retry-After``) is tried again."""
        return status in self.statuses or (status in self.when_told and retry_after is not None)


# Failures after which the request may or may not have arrived; its key makes a retry safe.
LOST = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
# Failures before any of the request was sent.
NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout)

# A call with an idempotency key, or a read.
IDEMPOTENT = Retried(frozenset({409, 429, 503}), LOST)
# A campaign's recipients upload, with its key: there 409 means "no longer a draft", final.
UPLOAD = Retried(frozenset({503}), LOST, frozenset({429}))
# A call without a key that changes something (creating or starting a campaign): tried
# again only when it certainly never arrived, so it is never made twice, or was refused
# over the ingest quota before anything was done.
UNREPEATABLE = Retried(frozenset(), NEVER_SENT, frozenset({429}))


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How many attempts a call gets and how long it may take in all, waits included.

    Without ``Retry-After`` the wait doubles from ``base_delay_s`` up to ``max_delay_s``, and
    is drawn between half of that and all of it, so clients refused together do not come
    back together.
    """

    max_attempts: int = 5
    max_elapsed_s: float = 30.0
    base_delay_s: float = 0.25
    max_delay_s: float = 8.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts: at least 1, not {self.max_attempts}")
        if min(self.max_elapsed_s, self.base_delay_s, self.max_delay_s) < 0:
            raise ValueError("max_elapsed_s, base_delay_s and max_delay_s may not be negative")


NO_RETRIES = RetryPolicy(max_attempts=1)


class Attempts:
    """One call's attempts: whether another is left, and how long to wait before it."""

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        clock: Callable[[], float] = time.monotonic,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self._policy = policy
        self._clock = clock
        self._jitter = jitter
        self._started = clock()
        self.made = 1  # the first attempt is being made

    def next_delay(self, retry_after: float | None) -> float | None:
        """Seconds to wait before the next attempt (``Retry-After`` when the server gave
        one), or None when no attempt is left or the wait would end past the time budget."""
        policy = self._policy
        if self.made >= policy.max_attempts:
            return None
        if retry_after is None:
            ceiling = min(policy.max_delay_s, policy.base_delay_s * 2.0 ** (self.made - 1))
            delay = ceiling / 2 + self._jitter() * ceiling / 2
        else:
            delay = retry_after
        if self._clock() - self._started + delay > policy.max_elapsed_s:
            return None
        self.made += 1
        return delay


def retry_after_s(response: httpx.Response) -> float | None:
    """The answer's ``Retry-After`` in seconds, or None without a usable one (Clarion sends
    whole seconds; the HTTP-date form is left to the backoff)."""
    value: str = response.headers.get("Retry-After", "")
    value = value.strip()
    return float(value) if value.isascii() and value.isdigit() else None
