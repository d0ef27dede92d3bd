"""``clarion status``: the backlog and delivery figures as a table, with the advisor's hints.

It reads Redis directly (the figures of ``GET /v1/ops/lag``), so it works while the API is
down. Two readings ``--interval`` seconds apart give the rates; ``--watch`` keeps printing.
What is shown: ``app.operations.status_hints``; which hints apply: ``app.operations.advisor``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

import click
from redis.exceptions import RedisError

from app.catalog import CatalogError, guarded_providers, load_catalog
from app.metrics import read_snapshot
from app.operations.status_hints import render
from app.processes.clients import redis_client
from app.setting_values import SettingsError
from app.settings import Settings
from streams.core.keys import KeySpace


async def _show(settings: Settings, interval: float, watch: bool, providers: list[str]) -> None:
    redis = redis_client(settings)
    keys = KeySpace(settings.key_prefix, settings.shards)
    try:
        before = await read_snapshot(redis, keys, providers)
        while True:
            await asyncio.sleep(interval)
            after = await read_snapshot(redis, keys, providers)
            click.echo(render(after, before))
            if not watch:
                return
            click.echo("")
            before = after
    finally:
        await redis.aclose()


@click.command()
@click.option(
    "--interval",
    default=2.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="seconds between the two readings that give the rates",
)
@click.option("--watch", is_flag=True, help="keep printing, every --interval seconds")
def status(interval: float, watch: bool) -> None:
    """Show queues, lag, dead letters and delivery rates, with the advisor's hints (from Redis)."""
    try:
        settings = Settings.from_env()
        providers = guarded_providers(load_catalog(settings.config_path))
    except (SettingsError, CatalogError) as error:
        raise click.ClickException(str(error)) from None
    run_reading_redis(_show(settings, interval, watch, providers))


def run_reading_redis(reading: Coroutine[Any, Any, None]) -> None:
    """Run a command that reads Redis until it ends or is interrupted (how ``--watch`` ends);
    a Redis it cannot read is a ClickException naming it."""
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(reading)
    except (RedisError, OSError) as error:
        raise click.ClickException(
            f"cannot read Redis at CLARION_REDIS_URL: {type(error).__name__}: {error}"
        ) from None
