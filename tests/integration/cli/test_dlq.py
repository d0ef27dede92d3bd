"""``clarion dlq list`` and ``clarion dlq replay`` as an operator runs them: real processes on
real Redis, with no API running."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import pytest
from redis.asyncio import Redis

from streams.core.keys import KeySpace
from tests.conftest import DIGEST_SECRET, REDIS_URL, REPO
from tests.integration.delivery_support import state
from tests.integration.dlq_support import EMAIL_BODY, dead_lettered, delivery_of, otp

pytestmark = pytest.mark.timeout(60)


async def clarion(prefix: str, *args: str) -> tuple[int, str, str]:
    """Run ``clarion <args>``; exit code, stdout, stderr."""
    env = {
        **os.environ,
        "CLARION_REDIS_URL": REDIS_URL,
        "CLARION_KEY_PREFIX": prefix,
        "CLARION_CONFIG": str(REPO / "clarion.toml"),
        # A replay checks the suppression list, which names addresses by their digest.
        "CLARION_DIGEST_SECRET": DIGEST_SECRET.decode(),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", *args, env=env, cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await process.communicate()
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


async def test_list_and_replay_from_the_shell(real_redis: Redis, key_prefix: str) -> None:
    keys = KeySpace(key_prefix)
    ids, _ = await dead_lettered(real_redis, keys, [otp(0), otp(1), EMAIL_BODY])
    email = await delivery_of(real_redis, keys, "u-9")
    first_sms = next(delivery_id for delivery_id in ids if delivery_id != email)

    code, table, _ = await clarion(key_prefix, "dlq", "list")
    assert code == 0
    assert "open dead letters: 3" in table
    assert "SMS 2, EMAIL 1" in table
    assert ids[0] in table
    assert "provider unreachable (outage)" in table
    assert "+4915112345678" not in table
    assert "anna@example.com" not in table

    replay = ["dlq", "replay", "--limit", "1", "--operator", "anna", "--reason", "outage over"]
    code, table, _ = await clarion(key_prefix, *replay, "--dry-run", "--channel", "SMS")
    assert code == 0
    assert "DRY RUN, nothing written: would replay 1, skipped 0" in table
    assert (await state(real_redis, keys, first_sms))["status"] == "FAILED"

    code, out, _ = await clarion(key_prefix, *replay, "--channel", "SMS", "--json")
    assert code == 0
    answer: dict[str, Any] = json.loads(out)
    assert [r["delivery_id"] for r in answer["replayed"]] == [first_sms]
    assert (await state(real_redis, keys, first_sms))["status"] == "QUEUED"

    code, out, _ = await clarion(key_prefix, "dlq", "list", "--json")
    assert (json.loads(out)["open"], json.loads(out)["resolved"]) == (2, 1)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--limit", "0"], "--limit"),
        (["--limit", "5000"], "--limit"),
        (["--limit", "5", "--type", "nope"], "type"),
        (["--limit", "5", "--since", "yesterday"], "since"),
        (["--limit", "5", "--operator", " "], "operator"),
    ],
)
async def test_a_bad_replay_is_refused_naming_the_option(
    key_prefix: str, args: list[str], named: str
) -> None:
    base = ["dlq", "replay", "--operator", "anna", "--reason", "why"]
    code, _, error = await clarion(key_prefix, *base, *args)
    assert code == 2
    assert named in error
    assert "Traceback" not in error


async def test_limit_operator_and_reason_are_required(key_prefix: str) -> None:
    code, _, error = await clarion(key_prefix, "dlq", "replay", "--operator", "a", "--reason", "b")
    assert code == 2
    assert "--limit" in error
