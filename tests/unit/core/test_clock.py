"""The wall clock in milliseconds."""

from __future__ import annotations

import time

import pytest

from streams.core import clock


def test_it_is_this_hosts_time_in_whole_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    now = clock.now_ms()
    assert isinstance(now, int)
    assert before <= now <= time.time_ns() // 1_000_000


def test_it_rounds_down_and_follows_a_patched_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time_ns", lambda: 1_700_000_000_123_999_999)
    assert clock.now_ms() == 1_700_000_000_123
