"""The feedback processor: from the inbox of verified callbacks to the deliveries they are
about.

It reads the inbox (``streams.feedback.store``) with the group ``feedback``, finds each item's
delivery in the read model by the provider's message id, and applies it:

- ``delivered`` moves a SENT delivery to DELIVERED;
- ``bounced``, ``undelivered`` and ``token_invalid`` move a SENT or DELIVERED one to FAILED
  (PERMANENT, the reason is the feedback; no dead letter: a message the provider took and
  could not deliver is nothing to replay);
- ``complained`` and ``unsubscribed`` leave the status as it is;
- each is a ``ProviderFeedbackReceived`` event naming the status after it, and an item that
  calls for it puts the address on the suppression list (a complaint or an unsubscribe is
  the address opting out of every type one may opt out of).

An item whose message the read model does not know yet (a receipt can come within the
projector's lag) is tried again every ``RETRY_S`` for ``MATCH_WINDOW_MS``, then counted as
unmatched and dropped. An entry is acknowledged (and deleted) once applied or dropped; one
read before a crash is read again (own pending entries first), and applying it again is a
no-op (the feedback id is marked on the delivery's state).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import asyncpg
import msgspec
import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.metrics import DUPLICATES_SKIPPED, FEEDBACK, FEEDBACK_UNMATCHED, UNSUBSCRIBES
from projections.queries import SentDelivery, deliveries_by_message, feedback_applied
from streams.core import clock, scripts
from streams.core.codec import as_text
from streams.core.consumer_groups import ensure_group, is_missing_group
from streams.core.events import ProviderFeedbackReceived
from streams.core.keys import KeySpace
from streams.core.scripts import KeyOrArg
from streams.delivery.state import DeliveryStatus, read_states
from streams.feedback.store import FEEDBACK_GROUP, FIELD, Feedback, decode, feedback_apply_call
from streams.metrics.recorder import MetricsRecorder
from streams.recipients.suppressions import Suppression, SuppressionStore

log = structlog.get_logger(__name__)

MATCH_WINDOW_MS: Final = 120_000
RETRY_S: Final = 1.0
BATCH: Final = 500
_SENT, _DELIVERED, _FAILED = DeliveryStatus.SENT, DeliveryStatus.DELIVERED, DeliveryStatus.FAILED
_FAILS: Final = frozenset({"bounced", "undelivered", "token_invalid"})
# Feedback that is the recipient unsubscribing (``clarion_unsubscribes_total``, source feedback).
UNSUBSCRIBING: Final = frozenset({"complained", "unsubscribed"})


def status_after(kind: str, status: DeliveryStatus) -> DeliveryStatus:
    """A delivery's status after feedback of ``kind``."""
    if kind == "delivered" and status == _SENT:
        return _DELIVERED
    if kind in _FAILS and status in (_SENT, _DELIVERED):
        return _FAILED
    return status


@dataclass(slots=True)
class _Waiting:
    entry_id: str
    item: Feedback


class FeedbackProcessor:
    """Matches and applies provider feedback (see the module documentation)."""

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        pool: Callable[[], Awaitable[asyncpg.Pool | None]],
        *,
        consumer: str,
        state_retention_ms: int,
        metrics: MetricsRecorder | None = None,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.pool = pool
        self.consumer = consumer
        self.state_retention_ms = state_retention_ms
        self.metrics = metrics
        self.suppressions = SuppressionStore(redis, keys)
        self._unmatched: dict[str, _Waiting] = {}
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """Process the inbox until ``stop()``: own pending entries first, then new ones."""
        inbox = self.keys.feedback_inbox
        await ensure_group(self.redis, inbox, FEEDBACK_GROUP)
        start = "0"
        while not self._stopping.is_set():
            try:
                reply: Any = await self.redis.xreadgroup(
                    FEEDBACK_GROUP, self.consumer, {inbox: start}, count=BATCH, block=1000
                )
            except RedisError as error:
                if is_missing_group(error):
                    await ensure_group(self.redis, inbox, FEEDBACK_GROUP)
                    continue
                log.warning("feedback.read_failed", error=str(error))
                await asyncio.sleep(RETRY_S)
                continue
            entries = reply[0][1] if reply else []
            if start == "0" and not entries:
                start = ">"  # own pending entries done
            await self.process([(as_text(e), f) for e, f in entries if f])

    async def process(self, entries: list[tuple[str, dict[bytes, bytes]]]) -> None:
        """Apply what ``entries`` hold, with the unmatched ones due for another try."""
        waiting = [*self._due(), *self._decoded(entries)]
        if not waiting:
            return
        pool = await self.pool()
        if pool is None:  # the read model is away: everything waits for it
            self._unmatched.update({w.entry_id: w for w in waiting})
            return
        found = await deliveries_by_message(
            pool, sorted({(w.item.provider, w.item.message_id) for w in waiting})
        )
        done: list[str] = []
        matched: list[tuple[_Waiting, SentDelivery]] = []
        now = clock.now_ms()
        for w in waiting:
            sent = found.get((w.item.provider, w.item.message_id))
            if sent is not None:
                matched.append((w, sent))
            elif now - (w.item.received_ms or now) > MATCH_WINDOW_MS:
                self._count(FEEDBACK_UNMATCHED, (w.item.provider,))
                done.append(w.entry_id)
            else:
                self._unmatched[w.entry_id] = w
        done += await self._apply(pool, matched)
        if done:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.xack(self.keys.feedback_inbox, FEEDBACK_GROUP, *done)
                pipe.xdel(self.keys.feedback_inbox, *done)
                await pipe.execute()

    def _due(self) -> list[_Waiting]:
        """The unmatched items to try again now (all of them: tries are a batch apart)."""
        due, self._unmatched = list(self._unmatched.values()), {}
        return due

    def _decoded(self, entries: list[tuple[str, dict[bytes, bytes]]]) -> list[_Waiting]:
        decoded = []
        for entry_id, fields in entries:
            try:
                decoded.append(_Waiting(entry_id, decode(fields[FIELD.encode()])))
            except (KeyError, msgspec.DecodeError, msgspec.ValidationError):
                log.error("feedback.unreadable_entry", entry_id=entry_id)
                self._unmatched.pop(entry_id, None)
        return decoded

    async def _apply(
        self, pool: asyncpg.Pool, matched: list[tuple[_Waiting, SentDelivery]]
    ) -> list[str]:
        """Apply matched items, shard by shard; the entries that are done."""
        by_shard: dict[int, list[tuple[_Waiting, SentDelivery]]] = defaultdict(list)
        for pair in matched:
            by_shard[self.keys.notification_shard(pair[1].id).shard].append(pair)
        done: list[str] = []
        for number, pairs in by_shard.items():
            done += await self._apply_on(pool, number, pairs)
        return done

    async def _apply_on(
        self, pool: asyncpg.Pool, number: int, pairs: list[tuple[_Waiting, SentDelivery]]
    ) -> list[str]:
        shard = self.keys.shard(number)
        states = await read_states(self.redis, shard, [sent.id for _, sent in pairs])
        # A state that left Redis (``streams.delivery.state_release``) took its feedback marks with
        # it: the read model's events tell whether this feedback was applied already.
        released = [(w, sent) for (w, sent), state in zip(pairs, states, strict=True) if not state]
        applied = await feedback_applied(pool, [(sent, w.item.feedback_id) for w, sent in released])
        done, todo, changes = [], [], []
        for (w, sent), state in zip(pairs, states, strict=True):
            if (sent.id, w.item.feedback_id) in applied:
                self._count(DUPLICATES_SKIPPED, ("feedback",))
                done.append(w.entry_id)
                continue
            status = state.status if state else sent.status
            version = state.version if state else sent.version
            todo.append((w, sent))
            changes.append(self._change(w.item, sent, status, version))
        if not changes:
            return done
        call = feedback_apply_call(shard, changes, self.state_retention_ms)
        replies = await scripts.FEEDBACK_APPLY(self.redis, *call)
        for (w, sent), reply in zip(todo, replies, strict=True):
            if reply == b"MOVED":
                self._unmatched[w.entry_id] = w  # read again next time
                continue
            done.append(w.entry_id)
            if reply == b"OK":
                self._count(FEEDBACK, (w.item.provider, w.item.kind))
                if w.item.kind in UNSUBSCRIBING:
                    self._count(UNSUBSCRIBES, (sent.notification_type, sent.channel, "feedback"))
                await self._suppress(w.item)
            elif reply == b"DUP":  # marked on the delivery's state: applied already
                self._count(DUPLICATES_SKIPPED, ("feedback",))
        return done

    def _change(
        self, item: Feedback, sent: SentDelivery, status: DeliveryStatus, version: int
    ) -> tuple[str, int, dict[str, KeyOrArg], ProviderFeedbackReceived]:
        after = status_after(item.kind, status)
        at_ms = item.at_ms or clock.now_ms()
        fields: dict[str, KeyOrArg] = {
            "status": after, "version": version + 1, "updated_ms": clock.now_ms(),
            "notification_id": sent.notification_id,
        }  # fmt: skip
        if after == _FAILED and status != _FAILED:
            fields |= {"error_class": "PERMANENT", "reason": item.kind,
                       "last_error": f"{item.kind}: {item.detail}"[:500]}  # fmt: skip
        event = ProviderFeedbackReceived(
            at=datetime.fromtimestamp(at_ms / 1000, UTC), notification_id=sent.notification_id,
            delivery_id=sent.id, version=version + 1, feedback=item.kind,
            provider=item.provider, detail=item.detail, status=after,
            feedback_id=item.feedback_id,
        )  # fmt: skip
        return item.feedback_id, version, fields, event

    async def _suppress(self, item: Feedback) -> None:
        if not (item.suppress and item.address_digest and item.channel):
            return
        entry = Suppression(
            channel=item.channel,  # type: ignore[arg-type]
            digest=item.address_digest,
            reason=item.suppress,  # type: ignore[arg-type]
            source=f"feedback:{item.provider}",
            at_ms=item.at_ms or clock.now_ms(),
            display=item.display,
        )
        await self.suppressions.add(entry)

    def _count(self, counter: Any, labels: tuple[str, ...]) -> None:
        if self.metrics is not None:
            self.metrics.inc(counter, labels)
