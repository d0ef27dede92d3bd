"""``[status_webhooks]`` in the catalog: defaults that need no section at all, and errors that
name the key."""

from __future__ import annotations

import ipaddress

import pytest

from app.catalog import CatalogError, parse_catalog


def test_no_section_gives_https_to_public_hosts_only() -> None:
    config = parse_catalog("").status_webhooks
    assert (config.allow_http_hosts, config.allow_networks) == ([], [])
    assert (config.timeout_seconds, config.lanes, config.window) == (5.0, 16, 1000)
    assert (config.retry.base_seconds, config.retry.max_seconds) == (1.0, 300.0)
    assert config.retry.give_up_seconds == 86400.0


def test_the_guard_carries_the_lists_and_one_connection_per_lane() -> None:
    config = parse_catalog(
        '[status_webhooks]\nallow_http_hosts = ["hooks.internal"]\n'
        'allow_networks = ["10.20.0.0/16"]\nlanes = 4\ntimeout_seconds = 2\n'
    ).status_webhooks
    guard = config.guard()
    assert guard.allow_http_hosts == ["hooks.internal"]
    assert guard.networks == (ipaddress.ip_network("10.20.0.0/16"),)
    assert (guard.max_in_flight, guard.timeout_seconds) == (4, 2.0)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ('allow_networks = ["ten"]', "status_webhooks: allow_networks: 'ten' is not a network"),
        ('allow_http_hosts = ["a b"]', "status_webhooks.allow_http_hosts[0]: Expected `str`"),
        ("lanes = 0", "status_webhooks.lanes: Expected `int` >= 1"),
        ("lanes = 8\nwindow = 4", "status_webhooks: window (4) must be at least lanes (8)"),
        ("timeout_seconds = 0", "status_webhooks.timeout_seconds: Expected `float` > 0.0"),
        ("retry = { give_up_seconds = 0 }", "status_webhooks.retry.give_up_seconds: Expected"),
        ("retry = { tries = 3 }", "status_webhooks.retry: Object contains unknown field `tries`"),
        ("url = 'https://x'", "status_webhooks: Object contains unknown field `url`"),
    ],
)
def test_a_wrong_key_is_named(section: str, message: str) -> None:
    with pytest.raises(CatalogError) as error:
        parse_catalog(f"[status_webhooks]\n{section}\n", "clarion.toml")
    assert str(error.value).startswith(f"clarion.toml: {message}"), str(error.value)
