"""The sandbox provider: a real adapter that sends nothing, for development, tests and benchmarks.

Every call is recorded in the stream ``keys.sandbox_sent`` (delivery id, idempotency key,
channel, address, attempt, outcome, duplicate, and the message id of a send). Successful sends
are remembered per idempotency key, atomically with the record and for as long as the record
keeps them (``remember_ms``, the stream retention), so an idempotent sandbox answers a repeat
with the first message id and sends nothing new.

A notification steers the sandbox through directives in its data, per channel::

    {"sandbox": {"SMS": {"fail_transient": 2}, "PUSH": {"latency_ms": 200}}}

``latency_ms`` delays every answer; the others are checked in this order: ``raise_bug``,
``fail_permanent``, ``invalid_token``, ``rate_limited``, ``fail_transient``, then the send.
A malformed directive is a PERMANENT failure naming it. The address is recorded in the
stream (that is the point of a sandbox) but never logged or put in an error message.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import msgspec
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.providers.base import Message, ProviderError, Reason
from streams.core.batching import BatchedScript
from streams.core.keys import KeySpace
from streams.core.scripts import SANDBOX_SEND, Call, KeyOrArg
from streams.core.vocabulary import ErrorClass

CallOutcome = Literal["sent", "transient", "permanent", "rate_limited", "bug"]

DIRECTIVES_KEY: Final = "sandbox"
KNOWN_DIRECTIVES: Final = frozenset(
    {"latency_ms", "fail_transient", "rate_limited", "fail_permanent", "invalid_token", "raise_bug"}
)
RATE_LIMIT_RETRY_AFTER: Final = 1.0
# How long a send is remembered unless told otherwise: the default stream retention.
REMEMBER_MS: Final = 3_600_000


@dataclass(frozen=True, slots=True)
class Directives:
    """What the sandbox is told to do for one channel of one notification."""

    latency_ms: float = 0.0
    fail_transient: int = 0
    rate_limited: int = 0
    fail_permanent: str | None = None
    invalid_token: bool = False
    raise_bug: bool = False


NO_DIRECTIVES: Final = Directives()


def _malformed(text: str) -> ProviderError:
    return ProviderError(ErrorClass.PERMANENT, text)


def _whole_number(name: str, value: Any) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _malformed(f"sandbox directive {name} must be a whole number (0 or more)")
    return value


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _malformed(f"sandbox directive {name} must be true or false")
    return value


def parse_directives(message: Message) -> Directives:
    """The directives for ``message.channel``; ``ProviderError`` (PERMANENT) if malformed."""
    by_channel = message.data.get(DIRECTIVES_KEY)
    if by_channel is None:
        return NO_DIRECTIVES
    if not isinstance(by_channel, Mapping):
        raise _malformed("sandbox directives must be a mapping of channel to directives")
    raw = by_channel.get(message.channel)
    if raw is None:
        return NO_DIRECTIVES
    if not isinstance(raw, Mapping):
        raise _malformed(f"sandbox directives for {message.channel} must be a mapping")
    unknown = sorted(str(name) for name in raw if name not in KNOWN_DIRECTIVES)
    if unknown:
        raise _malformed(f"unknown sandbox directive {unknown[0]!r} for {message.channel}")

    latency_ms = raw.get("latency_ms", 0)
    if (
        isinstance(latency_ms, bool)
        or not isinstance(latency_ms, int | float)
        or not math.isfinite(latency_ms)
        or latency_ms < 0
    ):
        raise _malformed(
            "sandbox directive latency_ms must be a number of milliseconds (0 or more)"
        )
    fail_permanent = raw.get("fail_permanent")
    if fail_permanent is not None and (not isinstance(fail_permanent, str) or not fail_permanent):
        raise _malformed("sandbox directive fail_permanent must be a non-empty reason text")
    return Directives(
        latency_ms=float(latency_ms),
        fail_transient=_whole_number("fail_transient", raw.get("fail_transient", 0)),
        rate_limited=_whole_number("rate_limited", raw.get("rate_limited", 0)),
        fail_permanent=fail_permanent,
        invalid_token=_flag("invalid_token", raw.get("invalid_token", False)),
        raise_bug=_flag("raise_bug", raw.get("raise_bug", False)),
    )


class _Call(msgspec.Struct, frozen=True):
    """One recorded call: the key remembering its idempotency key, and the script's fields."""

    done_key: str
    fields: tuple[KeyOrArg, ...]


def sandbox_send_call(
    keys: KeySpace, idempotent: bool, remember_ms: int, calls: Sequence[_Call]
) -> Call:
    """The keys and arguments of one ``streams/delivery/sandbox_send.lua`` call.

    KEYS: the record of every call (a stream), then per call the key remembering its
    idempotency key's first message id. ARGV: idempotent ("1"/"0"), how long a send is
    remembered (ms), then per call: outcome, new message id, delivery id, idempotency key,
    channel, address, attempt.
    """
    script_keys: list[KeyOrArg] = [keys.sandbox_sent]
    args: list[KeyOrArg] = ["1" if idempotent else "0", remember_ms]
    for call in calls:
        script_keys.append(call.done_key)
        args += call.fields
    return script_keys, args


class SandboxProvider:
    """A provider that records instead of sending (see the module documentation)."""

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        *,
        idempotent: bool = True,
        name: str = "sandbox",
        remember_ms: int = REMEMBER_MS,
    ) -> None:
        self.name = name
        self.idempotent = idempotent
        self._keys = keys
        # Concurrent sends share script calls: a sandbox standing in for a real provider in a
        # benchmark must cost as little as it can. The script answers {message id,
        # duplicate} per send.
        self._record_call: BatchedScript[None, _Call, Any] = BatchedScript(
            redis,
            SANDBOX_SEND,
            group_of=lambda _: None,
            build=lambda _, calls: sandbox_send_call(keys, idempotent, remember_ms, calls),
            parse=lambda reply: reply[0],
        )

    async def send(self, message: Message) -> str:
        """Obey the message's directives; return a message id or raise ``ProviderError``."""
        try:
            directives = parse_directives(message)
        except ProviderError:
            await self._record(message, "permanent")
            raise
        if directives.latency_ms > 0:
            await asyncio.sleep(directives.latency_ms / 1000)
        attempt = message.attempt
        if directives.raise_bug:
            await self._record(message, "bug")
            raise RuntimeError("sandbox: simulated bug")
        if directives.fail_permanent is not None:
            await self._record(message, "permanent")
            raise ProviderError(ErrorClass.PERMANENT, directives.fail_permanent)
        if directives.invalid_token:
            await self._record(message, "permanent")
            raise ProviderError(
                ErrorClass.PERMANENT,
                "sandbox: push token is invalid",
                reason=Reason.INVALID_ADDRESS,
            )
        if attempt <= directives.rate_limited:
            await self._record(message, "rate_limited")
            raise ProviderError(
                ErrorClass.TRANSIENT,
                "sandbox: 429 too many requests",
                retry_after=RATE_LIMIT_RETRY_AFTER,
            )
        if attempt <= directives.fail_transient:
            await self._record(message, "transient")
            raise ProviderError(
                ErrorClass.TRANSIENT,
                f"sandbox: transient failure (attempt {attempt} of {directives.fail_transient})",
            )
        return await self._record(message, "sent")

    async def close(self) -> None:
        """Nothing to close: the sandbox's calls share the worker's Redis client."""

    async def _record(self, message: Message, outcome: CallOutcome) -> str:
        """Record the call (and remember a send); the message id of a send, else ""."""
        # Unique, not secret: the process-wide PRNG is enough (reseeded after a fork).
        new_id = f"sandbox-{random.getrandbits(128):032x}" if outcome == "sent" else ""
        call = _Call(
            self._keys.sandbox_done(message.idempotency_key),
            (
                outcome,
                new_id,
                message.delivery_id,
                message.idempotency_key,
                message.channel,
                message.address,
                message.attempt,
            ),
        )
        try:
            [message_id] = await self._record_call.run([call])
        except RedisError as error:
            # Like an unreachable provider: it may or may not have sent, so try again later.
            # Also when Redis answers but refuses the write (out of memory, read-only,
            # loading): that says nothing about the message, so it is no BUG of the send.
            raise ProviderError(
                ErrorClass.TRANSIENT, f"sandbox: cannot record the call: {type(error).__name__}"
            ) from error
        return message_id.decode() if isinstance(message_id, bytes) else str(message_id)
