"""``clarion campaign status ID``: a campaign's progress, with a bar; ``--watch`` follows it
until it completes or is cancelled.

It reads Redis (the campaign's record) and, when it can, PostgreSQL (its deliveries'
statuses) directly, so it works while the API is down.
"""

from __future__ import annotations

import asyncio

import asyncpg
import click

from app.campaigns.progress import progress_of, render
from app.cli.status import run_reading_redis
from app.processes.clients import redis_client
from app.setting_values import SettingsError
from app.settings import Settings
from projections.campaign_queries import campaign_counts
from projections.database import DatabaseNotReady
from projections.database import connect as connect_database
from streams.campaigns.store import CampaignStore
from streams.core import clock
from streams.core.ids import is_uuid
from streams.core.keys import KeySpace


async def _read_model(settings: Settings) -> asyncpg.Pool | None:
    try:
        return await connect_database(settings.database_url, max_size=1)
    except (DatabaseNotReady, OSError, asyncpg.PostgresError):
        return None


async def _show(settings: Settings, campaign_id: str, interval: float, watch: bool) -> None:
    redis = redis_client(settings)
    pool = await _read_model(settings)
    store = CampaignStore(redis, KeySpace(settings.key_prefix, settings.shards))
    try:
        while True:
            campaign = await store.get(campaign_id)
            if campaign is None:
                raise click.ClickException(f"no campaign {campaign_id!r}")
            counts = await campaign_counts(pool, campaign_id) if pool is not None else None
            click.echo(render(progress_of(campaign, counts, clock.now_ms())))
            if not watch or campaign.state.ended:
                return
            await asyncio.sleep(interval)
            click.echo("")
    finally:
        await redis.aclose()
        if pool is not None:
            await pool.close()


@click.group()
def campaign() -> None:
    """Campaigns: their progress."""


@campaign.command()
@click.argument("campaign_id")
@click.option(
    "--interval", default=2.0, show_default=True, type=click.FloatRange(min=0.1),
    help="seconds between two readings with --watch",
)  # fmt: skip
@click.option("--watch", is_flag=True, help="keep printing until it completes or is cancelled")
def status(campaign_id: str, interval: float, watch: bool) -> None:
    """Show a campaign's progress: recipients generated, deliveries by status, pace and ETA."""
    if not is_uuid(campaign_id):
        raise click.BadParameter("a campaign id (a UUID)", param_hint="CAMPAIGN_ID")
    try:
        settings = Settings.from_env()
    except SettingsError as error:
        raise click.ClickException(str(error)) from None
    run_reading_redis(_show(settings, campaign_id, interval, watch))
