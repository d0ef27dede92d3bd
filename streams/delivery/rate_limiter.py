"""Per provider credential rate limits, shared by every worker process, with quota kept for
HIGH priority.

One GCRA (``rate_limit.lua``) holds the total rate of a credential; NORMAL and LOW also
have a GCRA of their own at their share of the rate, and may fill only their share of the
total's burst window, so when the total is near its limit only HIGH still gets through. The
clock is Redis's ``TIME``, so processes on hosts with different clocks share one limit.

A denied request is not an error and consumes nothing: the caller gets how long to wait.
Requests submitted by concurrent tasks while a call is in flight share one round trip, and
all requests for one credential go into one script call (its keys share a hash tag).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from streams.core import scripts
from streams.core.batching import BatchedScript
from streams.core.keys import KeySpace
from streams.core.scripts import Call, KeyOrArg
from streams.core.vocabulary import Priority

_US_PER_SECOND = 1_000_000

# (provider, rate, priority)
_Request = tuple[str, "Rate", Priority]


@dataclass(frozen=True, slots=True)
class Rate:
    """A credential's limit: ``per_second`` sustained, ``burst`` at once; NORMAL may use at
    most ``normal_share`` of it and LOW ``low_share``, HIGH all of it."""

    per_second: float
    burst: int = 1
    normal_share: float = 0.8
    low_share: float = 0.6

    def __post_init__(self) -> None:
        # Checked here because the script trusts its arguments (a zero rate would divide by 0).
        if not self.per_second > 0:
            raise ValueError(f"per_second must be > 0, not {self.per_second}")
        if self.burst < 1:
            raise ValueError(f"burst must be >= 1, not {self.burst}")
        for name in ("normal_share", "low_share"):
            share = getattr(self, name)
            if not 0 < share <= 1:
                raise ValueError(f"{name} must be in (0, 1], not {share}")


class RateLimiter:
    """Grants sends through provider credentials against limits shared via Redis."""

    def __init__(self, redis: Redis, keys: KeySpace, *, chunk: int = 256) -> None:
        self.redis = redis
        self.keys = keys
        self._script: BatchedScript[tuple[str, Rate], _Request, float] = BatchedScript(
            redis,
            scripts.RATE_LIMIT,
            group_of=_group_of,
            build=lambda group, requests: rate_limit_call(keys, *group, requests),
            parse=_seconds,
            # A request costs the script a few table lookups: large calls are cheap.
            chunk=chunk,
        )

    async def acquire(self, provider: str, rate: Rate, priority: Priority) -> float:
        """Take one send of ``priority`` (HIGH, NORMAL or LOW) through ``provider``.

        Returns 0.0 when granted, else the seconds until it would be granted (nothing was
        taken then; other requests may still take the slot first).
        """
        [wait] = await self._script.run([(provider, rate, _priority(priority))])
        return wait

    async def acquire_many(self, requests: Sequence[_Request]) -> list[float]:
        """Take a send for each (provider, rate, priority), granting or denying each in order.

        Returns, per request in the same order, 0.0 when granted, else the seconds until it
        would be granted. All requests for one provider (and rate) go into one script call;
        calls for different providers share one pipeline.
        """
        if not requests:
            return []
        # Checked before a request is queued: a bad one must fail its caller, not the batch.
        return await self._script.run(
            [(provider, rate, _priority(priority)) for provider, rate, priority in requests]
        )


def rate_limit_call(
    keys: KeySpace, provider: str, rate: Rate, requests: Sequence[_Request]
) -> Call:
    """The keys and arguments of one ``rate_limit.lua`` call: one credential's requests.

    KEYS: the credential's total, NORMAL and LOW buckets (one hash tag). ARGV: per_second,
    burst, normal_share, low_share, then the requests' priorities as one string of letters
    (``Priority.letter``), in order.
    """
    bucket = keys.rate_bucket
    script_keys: list[KeyOrArg] = [
        bucket(provider),
        bucket(provider, "normal"),
        bucket(provider, "low"),
    ]
    args: list[KeyOrArg] = [
        repr(float(rate.per_second)),
        rate.burst,
        repr(float(rate.normal_share)),
        repr(float(rate.low_share)),
        "".join(priority.letter for _, _, priority in requests),
    ]
    return script_keys, args


def _priority(priority: str) -> Priority:
    try:
        return Priority(priority)
    except ValueError:
        raise ValueError(f"unknown priority {priority!r}") from None


def _group_of(request: _Request) -> tuple[str, Rate]:
    return request[0], request[1]


def _seconds(wait_us: Any) -> float:
    return int(wait_us) / _US_PER_SECOND
