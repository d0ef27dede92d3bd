"""Lua scripts kept as ``.lua`` files beside this module, loaded once and called by SHA.

After a Redis restart (or SCRIPT FLUSH) the first call gets NOSCRIPT; the script is then
loaded again and the call repeated, which is safe because a NOSCRIPT call ran nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

KeyOrArg = str | bytes | int | float
# Reloads after NOSCRIPT before giving up: a second flush can land between load and retry.
_LOAD_ATTEMPTS = 3


def _lua(name: str) -> str:
    return resources.files("streams").joinpath(f"lua/{name}.lua").read_text()


class LuaScript:
    """One Lua script, called by SHA with a transparent reload on NOSCRIPT.

    With ``shared``, the functions of ``lua/shared.lua`` come in front of the script's own
    source: Redis gives a script no way to load another.
    """

    def __init__(self, name: str, *, shared: bool = False) -> None:
        self.name = name
        self.source = (_lua("shared") + "\n" if shared else "") + _lua(name)
        self.sha = hashlib.sha1(self.source.encode(), usedforsecurity=False).hexdigest()

    async def __call__(
        self, redis: Redis, keys: Sequence[KeyOrArg], args: Sequence[KeyOrArg]
    ) -> Any:
        """Run the script once."""
        for _ in range(_LOAD_ATTEMPTS):
            try:
                return await redis.evalsha(self.sha, len(keys), *keys, *args)
            except NoScriptError:
                await redis.script_load(self.source)
        return await redis.evalsha(self.sha, len(keys), *keys, *args)

    async def run_many(
        self,
        redis: Redis,
        calls: Sequence[tuple[Sequence[KeyOrArg], Sequence[KeyOrArg]]],
        *,
        return_exceptions: bool = False,
    ) -> list[Any]:
        """Run the script once per (keys, args) in a single pipeline; results in call order.

        A call that failed raises its error, unless ``return_exceptions``: then it is returned
        in that call's place.
        """
        if len(calls) == 1 and not return_exceptions:  # cheaper than a pipeline of one
            keys, args = calls[0]
            return [await self(redis, keys, args)]
        results = await self._pipelined(redis, calls)
        for _ in range(_LOAD_ATTEMPTS):
            missing = [i for i, result in enumerate(results) if isinstance(result, NoScriptError)]
            if not missing:
                break
            await redis.script_load(self.source)
            retried = await self._pipelined(redis, [calls[i] for i in missing])
            for i, result in zip(missing, retried, strict=True):
                results[i] = result
        if not return_exceptions:
            for result in results:
                if isinstance(result, Exception):
                    raise result
        return results

    async def _pipelined(
        self, redis: Redis, calls: Sequence[tuple[Sequence[KeyOrArg], Sequence[KeyOrArg]]]
    ) -> list[Any]:
        pipe = redis.pipeline(transaction=False)
        for keys, args in calls:
            pipe.evalsha(self.sha, len(keys), *keys, *args)
        return list(await pipe.execute(raise_on_error=False))


INGEST = LuaScript("ingest", shared=True)
DELIVERY_BEGIN = LuaScript("delivery_begin")
DELIVERY_FINISH = LuaScript("delivery_finish", shared=True)
DEAD_LETTER_RAW = LuaScript("dead_letter_raw")
SCHEDULE_DUE = LuaScript("schedule_due")
RECIPIENT_SETTINGS = LuaScript("recipient_settings")
SANDBOX_SEND = LuaScript("sandbox_send")
RATE_LIMIT = LuaScript("rate_limit")
TRIM_STREAM = LuaScript("trim_stream")
