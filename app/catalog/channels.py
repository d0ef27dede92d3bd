"""A catalog's channels (``[channels.<CHANNEL>]``): the providers each sends through, in
failover order, its retries, and for PUSH each platform's providers; the checks that every
provider named exists and can send the channel (and the platform), and the order each push
platform's targets go through."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import msgspec

from app.catalog.kinds import KIND_CHANNELS, KIND_PLATFORM, ProviderConfig
from app.catalog.push import Platform
from streams.core.vocabulary import CHANNELS, Channel

# A provider's or a notification type's name in the catalog.
Name = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_]{0,63}$")]


class RetryPolicy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    base_seconds: Annotated[float, msgspec.Meta(gt=0)] = 2.0
    max_seconds: Annotated[float, msgspec.Meta(gt=0)] = 300.0
    max_attempts: Annotated[int, msgspec.Meta(ge=1, le=100)] = 6


class ChannelConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[channels.<CHANNEL>]``: its provider, or providers in failover order, and retries."""

    provider: Name | None = None
    # Failover order: an attempt goes to the first provider whose circuit is not open, and
    # the next attempt to the next provider after one that certainly did not take the message.
    providers: list[Name] = []
    retry: RetryPolicy = RetryPolicy()
    # SMS: a body longer than this many segments fails (PERMANENT, reason template).
    max_segments: Annotated[int, msgspec.Meta(ge=1, le=20)] = 10
    # PUSH: each platform's providers in failover order; a platform not named here goes to
    # the channel's provider(s), those of them that can send to it.
    platforms: dict[Platform, list[Name]] = {}
    # PUSH: the platform of a plain ``push_tokens`` string.
    default_platform: Platform = Platform.FCM

    @property
    def provider_order(self) -> tuple[str, ...]:
        """The channel's providers, first choice first."""
        return (self.provider,) if self.provider else tuple(self.providers)


def check_channels(
    providers: dict[str, ProviderConfig],
    channels: dict[Channel, ChannelConfig],
    fail: Callable[[str, str], Exception],
) -> None:
    """Each channel names providers that exist and can send it (PUSH: each platform's
    providers can send to that platform)."""
    for channel, config in channels.items():
        if config.provider and config.providers:
            raise fail(f"channels.{channel}", "give provider or providers, not both")
        key = f"channels.{channel}.provider" if config.provider else f"channels.{channel}.providers"
        if config.platforms and channel != Channel.PUSH:
            raise fail(f"channels.{channel}.platforms", "only the PUSH channel has platforms")
        if not config.provider_order and not config.platforms:
            raise fail(key, "missing: name the channel's provider")
        _check_order(key, config.provider_order, channel, providers, fail)
        for platform, order in config.platforms.items():
            path = f"channels.{channel}.platforms.{platform}"
            if not order:
                raise fail(path, "missing: name the platform's provider")
            _check_order(path, tuple(order), channel, providers, fail)
            for name in order:
                kind = providers[name].kind
                if KIND_PLATFORM.get(kind, platform) != platform:
                    raise fail(path, f"provider {name!r} is of kind {kind}, not {platform}")


def _check_order(
    key: str,
    order: tuple[str, ...],
    channel: Channel,
    providers: dict[str, ProviderConfig],
    fail: Callable[[str, str], Exception],
) -> None:
    if len(set(order)) < len(order):
        raise fail(key, "a provider is named twice")
    for name in order:
        if name not in providers:
            raise fail(key, f"no provider named {name!r}")
        kind = providers[name].kind
        if channel not in KIND_CHANNELS.get(kind, CHANNELS):
            raise fail(key, f"provider {name!r} is of kind {kind}, which cannot send {channel}")


def push_orders(
    providers: dict[str, ProviderConfig], push: ChannelConfig | None
) -> dict[Platform, tuple[str, ...]]:
    """Each platform's providers: its own list, else those of the channel's that can send
    to it (a sandbox stands in for any platform)."""
    if push is None:
        return {}
    orders: dict[Platform, tuple[str, ...]] = {}
    for platform in Platform:
        own = push.platforms.get(platform)
        orders[platform] = (
            tuple(own)
            if own
            else tuple(
                name
                for name in push.provider_order
                if KIND_PLATFORM.get(providers[name].kind, platform) == platform
            )
        )
    return orders
