"""What an operator may ask of the dead-letter queue, and what they see: one set of checks
and views for the HTTP API (``app.operations.api.dlq``) and the CLI (``app.cli.dlq``).

Every mistake raises ``DlqRequestError`` with a message naming the field; the API answers it
with 422, the CLI with a usage error. Views never carry a recipient address or template data
values (see ``streams.dlq.entries``), and error texts are masked like log lines.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, TypeVar

import msgspec

from app.catalog import Catalog
from app.logging import mask
from streams.core.errors import Invalid
from streams.core.ids import is_uuid
from streams.core.vocabulary import CHANNELS, ERROR_CLASSES
from streams.dlq.entries import DeadLetter, Resolution
from streams.dlq.replay import (
    MAX_REPLAY,
    REPLAYED,
    SKIP_REASONS,
    ReplayOrder,
    ReplayReport,
    ReplayResult,
)
from streams.dlq.scan import Selection, Summary

MAX_SAMPLES = 100
DEFAULT_SAMPLES = 10
MAX_OPERATOR = 100
MAX_REASON = 500


class DlqRequestError(Invalid, ValueError):
    """A filter or replay parameter is invalid; the message names it."""


class ReplayBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of ``POST /v1/dlq/replay``: the filter, the bound, who and why."""

    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_REPLAY)]
    operator: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_OPERATOR)]
    reason: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_REASON)]
    type: str | None = None
    channel: str | None = None
    error_class: str | None = None
    since: str | None = None
    until: str | None = None
    delivery_ids: Annotated[list[str], msgspec.Meta(max_length=MAX_REPLAY)] = []
    dry_run: bool = False
    force: bool = False


def selection(
    catalog: Catalog,
    *,
    notification_type: str | None = None,
    channel: str | None = None,
    error_class: str | None = None,
    since: str | None = None,
    until: str | None = None,
    delivery_ids: list[str] | tuple[str, ...] = (),
    producer: str | None = None,
) -> Selection:
    """The entries these filters mean (only ``producer``'s, when given); ``DlqRequestError``
    naming the first invalid one."""
    if notification_type is not None and notification_type not in catalog.types:
        raise DlqRequestError(
            f"type: unknown notification type {notification_type!r}; "
            f"known: {', '.join(sorted(catalog.types))}"
        )
    since_ms, until_ms = _time_ms("since", since), _time_ms("until", until)
    if since_ms is not None and until_ms is not None and since_ms >= until_ms:
        raise DlqRequestError("until: must be later than since")
    for position, delivery_id in enumerate(delivery_ids):
        if not is_uuid(delivery_id):
            raise DlqRequestError(f"delivery_ids[{position}]: {delivery_id!r} is not a delivery id")
    return Selection(
        notification_type=notification_type,
        channel=_one_of("channel", channel, CHANNELS),
        error_class=_one_of("error_class", error_class, ERROR_CLASSES),
        since_ms=since_ms,
        until_ms=until_ms,
        delivery_ids=frozenset(d.lower() for d in delivery_ids),
        producer=producer,
    )


def replay_order(catalog: Catalog, body: ReplayBody, producer: str | None = None) -> ReplayOrder:
    """The replay a valid body asks for, of ``producer``'s entries only when given;
    ``DlqRequestError`` naming the first invalid field."""
    for name, value in (("operator", body.operator), ("reason", body.reason)):
        if not value.strip() or not value.isprintable():
            raise DlqRequestError(f"{name}: printable text is required, not only blanks")
    return ReplayOrder(
        selection=selection(
            catalog,
            notification_type=body.type,
            channel=body.channel,
            error_class=body.error_class,
            since=body.since,
            until=body.until,
            delivery_ids=body.delivery_ids,
            producer=producer,
        ),
        limit=body.limit,
        operator=body.operator.strip(),
        reason=body.reason.strip(),
        force=body.force,
        dry_run=body.dry_run,
        opt_out_types=frozenset(name for name, kind in catalog.types.items() if kind.opt_out),
    )


def samples_count(value: str | int | None) -> int:
    """How many sample entries to show: 0 to MAX_SAMPLES."""
    if value is None:
        return DEFAULT_SAMPLES
    text = str(value).strip()
    if text.isdigit() and int(text) <= MAX_SAMPLES:
        return int(text)
    raise DlqRequestError(f"samples: must be an integer from 0 to {MAX_SAMPLES}")


Word = TypeVar("Word", bound=str)


def _one_of(name: str, value: str | None, allowed: tuple[Word, ...]) -> Word | None:
    """The member of ``allowed`` that ``value`` is (None when absent)."""
    if value is None:
        return None
    for member in allowed:
        if member == value:
            return member
    raise DlqRequestError(f"{name}: must be one of {', '.join(allowed)}")


def _time_ms(name: str, value: str | None) -> int | None:
    """An ISO 8601 time in ms since the epoch; UTC when it has no offset."""
    if value is None:
        return None
    text = value.strip()
    try:
        # Only printable text: fromisoformat passes over a NUL (12:00\x00+05:00 is 12:00+05:00).
        if not text.isprintable():
            raise ValueError(text)
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise DlqRequestError(
            f"{name}: must be an ISO 8601 time, e.g. 2026-11-29T12:00:00Z"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        # 0001-01-01T00:00:00+14:00 is valid ISO 8601 but falls before year 1 in UTC (and
        # 9999-12-31T23:59:59-14:00 after year 9999): refused like in every time parameter.
        parsed.astimezone(UTC)
    except OverflowError:
        raise DlqRequestError(
            f"{name}: must be from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z"
        ) from None
    ms = int(parsed.timestamp() * 1000)
    if ms <= 0:  # stream entry ids start at the epoch; nothing was dead-lettered before it
        raise DlqRequestError(f"{name}: must be later than 1970-01-01T00:00:00Z")
    return ms


# --- views -----------------------------------------------------------------------------------


class ResolutionView(msgspec.Struct, frozen=True, kw_only=True):
    outcome: str
    operator: str
    reason: str
    at: datetime | None


class DeadLetterView(msgspec.Struct, frozen=True, kw_only=True):
    """One dead letter with its full context, without the address or template data values."""

    entry_id: str
    shard: int
    dead_lettered_at: datetime
    delivery_id: str | None
    notification_id: str | None
    type: str | None
    channel: str | None
    priority: str | None
    producer: str | None
    error_class: str
    last_error: str
    attempts: int
    first_attempt_at: datetime | None
    last_attempt_at: datetime | None
    worker: str | None
    worker_version: str | None
    version: int | None
    work_entry_id: str | None
    recipient_id: str | None
    locale: str | None
    created_at: datetime | None
    expires_at: datetime | None
    data_keys: list[str]
    other_fields: list[str]
    resolution: ResolutionView | None


class DlqSummaryView(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/dlq``: the open dead letters counted, plus samples in replay order."""

    open: int
    resolved: int
    by_error_class: dict[str, int]
    by_channel: dict[str, int]
    by_type: dict[str, int]
    oldest_open_at: datetime | None
    # The queue held more than one view looks at (its newest entries): the counts are
    # complete only for entries dead-lettered since ``complete_since``; narrow with since/until.
    truncated: bool
    complete_since: datetime | None
    samples: list[DeadLetterView]


class ReplayResultView(msgspec.Struct, frozen=True, kw_only=True):
    entry_id: str
    delivery_id: str | None
    notification_id: str | None
    type: str | None
    channel: str | None
    error_class: str
    outcome: str
    detail: str
    # A replayed delivery waiting for the recipient's quiet hours to end: when they end.
    deferred_until: datetime | None = None


class ReplayView(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /v1/dlq/replay``: what was (or, in a dry run, would be) replayed and skipped."""

    dry_run: bool
    operator: str
    reason: str
    replayed: list[ReplayResultView]
    skipped: list[ReplayResultView]
    truncated: bool


def letter_view(letter: DeadLetter) -> DeadLetterView:
    work = letter.work
    return DeadLetterView(
        entry_id=letter.entry_id,
        shard=letter.shard,
        dead_lettered_at=_at(letter.dead_lettered_ms),
        delivery_id=letter.delivery_id or None,
        notification_id=letter.notification_id or None,
        type=letter.notification_type or None,
        channel=letter.channel or None,
        priority=letter.priority or None,
        producer=letter.producer or None,
        error_class=letter.error_class,
        last_error=mask(letter.last_error),
        attempts=letter.attempts,
        first_attempt_at=_at_or_none(letter.first_attempt_ms),
        last_attempt_at=_at_or_none(letter.last_attempt_ms),
        worker=letter.worker or None,
        worker_version=letter.worker_version or None,
        version=letter.version,
        work_entry_id=letter.work_entry_id or None,
        recipient_id=work.recipient_id if work else None,
        locale=work.locale if work else None,
        created_at=_at(work.created_ms) if work else None,
        expires_at=_at(work.expires_ms) if work else None,
        data_keys=sorted(work.data) if work else [],
        other_fields=list(letter.other_fields),
        resolution=_resolution_view(letter.resolution),
    )


def summary_view(summary: Summary) -> DlqSummaryView:
    return DlqSummaryView(
        open=summary.open,
        resolved=summary.resolved,
        by_error_class=dict(summary.by_error_class.most_common()),
        by_channel=dict(summary.by_channel.most_common()),
        by_type=dict(summary.by_type.most_common()),
        oldest_open_at=_at_or_none(summary.oldest_open_ms or 0),
        truncated=summary.truncated,
        complete_since=_at_or_none(summary.complete_since_ms or 0) if summary.truncated else None,
        samples=[letter_view(letter) for letter in summary.samples],
    )


def replay_view(order: ReplayOrder, report: ReplayReport) -> ReplayView:
    return ReplayView(
        dry_run=report.dry_run,
        operator=order.operator,
        reason=order.reason,
        replayed=[_result_view(result) for result in report.replayed],
        skipped=[_result_view(result) for result in report.skipped],
        truncated=report.truncated,
    )


def _result_view(result: ReplayResult) -> ReplayResultView:
    letter = result.letter
    detail = "queued again, same delivery id" if result.outcome == REPLAYED else ""
    if result.deferred_until is not None:
        detail = (
            "queued again, same delivery id, once the recipient's quiet hours end at "
            f"{result.deferred_until.isoformat()}"
        )
    return ReplayResultView(
        entry_id=letter.entry_id,
        delivery_id=letter.delivery_id or None,
        notification_id=letter.notification_id or None,
        type=letter.notification_type or None,
        channel=letter.channel or None,
        error_class=letter.error_class,
        outcome=result.outcome,
        detail=SKIP_REASONS.get(result.outcome, detail),
        deferred_until=result.deferred_until,
    )


def _resolution_view(resolution: Resolution | None) -> ResolutionView | None:
    if resolution is None:
        return None
    return ResolutionView(
        outcome=resolution.outcome,
        operator=resolution.operator,
        reason=resolution.reason,
        at=_at_or_none(resolution.at_ms),
    )


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _at_or_none(ms: int) -> datetime | None:
    return _at(ms) if ms else None
