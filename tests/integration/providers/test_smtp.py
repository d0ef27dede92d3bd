"""The smtp provider against a real local relay (``tests.peers.smtp``): the message as it
arrives, TLS and AUTH, how every kind of answer is classified, and the connection pool."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import aiosmtplib
import pytest

from app.catalog.providers import SmtpConfig
from app.logging import mask
from app.providers import smtp as smtp_module
from app.providers.base import Message, ProviderError, Reason
from app.providers.smtp import SmtpProvider
from streams.core.vocabulary import ErrorClass
from tests.peers.smtp import HOST, USERNAME, Script, SmtpPeer, silent_port
from tests.servers import free_port

PASSWORD = "s3cret-Pa55word"
BOB = "bob@example.com"
GONE = "gone@example.com"
SENDER = "noreply@clarion.test"


def message(delivery_id: str = "dlv-1", address: str = BOB, **fields: Any) -> Message:
    values: dict[str, Any] = {
        "idempotency_key": f"idem-{delivery_id}",
        "channel": "EMAIL",
        "title": "Your order shipped",
        "body": "Hello Bob,\nyour parcel is on its way.\n",
        "html": "<p>Hello Bob,</p><p>your parcel is on its way.</p>",
        "attempt": 1,
    }
    values.update(fields)
    return Message(delivery_id=delivery_id, address=address, **values)


def config(port: int, **overrides: Any) -> SmtpConfig:
    values: dict[str, Any] = {
        "host": HOST,
        "from_address": f"Clärion Notifications <{SENDER}>",
        "port": port,
        "tls": "none",
        "pool_size": 4,
        "timeout_seconds": 5.0,
        "connect_timeout_seconds": 2.0,
    }
    values.update(overrides)
    return SmtpConfig(**values)


def peer_config(peer: SmtpPeer, **overrides: Any) -> SmtpConfig:
    """A configuration that suits ``peer``: its TLS, its CA, its credentials."""
    values: dict[str, Any] = {"tls": peer.tls, "ca_file": peer.ca_file}
    if peer.password:
        values |= {"username": USERNAME, "password_env": "SMTP_PASSWORD"}
    return config(peer.port, **(values | overrides))


@asynccontextmanager
async def provider(cfg: SmtpConfig, password: str = PASSWORD) -> AsyncIterator[SmtpProvider]:
    smtp = SmtpProvider("mail", cfg, {"password_env": password} if cfg.password_env else {})
    try:
        yield smtp
    finally:
        await smtp.close()


async def refusal(smtp: SmtpProvider, msg: Message) -> ProviderError:
    """The error ``msg`` fails with, checked to name neither the address nor a secret."""
    with pytest.raises(ProviderError) as caught:
        await smtp.send(msg)
    error = caught.value
    assert msg.address not in error.message
    assert PASSWORD not in error.message
    assert mask(error.message) == error.message
    return error


@pytest.fixture
def peer() -> Iterator[SmtpPeer]:
    with SmtpPeer() as relay:
        yield relay


# The message.


async def test_a_message_arrives_with_both_bodies_and_its_headers(peer: SmtpPeer) -> None:
    msg = message(
        title="Votre commande — expédiée",
        body="Hello Bob,\n.a line that starts with a dot\n" + "long " * 300 + "\n",
        html="<p>Grüße</p>",
    )
    async with provider(config(peer.port)) as smtp:
        message_id = await smtp.send(msg)

    [received] = peer.received
    assert (received.mail_from, received.rcpt_tos) == (SENDER, (BOB,))
    assert received.header("From") == f"Clärion Notifications <{SENDER}>"
    assert received.header("To") == BOB
    assert received.header("Subject") == "Votre commande — expédiée"
    assert received.message["Date"].datetime.tzinfo is not None
    assert received.header("Message-ID") == message_id == "<dlv-1@clarion.test>"
    assert received.header("X-Clarion-Delivery-Id") == "dlv-1"
    assert received.message.get_content_type() == "multipart/alternative"
    assert received.text == msg.body
    assert received.html == "<p>Grüße</p>"
    # The relay may refuse lines over 1000 octets and 8-bit data it was not told about.
    assert max(len(line) for line in received.raw.split(b"\r\n")) <= 998
    assert received.raw.isascii()


async def test_a_message_with_an_unsubscribe_link_carries_the_one_click_headers(
    peer: SmtpPeer,
) -> None:
    link = "https://notify.example.com/v1/unsubscribe/" + "AQAAAAAFRU1BSUwJbWFya2V0aW5n" * 3
    async with provider(config(peer.port)) as smtp:
        await smtp.send(message("dlv-1", unsubscribe_url=link))
        await smtp.send(message("dlv-2"))
    with_link, without = peer.received
    assert with_link.header("List-Unsubscribe") == f"<{link}>"
    assert with_link.header("List-Unsubscribe-Post") == "List-Unsubscribe=One-Click"
    assert max(len(line) for line in with_link.raw.split(b"\r\n")) <= 998
    assert without.message["List-Unsubscribe"] is None
    assert without.message["List-Unsubscribe-Post"] is None


async def test_the_relay_refuses_malformed_one_click_headers(peer: SmtpPeer) -> None:
    """The peer is as strict as a mailbox provider reading the fields: a one-click POST
    without an https link is no one-click unsubscribe."""
    raw = (
        f"From: {SENDER}\r\nTo: {BOB}\r\nSubject: s\r\n"
        "List-Unsubscribe: <mailto:leave@clarion.test>\r\n"
        "List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n\r\nbody\r\n"
    )
    client = aiosmtplib.SMTP(hostname=HOST, port=peer.port)
    async with client:
        with pytest.raises(aiosmtplib.SMTPDataError) as refused:
            await client.sendmail(SENDER, [BOB], raw)
    assert refused.value.code == 554
    assert "List-Unsubscribe-Post" in refused.value.message
    assert peer.received == []


async def test_a_message_without_html_is_plain_text(peer: SmtpPeer) -> None:
    async with provider(config(peer.port)) as smtp:
        await smtp.send(message(html=""))
    [received] = peer.received
    assert received.message.get_content_type() == "text/plain"
    assert (received.text, received.html) == ("Hello Bob,\nyour parcel is on its way.\n", "")


async def test_the_message_id_is_kept_across_attempts_and_differs_between_deliveries(
    peer: SmtpPeer,
) -> None:
    async with provider(config(peer.port)) as smtp:
        first = await smtp.send(message("dlv-1", attempt=1))
        again = await smtp.send(message("dlv-1", attempt=2))
        other = await smtp.send(message("dlv-2", attempt=1))
    assert first == again != other
    assert [r.header("Message-ID") for r in peer.received] == [first, again, other]


async def test_a_subject_cannot_smuggle_in_a_header(peer: SmtpPeer) -> None:
    async with provider(config(peer.port)) as smtp:
        await smtp.send(message(title="Hi\x0bBcc: eve@example.com\u2028X-Evil: 1\r\nZ: 2"))
    [received] = peer.received
    assert received.header("Subject") == "Hi Bcc: eve@example.com X-Evil: 1 Z: 2"
    assert [received.message[h] for h in ("Bcc", "X-Evil", "Z")] == [None, None, None]


async def test_an_international_domain_travels_in_its_ascii_form(peer: SmtpPeer) -> None:
    async with provider(config(peer.port)) as smtp:
        await smtp.send(message(address="bob@bücher.example"))
    assert peer.received[0].rcpt_tos == ("bob@xn--bcher-kva.example",)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("bob,eve@example.com", Reason.INVALID_ADDRESS),
        ("bob@localhost", Reason.INVALID_ADDRESS),
        ('"bob smith"@example.com', Reason.INVALID_ADDRESS),
        ("bob\x01@example.com", Reason.INVALID_ADDRESS),
        ("jürgen@example.com", Reason.REJECTED),
    ],
)
async def test_an_address_smtp_cannot_carry_fails_without_a_connection(
    peer: SmtpPeer, address: str, reason: Reason
) -> None:
    async with provider(config(peer.port)) as smtp:
        error = await refusal(smtp, message(address=address))
    assert (error.error_class, error.reason, error.not_accepted) == (
        ErrorClass.PERMANENT, reason, True,
    )  # fmt: skip
    assert peer.connections == 0


@pytest.mark.parametrize(
    ("overrides", "setting"),
    [
        ({"from_address": "not an address"}, "providers.mail.from"),
        ({"from_address": "Eve\r\nBcc: x <eve@example.com>"}, "providers.mail.from"),
        ({"tls": "starttls", "ca_file": "/nonexistent/ca.pem"}, "providers.mail.ca_file"),
    ],
)
def test_a_configuration_that_cannot_work_is_refused_naming_the_setting(
    overrides: dict[str, Any], setting: str
) -> None:
    with pytest.raises(ValueError, match=setting):
        SmtpProvider("mail", config(25, **overrides), {})


# TLS and AUTH.


@pytest.mark.parametrize("tls", ["starttls", "tls"])
async def test_tls_with_the_relays_ca_and_auth_delivers(tls: str) -> None:
    with SmtpPeer(tls=tls, password=PASSWORD) as relay:  # type: ignore[arg-type]
        async with provider(peer_config(relay)) as smtp:
            await smtp.send(message())
        assert [r.rcpt_tos for r in relay.received] == [(BOB,)]


@pytest.mark.parametrize("tls", ["starttls", "tls"])
async def test_an_untrusted_certificate_is_refused_and_classified(tls: str) -> None:
    with SmtpPeer(tls=tls) as relay:  # type: ignore[arg-type]
        # No ca_file: the system's store, which does not know the relay's CA.
        async with provider(peer_config(relay, ca_file="")) as smtp:
            error = await refusal(smtp, message())
        assert relay.received == []
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, True)
    assert "connect: TLS handshake failed: unable to get local issuer certificate" in error.message


async def test_a_wrong_password_lets_a_backup_provider_take_over() -> None:
    with SmtpPeer(tls="starttls", password=PASSWORD) as relay:
        async with provider(peer_config(relay), password="wrong-password") as smtp:
            error = await refusal(smtp, message())
        assert relay.received == []
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, True)
    assert "AUTH refused: 535 5.7.8" in error.message
    assert "wrong-password" not in error.message


NO_AUTH = {"username": "", "password_env": None}


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (NO_AUTH, "MAIL refused: 530 5.7.0 Authentication required"),
        ({**NO_AUTH, "tls": "none"}, "MAIL refused: 530 Must issue a STARTTLS command first"),
        ({"tls": "none"}, "connect: The SMTP AUTH extension is not supported"),
    ],
    ids=["without-auth", "without-starttls", "auth-without-starttls"],
)
async def test_a_relay_requiring_auth_or_tls_refuses_the_session(
    overrides: dict[str, Any], said: str
) -> None:
    with SmtpPeer(tls="starttls", password=PASSWORD) as relay:
        async with provider(peer_config(relay, **overrides)) as smtp:
            error = await refusal(smtp, message())
        assert relay.received == []
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, True)
    assert said in error.message


# Answers.


@pytest.mark.parametrize(
    ("script", "error_class", "reason"),
    [
        (Script(rcpt=f"550 5.1.1 <{GONE}>: Recipient address rejected"), "PERMANENT", "invalid"),
        (Script(rcpt=f"551 5.1.6 User not local; please try <{GONE}.new>"), "PERMANENT", "invalid"),
        (Script(rcpt=f"553 5.1.3 <{GONE}>: malformed address"), "PERMANENT", "invalid"),
        (Script(rcpt="550 5.7.1 Relaying denied"), "PERMANENT", "rejected"),
        (Script(rcpt=f"552 5.2.2 <{GONE}>: mailbox full"), "PERMANENT", "rejected"),
        (Script(rcpt=f"451 4.3.0 <{GONE}>: temporary lookup failure"), "TRANSIENT", None),
        (Script(rcpt="450 4.7.1 Greylisted, try again later"), "TRANSIENT", None),
        (Script(data="554 5.7.1 Message rejected as spam"), "PERMANENT", "rejected"),
        (Script(data=f"550 5.1.1 <{GONE}>: user unknown"), "PERMANENT", "invalid"),
        (Script(data="452 4.3.1 Insufficient system storage"), "TRANSIENT", None),
    ],
)
async def test_each_refusal_is_classified_and_never_accepted(
    script: Script, error_class: str, reason: str | None
) -> None:
    with SmtpPeer(scripts={GONE: script}) as relay:
        async with provider(config(relay.port)) as smtp:
            error = await refusal(smtp, message(address=GONE))
            # The refused transaction is reset; the connection carries the next message.
            await smtp.send(message("dlv-2"))
        assert [r.rcpt_tos for r in relay.received] == [(BOB,)]
        assert relay.connections == 1
    expected = {"invalid": Reason.INVALID_ADDRESS, "rejected": Reason.REJECTED, None: None}
    assert (error.error_class, error.reason, error.not_accepted) == (
        error_class, expected[reason], True,
    )  # fmt: skip
    code = (script.rcpt or script.data)[:9]
    assert f"refused: {code}" in error.message


async def test_a_closed_port_is_refused_and_not_accepted() -> None:
    async with provider(config(free_port())) as smtp:
        error = await refusal(smtp, message())
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, True)
    assert "connection refused" in error.message


async def test_a_name_that_does_not_resolve_is_not_accepted() -> None:
    async with provider(config(25, host="relay.does-not-exist.invalid")) as smtp:
        error = await refusal(smtp, message())
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, True)


async def test_a_relay_that_never_greets_times_out_within_the_connect_limit() -> None:
    with silent_port() as port:
        cfg = config(port, connect_timeout_seconds=0.3, timeout_seconds=5.0)
        async with provider(cfg) as smtp:
            started = time.monotonic()
            error = await refusal(smtp, message())
    assert time.monotonic() - started < 2.0
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, True)
    assert "connect: timed out" in error.message


@pytest.mark.parametrize(
    "script", [Script(silent_after_data=True), Script(drop_after_data=True)], ids=["silent", "drop"]
)
async def test_no_answer_to_the_final_dot_may_have_been_accepted(script: Script) -> None:
    with SmtpPeer(scripts={BOB: script}) as relay:
        async with provider(config(relay.port, timeout_seconds=1.0)) as smtp:
            error = await refusal(smtp, message())
            # The relay did take it: only the same provider may try again.
            assert len(relay.received) == 1
            relay.scripts.clear()
            await smtp.send(message("dlv-2"))
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, False)
    assert "may have queued" in error.message


# The pool.


async def test_sends_reuse_one_connection(peer: SmtpPeer) -> None:
    async with provider(config(peer.port)) as smtp:
        for n in range(20):
            await smtp.send(message(f"dlv-{n}"))
    assert (len(peer.received), peer.connections) == (20, 1)


async def test_200_concurrent_sends_arrive_once_each_over_at_most_pool_size_connections(
    peer: SmtpPeer,
) -> None:
    ids = [f"dlv-{n}" for n in range(200)]
    async with provider(config(peer.port, pool_size=4)) as smtp:
        returned = await asyncio.gather(*(smtp.send(message(i)) for i in ids))
    assert sorted(r.header("X-Clarion-Delivery-Id") for r in peer.received) == sorted(ids)
    assert sorted(returned) == sorted(f"<{i}@clarion.test>" for i in ids)
    assert 1 <= peer.connections <= 4


async def test_the_pool_replaces_connections_the_relay_dropped(peer: SmtpPeer) -> None:
    async with provider(config(peer.port)) as smtp:
        await smtp.send(message("dlv-1"))
        assert peer.drop_connections() == 1
        await smtp.send(message("dlv-2"))
        # Dropped as the client reuses it (its MAIL is the first to notice): once more on
        # a fresh connection, the message was not sent.
        peer.drop_at_mail = 1
        await smtp.send(message("dlv-3"))
    assert len(peer.received) == 3
    assert peer.connections == 3


async def test_a_connection_idle_too_long_is_replaced_before_use(
    peer: SmtpPeer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with provider(config(peer.port)) as smtp:
        await smtp.send(message("dlv-1"))
        monkeypatch.setattr(smtp_module, "MAX_IDLE_SECONDS", 0.0)
        await smtp.send(message("dlv-2"))
    assert (len(peer.received), peer.connections) == (2, 2)


async def test_close_quits_the_pooled_connections(peer: SmtpPeer) -> None:
    async with provider(config(peer.port, pool_size=3)) as smtp:
        await asyncio.gather(*(smtp.send(message(f"dlv-{n}")) for n in range(6)))
        assert peer.live
    assert await asyncio.to_thread(peer.wait_for_no_connections, 2.0)
