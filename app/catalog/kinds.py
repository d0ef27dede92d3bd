"""Every provider kind: the catalog entry it is configured by and the channels it can send."""

from __future__ import annotations

from typing import Final

from app.catalog.providers import (
    InboxConfig,
    SandboxConfig,
    SendgridConfig,
    SmtpConfig,
    TwilioConfig,
    WebhookConfig,
)
from app.catalog.push import ApnsConfig, FcmConfig, Platform, WebPushConfig
from streams.core.vocabulary import Channel

# ``[providers.<name>]``, chosen by its ``kind``.
ProviderConfig = (
    SandboxConfig
    | InboxConfig
    | SmtpConfig
    | SendgridConfig
    | TwilioConfig
    | WebhookConfig
    | FcmConfig
    | ApnsConfig
    | WebPushConfig
)

# The channels each provider kind can send; the sandbox stands in for any.
KIND_CHANNELS: Final[dict[str, frozenset[Channel]]] = {
    "inbox": frozenset({Channel.IN_APP}),
    "smtp": frozenset({Channel.EMAIL}),
    "sendgrid": frozenset({Channel.EMAIL}),
    "twilio": frozenset({Channel.SMS}),
    "webhook": frozenset({Channel.WEBHOOK}),
    "fcm": frozenset({Channel.PUSH}),
    "apns": frozenset({Channel.PUSH}),
    "webpush": frozenset({Channel.PUSH}),
}

# The push platform each push kind sends to (a kind's name is its platform's).
KIND_PLATFORM: Final[dict[str, Platform]] = {platform.value: platform for platform in Platform}
