"""The dead-letter queue: what is in it, and the controlled replay of what an operator picks.

Each shard's ``dlq`` stream holds three kinds of entries:

- a FAILED delivery (``delivery_finish.lua``): ids, type, channel, priority, error class,
  last error, attempts and their times, worker, the delivery's version and its work item;
- a POISON work entry (``dead_letter_raw.lua``): the reason and the entry's raw fields
  (``raw_w`` is the work item, when it can be read at all);
- an unreadable ``delayed`` member (``schedule_due.lua``): a reason and the member.

A replayed NORMAL or LOW delivery to a channel other than IN_APP whose recipient is inside
quiet hours right now waits in ``delayed`` until the window ends, as at acceptance (the caller
says when a window ends: ``quiet_until``); one whose window ends past the notification's TTL
is not replayed.

Entries are never deleted here: they are the audit trail. A replay records how it settled an
entry in the shard's ``dlq:resolved`` hash (entry id → JSON with the outcome, operator, reason
and time): ``replayed``, or a reason it can never be replayed (already sent, past its TTL…).
Entries without that mark are the open dead letters.

Work items carry the recipient's address and template data: a ``DeadLetter`` keeps its work
item for a replay, and whoever shows an entry must leave both out (``app.operations.dlq``).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
from redis.asyncio import Redis

from streams import codec
from streams.events import DeliveryDeferred, DeliveryReplayed, QuietHoursSetting
from streams.keys import KeySpace, ShardKeys
from streams.recipient_settings import QUIET_HOURS_EXEMPT, RecipientSettings
from streams.scheduler import delayed_member
from streams.scripts import KeyOrArg, LuaScript
from streams.work_items import WorkItem

MAX_REPLAY = 1000  # entries one replay call may replay
REPLAY_SCAN = 5 * MAX_REPLAY  # entries one replay call may look at
SUMMARY_SCAN = 100_000  # entries one summary may look at
_PAGE = 500

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
}
FORCE_ONLY = frozenset({"POISON", "BUG"})

_REPLAY_SCRIPT = LuaScript("dlq_replay")
# When the quiet window containing an instant ends (None outside a window): the application's
# quiet-hours rule, handed in so this package keeps to Redis and the event contract.
QuietUntil = Callable[[QuietHoursSetting, datetime], datetime | None]


@dataclass(frozen=True, slots=True)
class Resolution:
    """How a replay settled an entry."""

    outcome: str
    operator: str
    reason: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One ``dlq`` entry, parsed. Fields an entry does not carry are empty (or 0)."""

    shard: int
    entry_id: str
    error_class: str  # POISON for entries written without one
    last_error: str
    delivery_id: str = ""
    notification_id: str = ""
    notification_type: str = ""
    channel: str = ""
    priority: str = ""
    attempts: int = 0
    first_attempt_ms: int = 0
    last_attempt_ms: int = 0
    worker: str = ""
    worker_version: str = ""
    version: int | None = None  # the delivery's version when it was dead-lettered
    work_entry_id: str = ""
    work: WorkItem | None = None  # None when the entry holds no readable work item
    other_fields: tuple[str, ...] = ()  # names only: raw values may hold an address
    resolution: Resolution | None = None

    @property
    def dead_lettered_ms(self) -> int:
        return int(self.entry_id.partition("-")[0])


@dataclass(frozen=True, slots=True)
class Selection:
    """Which entries an operator means; None (or empty) matches everything."""

    notification_type: str | None = None
    channel: str | None = None
    error_class: str | None = None
    since_ms: int | None = None  # dead-lettered at or after
    until_ms: int | None = None  # dead-lettered before
    delivery_ids: frozenset[str] = frozenset()

    def matches(self, letter: DeadLetter) -> bool:
        """True when ``letter`` passes every filter (the time range is applied by XRANGE)."""
        return (
            self.notification_type in (None, letter.notification_type)
            and self.channel in (None, letter.channel)
            and self.error_class in (None, letter.error_class)
            and (not self.delivery_ids or letter.delivery_id in self.delivery_ids)
        )


# --- reading -------------------------------------------------------------------------------


_KNOWN = frozenset(
    {
        "delivery_id",
        "notification_id",
        "type",
        "channel",
        "priority",
        "error_class",
        "last_error",
        "reason",
        "attempts",
        "first_attempt_ms",
        "last_attempt_ms",
        "worker",
        "worker_version",
        "version",
        "work_entry_id",
        "work",
        "raw_w",
    }
)


def parse_entry(shard: int, entry_id: str, raw: dict[bytes, bytes]) -> DeadLetter:
    """A ``dlq`` entry's fields as a ``DeadLetter`` (without its resolution)."""
    fields = {name.decode(errors="replace"): value for name, value in raw.items()}

    def text(name: str) -> str:
        value = fields.get(name)
        return value.decode(errors="replace") if value is not None else ""

    def number(name: str) -> int:
        value = text(name)
        return int(value) if value.isdigit() else 0

    work = _work_item(fields.get("work") or fields.get("raw_w"))
    version = text("version")
    return DeadLetter(
        shard=shard,
        entry_id=entry_id,
        error_class=text("error_class") or "POISON",
        last_error=text("last_error") or text("reason"),
        delivery_id=text("delivery_id") or (work.delivery_id if work else ""),
        notification_id=text("notification_id") or (work.notification_id if work else ""),
        notification_type=text("type") or (work.notification_type if work else ""),
        channel=text("channel") or (work.channel if work else ""),
        priority=text("priority") or (work.priority if work else ""),
        attempts=number("attempts"),
        first_attempt_ms=number("first_attempt_ms"),
        last_attempt_ms=number("last_attempt_ms"),
        worker=text("worker"),
        worker_version=text("worker_version"),
        version=int(version) if version.isdigit() else None,
        work_entry_id=text("work_entry_id"),
        work=work,
        other_fields=tuple(sorted(set(fields) - _KNOWN)),
    )


def _work_item(raw: bytes | None) -> WorkItem | None:
    if raw is None:
        return None
    try:
        return codec.decode_work_item(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _resolution(raw: bytes | None) -> Resolution | None:
    if raw is None:
        return None
    try:
        mark = json.loads(raw)
        return Resolution(
            str(mark["outcome"]), str(mark["operator"]), str(mark["reason"]), int(mark["at_ms"])
        )
    except (ValueError, KeyError, TypeError):
        return Resolution("unknown", "", "", 0)  # a mark nobody can read still settles it


async def scan(
    redis: Redis, keys: KeySpace, selection: Selection, *, open_only: bool, max_entries: int
) -> AsyncIterator[list[DeadLetter]]:
    """Pages of matching entries, oldest first, shard by shard, each with its resolution.

    Looks at no more than ``max_entries`` entries in all, matching or not.
    """
    low = f"{selection.since_ms}-0" if selection.since_ms is not None else "-"
    high = f"({selection.until_ms}-0" if selection.until_ms is not None else "+"
    looked = 0
    for shard in keys.all_shards():
        start = low
        while looked < max_entries:
            count = min(_PAGE, max_entries - looked)
            entries: Any = await redis.xrange(shard.dlq, start, high, count=count)
            if not entries:
                break
            looked += len(entries)
            ids = [_text(entry_id) for entry_id, _ in entries]
            marks: list[Any] = await redis.hmget(shard.dlq_resolved, ids)
            page = []
            for entry_id, (_, raw), mark in zip(ids, entries, marks, strict=True):
                if open_only and mark is not None:
                    continue
                letter = parse_entry(shard.shard, entry_id, raw)
                if selection.matches(letter):
                    page.append(_with_resolution(letter, _resolution(mark)))
            if page:
                yield page
            if len(entries) < count:
                break
            start = f"({ids[-1]}"


def _with_resolution(letter: DeadLetter, resolution: Resolution | None) -> DeadLetter:
    return letter if resolution is None else dataclasses.replace(letter, resolution=resolution)


@dataclass(slots=True)
class Summary:
    """The open dead letters a selection matches: counts by class, channel, type, samples."""

    open: int = 0
    resolved: int = 0
    by_error_class: Counter[str] = field(default_factory=Counter)
    by_channel: Counter[str] = field(default_factory=Counter)
    by_type: Counter[str] = field(default_factory=Counter)
    oldest_open_ms: int | None = None
    samples: list[DeadLetter] = field(default_factory=list)
    truncated: bool = False  # more entries than one summary looks at: counts are partial


async def summarize(
    redis: Redis,
    keys: KeySpace,
    selection: Selection,
    *,
    samples: int,
    max_entries: int = SUMMARY_SCAN,
) -> Summary:
    """Count the matching entries (open ones by class, channel and type) and take samples:
    the first ``samples`` open ones, in the order a replay would take them."""
    summary = Summary()
    async for page in scan(redis, keys, selection, open_only=False, max_entries=max_entries):
        for letter in page:
            if letter.resolution is not None:
                summary.resolved += 1
                continue
            summary.open += 1
            summary.by_error_class[letter.error_class] += 1
            summary.by_channel[letter.channel or "unknown"] += 1
            summary.by_type[letter.notification_type or "unknown"] += 1
            if summary.oldest_open_ms is None:
                summary.oldest_open_ms = letter.dead_lettered_ms
            summary.oldest_open_ms = min(summary.oldest_open_ms, letter.dead_lettered_ms)
            if len(summary.samples) < samples:
                summary.samples.append(letter)
    summary.truncated = await _more_than(redis, keys, selection, max_entries)
    return summary


async def _more_than(redis: Redis, keys: KeySpace, selection: Selection, limit: int) -> bool:
    """Whether the selection's time window holds more than ``limit`` entries in all."""
    if selection.since_ms is None and selection.until_ms is None:
        async with redis.pipeline(transaction=False) as pipe:
            for shard in keys.all_shards():
                pipe.xlen(shard.dlq)
            lengths: list[int] = await pipe.execute()
        return sum(lengths) > limit
    total = 0
    low = f"{selection.since_ms}-0" if selection.since_ms is not None else "-"
    high = f"({selection.until_ms}-0" if selection.until_ms is not None else "+"
    for shard in keys.all_shards():
        # XRANGE with COUNT limit+1 bounds the work: only whether there is more matters.
        found: Any = await redis.xrange(shard.dlq, low, high, count=limit + 1 - total)
        total += len(found)
        if total > limit:
            return True
    return False


# --- replay --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplayOrder:
    """An operator's replay: what, at most how many, who and why."""

    selection: Selection
    limit: int
    operator: str
    reason: str
    force: bool = False
    dry_run: bool = False


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a replay did (or, in a dry run, would do) with one entry."""

    letter: DeadLetter
    outcome: str  # REPLAYED or a key of SKIP_REASONS
    # A replayed delivery held back by the recipient's quiet hours: when they end.
    deferred_until: datetime | None = None


@dataclass(slots=True)
class ReplayReport:
    dry_run: bool
    replayed: list[Verdict] = field(default_factory=list)
    skipped: list[Verdict] = field(default_factory=list)
    # The scan stopped at REPLAY_SCAN entries before the limit was reached: call again.
    truncated: bool = False


async def replay(
    redis: Redis, keys: KeySpace, order: ReplayOrder, now_ms: int, quiet_until: QuietUntil
) -> ReplayReport:
    """Replay the open entries ``order`` selects, oldest first, up to ``order.limit``.

    A dry run returns exactly what the same call would do now, and writes nothing. Every
    entry goes through one script call that re-checks the delivery's state atomically.
    """
    if not 1 <= order.limit <= MAX_REPLAY:
        raise ValueError(f"limit must be from 1 to {MAX_REPLAY}")
    run = _ReplayRun(redis, keys, order, now_ms, quiet_until)
    async for page in scan(redis, keys, order.selection, open_only=True, max_entries=REPLAY_SCAN):
        if await run.page(page):
            return run.report
    run.report.truncated = await _more_than(redis, keys, order.selection, REPLAY_SCAN)
    return run.report


class _ReplayRun:
    """One replay call, page by page; it remembers what it replayed so far."""

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        order: ReplayOrder,
        now_ms: int,
        quiet_until: QuietUntil,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.order = order
        self.now_ms = now_ms
        self.now = datetime.fromtimestamp(now_ms / 1000, UTC)
        self.quiet_until = quiet_until
        self.report = ReplayReport(dry_run=order.dry_run)
        self.replayed_ids: set[str] = set()

    async def page(self, page: Sequence[DeadLetter]) -> bool:
        """Decide on one page (all of one shard) in order, up to the entry that uses up the
        limit; True when the limit is used up (the replay ends there)."""
        shard = self.keys.shard(page[0].shard)
        budget = self.order.limit - len(self.report.replayed)
        outcomes: dict[str, str] = {}
        quiet_ends: dict[str, datetime | None] = {}
        candidates: list[DeadLetter] = []
        for letter in page:
            if letter.error_class in FORCE_ONLY and not self.order.force:
                outcomes[letter.entry_id] = "needs_force"
            elif letter.work is None or not letter.delivery_id:
                outcomes[letter.entry_id] = "unreadable"
            else:
                candidates.append(letter)
        if candidates:
            ends = await self._quiet_ends(shard, candidates)
            replies = await self._run_script(shard, candidates, ends, budget)
            ids = [c.entry_id for c in candidates]
            outcomes.update(zip(ids, replies, strict=True))
            quiet_ends.update(zip(ids, ends, strict=True))
        # The script answers "over_limit" only after the budget's last replay, where this
        # loop has stopped already.
        for letter in page:
            outcome = outcomes[letter.entry_id]
            deferred_until = quiet_ends.get(letter.entry_id) if outcome == REPLAYED else None
            verdict = Verdict(letter, outcome, deferred_until)
            if verdict.outcome == REPLAYED:
                self.report.replayed.append(verdict)
                self.replayed_ids.add(letter.delivery_id)
            else:
                self.report.skipped.append(verdict)
                if verdict.outcome == "unreadable":
                    await self._settle_unreadable(shard, letter)
            if len(self.report.replayed) == self.order.limit:
                return True
        return False

    async def _run_script(
        self,
        shard: ShardKeys,
        letters: Sequence[DeadLetter],
        quiet_ends: Sequence[datetime | None],
        budget: int,
    ) -> list[str]:
        versions = await self._versions(shard, letters)
        script_keys: list[KeyOrArg] = [
            shard.events,
            *shard.work_streams,
            shard.dlq_resolved,
            shard.delayed,
        ]
        order = self.order
        args: list[KeyOrArg] = [
            "1" if order.dry_run else "0",
            self.now_ms,
            order.operator,
            order.reason,
            budget,
        ]
        for letter, version, quiet_end in zip(letters, versions, quiet_ends, strict=True):
            work = letter.work
            assert work is not None  # unreadable entries never get here
            replayed = DeliveryReplayed(
                at=self.now,
                notification_id=work.notification_id,
                delivery_id=work.delivery_id,
                version=version + 1,
                operator=order.operator,
                reason=order.reason,
            )
            item = codec.encode(msgspec.structs.replace(work, attempts=0))
            script_keys.append(shard.delivery(work.delivery_id))
            args += [
                letter.entry_id,
                "FAILED" if letter.version is not None else "POISON",
                version,
                "1" if letter.delivery_id in self.replayed_ids else "0",
                work.expires_ms,
            ]
            if quiet_end is None:
                args += [work.priority.lower(), codec.encode_events([replayed]), item]
            else:  # replayed, then held back by quiet hours: two changes, two versions
                deferred = DeliveryDeferred(
                    at=self.now,
                    notification_id=work.notification_id,
                    delivery_id=work.delivery_id,
                    version=version + 2,
                    channel=work.channel,
                    reason="quiet_hours",
                    until=quiet_end,
                )
                args += [
                    int(quiet_end.timestamp() * 1000),
                    codec.encode_events([replayed, deferred]),
                    delayed_member(work.priority, item),
                ]
        replies: list[bytes] = await _REPLAY_SCRIPT(self.redis, script_keys, args)
        return [reply.decode() for reply in replies]

    async def _quiet_ends(
        self, shard: ShardKeys, letters: Sequence[DeadLetter]
    ) -> list[datetime | None]:
        """For each entry, when the recipient's quiet window ends if its delivery must wait
        for that now; None when it may go at once."""
        held = [
            letter
            for letter in letters
            if letter.work is not None
            and letter.work.priority != "HIGH"
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
            mark = _mark("unreadable", self.order, self.now_ms)
            await self.redis.hsetnx(shard.dlq_resolved, letter.entry_id, mark)


def _mark(outcome: str, order: ReplayOrder, now_ms: int) -> str:
    return json.dumps(
        {"outcome": outcome, "operator": order.operator, "reason": order.reason, "at_ms": now_ms}
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
