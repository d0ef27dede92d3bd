"""One attempt at a delivery with a real worker and real Redis: retries with jitter, permanent
failures, time limits, the TTL, bugs in an adapter, dead addresses, templates (escaped
HTML, a template failure of one delivery), and one-click unsubscribe header fields through
the SMTP and SendGrid adapters to their peers."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

from app import __version__
from app.catalog import Catalog, parse_catalog
from app.providers.base import Message, Provider
from app.providers.registry import build_providers
from app.unsubscribe import PATH, UnsubscribeLinks, UnsubscribeTokens
from streams.core import codec
from streams.core.keys import KeySpace
from streams.core.vocabulary import Channel
from tests.conftest import DIGEST_SECRET, stream_events
from tests.integration import delivery_support
from tests.integration.delivery_support import (
    FAST,
    accept,
    catalog_text,
    dead_letters,
    fast_catalog,
    final_state,
    otp,
    running_worker,
    sandbox_calls,
)
from tests.peers.list_unsubscribe import LINK, POST
from tests.peers.sendgrid import PEER_KEY, SendgridPeer
from tests.peers.serving import serve
from tests.peers.smtp import SmtpPeer


async def test_transient_twice_then_sent_with_jittered_delays(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog(base=0.2, max_delay=2.0, attempts=6)
    answer = await accept(real_redis, keys, catalog, otp(directives={"fail_transient": 2}), "k")
    delivery_id = answer["deliveries"][0]["id"]
    async with running_worker(real_redis, keys, catalog):
        done = await final_state(real_redis, keys, delivery_id)
    assert done["status"] == "SENT"
    assert done["attempts"] == "3"
    calls = await sandbox_calls(real_redis, keys)
    assert [c["outcome"] for c in calls] == ["transient", "transient", "sent"]
    assert [c["attempt"] for c in calls] == ["1", "2", "3"]
    # Full jitter: the n-th wait lies in [0, base * 2^(n-1)] (+ scheduling slack).
    gaps = [(b["at_ms"] - a["at_ms"]) / 1000 for a, b in itertools.pairwise(calls)]
    assert gaps[0] <= 0.2 + 0.25
    assert gaps[1] <= 0.4 + 0.25
    events = await stream_events(real_redis, keys.shard(0).events)
    failures = [e for e in events if type(e).__name__ == "DeliveryAttemptFailed"]
    assert [f.attempt for f in failures] == [1, 2]  # type: ignore[attr-defined]
    assert {f.error_class for f in failures} == {"TRANSIENT"}  # type: ignore[attr-defined]


async def test_a_permanent_failure_fails_at_once_into_the_dlq(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    # Provider texts may quote the address: it is masked before it is stored anywhere.
    body = otp(directives={"fail_permanent": "number +4915112345678 does not exist"})
    delivery_id = (await accept(real_redis, keys, catalog, body, "k"))["deliveries"][0]["id"]
    async with running_worker(real_redis, keys, catalog):
        done = await final_state(real_redis, keys, delivery_id)
        await asyncio.sleep(0.3)  # no retry may follow
    assert done["status"] == "FAILED"
    assert done["error_class"] == "PERMANENT"
    assert len(await sandbox_calls(real_redis, keys)) == 1
    [letter] = await dead_letters(real_redis, keys)
    assert letter["delivery_id"] == delivery_id
    assert letter["error_class"] == "PERMANENT"
    assert letter["last_error"] == done["last_error"] == "number <phone> does not exist"
    assert letter["attempts"] == "1"
    assert letter["type"] == "otp"
    assert letter["channel"] == "SMS"
    assert letter["worker"] == "test-0"
    assert letter["worker_version"] == __version__
    assert int(letter["first_attempt_ms"]) <= int(letter["last_attempt_ms"])
    assert codec.decode_work_item(letter["work"]).delivery_id == delivery_id
    names = [type(e).__name__ for e in await stream_events(real_redis, keys.shard(0).events)]
    assert names[-2:] == ["DeliveryFailed", "DeliveryDeadLettered"]


async def test_a_provider_that_does_not_answer_in_time_is_a_transient_failure(
    real_redis: Redis, key_prefix: str
) -> None:
    text = catalog_text(base=0.02, max_delay=0.05, attempts=2)
    assert "timeout_seconds = 10" in text, "clarion.toml changed: update this test"
    catalog = parse_catalog(text.replace("timeout_seconds = 10", "timeout_seconds = 0.2"), "t")
    keys = KeySpace(key_prefix)
    body = otp(directives={"latency_ms": 3000})
    delivery_id = (await accept(real_redis, keys, catalog, body, "k"))["deliveries"][0]["id"]
    started = time.monotonic()
    async with running_worker(real_redis, keys, catalog):
        done = await final_state(real_redis, keys, delivery_id)
    # Two attempts of 0.2 s each (give or take the watchdog's tick), not two of 3 s.
    assert time.monotonic() - started < 2.5
    assert done["status"] == "FAILED"
    assert done["attempts"] == "2"
    assert done["error_class"] == "TRANSIENT"
    assert done["last_error"] == "sandbox: no answer within 0.2 s"


async def test_exhausted_retries_fail(real_redis: Redis, key_prefix: str) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog(base=0.02, max_delay=0.05, attempts=3)
    body = otp(directives={"fail_transient": 99})
    delivery_id = (await accept(real_redis, keys, catalog, body, "k"))["deliveries"][0]["id"]
    async with running_worker(real_redis, keys, catalog):
        done = await final_state(real_redis, keys, delivery_id)
    assert done["status"] == "FAILED"
    assert done["attempts"] == "3"
    assert len(await sandbox_calls(real_redis, keys)) == 3
    assert (await dead_letters(real_redis, keys))[0]["error_class"] == "TRANSIENT"


async def test_a_ttl_shorter_than_the_backoff_expires_without_another_call(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog(base=4, max_delay=60, attempts=6)
    # TTL 2 s; retries wait up to 4, 8, 16 s (full jitter): one of them lands past the TTL.
    body = otp(directives={"fail_transient": 5}, ttl_seconds=2)
    answer = await accept(real_redis, keys, catalog, body, "k")
    delivery_id = answer["deliveries"][0]["id"]
    async with running_worker(real_redis, keys, catalog):
        done = await final_state(real_redis, keys, delivery_id, within=15)
        await asyncio.sleep(0.3)
    assert done["status"] == "EXPIRED"
    calls = await sandbox_calls(real_redis, keys)
    expires_ms = int(answer["id"][:8] + answer["id"][9:13], 16) + 2000
    assert calls  # it was tried
    assert all(call["at_ms"] < expires_ms for call in calls)  # and never after its TTL


async def test_a_bug_in_the_adapter_is_survived_and_dead_lettered(
    real_redis: Redis, key_prefix: str
) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    buggy = await accept(real_redis, keys, catalog, otp(directives={"raise_bug": True}), "bug")
    fine = await accept(real_redis, keys, catalog, otp("2"), "fine")
    async with running_worker(real_redis, keys, catalog):
        bug_state = await final_state(real_redis, keys, buggy["deliveries"][0]["id"])
        fine_state = await final_state(real_redis, keys, fine["deliveries"][0]["id"])
    assert bug_state["status"] == "FAILED"
    assert bug_state["error_class"] == "BUG"
    assert fine_state["status"] == "SENT"
    assert (await dead_letters(real_redis, keys))[0]["error_class"] == "BUG"


async def test_an_invalid_push_token_is_remembered(real_redis: Redis, key_prefix: str) -> None:
    keys, catalog = KeySpace(key_prefix), fast_catalog()
    body = {
        "recipient": {"id": "u-9", "push_tokens": ["dead-token", "live-token"]},
        "type": "security_alert",
        "data": {"message": "new login", "sandbox": {"PUSH": {"invalid_token": True}}},
        "channels": ["PUSH"],
    }
    first = await accept(real_redis, keys, catalog, body, "a")
    async with running_worker(real_redis, keys, catalog):
        for delivery in first["deliveries"]:
            await final_state(real_redis, keys, delivery["id"])
    # Both tokens were reported dead by this sandbox; the next notification skips them.
    again = {**body, "data": {"message": "again"}}
    second = await accept(real_redis, keys, catalog, again, "b")
    assert {(d["status"], d.get("reason")) for d in second["deliveries"]} == {
        ("SUPPRESSED", "invalid_address")
    }


class Recorded:
    """A provider that keeps every message it is given before passing it on."""

    def __init__(self, inner: Provider, messages: list[Message]) -> None:
        self.inner, self.messages, self.name = inner, messages, inner.name

    async def send(self, message: Message) -> str:
        self.messages.append(message)
        return await self.inner.send(message)

    async def close(self) -> None:
        await self.inner.close()


@pytest.fixture
def messages(monkeypatch: pytest.MonkeyPatch) -> list[Message]:
    """What the workers of this test hand their providers, in order."""
    given: list[Message] = []

    def recorded(*args: Any, **kwargs: Any) -> dict[str, Provider]:
        built = build_providers(*args, **kwargs)
        return {name: Recorded(provider, given) for name, provider in built.items()}

    monkeypatch.setattr(delivery_support, "build_providers", recorded)
    return given


def with_template(old: str, new: str) -> Catalog:
    """The fast-retry catalog with one template line changed."""
    text = catalog_text()
    assert old in text, "clarion.toml changed: update this test"
    return parse_catalog(text.replace(old, new, 1), "test-catalog.toml")


ORDER_EMAIL = (
    'EMAIL = { title = "Order {{ order_id }} confirmed", '
    'body = "Thank you! Your order {{ order_id }} is confirmed." }'
)


async def test_an_email_html_escapes_what_the_data_holds(
    real_redis: Redis, key_prefix: str, messages: list[Message]
) -> None:
    html = ORDER_EMAIL[:-2] + ', html = "<p>Order <b>{{ order_id }}</b> is confirmed.</p>" }'
    keys, catalog = KeySpace(key_prefix), with_template(ORDER_EMAIL, html)
    body = {
        "recipient": {"id": "u-1", "email": "u@example.com"},
        "type": "order_confirmed",
        "channels": ["EMAIL"],
        "data": {"order_id": "<script>alert('A-7')</script>"},
    }
    [delivery] = (await accept(real_redis, keys, catalog, body, "k"))["deliveries"]
    async with running_worker(real_redis, keys, catalog):
        assert (await final_state(real_redis, keys, delivery["id"]))["status"] == "SENT"
    [message] = messages
    assert message.html == (
        "<p>Order <b>&lt;script&gt;alert(&#39;A-7&#39;)&lt;/script&gt;</b> is confirmed.</p>"
    )
    # The text parts are not HTML: they keep the value as it is.
    assert message.title == "Order <script>alert('A-7')</script> confirmed"
    assert message.body == "Thank you! Your order <script>alert('A-7')</script> is confirmed."


async def test_a_template_error_fails_that_delivery_while_the_other_channel_is_sent(
    real_redis: Redis, key_prefix: str, messages: list[Message]
) -> None:
    push = 'PUSH = { title = "Security alert", body = "{{ message }}" }'
    # Data a template cannot use: the message is text, which has no attribute "text".
    keys = KeySpace(key_prefix)
    catalog = with_template(push, push.replace("{{ message }}", "{{ message.text }}"))
    body = {
        "recipient": {"id": "u-1", "email": "u@example.com", "push_tokens": ["token-1"]},
        "type": "security_alert",
        "data": {"message": "new login"},
    }
    answer = await accept(real_redis, keys, catalog, body, "k")
    ids = {d["channel"]: d["id"] for d in answer["deliveries"]}
    async with running_worker(real_redis, keys, catalog):
        email = await final_state(real_redis, keys, ids["EMAIL"])
        failed = await final_state(real_redis, keys, ids["PUSH"])
    assert email["status"] == "SENT"
    assert (failed["status"], failed["error_class"], failed["attempts"]) == (
        "FAILED", "PERMANENT", "1",
    )  # fmt: skip
    assert "the template cannot be filled: " in failed["last_error"]
    assert "text" in failed["last_error"]
    assert [m.channel for m in messages] == ["EMAIL"]  # the PUSH never reached a provider
    [letter] = await dead_letters(real_redis, keys)
    assert (letter["delivery_id"], letter["channel"]) == (ids["PUSH"], "PUSH")


# --- one-click unsubscribe header fields, through each email adapter to its peer -------------

PUBLIC_URL = "https://notify.example.com"
TOKENS = UnsubscribeTokens(DIGEST_SECRET)
EMAIL_PROVIDER = {
    "smtp": 'kind = "smtp"\nhost = "127.0.0.1"\nport = {port}\ntls = "none"\n'
    'from = "Shop <no-reply@shop.test>"\n',
    "sendgrid": 'kind = "sendgrid"\napi_key_env = "TEST_SENDGRID_KEY"\n'
    'from = "no-reply@shop.test"\nbase_url = "http://127.0.0.1:{port}"\n',
}
# Subject -> (List-Unsubscribe, List-Unsubscribe-Post) of each email a peer took.
Headers = dict[str, tuple[str, str]]


@contextlib.contextmanager
def email_peer(kind: str) -> Iterator[tuple[int, Callable[[], Headers]]]:
    """The peer of ``kind``: its port, and what it received so far."""
    if kind == "smtp":
        with SmtpPeer() as relay:
            yield (
                relay.port,
                lambda: {
                    r.header("Subject"): (r.header(LINK), r.header(POST)) for r in relay.received
                },
            )
        return
    peer = SendgridPeer()
    with serve(peer) as served:
        yield (
            served.port,
            lambda: {
                m.subject: (m.headers.get(LINK, ""), m.headers.get(POST, "")) for m in peer.accepted
            },
        )


def email_catalog(kind: str, port: int) -> Catalog:
    """The fast catalog with EMAIL going to a provider of ``kind`` at ``port``."""
    text = catalog_text()
    channel = '[channels.EMAIL]\nprovider = "sandbox"'
    assert channel in text, "clarion.toml changed: update this test"
    text = text.replace(channel, '[channels.EMAIL]\nprovider = "mail"')
    provider = EMAIL_PROVIDER[kind].replace("{port}", str(port))
    return parse_catalog(f"{text}\n[providers.mail]\n{provider}", "test-catalog.toml")


@pytest.mark.parametrize("kind", ["smtp", "sendgrid"])
@pytest.mark.parametrize("public_url", [PUBLIC_URL, ""], ids=["public-url", "no-public-url"])
async def test_emails_one_may_switch_off_carry_one_click_unsubscribe_headers(
    real_redis: Redis, key_prefix: str, monkeypatch: pytest.MonkeyPatch, kind: str,
    public_url: str,
) -> None:  # fmt: skip
    monkeypatch.setenv("TEST_SENDGRID_KEY", PEER_KEY)
    recipient = {"id": "u-1", "email": "anna@example.com"}
    bodies = [
        {"type": "order_confirmed", "data": {"order_id": "A-1"}},
        {"type": "marketing", "data": {"subject": "Deals", "body": "50 % off"}},
        {"type": "security_alert", "data": {"message": "new sign-in"}},
    ]
    links = UnsubscribeLinks(public_url, TOKENS, 86400) if public_url else None
    with email_peer(kind) as (port, received):
        keys, catalog = KeySpace(key_prefix), email_catalog(kind, port)
        ids = []
        for n, body in enumerate(bodies):
            answer = await accept(
                real_redis, keys, catalog, {**body, "recipient": recipient, "channels": ["EMAIL"]},
                f"k-{n}",
            )  # fmt: skip
            ids += [d["id"] for d in answer["deliveries"]]
        options = dataclasses.replace(FAST, unsubscribe=links)
        async with running_worker(real_redis, keys, catalog, options=options):
            for delivery_id in ids:
                assert (await final_state(real_redis, keys, delivery_id))["status"] == "SENT"
        headers = received()
    # Never for what cannot be switched off, and never without a public URL.
    assert headers["Security alert"] == ("", "")
    if not public_url:
        assert headers == dict.fromkeys(headers, ("", ""))
        return
    started = time.time()
    for subject, type_name in (("Order A-1 confirmed", "order_confirmed"), ("Deals", "marketing")):
        link, post = headers[subject]
        assert post == "List-Unsubscribe=One-Click"
        assert link.startswith(f"<{PUBLIC_URL}{PATH}")
        assert link.endswith(">")
        opt_out = TOKENS.read(link[1:-1].rpartition("/")[2], started)
        assert (opt_out.recipient_id, opt_out.notification_type, opt_out.channel) == (
            "u-1", type_name, Channel.EMAIL,
        )  # fmt: skip
        assert abs(opt_out.expires_at - (started + 86400)) < 30
