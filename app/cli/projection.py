"""``clarion projection``: operator commands for the read model in PostgreSQL."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import click

from app.logging import configure_logging
from app.processes.clients import redis_client
from app.processes.redis_checks import RedisNotReady, check_redis
from app.setting_values import SettingsError
from app.settings import Settings
from projections.database import DatabaseNotReady
from projections.database import connect as connect_database
from projections.rebuild import RebuildSummary, rebuild
from projections.rebuild_schema import RebuildError
from streams.core.keys import KeySpace

_PHASES = {
    "history": "PostgreSQL history (events)",
    "redis": "Redis beyond it (entries) ",
}


@click.group()
def projection() -> None:
    """The read model in PostgreSQL."""


@projection.command("rebuild")
@click.option(
    "--yes",
    is_flag=True,
    help="Swap the rebuilt tables in without asking, also when some notifications have no "
    "history left to rebuild them from.",
)
def rebuild_command(yes: bool) -> None:
    """Rebuild the notification and delivery tables from the event history.

    Every event in delivery_event, then what Redis holds beyond it, is projected into fresh
    tables that replace the current ones in one transaction. The service keeps running:
    reads see the current tables until the swap, and the projector waits meanwhile and
    catches up afterwards. Notifications whose history partitions were already dropped
    (CLARION_RETENTION_DAYS) cannot be rebuilt.
    """
    try:
        settings = Settings.from_env()
    except SettingsError as error:
        raise click.ClickException(str(error)) from None
    configure_logging(settings.log_format, settings.log_level)
    try:
        summary = asyncio.run(_rebuild(settings, yes))
    except (RebuildError, RedisNotReady, DatabaseNotReady) as error:
        raise click.ClickException(str(error)) from None
    if summary.swapped:
        click.echo("Rebuilt tables swapped in.")
    else:
        click.echo("Not swapped: the read model is unchanged.")


async def _rebuild(settings: Settings, yes: bool) -> RebuildSummary:
    redis = redis_client(settings)
    try:
        await check_redis(redis, settings.redis_url)
        pool = await connect_database(settings.database_url)  # created and migrated if new
        await pool.close()
        bars = _Bars()

        def confirm(summary: RebuildSummary) -> bool:
            bars.close()
            _describe(summary, settings.retention_days)
            if summary.lost and not yes:
                return click.confirm(
                    f"{summary.lost} notifications of the current tables have no history left "
                    "and would be gone. Swap in the rebuilt tables anyway?",
                    default=False,
                )
            return True

        return await rebuild(
            settings.database_url,
            redis,
            KeySpace(settings.key_prefix, settings.shards),
            progress=bars,
            confirm=confirm,
        )
    finally:
        await redis.aclose()


def _describe(summary: RebuildSummary, retention_days: int) -> None:
    oldest = summary.oldest_event.isoformat() if summary.oldest_event else "-"
    click.echo(
        f"History: {summary.history_events} events in PostgreSQL, the oldest from {oldest} "
        f"(older ones were dropped after CLARION_RETENTION_DAYS={retention_days} and cannot "
        f"be restored); {summary.redis_entries} newer entries from Redis."
    )
    if summary.undecodable_events:
        click.echo(f"Skipped {summary.undecodable_events} events that no longer decode.")
    if summary.redacted_events:
        click.echo(f"{summary.redacted_events} inbox messages had their text erased.")
    click.echo(
        f"notification: {summary.notifications_before} rows now, "
        f"{summary.notifications_after} rebuilt; delivery: {summary.deliveries_before} now, "
        f"{summary.deliveries_after} rebuilt."
    )


class _Bars:
    """One click progress bar per phase of the rebuild, on standard error."""

    def __init__(self) -> None:
        self._bar: Any = None

    def phase(self, name: str, total: int) -> None:
        self.close()
        self._bar = click.progressbar(length=total, label=_PHASES.get(name, name), file=sys.stderr)
        self._bar.render_progress()

    def advance(self, count: int) -> None:
        if self._bar is not None:
            self._bar.update(count)

    def close(self) -> None:
        if self._bar is not None:
            # The Redis phase's total is an upper bound: show the phase as done.
            self._bar.update(max(0, self._bar.length - self._bar.pos))
            self._bar.render_finish()
            self._bar = None
