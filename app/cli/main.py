"""The ``clarion`` command: run the service, send a notification, cancel one."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any
from urllib.parse import quote

import click
import httpx
import structlog

from app.catalog import CatalogError, check_for_workers, load_catalog
from app.cli.campaign import campaign
from app.cli.dlq import dlq
from app.cli.projection import projection
from app.cli.recipient import recipient
from app.cli.status import status
from app.logging import configure_logging
from app.processes import projector as projector_process
from app.processes import status_webhooks as status_webhooks_process
from app.processes import worker as worker_process
from app.processes.clients import redis_client
from app.processes.redis_checks import RedisNotReady, check_redis
from app.processes.supervisor import Child, supervise
from app.setting_values import SettingsError
from app.settings import Settings
from projections.database import DatabaseNotReady
from streams.core.vocabulary import Priority

log = structlog.get_logger(__name__)

# After SIGTERM, how long the API lets requests in flight finish before it cancels them (the
# inbox streams it ends at once: ``app.processes.api``). Without a limit, one request stuck
# on a dependency would keep a stopping process running for ever.
SHUTDOWN_GRACE_S = 5


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except SettingsError as error:
        raise click.ClickException(str(error)) from None


def _service_settings() -> Settings:
    """The settings of a service process (API, worker): with everything those need."""
    settings = _settings()
    try:
        settings.address_digest()
    except SettingsError as error:
        raise click.ClickException(str(error)) from None
    return settings


async def _preflight(settings: Settings) -> None:
    redis = redis_client(settings)
    try:
        await check_redis(redis, settings.redis_url)
    finally:
        await redis.aclose()


@click.group()
def main() -> None:
    """Clarion: multi-channel notifications on Redis Streams."""


@main.command()
@click.option("--workers", default=2, show_default=True, help="uvicorn worker processes")
@click.option("--delivery-workers", default=1, show_default=True, help="delivery worker processes")
def run(workers: int, delivery_workers: int) -> None:
    """Run the service: the HTTP API, the delivery workers, the projector and the
    status-webhooks process."""
    settings = _service_settings()
    configure_logging(settings.log_format, settings.log_level)
    try:
        catalog = load_catalog(settings.config_path)
        check_for_workers(catalog, os.environ, settings.lease_ms)
        asyncio.run(_preflight(settings))
    except (CatalogError, RedisNotReady) as error:
        raise click.ClickException(str(error)) from None
    if not settings.api_keys:
        log.warning("auth.no_api_keys", hint="set CLARION_API_KEYS=producer:secret:send+read")
    log.info(
        "clarion.start",
        listen=f"{settings.host}:{settings.port}",
        workers=workers,
        types=sorted(catalog.types),
        shards=settings.shards,
    )
    api = Child("api", ("api", "--workers", str(workers)))
    delivery = [Child(f"worker-{n}", ("worker", "--slot", str(n))) for n in range(delivery_workers)]
    projector = Child("projector", ("projector",))
    status_webhooks = Child("status-webhooks", ("status-webhooks",))
    sys.exit(supervise([api, *delivery, projector, status_webhooks]))


@main.command()
@click.option("--workers", default=2, show_default=True, help="uvicorn worker processes")
def api(workers: int) -> None:
    """Run the HTTP API only."""
    settings = _service_settings()
    configure_logging(settings.log_format, settings.log_level)
    import uvicorn  # noqa: PLC0415 - only the server needs it

    uvicorn.run(
        "app.processes.api:build",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=workers,
        loop="uvloop",
        # httptools, with the request head bounded in size and time (``http_edge``).
        http="app.processes.http_edge:EdgeProtocol",
        limit_concurrency=settings.max_connections,
        timeout_keep_alive=settings.keep_alive_seconds,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )


@main.command()
@click.option("--processes", default=1, show_default=True, help="worker processes")
@click.option("--slot", default=None, type=int, help="run one worker with this consumer slot")
def worker(processes: int, slot: int | None) -> None:
    """Run delivery workers only (consumer group "delivery" on every work stream)."""
    settings = _service_settings()
    configure_logging(settings.log_format, settings.log_level)
    try:
        check_for_workers(load_catalog(settings.config_path), os.environ, settings.lease_ms)
    except CatalogError as error:
        raise click.ClickException(str(error)) from None
    if slot is not None or processes == 1:
        try:
            worker_process.main(slot or 0)
        except RedisNotReady as error:
            raise click.ClickException(str(error)) from None
        return
    children = [Child(f"worker-{n}", ("worker", "--slot", str(n))) for n in range(processes)]
    sys.exit(supervise(children))


@main.command()
def projector() -> None:
    """Run the projector only: every shard's events into PostgreSQL."""
    try:
        projector_process.main()
    except (RedisNotReady, DatabaseNotReady) as error:
        raise click.ClickException(str(error)) from None


@main.command("status-webhooks")
def status_webhooks() -> None:
    """Run the status-webhooks process only: final statuses POSTed to producers' URLs
    (consumer group "status-webhooks" on every events stream; one process is active at a
    time, others wait to take over)."""
    try:
        status_webhooks_process.main()
    except RedisNotReady as error:
        raise click.ClickException(str(error)) from None
    except CatalogError as error:
        raise click.ClickException(str(error)) from None


@main.command()
@click.option("--type", "type_name", required=True, help="notification type from the catalog")
@click.option("--recipient", required=True, help="recipient id")
@click.option("--email", default=None)
@click.option("--phone", default=None, help="E.164, e.g. +4915112345678")
@click.option("--push-token", "push_tokens", multiple=True)
@click.option("--channel", "channels", multiple=True, help="override the type's channels")
@click.option("--priority", type=click.Choice([p.value for p in Priority]), default=None)
@click.option("--data", "data_pairs", multiple=True, help="template variable, name=value")
@click.option("--locale", default=None)
@click.option("--send-at", default=None, help="when to send: RFC 3339 with an offset")
@click.option("--delay", default=None, help="send later: seconds, or ISO 8601 such as PT15M")
@click.option("--cancellation-key", default=None, help="a key to cancel it by, e.g. order-123")
@click.option("--key", "idempotency_key", default=None, help="Idempotency-Key (default: random)")
@click.option("--url", default=None, help="API base URL (default from CLARION_HOST/PORT)")
@click.option("--api-key", envvar="CLARION_API_KEY", required=True, help="or CLARION_API_KEY")
def send(
    type_name: str,
    recipient: str,
    email: str | None,
    phone: str | None,
    push_tokens: tuple[str, ...],
    channels: tuple[str, ...],
    priority: str | None,
    data_pairs: tuple[str, ...],
    locale: str | None,
    send_at: str | None,
    delay: str | None,
    cancellation_key: str | None,
    idempotency_key: str | None,
    url: str | None,
    api_key: str,
) -> None:
    """Send one notification through the HTTP API and print the answer. The API checks
    every value (--send-at, --delay and the rest): what it refuses is printed as it
    answered."""
    data: dict[str, str] = {}
    for pair in data_pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"{pair!r} is not name=value", param_hint="--data")
        data[name] = value
    body: dict[str, Any] = {
        "recipient": {"id": recipient},
        "type": type_name,
        "data": data,
    }
    optional: dict[str, Any] = {"email": email, "phone": phone, "push_tokens": list(push_tokens)}
    body["recipient"].update({name: value for name, value in optional.items() if value})
    optional = {
        "channels": list(channels),
        "priority": priority,
        "locale": locale,
        "send_at": send_at,
        # Whole seconds go as a number, anything else as the duration text it is.
        "delay": int(delay) if delay is not None and delay.isdigit() else delay,
        "cancellation_key": cancellation_key,
    }
    body.update({name: value for name, value in optional.items() if value})
    key = idempotency_key or os.urandom(12).hex()
    _post(url, "/v1/notifications", body, api_key, key)


@main.command()
@click.argument("notification_id", required=False)
@click.option(
    "--key", "cancellation_key", default=None, help="the cancellation_key it was sent with"
)
@click.option("--url", default=None, help="API base URL (default from CLARION_HOST/PORT)")
@click.option("--api-key", envvar="CLARION_API_KEY", required=True, help="or CLARION_API_KEY")
def cancel(
    notification_id: str | None, cancellation_key: str | None, url: str | None, api_key: str
) -> None:
    """Cancel what has not gone out yet: one notification by its id, or every one sent with
    a cancellation key (--key); print what was cancelled and what had already gone."""
    if (notification_id is None) == (cancellation_key is None):
        raise click.UsageError("give a notification id or --key, not both")
    if notification_id is not None:
        _post(url, f"/v1/notifications/{quote(notification_id, safe='')}/cancel", None, api_key)
    else:
        _post(url, "/v1/cancellations", {"key": cancellation_key}, api_key)


def _post(
    url: str | None,
    path: str,
    body: dict[str, Any] | None,
    api_key: str,
    idempotency_key: str | None = None,
) -> None:
    """POST ``body`` to the API, print the status and the answer; exit 1 on a 4xx or 5xx."""
    settings = _settings()
    base = url or f"http://{settings.host}:{settings.port}"
    headers = {"Authorization": f"Bearer {api_key}"}
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    try:
        response = httpx.post(f"{base}{path}", json=body, headers=headers, timeout=10)
    except httpx.HTTPError as error:
        raise click.ClickException(f"cannot reach {base}: {error}") from None
    said = f"  Idempotency-Key: {idempotency_key}" if idempotency_key is not None else ""
    click.echo(f"HTTP {response.status_code}{said}")
    try:
        click.echo(json.dumps(response.json(), indent=2))
    except ValueError:
        click.echo(response.text)
    if response.status_code >= 400:
        sys.exit(1)


main.add_command(status)
main.add_command(campaign)
main.add_command(projection)
main.add_command(dlq)
main.add_command(recipient)
