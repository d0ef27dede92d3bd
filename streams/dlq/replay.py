"""An operator's controlled replay of dead letters: what is replayed, and the script that does it.

A replay keeps the delivery id, bumps the version, starts a fresh attempt series, appends a
``DeliveryReplayed`` event and a work item, and marks the entry resolved in ``dlq:resolved``;
the entry itself stays. Every entry goes through one call of ``replay.lua``, which
re-checks the delivery's state atomically: a delivery sent since, one past its TTL or one
whose state expired is never replayed; POISON and BUG entries only with ``force``.

A replay checks again what ingest checks and may have changed since: a recipient who
switched the type off (``opted_out``) or an address that went on the suppression list
(``suppressed_<reason>``) is not sent to; both leave the entry open.

A replayed NORMAL or LOW delivery to a channel other than IN_APP whose recipient is inside
quiet hours right now waits in ``delayed`` until the window ends, as at ingest (the caller
says when a window ends: ``quiet_until``); one whose window ends past the notification's TTL
is not replayed. A dry run answers exactly what the same call would do now and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import msgspec
from redis.asyncio import Redis

from streams.core import codec, scripts
from streams.core.connection import clock_ms
from streams.core.events import DeliveryDeferred, DeliveryReplayed, QuietHoursSetting
from streams.core.keys import KeySpace, ShardKeys
from streams.core.scripts import Call, KeyOrArg
from streams.core.vocabulary import ErrorClass, Priority
from streams.delivery.delayed import delayed_member
from streams.delivery.work_items import WorkItem
from streams.dlq.entries import DeadLetter, resolution_mark
from streams.dlq.scan import Selection, more_than, scan
from streams.recipients.read import RecipientSettings
from streams.recipients.settings import QUIET_HOURS_EXEMPT, AddressDigest
from streams.recipients.suppressions import REASONS as SUPPRESSION_REASONS
from streams.recipients.suppressions import address_field

MAX_REPLAY = 1000  # entries one replay call may replay
REPLAY_SCAN = 5 * MAX_REPLAY  # entries one replay call may look at

REPLAYED = "replayed"
# Why an entry was not replayed. A real replay marks the entry resolved for the reasons from
# already_sent to unreadable, which can never change; needs_force, moved and already_replayed
# leave it open for a later call.
SKIP_REASONS: dict[str, str] = {
    "already_sent": "the delivery was sent since: never sent again",
    "already_ended": "the delivery expired or was suppressed since",
    "ttl_passed": "the notification's TTL has passed: it would be stale",
    "quiet_hours_past_ttl": "the recipient's quiet hours end after the notification's TTL",
    "state_expired": "the delivery's state is gone from Redis: cannot tell it was not sent",
    "superseded": "the delivery was replayed since (through this or another entry)",
    "unreadable": "the entry holds no readable work item",
    "needs_force": "POISON and BUG entries are replayed only with force",
    "moved": "the delivery changed while this call ran: try again",
    "already_replayed": "another replay settled this entry while this call ran",
    "opted_out": "the recipient switched this type off on this channel since",
    **{
        f"suppressed_{reason}": f"the address is on the suppression list ({reason})"
        for reason in SUPPRESSION_REASONS
    },
}
FORCE_ONLY = frozenset({ErrorClass.POISON, ErrorClass.BUG})

# When the quiet window containing an instant ends (None outside a window): the application's
# quiet-hours rule, handed in so this package keeps to Redis and the event contract.
QuietUntil = Callable[[QuietHoursSetting, datetime], datetime | None]


@dataclass(frozen=True, slots=True)
class ReplayOrder:
    """An operator's replay: what, at most how many, who and why."""

    selection: Selection
    limit: int
    operator: str
    reason: str
    force: bool = False
    dry_run: bool = False
    # The notification types a recipient may opt out of (the catalog says which).
    opt_out_types: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """What a replay did (or, in a dry run, would do) with one entry."""

    letter: DeadLetter
    outcome: str  # REPLAYED or a key of SKIP_REASONS
    # A replayed delivery held back by the recipient's quiet hours: when they end.
    deferred_until: datetime | None = None


@dataclass(slots=True)
class ReplayReport:
    dry_run: bool
    replayed: list[ReplayResult] = field(default_factory=list)
    skipped: list[ReplayResult] = field(default_factory=list)
    # The scan stopped at REPLAY_SCAN entries before the limit was reached: call again.
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class Candidate:
    """An entry with a readable work item, about to go through the script."""

    letter: DeadLetter
    version: int  # the delivery version its replay expects
    superseded: bool  # this call already replayed the delivery through an earlier entry
    quiet_end: datetime | None  # when it must wait for the recipient's quiet hours to end


async def replay(
    redis: Redis,
    keys: KeySpace,
    order: ReplayOrder,
    quiet_until: QuietUntil,
    *,
    address_digest: AddressDigest,
) -> ReplayReport:
    """Replay the open entries ``order`` selects, oldest first, up to ``order.limit``.

    A dry run returns exactly what the same call would do now, and writes nothing. The time
    is the Redis clock's, as in the script.
    """
    if not 1 <= order.limit <= MAX_REPLAY:
        raise ValueError(f"limit must be from 1 to {MAX_REPLAY}")
    now = datetime.fromtimestamp(await clock_ms(redis, keys.shard(0).dlq) / 1000, UTC)
    run = _ReplayRun(redis, keys, order, now, quiet_until, address_digest=address_digest)
    async for page in scan(redis, keys, order.selection, open_only=True, max_entries=REPLAY_SCAN):
        if await run.page(page):
            return run.report
    run.report.truncated = await more_than(redis, keys, order.selection, REPLAY_SCAN)
    return run.report


class _ReplayRun:
    """One replay call, page by page; it remembers what it replayed so far."""

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        order: ReplayOrder,
        now: datetime,
        quiet_until: QuietUntil,
        *,
        address_digest: AddressDigest,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.order = order
        self.now = now
        self.quiet_until = quiet_until
        self.address_digest = address_digest
        self.report = ReplayReport(dry_run=order.dry_run)
        self.replayed_ids: set[str] = set()

    async def page(self, page: Sequence[DeadLetter]) -> bool:
        """Decide on one page (all of one shard) in order, up to the entry that uses up the
        limit; True when the limit is used up (the replay ends there)."""
        shard = self.keys.shard(page[0].shard)
        results = await self._results(shard, page)
        for letter in page:
            result = results[letter.entry_id]
            if result.outcome == REPLAYED:
                self.report.replayed.append(result)
                self.replayed_ids.add(letter.delivery_id)
            else:
                self.report.skipped.append(result)
                if result.outcome == "unreadable":
                    await self._settle_unreadable(shard, letter)
            # The script answers "over_limit" only after the budget's last replay, where
            # this loop stops.
            if len(self.report.replayed) == self.order.limit:
                return True
        return False

    async def _results(
        self, shard: ShardKeys, page: Sequence[DeadLetter]
    ) -> dict[str, ReplayResult]:
        """Each entry's result by entry id: the ones the script needs to see go through it."""
        results: dict[str, ReplayResult] = {}
        letters: list[DeadLetter] = []
        for letter in page:
            if letter.error_class in FORCE_ONLY and not self.order.force:
                results[letter.entry_id] = ReplayResult(letter, "needs_force")
            elif letter.work is None or not letter.delivery_id:
                results[letter.entry_id] = ReplayResult(letter, "unreadable")
            else:
                letters.append(letter)
        if not letters:
            return results
        versions = await self._versions(shard, letters)
        quiet_ends = await self._quiet_ends(shard, letters)
        candidates = [
            Candidate(letter, version, letter.delivery_id in self.replayed_ids, quiet_end)
            for letter, version, quiet_end in zip(letters, versions, quiet_ends, strict=True)
        ]
        budget = self.order.limit - len(self.report.replayed)
        call = dlq_replay_call(
            shard, self.order, budget, self.now, candidates, address_digest=self.address_digest
        )
        replies: list[bytes] = await scripts.DLQ_REPLAY(self.redis, *call)
        for candidate, reply in zip(candidates, replies, strict=True):
            outcome = reply.decode()
            waits = candidate.quiet_end if outcome == REPLAYED else None
            results[candidate.letter.entry_id] = ReplayResult(candidate.letter, outcome, waits)
        return results

    async def _quiet_ends(
        self, shard: ShardKeys, letters: Sequence[DeadLetter]
    ) -> list[datetime | None]:
        """For each entry, when the recipient's quiet window ends if its delivery must wait
        for that now; None when it may go at once."""
        held = [
            letter
            for letter in letters
            if letter.work is not None
            and letter.work.priority != Priority.HIGH
            and letter.work.channel not in QUIET_HOURS_EXEMPT
        ]
        if not held:
            return [None] * len(letters)
        async with self.redis.pipeline(transaction=False) as pipe:
            for letter in held:
                assert letter.work is not None
                pipe.hgetall(shard.recipient(letter.work.recipient_id))
            hashes: list[dict[bytes, bytes]] = await pipe.execute()
        ends: dict[str, datetime | None] = {}
        for letter, raw in zip(held, hashes, strict=True):
            quiet_hours = RecipientSettings.from_hash(raw).quiet_hours
            if quiet_hours is not None:
                ends[letter.entry_id] = self.quiet_until(quiet_hours, self.now)
        return [ends.get(letter.entry_id) for letter in letters]

    async def _versions(self, shard: ShardKeys, letters: Sequence[DeadLetter]) -> list[int]:
        """The delivery version each entry's replay expects: the one a FAILED entry recorded;
        for a POISON entry, which records none, the current one (the script checks it did
        not change)."""
        poison = [letter for letter in letters if letter.version is None]
        current: list[bytes | None] = []
        if poison:
            async with self.redis.pipeline(transaction=False) as pipe:
                for letter in poison:
                    pipe.hget(shard.delivery(letter.delivery_id), "version")
                current = await pipe.execute()
        read = iter(int(version or 0) for version in current)
        return [letter.version if letter.version is not None else next(read) for letter in letters]

    async def _settle_unreadable(self, shard: ShardKeys, letter: DeadLetter) -> None:
        """Mark an entry without a readable work item resolved: no replay can ever use it."""
        if not self.order.dry_run:
            now_ms = int(self.now.timestamp() * 1000)
            mark = resolution_mark("unreadable", self.order.operator, self.order.reason, now_ms)
            await self.redis.hsetnx(shard.dlq_resolved, letter.entry_id, mark)


def dlq_replay_call(
    shard: ShardKeys,
    order: ReplayOrder,
    budget: int,
    now: datetime,
    candidates: Sequence[Candidate],
    *,
    address_digest: AddressDigest,
) -> Call:
    """The keys and arguments of one ``replay.lua`` call, as the script reads them.

    KEYS: events, work:high, work:normal, work:low, dlq:resolved, delayed, the suppression
    list, then per entry the delivery's state hash and the recipient's settings. ARGV: dry
    run ("1"/"0"), operator, reason, most entries to replay, then per entry: dlq entry id,
    kind (FAILED or POISON), expected delivery version, superseded ("1"/"0"), the
    notification's expiry (ms), where the work goes (the stream name, or the end of quiet
    hours in ms for ``delayed``), its events (one ``events`` entry), the fresh work item (a
    ``delayed`` member when it waits), the settings field that switches the type off on the
    channel ("" when it cannot be), the address's suppression list field ("" without an
    address), whether the type may be opted out of ("1"/"0").
    """
    keys: list[KeyOrArg] = [
        shard.events, *shard.work_streams, shard.dlq_resolved, shard.delayed, shard.suppressions,
    ]  # fmt: skip
    args: list[KeyOrArg] = ["1" if order.dry_run else "0", order.operator, order.reason, budget]
    for candidate in candidates:
        work = candidate.letter.work
        assert work is not None  # candidates have a readable work item
        keys += [shard.delivery(work.delivery_id), shard.recipient(work.recipient_id)]
        args += [
            candidate.letter.entry_id,
            "FAILED" if candidate.letter.version is not None else "POISON",
            candidate.version,
            "1" if candidate.superseded else "0",
            work.expires_ms,
            *_replayed_work(order, now, candidate, work),
            *_checks(order, work, address_digest),
        ]
    return keys, args


def _replayed_work(
    order: ReplayOrder, now: datetime, candidate: Candidate, work: WorkItem
) -> list[KeyOrArg]:
    """Where the replayed work goes, its events and the work item (see ``dlq_replay_call``)."""
    replayed = DeliveryReplayed(
        at=now,
        notification_id=work.notification_id,
        delivery_id=work.delivery_id,
        version=candidate.version + 1,
        operator=order.operator,
        reason=order.reason,
    )
    item = codec.encode_work_item(msgspec.structs.replace(work, attempts=0))
    if candidate.quiet_end is None:
        return [work.priority.stream_name, codec.encode_events([replayed]), item]
    # Replayed, then held back by quiet hours: two changes, two versions.
    deferred = DeliveryDeferred(
        at=now,
        notification_id=work.notification_id,
        delivery_id=work.delivery_id,
        version=candidate.version + 2,
        channel=work.channel,
        reason="quiet_hours",
        until=candidate.quiet_end,
    )
    return [
        int(candidate.quiet_end.timestamp() * 1000),
        codec.encode_events([replayed, deferred]),
        delayed_member(work.priority, item),
    ]


def _checks(order: ReplayOrder, work: WorkItem, address_digest: AddressDigest) -> list[KeyOrArg]:
    """What the script checks that ingest checks too: the recipient's opt-out of the type on
    the channel, and the address on the suppression list."""
    opt_out = work.notification_type in order.opt_out_types
    return [
        f"p:{work.notification_type}:{work.channel}" if opt_out else "",
        address_field(work.channel, address_digest(work.address)) if work.address else "",
        "1" if opt_out else "0",
    ]
