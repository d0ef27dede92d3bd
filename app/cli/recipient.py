"""``clarion recipient revoke-tokens ID``: refuse every inbox token of a recipient made until
now, and end its open realtime streams (``streams.inbox.revocation``), as
``POST /v1/recipients/{id}/inbox-tokens/revoke`` does.

It writes Redis directly, so an operator can revoke a leaked token while the API is down or
without a producer's key.
"""

from __future__ import annotations

from datetime import UTC, datetime

import click

from app.cli.status import run_reading_redis
from app.processes.clients import redis_client
from app.setting_values import SettingsError
from app.settings import Settings
from streams.core.keys import KeySpace
from streams.inbox.revocation import InboxRevocations

_MAX_ID = 255


async def _revoke(settings: Settings, recipient_id: str) -> None:
    redis = redis_client(settings)
    try:
        revocations = InboxRevocations(redis, KeySpace(settings.key_prefix, settings.shards))
        epoch = await revocations.revoke(recipient_id)
    finally:
        await redis.aclose()
    before = datetime.fromtimestamp(epoch / 1000, UTC).isoformat(timespec="milliseconds")
    click.echo(f"revoked: every inbox token of {recipient_id!r} made before {before}")


@click.group()
def recipient() -> None:
    """Recipients: their inbox tokens."""


@recipient.command(name="revoke-tokens")
@click.argument("recipient_id")
def revoke_tokens(recipient_id: str) -> None:
    """Refuse every inbox token of RECIPIENT_ID made until now (its apps get 401 and their
    open streams end); tokens made afterwards work."""
    if not recipient_id or len(recipient_id) > _MAX_ID or not recipient_id.isprintable():
        raise click.BadParameter("1-255 printable characters", param_hint="RECIPIENT_ID")
    try:
        settings = Settings.from_env()
    except SettingsError as error:
        raise click.ClickException(str(error)) from None
    run_reading_redis(_revoke(settings, recipient_id))
