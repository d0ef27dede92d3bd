"""The providers of a catalog, each built by the adapter of its kind."""

from __future__ import annotations

import os
from collections.abc import Mapping

from redis.asyncio import Redis

from app.catalog import Catalog, check_for_workers
from app.catalog.providers import (
    InboxConfig,
    SandboxConfig,
    SendgridConfig,
    SmtpConfig,
    TwilioConfig,
    WebhookConfig,
)
from app.catalog.push import ApnsConfig, FcmConfig, WebPushConfig
from app.inbox.provider import InboxProvider
from app.providers.apns import ApnsProvider
from app.providers.base import Provider
from app.providers.fcm import FcmProvider
from app.providers.sandbox import REMEMBER_MS, SandboxProvider
from app.providers.sendgrid import SendgridProvider
from app.providers.smtp import SmtpProvider
from app.providers.twilio import TwilioProvider
from app.providers.webhook import WebhookProvider
from app.providers.webpush import WebPushProvider
from streams.core.keys import KeySpace

# Longer than any provider's time limit may be (``ProviderLimits.timeout_seconds``): only
# the worker's real lease makes a time limit too long, and it checks that at start-up.
_ANY_LEASE_MS = 3_600_001


def build_providers(
    catalog: Catalog,
    redis: Redis,
    keys: KeySpace,
    *,
    remember_ms: int = REMEMBER_MS,
    environ: Mapping[str, str] | None = None,
    public_url: str = "",
) -> dict[str, Provider]:
    """One adapter per provider of the catalog, with its secrets from ``environ`` (default:
    the process's environment; a missing one raises ``CatalogError`` naming it). A sandbox
    remembers a send for ``remember_ms`` (the stream retention: as long as its record keeps
    the send). With ``public_url`` (where providers reach Clarion), Twilio is asked to post
    status callbacks to ``<public_url>/v1/feedback/<name>``."""
    secrets = check_for_workers(catalog, os.environ if environ is None else environ, _ANY_LEASE_MS)
    providers: dict[str, Provider] = {}
    for name, config in catalog.providers.items():
        own = secrets[name]
        match config:
            case SandboxConfig():
                providers[name] = SandboxProvider(
                    redis, keys, idempotent=config.idempotent, name=name, remember_ms=remember_ms
                )
            case InboxConfig():
                providers[name] = InboxProvider(name, config)
            case SmtpConfig():
                providers[name] = SmtpProvider(name, config, own)
            case SendgridConfig():
                providers[name] = SendgridProvider(name, config, own)
            case TwilioConfig():
                callback = f"{public_url}/v1/feedback/{name}" if public_url else ""
                providers[name] = TwilioProvider(name, config, own, status_callback=callback)
            case WebhookConfig():
                providers[name] = WebhookProvider(name, config, own)
            case WebPushConfig():
                providers[name] = WebPushProvider(name, config, own)
            case FcmConfig():
                providers[name] = FcmProvider(name, config, own)
            case ApnsConfig():
                providers[name] = ApnsProvider(name, config, own)
    return providers


async def close_providers(providers: Mapping[str, Provider]) -> None:
    """Close every adapter's pooled connections."""
    for provider in providers.values():
        await provider.close()
