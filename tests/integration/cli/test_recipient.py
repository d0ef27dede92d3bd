"""``clarion recipient revoke-tokens`` against real Redis: it raises the recipient's
revocation epoch, so a token made before is refused and one made after is not."""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner

from app.cli.main import main
from streams.core.connection import connect
from streams.core.keys import KeySpace
from streams.inbox.revocation import InboxRevocations, TokensRevoked
from tests.conftest import REDIS_URL, delete_prefix


def invoke(prefix: str, *args: str) -> tuple[int, str]:
    env = {"CLARION_KEY_PREFIX": prefix, "CLARION_REDIS_URL": REDIS_URL}
    result = CliRunner().invoke(main, ["recipient", "revoke-tokens", *args], env=env)
    return result.exit_code, result.output


async def _epoch(prefix: str, recipient_id: str) -> int:
    redis = connect(REDIS_URL)
    try:
        return await InboxRevocations(redis, KeySpace(prefix)).epoch(recipient_id)
    finally:
        await redis.aclose()


async def _refused(prefix: str, recipient_id: str, epoch: int) -> bool:
    redis = connect(REDIS_URL)
    try:
        await InboxRevocations(redis, KeySpace(prefix)).check(recipient_id, epoch)
    except TokensRevoked:
        return True
    finally:
        await redis.aclose()
    return False


async def _clean(prefix: str) -> None:
    redis = connect(REDIS_URL)
    await delete_prefix(redis, prefix)
    await redis.aclose()


def test_revoking_refuses_the_tokens_made_before(key_prefix: str) -> None:
    try:
        before = asyncio.run(_epoch(key_prefix, "user 7/ü"))
        code, output = invoke(key_prefix, "user 7/ü")
        assert code == 0, output
        assert "revoked: every inbox token of 'user 7/ü' made before 20" in output
        after = asyncio.run(_epoch(key_prefix, "user 7/ü"))
        assert asyncio.run(_refused(key_prefix, "user 7/ü", before))
        assert not asyncio.run(_refused(key_prefix, "user 7/ü", after))
    finally:
        asyncio.run(_clean(key_prefix))


@pytest.mark.parametrize("recipient_id", ["", "a" * 256, "tab\there"])
def test_a_recipient_id_that_cannot_be_one_is_refused(key_prefix: str, recipient_id: str) -> None:
    code, output = invoke(key_prefix, recipient_id)
    assert code == 2
    assert "1-255 printable characters" in output


def test_an_unreachable_redis_is_named() -> None:
    env = {"CLARION_REDIS_URL": "redis://127.0.0.1:1/0"}
    result = CliRunner().invoke(main, ["recipient", "revoke-tokens", "u-1"], env=env)
    assert result.exit_code == 1
    assert "cannot read Redis at CLARION_REDIS_URL" in result.output
