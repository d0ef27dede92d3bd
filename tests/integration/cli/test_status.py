"""``clarion status`` run once against real Redis."""

from __future__ import annotations

import time

from click.testing import CliRunner

from app.cli.main import main
from app.operations.advisor import NO_WORKER_TEXT
from streams.core.keys import KeySpace
from streams.core.vocabulary import Priority
from tests.conftest import REDIS_URL, sync_test_redis


def test_status_prints_the_backlog_and_the_advisors_lag_hint(key_prefix: str) -> None:
    high = KeySpace(key_prefix).shard(0).work(Priority.HIGH)
    redis = sync_test_redis()
    try:
        # One OTP accepted ten seconds ago that no worker has taken: HIGH waits too long.
        redis.xadd(high, {"w": b"[]"}, id=f"{int(time.time() * 1000) - 10_000}-0")
        result = CliRunner().invoke(
            main,
            ["status", "--interval", "0.1"],
            env={"CLARION_KEY_PREFIX": key_prefix, "CLARION_REDIS_URL": REDIS_URL},
        )
    finally:
        redis.delete(high)
        redis.close()
    assert result.exit_code == 0, result.output
    [row] = [line.split() for line in result.output.splitlines() if line.startswith("work:high")]
    # stream, shard, group, length, pending, lag, oldest ("10.0 s"), change/s
    assert row[:6] == ["work:high", "0", "delivery", "1", "0", "1"]
    assert float(row[6]) >= 10
    # No worker reports a heartbeat: the advisor says to start one, not to look downstream.
    assert "hint: lag high: HIGH: 1 waiting, the oldest 10." in result.output
    assert NO_WORKER_TEXT in result.output


def test_status_names_an_unreachable_redis(key_prefix: str) -> None:
    result = CliRunner().invoke(
        main,
        ["status", "--interval", "0.1"],
        env={"CLARION_KEY_PREFIX": key_prefix, "CLARION_REDIS_URL": "redis://127.0.0.1:1/0"},
    )
    assert result.exit_code == 1
    assert "cannot read Redis at CLARION_REDIS_URL" in result.output
