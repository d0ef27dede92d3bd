"""A catalog's channels: providers that exist and can send the channel, each push
platform's providers, and the order a push target's deliveries go through."""

from __future__ import annotations

import re

import pytest

from app.catalog import Catalog, CatalogError, parse_catalog
from tests.unit.catalog.examples import PUSH_CATALOG, broken, catalog_error


def test_a_channel_with_an_undefined_provider_is_refused() -> None:
    text = broken('[channels.SMS]\nprovider = "sandbox"', '[channels.SMS]\nprovider = "twilio"')
    message = catalog_error(text)
    assert message.startswith("x.toml: ")
    assert "channels.SMS.provider" in message
    assert "twilio" in message


def push_catalog(channel: str) -> Catalog:
    return parse_catalog(PUSH_CATALOG.format(channel=channel), source="x.toml")


def test_each_push_platform_has_its_providers() -> None:
    catalog = push_catalog('provider = "sandbox"\nplatforms = { apns = ["apns", "apns_backup"] }')
    assert catalog.push_orders == {
        "fcm": ("sandbox",),
        "apns": ("apns", "apns_backup"),
        "webpush": ("sandbox",),
    }
    assert catalog.provider_order("PUSH", "apns " + "a1" * 32) == ("apns", "apns_backup")
    assert catalog.provider_order("PUSH", "plain-token") == ("sandbox",)


def test_a_channel_provider_takes_only_its_own_platform() -> None:
    catalog = push_catalog('providers = ["fcm", "sandbox"]\ndefault_platform = "apns"')
    assert catalog.push_orders == {
        "fcm": ("fcm", "sandbox"),
        "apns": ("sandbox",),
        "webpush": ("sandbox",),
    }
    # A plain token is of the default platform.
    assert catalog.provider_order("PUSH", "plain-token") == ("sandbox",)


def test_a_platform_nobody_sends_to_has_no_providers() -> None:
    catalog = push_catalog('platforms = { fcm = ["fcm"] }')
    assert catalog.push_orders == {"fcm": ("fcm",), "apns": (), "webpush": ()}


@pytest.mark.parametrize(
    ("channel", "problem"),
    [
        (
            'platforms = { fcm = ["apns"] }',
            "channels.PUSH.platforms.fcm: provider 'apns' is of kind apns, not fcm",
        ),
        ("platforms = { fcm = [] }", "channels.PUSH.platforms.fcm: missing"),
        ('platforms = { apns = ["nope"] }', "no provider named 'nope'"),
        ('platforms = { apns = ["apns", "apns"] }', "a provider is named twice"),
        ('platforms = { android = ["fcm"] }', "channels.PUSH"),
        ("", "channels.PUSH.providers: missing"),
    ],
)
def test_broken_push_platforms_name_the_key(channel: str, problem: str) -> None:
    with pytest.raises(CatalogError, match=re.escape(problem)):
        push_catalog(channel)


def test_only_push_has_platforms() -> None:
    text = broken(
        '[channels.SMS]\nprovider = "sandbox"',
        '[channels.SMS]\nprovider = "sandbox"\nplatforms = { fcm = ["sandbox"] }',
    )
    assert "channels.SMS.platforms: only the PUSH channel has platforms" in catalog_error(text)


def test_push_kinds_send_push_only() -> None:
    text = (
        PUSH_CATALOG.format(channel='provider = "sandbox"') + '\n[channels.SMS]\nprovider = "fcm"\n'
    )
    message = catalog_error(text)
    assert "channels.SMS.provider: provider 'fcm' is of kind fcm, which cannot send SMS" in message
