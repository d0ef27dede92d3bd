"""One-click unsubscribe over HTTP, on real Redis and on fakeredis: the page a link opens
changes nothing; its button and a mail client's one-click POST switch the pair off once (a
PreferenceChanged event, source ``unsubscribe_link``) and the next email of that type is
suppressed; every link that does not work gets a page saying why, never a 5xx; the token
never reaches a log line. Each pair switched off counts once in ``clarion_unsubscribes_total``
(source ``link``), read from a real ``/metrics``."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
import structlog
from litestar import Litestar
from redis.asyncio import Redis

from app.api.app import create_app
from app.catalog import Catalog, parse_catalog
from app.settings import Settings
from app.signed_tokens import MAX_TOKEN_CHARS
from app.unsubscribe import OptOut, UnsubscribeTokens
from streams.core.events import PreferenceChanged, PreferenceEntry
from streams.core.keys import KeySpace
from streams.core.vocabulary import Channel
from streams.recipients.settings import RecipientSettingsStore
from tests.conftest import DIGEST_SECRET, PROFILES, REPO, Clock, http_client, stream_events
from tests.integration.api_support import post, sample, scrape
from tests.servers import free_port

Client = httpx.AsyncClient
TOKENS = UnsubscribeTokens(DIGEST_SECRET)
ONE_CLICK = {
    "content": b"List-Unsubscribe=One-Click",
    "headers": {"Content-Type": "application/x-www-form-urlencoded"},
}
RECIPIENT = {"id": "user-9", "email": "eva@example.com", "push_tokens": ["tok-9"]}
ORDER = {"recipient": RECIPIENT, "type": "order_confirmed", "data": {"order_id": "A-1"}}


def link(clock: Clock, type_name: str = "order_confirmed", **changes: Any) -> str:
    """The path of a link to switch ``type_name`` off by email for user-9, valid for a day."""
    expires_at = int((clock.now + timedelta(days=1)).timestamp())
    opt_out = OptOut("user-9", type_name, Channel.EMAIL, expires_at)
    tokens = changes.pop("tokens", TOKENS)
    return f"/v1/unsubscribe/{tokens.make(dataclasses.replace(opt_out, **changes))}"


async def events(redis: Redis, key_prefix: str) -> list[Any]:
    return await stream_events(redis, KeySpace(key_prefix).shard(0).events)


async def settings_of(client: Client, recipient_id: str = "user-9") -> dict[str, Any]:
    response = await client.get(f"/v1/recipients/{recipient_id}/settings", headers=PROFILES)
    assert response.status_code == 200
    answer: dict[str, Any] = response.json()
    return answer


def statuses(response: Any) -> dict[str, str]:
    return {d["channel"]: (d["status"], d.get("reason")) for d in response.json()["deliveries"]}


def assert_safe_page(response: httpx.Response) -> None:
    """A page of ours: HTML, not cached, no referrer, no script or style from anywhere."""
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert "default-src 'none'" in response.headers["content-security-policy"]
    page = response.text
    assert "<script" not in page
    assert not re.search(r"(src|href)=", page)  # nothing loaded from anywhere


async def test_the_page_names_the_type_in_plain_words_and_changes_nothing(
    client: Client, clock: Clock, redis: Redis, key_prefix: str
) -> None:
    response = await client.get(link(clock))
    assert response.status_code == 200
    assert_safe_page(response)
    page = response.text
    assert "Unsubscribe from “Order confirmations”?" in page  # the catalog's label
    assert "no longer receive <strong>Order confirmations</strong> by email" in page
    # One form, posting back to the link itself, with one button.
    assert page.count("<form") == 1
    assert '<form method="post">' in page
    assert page.count("<button") == 1
    assert await events(redis, key_prefix) == []


async def test_a_one_click_post_switches_the_pair_off_and_keeps_the_others(
    client: Client, clock: Clock, redis: Redis, key_prefix: str
) -> None:
    push_off = {"preferences": [{"type": "marketing", "channel": "PUSH", "enabled": False}]}
    await client.put("/v1/recipients/user-9/preferences", json=push_off, headers=PROFILES)

    response = await client.post(link(clock), **ONE_CLICK)
    assert response.status_code == 200
    assert_safe_page(response)
    assert "You are unsubscribed" in response.text
    assert "<strong>Order confirmations</strong> by email" in response.text

    settings = await settings_of(client)
    assert settings["preferences"] == [
        {"type": "marketing", "channel": "PUSH", "enabled": False},
        {"type": "order_confirmed", "channel": "EMAIL", "enabled": False},
    ]
    changed = (await events(redis, key_prefix))[-1]
    assert isinstance(changed, PreferenceChanged)
    assert (changed.recipient_id, changed.source, changed.settings_version) == (
        "user-9", "unsubscribe_link", 2,
    )  # fmt: skip
    assert PreferenceEntry(type="order_confirmed", channel="EMAIL", enabled=False) in (
        changed.preferences or []
    )

    # The next order confirmation is not emailed; its other channels and OTPs still go out.
    answer = await post(client, ORDER, key="after")
    assert statuses(answer) == {
        "EMAIL": ("SUPPRESSED", "opted_out"), "PUSH": ("QUEUED", None),
        "IN_APP": ("QUEUED", None),
    }  # fmt: skip
    otp = {"recipient": RECIPIENT, "type": "otp", "channels": ["EMAIL"], "data": {"code": "7"}}
    assert statuses(await post(client, otp, key="otp")) == {"EMAIL": ("QUEUED", None)}


async def test_repeating_it_is_harmless_and_records_nothing_more(
    client: Client, clock: Clock, redis: Redis, key_prefix: str
) -> None:
    path = link(clock)
    first = await client.post(path, **ONE_CLICK)
    again = await client.post(path, **ONE_CLICK)  # the page's button sends the same
    assert (first.status_code, again.status_code) == (200, 200)
    assert "You are unsubscribed" in again.text
    assert len(await events(redis, key_prefix)) == 1
    assert (await settings_of(client))["version"] == 1


async def test_an_unsubscribe_is_counted_once_by_type_and_channel(
    make_app: Callable[..., Litestar], clock: Clock
) -> None:
    app = make_app()
    async with http_client(app) as client:
        path = link(clock)
        assert (await client.get(path)).status_code == 200  # the page alone counts nothing
        assert (await client.post(path, **ONE_CLICK)).status_code == 200
        assert (await client.post(path, **ONE_CLICK)).status_code == 200  # no change: not again
        marketing = link(clock, "marketing", channel=Channel.SMS)
        assert (await client.post(marketing, **ONE_CLICK)).status_code == 200
        await app.state.metrics.flush()
        samples = await scrape(client)
    unsubscribes = "clarion_unsubscribes_total"
    order = {"type": "order_confirmed", "channel": "EMAIL", "source": "link"}
    assert sample(samples, unsubscribes, **order) == 1
    assert sample(samples, unsubscribes, type="marketing", channel="SMS", source="link") == 1


async def test_head_answers_as_get_would_without_a_body(client: Client, clock: Clock) -> None:
    good = await client.head(link(clock))
    assert (good.status_code, good.content) == (200, b"")
    assert good.headers["content-type"].startswith("text/html")
    assert good.headers["cache-control"] == "no-store"
    bad = await client.head(link(clock)[:-4])
    assert (bad.status_code, bad.content) == (404, b"")


async def test_other_methods_are_refused_naming_the_allowed_ones(
    client: Client, clock: Clock, redis: Redis, key_prefix: str
) -> None:
    path = link(clock)
    for method in ("PUT", "DELETE", "PATCH"):
        response = await client.request(method, path, **ONE_CLICK)
        assert response.status_code == 405
        assert set(response.headers["allow"].split(", ")) == {"GET", "HEAD", "POST", "OPTIONS"}
    options = await client.options(path)
    assert options.status_code == 204
    assert set(options.headers["allow"].split(", ")) == {"GET", "HEAD", "POST", "OPTIONS"}
    assert await events(redis, key_prefix) == []


def changed(path: str, at: int) -> str:
    """``path`` with the token's character ``at`` replaced by another."""
    token = path.rpartition("/")[2]
    other = "B" if token[at] != "B" else "C"
    return f"/v1/unsubscribe/{token[:at]}{other}{token[at + 1 :]}"


async def test_a_link_that_does_not_work_gets_a_page_saying_why(
    client: Client, clock: Clock, redis: Redis, key_prefix: str
) -> None:
    path = link(clock)
    cases = {
        "cut short": (path[:-5], "It may have been cut short"),
        "changed": (changed(path, 20), "It may have been changed"),
        "another deployment's": (
            link(clock, tokens=UnsubscribeTokens(b"another-deployment-secret")),
            "It may have been changed",
        ),
        "garbage": ("/v1/unsubscribe/%3Cscript%3E", "It may have been cut short"),
        "huge": ("/v1/unsubscribe/" + "A" * (MAX_TOKEN_CHARS + 1), "cut short"),
        "expired": (
            link(clock, expires_at=int(clock.now.timestamp())),
            "This unsubscribe link has expired",
        ),
        "of an unknown type": (link(clock, "invoice"), "no longer sent"),
    }
    with structlog.testing.capture_logs() as logs:
        for name, (bad, says) in cases.items():
            for method in ("GET", "POST"):
                response = await client.request(method, bad, **ONE_CLICK)
                assert response.status_code == 404, (name, method)
                assert says in response.text, (name, method)
                assert_safe_page(response)
    assert await events(redis, key_prefix) == []
    assert (await settings_of(client))["preferences"] == []
    for bad, _ in cases.values():
        assert bad.rpartition("/")[2] not in str(logs)  # never a token in a log line
    assert {line["why"] for line in logs if line["event"] == "unsubscribe.refused"} == {
        "malformed", "forged", "expired", "unknown_type",
    }  # fmt: skip


async def test_a_type_that_can_no_longer_be_switched_off_is_refused(
    client: Client, clock: Clock, redis: Redis, key_prefix: str
) -> None:
    """Security alerts cannot be switched off; a link to one (the catalog changed since the
    email went out) switches nothing off."""
    for method in ("GET", "POST"):
        response = await client.request(method, link(clock, "security_alert"), **ONE_CLICK)
        assert response.status_code == 400
        assert "cannot be switched off" in response.text
    assert await events(redis, key_prefix) == []


MULTIPART = "multipart/form-data; boundary=b0undary"


def multipart(name: bytes, value: bytes) -> bytes:
    return (
        b'--b0undary\r\nContent-Disposition: form-data; name="' + name + b'"\r\n'
        b"Content-Type: text/plain; charset=utf-8\r\n\r\n" + value + b"\r\n--b0undary--\r\n"
    )


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"", None),
        (b"", "application/x-www-form-urlencoded"),
        (b"foo=bar", "application/x-www-form-urlencoded"),
        (b"List-Unsubscribe=One-Click", "text/plain"),
        (b"List-Unsubscribe=One-Click", None),
        (b"List-Unsubscribe=one-click", "application/x-www-form-urlencoded"),
        (b"List-Unsubscribe=One-Click&List-Unsubscribe=No", "application/x-www-form-urlencoded"),
        (b"List-Unsubscribe", "application/x-www-form-urlencoded"),
        (b"List-Unsubscribe=One-Click\xff", "application/x-www-form-urlencoded"),
        (b'{"List-Unsubscribe": "One-Click"}', "application/json"),
        (b"garbage", MULTIPART),
        (b"--b0undary\r\n\r\n", MULTIPART),
        (multipart(b"foo", b"bar"), MULTIPART),
        (multipart(b"List-Unsubscribe", b"One-Click\xe9"), MULTIPART),
        (b"List-Unsubscribe=One-Click", "multipart/form-data"),  # no boundary
    ],
)
async def test_a_post_without_the_one_click_form_changes_nothing(
    client: Client,
    clock: Clock,
    redis: Redis,
    key_prefix: str,
    body: bytes,
    content_type: str | None,
) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    response = await client.post(link(clock), content=body, headers=headers)
    assert response.status_code == 400
    assert_safe_page(response)
    assert "Nothing was changed" in response.text or "multipart" in response.text
    assert await events(redis, key_prefix) == []
    assert (await settings_of(client))["version"] == 0


async def test_a_multipart_one_click_post_unsubscribes(
    client: Client, clock: Clock, redis: Redis, key_prefix: str
) -> None:
    body = multipart(b"List-Unsubscribe", b"One-Click")
    response = await client.post(link(clock), content=body, headers={"Content-Type": MULTIPART})
    assert response.status_code == 200
    assert "You are unsubscribed" in response.text
    assert len(await events(redis, key_prefix)) == 1


async def test_a_body_larger_than_a_one_click_post_is_refused(
    client: Client, clock: Clock, redis: Redis, key_prefix: str
) -> None:
    response = await client.post(link(clock), content=b"List-Unsubscribe=One-Click" + b"&" * 2000)
    assert response.status_code == 413
    assert "at most 1024 bytes" in response.text
    assert await events(redis, key_prefix) == []


async def test_without_redis_the_page_says_to_try_again_and_logs_no_token(
    settings: Settings, catalog: Catalog, clock: Clock
) -> None:
    unreachable = Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=1)
    app = create_app(settings, redis=unreachable, catalog=catalog, clock=clock)
    path = link(clock)
    with structlog.testing.capture_logs() as logs:
        async with http_client(app) as client:
            page = await client.get(path)
            assert page.status_code == 200  # the page needs nothing but the token
            response = await client.post(path, **ONE_CLICK)
    await unreachable.aclose()
    assert response.status_code == 503
    assert response.headers["retry-after"] == "60"
    assert "Nothing was changed" in response.text
    assert path.rpartition("/")[2] not in str(logs)


async def test_a_type_without_a_label_is_named_in_words(
    redis: Redis, settings: Settings, clock: Clock
) -> None:
    text = (REPO / "clarion.toml").read_text()
    assert 'label = "Order confirmations"' in text, "clarion.toml changed: update this test"
    catalog = parse_catalog(text.replace('label = "Order confirmations"', ""), "t.toml")
    app = create_app(settings, redis=redis, catalog=catalog, clock=clock)
    async with http_client(app) as client:
        page = (await client.get(link(clock))).text
    assert "Unsubscribe from “order confirmed”?" in page


@pytest.mark.parametrize("recipient_id", ["user/with/slashes", "ünïcødé-🙂-\u202e", "a" * 255])
async def test_any_recipient_id_round_trips(
    client: Client, clock: Clock, redis: Redis, key_prefix: str, recipient_id: str
) -> None:
    response = await client.post(link(clock, recipient_id=recipient_id), **ONE_CLICK)
    assert response.status_code == 200
    store = RecipientSettingsStore(redis, KeySpace(key_prefix))
    assert (await store.get(recipient_id)).disabled == {("order_confirmed", "EMAIL")}
