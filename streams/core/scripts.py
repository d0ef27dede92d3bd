"""Every Lua script Clarion runs, registered here: ``.lua`` files beside the Python that
calls them in each feature's package (``streams/delivery/begin.lua`` is
``LuaScript("delivery/begin")``), loaded once and called by SHA.

Redis gives a script no way to load another, so ``shared.lua`` beside this module (the Redis
clock, the argument reader, the work-stream table, ...) is put in front of every script's own
source, and in front of that the delivery statuses and their sets written out from
``streams.core.vocabulary``, with the form of an inbox message's state (``vocabulary_lua``):
the scripts decide by the very sets the Python code does, and no script spells them out
again.
The text is the same in every process, so is every script's SHA.

Each script declares every key it touches in KEYS (one hash tag, so the same code runs on a
Redis Cluster), and its keys and arguments are laid out by one Python function, named after
it with ``_call`` (for example ``ingest_call`` in ``streams.ingest.writer`` for ``INGEST``);
``tests/integration/core/test_scripts.py`` runs each of those against its script as a Redis
user allowed to touch only the declared keys.

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

from streams.core.vocabulary import (
    ENDED_UNSENT,
    PROVIDER_ACCEPTED,
    TERMINAL,
    DeliveryStatus,
    Priority,
)
from streams.inbox.messages import NEW_STATE_PREFIX, STATE_PATTERN

KeyOrArg = str | bytes | int | float
# One script call: its keys and its arguments.
Call = tuple[list[KeyOrArg], list[KeyOrArg]]
# Reloads after NOSCRIPT before giving up: a second flush can land between load and retry.
_LOAD_ATTEMPTS = 3


def lua_source(name: str) -> str:
    """The text of ``streams/<name>.lua`` (``name`` is a path such as ``delivery/begin``)."""
    return resources.files("streams").joinpath(f"{name}.lua").read_text()


def _lua_set(name: str, members: frozenset[DeliveryStatus]) -> str:
    """A Lua table with ``true`` for each member, in the enum's order (a stable text)."""
    entries = ", ".join(f"{status} = true" for status in DeliveryStatus if status in members)
    return f"local {name} = {{ {entries} }}"


def vocabulary_lua() -> str:
    """The delivery statuses and the sets the scripts decide by, as Lua locals: ``STATUS``
    (``STATUS.SENT == "SENT"``), ``TERMINAL``, ``PROVIDER_ACCEPTED`` and ``ENDED_UNSENT``
    (``TERMINAL[status]`` is true for a status in the set); ``WORK_STREAM_NAMES``, each
    priority's ``stream_name`` in the enum's order; and how an inbox message's state
    is written (``streams.inbox.messages.MessageState``): ``INBOX_STATE_PATTERN`` reads it,
    ``INBOX_NEW_STATE`` followed by the version is a new message's."""
    statuses = ", ".join(f'{status.name} = "{status.value}"' for status in DeliveryStatus)
    work_streams = ", ".join(f'"{priority.stream_name}"' for priority in Priority)
    return "\n".join(
        (
            "-- Written from streams/core/vocabulary.py and streams/inbox/messages.py; do not"
            " edit.",
            f"local STATUS = {{ {statuses} }}",
            _lua_set("TERMINAL", TERMINAL),
            _lua_set("PROVIDER_ACCEPTED", PROVIDER_ACCEPTED),
            _lua_set("ENDED_UNSENT", ENDED_UNSENT),
            f"local WORK_STREAM_NAMES = {{ {work_streams} }}",
            f'local INBOX_STATE_PATTERN = "{STATE_PATTERN}"',
            f'local INBOX_NEW_STATE = "{NEW_STATE_PREFIX}"',
        )
    )


# What every script begins with: the vocabulary, then ``shared.lua``.
PRELUDE = vocabulary_lua() + "\n" + lua_source("core/shared")


class LuaScript:
    """One Lua script (``PRELUDE`` in front of its own source), called by SHA with a
    transparent reload on NOSCRIPT."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.source = PRELUDE + "\n" + lua_source(name)
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
            # By name: redis-py's Redis Cluster pipeline refuses its evalsha method (a script
            # may touch any key), while a call by name is routed by its declared keys.
            pipe.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
        return list(await pipe.execute(raise_on_error=False))


# Every script, by feature: its file (``delivery/begin`` is ``streams/delivery/begin.lua``) and
# the module whose ``<script name>_call`` function lays out its call (``DELIVERY_BEGIN``:
# ``streams.delivery.store.delivery_begin_call``).
LEASE = LuaScript("core/lease")  # core.leases
TRIM_STREAM = LuaScript("core/trim_stream")  # core.retention

INGEST = LuaScript("ingest/ingest")  # ingest.writer
INGEST_QUOTA = LuaScript("ingest/quota")  # ingest.quota

DELIVERY_BEGIN = LuaScript("delivery/begin")  # delivery.store
DELIVERY_FINISH = LuaScript("delivery/finish")  # delivery.store
DEAD_LETTER_RAW = LuaScript("delivery/dead_letter_raw")  # delivery.store
SCHEDULE_DUE = LuaScript("delivery/schedule_due")  # delivery.delayed
AWAIT_ADDRESS = LuaScript("delivery/await_address")  # delivery.address_waits
RATE_LIMIT = LuaScript("delivery/rate_limit")  # delivery.rate_limiter
THROTTLE = LuaScript("delivery/throttle")  # delivery.throttles
CIRCUIT = LuaScript("delivery/circuit")  # delivery.circuit_breaker
FAIR_FEED = LuaScript("delivery/fair_feed")  # delivery.fairness
RELEASE_STATES = LuaScript("delivery/release_states")  # delivery.state_release
CANCEL = LuaScript("delivery/cancel")  # delivery.cancellations
PROMOTE = LuaScript("delivery/promote")  # delivery.parking
SANDBOX_SEND = LuaScript("delivery/sandbox_send")  # app.providers.sandbox

RECIPIENT_SETTINGS = LuaScript("recipients/settings")  # recipients.settings
RECIPIENTS_READ = LuaScript("recipients/read")  # recipients.read
SUPPRESSION = LuaScript("recipients/suppression")  # recipients.suppressions
ERASE = LuaScript("recipients/erase")  # recipients.erase

INBOX_PAGE = LuaScript("inbox/page")  # inbox.pages
INBOX_MARK = LuaScript("inbox/mark")  # inbox.marks
INBOX_REVOKE = LuaScript("inbox/revoke")  # inbox.revocation

DIGEST_JOIN = LuaScript("digests/join")  # digests.store
DIGEST_SEAL = LuaScript("digests/seal")  # digests.closing
DIGEST_LEAVE = LuaScript("digests/leave")  # digests.store
DIGEST_TAKE = LuaScript("digests/take")  # digests.closing
DIGEST_CLOSE = LuaScript("digests/close")  # digests.closing

CAMPAIGN_WRITE = LuaScript("campaigns/write")  # campaigns.store
DLQ_REPLAY = LuaScript("dlq/replay")  # dlq.replay
FEEDBACK_TAKE = LuaScript("feedback/take")  # feedback.store
FEEDBACK_APPLY = LuaScript("feedback/apply")  # feedback.store
STATUS_OUTBOX_APPEND = LuaScript("status_webhooks/outbox_append")  # status_webhooks.outbox
STATUS_DEAD_LETTER = LuaScript("status_webhooks/dead_letter")  # status_webhooks.outbox

ALL: tuple[LuaScript, ...] = (
    INGEST,
    DIGEST_JOIN,
    DIGEST_SEAL,
    DIGEST_LEAVE,
    DIGEST_TAKE,
    DIGEST_CLOSE,
    DELIVERY_BEGIN,
    DELIVERY_FINISH,
    DEAD_LETTER_RAW,
    SCHEDULE_DUE,
    AWAIT_ADDRESS,
    RECIPIENT_SETTINGS,
    SANDBOX_SEND,
    RATE_LIMIT,
    INGEST_QUOTA,
    TRIM_STREAM,
    DLQ_REPLAY,
    CIRCUIT,
    SUPPRESSION,
    ERASE,
    FEEDBACK_TAKE,
    FEEDBACK_APPLY,
    INBOX_PAGE,
    INBOX_MARK,
    INBOX_REVOKE,
    LEASE,
    CAMPAIGN_WRITE,
    RECIPIENTS_READ,
    FAIR_FEED,
    STATUS_OUTBOX_APPEND,
    STATUS_DEAD_LETTER,
    RELEASE_STATES,
    CANCEL,
    PROMOTE,
    THROTTLE,
)
