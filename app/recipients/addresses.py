"""Addresses as people hand them to the suppression list, and as the list shows them.

An address given to the admin API is checked with the same shapes a notification's
recipient has (``app.ingest.requests``) and turned into the delivery address Clarion uses
(a push target becomes ``fcm <token>``, ``apns <token>`` or ``webpush <endpoint> <keys>``;
a plain token stays itself, as a ``push_tokens`` entry does), so its digest is the one
fan-out computes for the same address. The list shows each address masked, enough for a
person to recognise it and not enough to recover it.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from app.catalog.push import Platform, parse_address
from app.ingest import requests
from app.ingest.requests import PushTarget, target_address
from streams.core.errors import Invalid
from streams.core.vocabulary import Channel


class AddressError(Invalid, ValueError):
    """The address is not one of its channel; the message names the field."""


# The shapes a notification's recipient has (their patterns are tested with the request's).
class _Email(msgspec.Struct):
    address: requests.Email


class _Phone(msgspec.Struct):
    address: requests.Phone


class _Token(msgspec.Struct):
    address: requests.PushToken


class _Url(msgspec.Struct):
    address: requests.WebhookUrl


_SHAPES: dict[str, type[msgspec.Struct]] = {
    Channel.EMAIL: _Email,
    Channel.SMS: _Phone,
    Channel.PUSH: _Token,
    Channel.WEBHOOK: _Url,
}
SUPPRESSIBLE: tuple[str, ...] = tuple(_SHAPES)

Address = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]


def delivery_address(channel: Channel, address: str | None, push_target: PushTarget | None) -> str:
    """The delivery address of what an admin gave: ``address`` (an email address, a phone
    number, a plain push token, a webhook URL) or, for PUSH, a typed ``push_target``."""
    shape = _SHAPES.get(channel)
    if shape is None:
        raise AddressError(f"channel: {channel} has no addresses to suppress")
    if push_target is not None:
        if channel != Channel.PUSH:
            raise AddressError("push_target: only for the PUSH channel")
        if address is not None:
            raise AddressError("address: give either address or push_target, not both")
        return target_address(push_target)
    if address is None:
        raise AddressError("address: required (or push_target for PUSH)")
    try:
        msgspec.convert({"address": address}, shape)
    except msgspec.ValidationError:
        raise AddressError(f"address: not a valid {channel} address") from None
    return address


def masked(channel: Channel, address: str) -> str:
    """How the suppression list shows an address: its shape, never all of it."""
    if channel == Channel.EMAIL:
        local, _, domain = address.rpartition("@")
        return f"{local[:1]}***@{domain}"
    if channel == Channel.SMS:
        return f"{address[:3]}***{address[-2:]}"
    if channel == Channel.PUSH:
        target = parse_address(address)
        if target.platform is Platform.WEBPUSH:
            host = target.token.split("/", 3)[2] if target.token.count("/") >= 2 else "?"
            return f"webpush {host}/***"
        prefix = f"{target.platform} " if target.platform else ""
        return f"{prefix}{target.token[:6]}***"
    scheme, _, rest = address.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}/***"
