"""``clarion dlq list`` and ``clarion dlq replay``: the dead-letter queue from a shell.

They work on Redis directly with the settings from the environment (and the catalog, to
check type names), so they work while the API is down. They do what ``GET /v1/dlq`` and
``POST /v1/dlq/replay`` do, with the same checks, and print tables (``--json``: the API's
answer).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime

import click
import msgspec
from redis.exceptions import RedisError

from app.catalog import Catalog, CatalogError, load_catalog
from app.ingest import quiet_hours
from app.operations.dlq import (
    DEFAULT_SAMPLES,
    DlqRequestError,
    DlqSummaryView,
    ReplayBody,
    ReplayResultView,
    ReplayView,
    replay_order,
    replay_view,
    samples_count,
    selection,
    summary_view,
)
from app.processes.clients import redis_client
from app.setting_values import SettingsError
from app.settings import Settings
from streams.core.connection import redact
from streams.core.keys import KeySpace
from streams.core.vocabulary import CHANNELS, ERROR_CLASSES
from streams.dlq.replay import MAX_REPLAY, ReplayOrder
from streams.dlq.replay import replay as replay_dead_letters
from streams.dlq.scan import Selection, summarize


def _environment() -> tuple[Settings, Catalog]:
    try:
        settings = Settings.from_env()
        return settings, load_catalog(settings.config_path)
    except (SettingsError, CatalogError) as error:
        raise click.ClickException(str(error)) from None


def _filters(function: click.decorators.FC) -> click.decorators.FC:
    """The options that select entries, shared by both commands."""
    options = [
        click.option("--type", "notification_type", default=None, help="notification type"),
        click.option("--channel", type=click.Choice(CHANNELS), default=None),
        click.option("--error-class", type=click.Choice(ERROR_CLASSES), default=None),
        click.option("--since", default=None, help="dead-lettered at or after (ISO 8601, UTC)"),
        click.option("--until", default=None, help="dead-lettered before (ISO 8601, UTC)"),
        click.option("--json", "as_json", is_flag=True, help="print the API's JSON answer"),
    ]
    for option in reversed(options):
        function = option(function)
    return function


@click.group()
def dlq() -> None:
    """Inspect the dead-letter queue and replay what it holds."""


@dlq.command(name="list")
@_filters
@click.option("--samples", default=DEFAULT_SAMPLES, show_default=True, help="entries to show")
def list_command(
    notification_type: str | None,
    channel: str | None,
    error_class: str | None,
    since: str | None,
    until: str | None,
    as_json: bool,
    samples: int,
) -> None:
    """Count the open dead letters by error class, channel and type; show the oldest."""
    settings, catalog = _environment()
    try:
        chosen = selection(
            catalog,
            notification_type=notification_type,
            channel=channel,
            error_class=error_class,
            since=since,
            until=until,
        )
        count = samples_count(samples)
    except DlqRequestError as error:
        raise click.UsageError(str(error)) from None
    view = asyncio.run(_summarize(settings, chosen, count))
    click.echo(msgspec.json.encode(view).decode() if as_json else "\n".join(_summary_lines(view)))


@dlq.command()
@_filters
@click.option("--delivery-id", "delivery_ids", multiple=True, help="only these (repeatable)")
@click.option("--limit", type=int, required=True, help=f"most entries to replay (1-{MAX_REPLAY})")
@click.option("--operator", required=True, help="who replays (recorded)")
@click.option("--reason", required=True, help="why (recorded)")
@click.option("--dry-run", is_flag=True, help="only show what would be replayed")
@click.option("--force", is_flag=True, help="replay POISON and BUG entries too")
def replay(
    notification_type: str | None,
    channel: str | None,
    error_class: str | None,
    since: str | None,
    until: str | None,
    as_json: bool,
    delivery_ids: tuple[str, ...],
    limit: int,
    operator: str,
    reason: str,
    dry_run: bool,
    force: bool,
) -> None:
    """Replay the open dead letters the filters select, oldest first, at most --limit."""
    settings, catalog = _environment()
    try:
        body = msgspec.convert(
            {
                "limit": limit,
                "operator": operator,
                "reason": reason,
                "type": notification_type,
                "channel": channel,
                "error_class": error_class,
                "since": since,
                "until": until,
                "delivery_ids": list(delivery_ids),
                "dry_run": dry_run,
                "force": force,
            },
            ReplayBody,
        )
        order = replay_order(catalog, body)
    except msgspec.ValidationError as error:
        raise click.UsageError(_option_message(str(error))) from None
    except DlqRequestError as error:
        raise click.UsageError(str(error)) from None
    view = asyncio.run(_replay(settings, order))
    click.echo(msgspec.json.encode(view).decode() if as_json else "\n".join(_replay_lines(view)))


def _option_message(message: str) -> str:
    """msgspec's "... - at `$.limit`" as "--limit: ..."."""
    text, _, path = message.partition(" - at `$.")
    return f"--{path.rstrip('`').replace('_', '-')}: {text}" if path else message


async def _summarize(settings: Settings, chosen: Selection, samples: int) -> DlqSummaryView:
    redis = redis_client(settings)
    keys = KeySpace(settings.key_prefix, settings.shards)
    try:
        return summary_view(await summarize(redis, keys, chosen, samples=samples))
    except (RedisError, OSError) as error:
        raise click.ClickException(
            f"cannot read Redis at {redact(settings.redis_url)}: {error}"
        ) from None
    finally:
        await redis.aclose()


async def _replay(settings: Settings, order: ReplayOrder) -> ReplayView:
    try:
        # The suppression list names addresses by their digest: a replay checks it.
        digest = settings.address_digest()
    except SettingsError as error:
        raise click.ClickException(str(error)) from None
    redis = redis_client(settings)
    keys = KeySpace(settings.key_prefix, settings.shards)
    try:
        report = await replay_dead_letters(
            redis, keys, order, quiet_hours.window_end, address_digest=digest
        )
    except (RedisError, OSError) as error:
        raise click.ClickException(
            f"cannot use Redis at {redact(settings.redis_url)}: {error}"
        ) from None
    finally:
        await redis.aclose()
    return replay_view(order, report)


# --- tables ----------------------------------------------------------------------------------


def _summary_lines(view: DlqSummaryView) -> list[str]:
    lines = [
        f"open dead letters: {view.open}   resolved by replays: {view.resolved}   "
        f"oldest open: {_time(view.oldest_open_at)}",
    ]
    if view.truncated:
        lines.append(
            f"(counted the newest entries only, complete since {_time(view.complete_since)}: "
            "narrow the filter or the time range)"
        )
    for title, counts in (
        ("by error class", view.by_error_class),
        ("by channel", view.by_channel),
        ("by type", view.by_type),
    ):
        text = ", ".join(f"{name} {count}" for name, count in counts.items()) or "-"
        lines.append(f"{title:<16}{text}")
    if view.samples:
        rows = [
            [
                _time(s.dead_lettered_at),
                s.delivery_id or "-",
                s.type or "-",
                s.channel or "-",
                s.error_class,
                str(s.attempts),
                s.last_error,
            ]
            for s in view.samples
        ]
        headers = ["DEAD-LETTERED", "DELIVERY", "TYPE", "CHANNEL", "CLASS", "ATTEMPTS", "ERROR"]
        lines += ["", *_table(headers, rows)]
    return lines


def _replay_lines(view: ReplayView) -> list[str]:
    verb = "would replay" if view.dry_run else "replayed"
    lines = [
        f"{'DRY RUN, nothing written: ' if view.dry_run else ''}{verb} {len(view.replayed)}, "
        f"skipped {len(view.skipped)}   (operator {view.operator!r}, reason {view.reason!r})"
    ]
    if view.truncated:
        lines.append("(stopped after the scan limit before the end of the range: run again)")
    rows = [_result_row(v) for v in [*view.replayed, *view.skipped]]
    if rows:
        headers = ["OUTCOME", "DELIVERY", "TYPE", "CHANNEL", "CLASS", "DETAIL"]
        lines += ["", *_table(headers, rows)]
    return lines


def _result_row(result: ReplayResultView) -> list[str]:
    return [
        result.outcome,
        result.delivery_id or f"(entry {result.entry_id})",
        result.type or "-",
        result.channel or "-",
        result.error_class,
        result.detail,
    ]


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns; the last one is not padded (long error texts)."""
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers) - 1)]

    def line(cells: Sequence[str]) -> str:
        padded = [cell.ljust(width) for cell, width in zip(cells, widths, strict=False)]
        return "  ".join([*padded, cells[-1]])

    return [line(headers), *(line(row) for row in rows)]


def _time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value else "-"
