"""When a failed delivery is tried again: exponential backoff under a ceiling, full jitter
below it, a provider's Retry-After as the least wait, and a bounded number of attempts."""

from __future__ import annotations

import pytest

from app.catalog.channels import RetryPolicy
from app.delivery.retry_policy import backoff_ceiling, may_retry, retry_delay

POLICY = RetryPolicy(base_seconds=2, max_seconds=60, max_attempts=4)


def test_the_ceiling_doubles_with_each_attempt_up_to_the_maximum() -> None:
    ceilings = [backoff_ceiling(POLICY, attempt) for attempt in range(1, 9)]
    assert ceilings == [2, 4, 8, 16, 32, 60, 60, 60]


def test_full_jitter_draws_between_zero_and_the_ceiling() -> None:
    drawn: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        drawn.append((low, high))
        return high * 0.25

    assert retry_delay(POLICY, 3, uniform=uniform) == 2.0
    assert retry_delay(POLICY, 9, uniform=uniform) == 15.0
    assert drawn == [(0.0, 8.0), (0.0, 60.0)]


def test_the_real_jitter_stays_within_its_bounds() -> None:
    delays = [retry_delay(POLICY, 2) for _ in range(500)]
    assert all(0.0 <= delay <= 4.0 for delay in delays)
    assert len(set(delays)) > 400  # spread, not one value for every delivery


@pytest.mark.parametrize(
    ("drawn", "retry_after", "expected"),
    [(1.0, 5.0, 5.0), (7.0, 5.0, 7.0), (1.0, None, 1.0), (1.0, 0.0, 1.0)],
)
def test_retry_after_is_the_least_wait(
    drawn: float, retry_after: float | None, expected: float
) -> None:
    assert retry_delay(POLICY, 3, retry_after, uniform=lambda low, high: drawn) == expected


def test_attempts_are_bounded_by_the_policy() -> None:
    assert [may_retry(POLICY, made) for made in range(1, 6)] == [True, True, True, False, False]
    assert not may_retry(RetryPolicy(max_attempts=1), 1)
