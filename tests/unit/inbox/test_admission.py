"""Inbox streams per process and per recipient, and re-reads per recipient and minute: a few
streams of one recipient, its oldest replaced by a newer one once it is old enough (never
one another in a loop), refusals saying when to retry."""

from __future__ import annotations

import pytest
from fakeredis import FakeAsyncRedis

from streams.core.errors import RateLimited, Unavailable
from streams.core.keys import KeySpace
from streams.inbox.admission import ResumeWindow, StreamLimits
from streams.inbox.live import InboxHub


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def hub_with(clock: Clock, **limits: int) -> InboxHub:
    return InboxHub(FakeAsyncRedis(), KeySpace("t"), StreamLimits(**limits), clock=clock)  # type: ignore[arg-type]


def test_a_thousand_streams_of_one_recipient_at_once_leave_its_cap_open() -> None:
    clock = Clock()
    hub = hub_with(clock, per_recipient=5)
    admitted, refused = [], []
    for _ in range(1000):
        try:
            admitted.append(hub.admit("u-1"))
        except RateLimited as refusal:
            refused.append(refusal)
    assert len(admitted) == 5
    assert hub.clients == 5
    assert {type(r) for r in refused} == {RateLimited}
    assert refused[0].retry_after_s == 30
    assert "CLARION_INBOX_STREAMS_PER_RECIPIENT" in refused[0].detail
    assert not any(listener.replaced for listener in admitted)


def test_a_newer_stream_replaces_the_oldest_once_it_is_old_enough() -> None:
    clock = Clock()
    hub = hub_with(clock, per_recipient=2)
    first = hub.admit("u-1")
    clock.now += 10
    second = hub.admit("u-1")
    clock.now += 25  # the first is 35 s old, the second 25 s
    third = hub.admit("u-1")
    assert first.replaced
    assert first.wake.is_set()
    assert not second.replaced
    assert not third.replaced
    assert hub.clients == 2
    hub.release("u-1", first)  # its stream ends afterwards: nothing more to forget
    assert hub.clients == 2
    # The replaced one reconnects at once: the others are too young to be replaced.
    with pytest.raises(RateLimited) as refused:
        hub.admit("u-1")
    assert refused.value.retry_after_s == 5  # when the second is 30 s old


def test_past_the_process_limit_a_stream_is_refused_with_503_and_a_place_comes_back() -> None:
    hub = hub_with(Clock(), streams=3)
    listeners = [hub.admit(f"u-{n}") for n in range(3)]
    with pytest.raises(Unavailable) as refused:
        hub.admit("u-9")
    assert "CLARION_INBOX_STREAMS" in refused.value.detail
    hub.release("u-0", listeners[0])
    hub.release("u-0", listeners[0])  # released twice: counted once
    assert hub.clients == 2
    hub.admit("u-9")


def test_streams_of_other_recipients_do_not_count_against_one() -> None:
    hub = hub_with(Clock(), per_recipient=1)
    hub.admit("u-1")
    hub.admit("u-2")
    assert hub.clients == 2


def test_a_recipient_re_reads_its_feeds_a_few_times_a_minute() -> None:
    clock = Clock()
    window = ResumeWindow(3, clock)
    assert [window.allow("u-1") for _ in range(4)] == [True, True, True, False]
    assert window.allow("u-2")  # another recipient has its own
    clock.now += 60
    assert window.allow("u-1")
