"""BatchedScript: concurrent callers share pipelined script calls, and each gets its own
replies back in order, with a failed call's error in place of exactly its items."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from streams.core.batching import BatchedScript, Call
from streams.core.scripts import LuaScript

# Answers each argument with itself and "!", or fails the whole call when asked to.
_ECHO = """
if ARGV[1] == "fail" then
  return redis.error_reply("asked to fail")
end
local out = {}
for i = 2, #ARGV do
  out[#out + 1] = ARGV[i] .. "!"
end
return out
"""

Item = tuple[str, str]  # (group, value); the group "bad" makes its calls fail


class _EchoScript(LuaScript):
    """The echo script above, counting how many pipelines it was sent in."""

    def __init__(self) -> None:
        self.name = "echo"
        self.source = _ECHO
        self.sha = hashlib.sha1(_ECHO.encode(), usedforsecurity=False).hexdigest()
        self.pipelines = 0

    async def run_many(self, *args: Any, **kwargs: Any) -> list[Any]:
        self.pipelines += 1
        return await super().run_many(*args, **kwargs)


def _build(group: str, items: Sequence[Item]) -> Call:
    return [], ["fail" if group == "bad" else "ok", *(value for _, value in items)]


def _batched(redis: Redis, chunk: int = 64) -> tuple[_EchoScript, BatchedScript[str, Item, str]]:
    script = _EchoScript()
    batched: BatchedScript[str, Item, str] = BatchedScript(
        redis,
        script,
        group_of=lambda item: item[0],
        build=_build,
        parse=lambda raw: raw.decode(),
        chunk=chunk,
    )
    return script, batched


async def test_each_caller_gets_its_replies_in_order(redis: Redis) -> None:
    script, batched = _batched(redis, chunk=3)
    callers = [[("a" if i % 2 else "b", f"{n}-{i}") for i in range(7)] for n in range(20)]

    answers = await asyncio.gather(*(batched.run(items) for items in callers))

    for items, replies in zip(callers, answers, strict=True):
        assert replies == [f"{value}!" for _, value in items]
    # Callers arriving while a write is in flight share the next pipeline.
    assert script.pipelines < len(callers)


async def test_a_failed_call_fails_only_its_own_items(redis: Redis) -> None:
    _, batched = _batched(redis)
    mixed = [("good", "1"), ("bad", "2"), ("good", "3")]

    replies = await batched.run_settled(mixed)

    assert replies[0] == "1!"
    assert replies[2] == "3!"
    assert isinstance(replies[1], ResponseError)
    assert "asked to fail" in str(replies[1])
    with pytest.raises(ResponseError, match="asked to fail"):
        await batched.run(mixed)
    assert await batched.run([("good", "4")]) == ["4!"]  # the coalescer keeps working


async def test_nothing_to_run_answers_at_once(redis: Redis) -> None:
    script, batched = _batched(redis)
    assert await batched.run([]) == []
    assert script.pipelines == 0


async def test_items_run_alone_go_out_beside_a_write_in_flight(redis: Redis) -> None:
    """Each ``run_alone`` call is a pipeline of its own, sent at once: five parts submitted
    together are five pipelines in flight at the same time, where ``run_settled`` shares
    one."""
    script, batched = _batched(redis)
    in_flight = most = 0
    run_many = script.run_many

    async def counted(*args: Any, **kwargs: Any) -> list[Any]:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            return await run_many(*args, **kwargs)
        finally:
            in_flight -= 1

    script.run_many = counted  # type: ignore[method-assign]
    parts = [[("a", f"{n}-a"), ("bad", "x"), ("b", f"{n}-b")] for n in range(5)]

    answers = await asyncio.gather(*(batched.run_alone(items) for items in parts))

    assert (script.pipelines, most) == (5, 5)
    for items, replies in zip(parts, answers, strict=True):
        assert [replies[0], replies[2]] == [f"{items[0][1]}!", f"{items[2][1]}!"]
        assert isinstance(replies[1], ResponseError)  # a failed call fails its items alone
    await asyncio.gather(*(batched.run_settled(items) for items in parts))
    assert (script.pipelines, most) == (5 + 1, 5)
    assert await batched.run_alone([]) == []
