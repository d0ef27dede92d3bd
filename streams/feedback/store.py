"""Provider feedback in Redis: the inbox of verified callbacks, the guard that refuses a
replayed callback, and applying a callback's feedback to its delivery.

A callback (an HTTP request a provider made) holds one or more ``Feedback`` items. The API
verifies it and takes it (``Inbox.take``): its replay guard and its items go into Redis in
one script, so a replay is refused exactly when the first one's items are in the inbox. The
feedback processor (``app.feedback``) reads the inbox with the group ``feedback``, matches
each item to its delivery through the provider's message id, and applies it with
``feedback_apply_call``: the delivery's state, a ``ProviderFeedbackReceived`` event and a
mark of the feedback id on the state (applying it again is a no-op), atomically per shard.

Items carry no contact address: the address a provider names is kept as its digest (for
the suppression list) and a masked form, as the list shows addresses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import msgspec
from redis.asyncio import Redis

from streams.core import codec, scripts
from streams.core.batching import BatchedScript
from streams.core.events import ProviderFeedbackReceived
from streams.core.keys import KeySpace, ShardKeys
from streams.core.scripts import Call, KeyOrArg

FEEDBACK_GROUP: Final = "feedback"
FIELD: Final = "f"

FeedbackKind = Literal[
    "delivered", "bounced", "undelivered", "complained", "unsubscribed", "token_invalid"
]


class Feedback(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """What a provider said about one message it took."""

    provider: str  # the catalog's name of the provider
    feedback_id: str  # the provider's id of this event (a repeat is applied once)
    message_id: str  # the provider's id of the message (``provider_message_id``)
    kind: FeedbackKind
    detail: str = ""  # the provider's words, masked and cut short
    at_ms: int = 0  # when it happened, by the provider's clock (else when it came)
    received_ms: int = 0  # when Clarion took it (matching gives up a while after)
    # The suppression list entry it calls for ("": none), for the address the provider
    # named: its channel, digest and masked form.
    suppress: str = ""
    channel: str = ""
    address_digest: str = ""
    display: str = ""


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Feedback)


def encode(item: Feedback) -> bytes:
    return _encoder.encode(item)


def decode(raw: bytes) -> Feedback:
    """An inbox entry's item; ``msgspec.DecodeError`` / ``ValidationError`` if it is none."""
    return _decoder.decode(raw)


@dataclass(frozen=True, slots=True)
class VerifiedCallback:
    """A verified callback to take: its provider, the key its replay is known by, how long
    a replay is refused, and its items."""

    provider: str
    replay_key: str
    guard_ms: int
    items: Sequence[Feedback]


class Inbox:
    """Takes callbacks into the inbox; concurrent ones share script calls and pipelines
    (``BatchedScript``): under load a round trip carries many callbacks."""

    def __init__(self, redis: Redis, keys: KeySpace) -> None:
        self._script: BatchedScript[int, VerifiedCallback, bool] = BatchedScript(
            redis,
            scripts.FEEDBACK_TAKE,
            group_of=lambda _: 0,  # one inbox: one hash tag
            build=lambda _, callbacks: feedback_take_call(keys, callbacks),
            parse=lambda reply: reply == 1,
        )

    async def take(self, callback: VerifiedCallback) -> bool:
        """Put the callback's items into the inbox unless it was taken within its guard
        time; whether they were."""
        [taken] = await self._script.run([callback])
        return taken


def feedback_take_call(keys: KeySpace, callbacks: Sequence[VerifiedCallback]) -> Call:
    """The keys and arguments of one ``take.lua`` call.

    KEYS: the inbox, then each callback's replay guard. ARGV: per callback its guard's
    lifetime (ms), its number of items, each item encoded.
    """
    keys_: list[KeyOrArg] = [keys.feedback_inbox]
    args: list[KeyOrArg] = []
    for callback in callbacks:
        keys_.append(keys.feedback_seen(callback.provider, callback.replay_key))
        args += [callback.guard_ms, len(callback.items), *map(encode, callback.items)]
    return keys_, args


def feedback_apply_call(
    shard: ShardKeys,
    changes: Sequence[tuple[str, int, dict[str, KeyOrArg], ProviderFeedbackReceived]],
    retention_ms: int,
) -> Call:
    """The keys and arguments of one ``apply.lua`` call, for changes given as
    (feedback id, version read, state fields to set, the event).

    KEYS: events, then per change the delivery's state hash. ARGV: the retention of an ended
    state (ms), then per change: the feedback id, the version read, the field count, the
    field/value pairs, the encoded event.
    """
    keys: list[KeyOrArg] = [shard.events]
    args: list[KeyOrArg] = [retention_ms]
    for feedback_id, version, fields, event in changes:
        keys.append(shard.delivery(event.delivery_id))
        pairs = [part for pair in fields.items() for part in pair]
        args += [feedback_id, version, len(pairs), *pairs, codec.encode_events([event])]
    return keys, args
