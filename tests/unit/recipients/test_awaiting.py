"""A delivery that waited for an address: the address a profile gives it, and what becomes of
it by fan-out's rules applied to the settings as they are when it comes due."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.recipients.awaiting import address_for, with_address, without_address
from streams.core.events import QuietHoursSetting
from streams.core.vocabulary import Channel, Priority
from streams.delivery.decisions import Deferred, Expired, Suppressed
from streams.delivery.work_items import WorkItem
from streams.recipients.read import RecipientSettings
from streams.recipients.settings import AddressDigest
from streams.recipients.suppressions import Suppression

DIGEST = AddressDigest(b"k" * 32)
# 2026-01-15 12:00 UTC: 13:00 in Berlin.
NOON_MS = int(datetime(2026, 1, 15, 12, 0, tzinfo=UTC).timestamp() * 1000)
PROFILE = (
    b'{"email":"anna@example.com","phone":"+4915112345678",'
    b'"push_tokens":["tok-1","tok-2"],"webhook_url":"https://hooks.example.com/a"}'
)


def item(**changes: object) -> WorkItem:
    fields: dict[str, object] = {
        "delivery_id": "d-1", "notification_id": "n-1", "notification_type": "order_confirmed",
        "channel": Channel.EMAIL, "priority": Priority.NORMAL, "recipient_id": "user-42",
        "address": "anna@example.com", "locale": "en", "created_ms": NOON_MS - 5_000,
        "expires_ms": NOON_MS + 7_200_000,
    }  # fmt: skip
    return WorkItem(**(fields | changes))  # type: ignore[arg-type]


def decide(work: WorkItem, settings: RecipientSettings, **changes: object) -> object:
    options: dict[str, object] = {"opt_out": True, "listed": None, "routable": True}
    return with_address(work, settings, DIGEST, now_ms=NOON_MS, **(options | changes))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("channel", "address"),
    [
        (Channel.EMAIL, "anna@example.com"),
        (Channel.SMS, "+4915112345678"),
        (Channel.WEBHOOK, "https://hooks.example.com/a"),
        (Channel.PUSH, "tok-1"),  # the first device: one delivery, one address
    ],
)
def test_a_profile_gives_each_channel_its_address(channel: Channel, address: str) -> None:
    assert address_for(PROFILE, channel) == address


def test_no_profile_or_a_profile_without_the_channels_address_gives_none() -> None:
    assert address_for(b"", Channel.EMAIL) == ""
    assert address_for(b'{"phone":"+4915112345678"}', Channel.EMAIL) == ""
    assert address_for(b'{"email":"anna@example.com"}', Channel.PUSH) == ""


def test_without_an_address_it_waits_with_backoff_until_its_bound_then_is_suppressed() -> None:
    waiting = item(address="", await_until_ms=NOON_MS + 30_000)
    # It waits on as ingest recorded it: no event for a look that found nothing.
    first = Deferred(NOON_MS + 5_000, "awaiting_address", event=False)
    assert without_address(waiting, NOON_MS) == first
    near = NOON_MS + 28_000
    last = Deferred(NOON_MS + 30_000, "awaiting_address", event=False)
    assert without_address(waiting, near) == last
    assert without_address(waiting, NOON_MS + 30_000) == Suppressed("no_address")


def test_with_an_address_and_nothing_against_it_it_is_sent_now() -> None:
    assert decide(item(), RecipientSettings()) is None


def test_an_opt_out_made_while_it_waited_suppresses_it_if_the_type_allows() -> None:
    settings = RecipientSettings(disabled=frozenset({("order_confirmed", "EMAIL")}))
    assert decide(item(), settings) == Suppressed("opted_out")
    assert decide(item(), settings, opt_out=False) is None


def test_a_dead_or_suppressed_or_unroutable_address_is_never_used() -> None:
    dead = RecipientSettings(invalid=frozenset({("EMAIL", DIGEST("anna@example.com"))}))
    assert decide(item(), dead) == Suppressed("invalid_address")
    entry = Suppression(Channel.EMAIL, DIGEST("anna@example.com"), "hard_bounce", "api", 0)
    assert decide(item(), RecipientSettings(), listed=entry) == Suppressed("hard_bounce")
    lapsed = Suppression(Channel.EMAIL, "x", "hard_bounce", "api", 0, until_ms=NOON_MS - 1)
    assert decide(item(), RecipientSettings(), listed=lapsed) is None
    assert decide(item(), RecipientSettings(), routable=False) == Suppressed("no_provider")


def test_quiet_hours_defer_it_or_expire_it_but_not_high_or_in_app() -> None:
    quiet = RecipientSettings(
        quiet_hours=QuietHoursSetting(start="12:00", end="14:00", timezone="Europe/Berlin")
    )
    ends = int(datetime(2026, 1, 15, 13, 0, tzinfo=UTC).timestamp() * 1000)
    assert decide(item(), quiet) == Deferred(ends, "quiet_hours")
    assert decide(item(expires_ms=ends), quiet) == Expired("quiet_hours_past_ttl")
    assert decide(item(priority=Priority.HIGH), quiet) is None
    assert decide(item(channel=Channel.WEBHOOK, address="https://h.example.com"), quiet) is None
