"""The client's retry budget: waits that double with jitter, Retry-After taken as given, and
no attempt past the bounds on attempts and on time."""

from __future__ import annotations

import httpx
import pytest

from clarion_client.retry import (
    IDEMPOTENT,
    NO_RETRIES,
    UNREPEATABLE,
    UPLOAD,
    Attempts,
    RetryPolicy,
    retry_after_s,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_without_retry_after_the_wait_doubles_up_to_the_ceiling() -> None:
    policy = RetryPolicy(max_attempts=10, max_elapsed_s=1000, base_delay_s=1, max_delay_s=4)
    attempts = Attempts(policy, clock=FakeClock(), jitter=lambda: 1.0)
    assert [attempts.next_delay(None) for _ in range(5)] == [1, 2, 4, 4, 4]


def test_jitter_draws_between_half_the_wait_and_all_of_it() -> None:
    policy = RetryPolicy(max_attempts=10, max_elapsed_s=1000, base_delay_s=2, max_delay_s=8)
    lowest = Attempts(policy, clock=FakeClock(), jitter=lambda: 0.0)
    assert [lowest.next_delay(None) for _ in range(3)] == [1, 2, 4]
    middle = Attempts(policy, clock=FakeClock(), jitter=lambda: 0.5)
    assert middle.next_delay(None) == 1.5


def test_retry_after_is_the_wait_when_the_server_gives_one() -> None:
    attempts = Attempts(RetryPolicy(max_elapsed_s=60), clock=FakeClock(), jitter=lambda: 1.0)
    assert attempts.next_delay(7) == 7
    assert attempts.next_delay(0) == 0


def test_no_attempt_past_max_attempts() -> None:
    attempts = Attempts(RetryPolicy(max_attempts=3), clock=FakeClock())
    assert attempts.next_delay(None) is not None
    assert attempts.next_delay(None) is not None
    assert attempts.next_delay(None) is None
    assert attempts.made == 3
    assert Attempts(NO_RETRIES).next_delay(None) is None


def test_no_wait_that_ends_past_the_time_budget() -> None:
    clock = FakeClock()
    attempts = Attempts(RetryPolicy(max_attempts=100, max_elapsed_s=10), clock=clock)
    assert attempts.next_delay(4) == 4
    clock.now += 4
    assert attempts.next_delay(7) is None  # 4 + 7 > 10: the call gives up now
    assert attempts.next_delay(6) == 6  # 4 + 6 = 10 still fits


@pytest.mark.parametrize(
    ("value", "expected"),
    [("3", 3.0), (" 12 ", 12.0), ("0", 0.0), ("", None), ("-1", None), ("1.5", None),
     ("Wed, 21 Oct 2026 07:28:00 GMT", None), ("1e3", None)],
)  # fmt: skip
def test_retry_after_reads_whole_seconds_only(value: str, expected: float | None) -> None:
    response = httpx.Response(429, headers={"Retry-After": value} if value else {})
    assert retry_after_s(response) == expected


def test_a_policy_that_cannot_work_is_refused_naming_the_setting() -> None:
    with pytest.raises(ValueError, match="max_attempts: at least 1"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="may not be negative"):
        RetryPolicy(base_delay_s=-1)


def test_a_campaign_call_is_tried_again_after_a_429_only_when_told_when() -> None:
    # Over the ingest quota (Retry-After): nothing was done, so even a call without a key
    # is tried again. Too many open campaigns (no Retry-After) is final.
    for retried in (UPLOAD, UNREPEATABLE):
        assert retried.again(429, 1.0)
        assert not retried.again(429, None)
        assert not retried.again(409, 1.0)
    assert IDEMPOTENT.again(429, None)
