"""The SendGrid adapter against the local SendGrid peer: the mail arrives in Mail Send's shape
(the peer checks it as SendGrid would), each answer maps to its error class and reason,
connections are kept alive, and no address or key appears in an error or a log line."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import msgspec
import pytest
import structlog

from app.catalog.providers import SendgridConfig
from app.providers.base import DELIVERY_HEADER, Message, ProviderError, Reason
from app.providers.sendgrid import SendgridProvider
from streams.core.vocabulary import ErrorClass
from tests.peers.sendgrid import INVALID_ADDRESS, PEER_KEY, REJECTED_ADDRESS, SendgridPeer
from tests.peers.serving import Answer, Fault, Served, serve
from tests.servers import free_port

ADDRESS = "jane.doe@example.com"
SENDER = "notify@clarion.example"


@pytest.fixture
def peer() -> SendgridPeer:
    return SendgridPeer()


@pytest.fixture
def served(peer: SendgridPeer) -> Iterator[Served]:
    with serve(peer) as running:
        yield running


def make_provider(base_url: str, key: str = PEER_KEY, **limits: Any) -> SendgridProvider:
    config = msgspec.convert(
        {"kind": "sendgrid", "api_key_env": "SENDGRID_API_KEY", "from": SENDER,
         "from_name": "Clarion", "base_url": base_url, **limits},
        SendgridConfig,
    )  # fmt: skip
    return SendgridProvider("mail", config, {"api_key_env": key})


@pytest.fixture
async def provider(served: Served) -> AsyncIterator[SendgridProvider]:
    adapter = make_provider(served.base_url)
    yield adapter
    await adapter.close()


def email(address: str = ADDRESS, **fields: Any) -> Message:
    values: dict[str, Any] = {
        "delivery_id": "dlv-1",
        "idempotency_key": "idem-1",
        "channel": "EMAIL",
        "address": address,
        "title": "Your order shipped",
        "body": "It is on its way.",
        "html": "<p>It is on its way.</p>",
        "attempt": 1,
        "notification_id": "ntf-1",
        **fields,
    }
    return Message(**values)


async def refusal(provider: SendgridProvider, message: Message) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await provider.send(message)
    assert ADDRESS not in caught.value.message
    assert message.address not in caught.value.message
    assert PEER_KEY not in caught.value.message
    return caught.value


async def test_a_mail_arrives_in_mail_sends_shape_and_its_message_id_comes_back(
    provider: SendgridProvider, peer: SendgridPeer
) -> None:
    message_id = await provider.send(email())
    [mail] = peer.accepted
    assert message_id == mail.message_id
    assert mail.to == [ADDRESS]
    assert mail.sender == {"email": SENDER, "name": "Clarion"}
    assert mail.subject == "Your order shipped"
    assert mail.content == [
        {"type": "text/plain", "value": "It is on its way."},
        {"type": "text/html", "value": "<p>It is on its way.</p>"},
    ]
    assert mail.headers == {DELIVERY_HEADER: "dlv-1"}
    assert mail.custom_args == {"clarion_delivery_id": "dlv-1", "clarion_notification_id": "ntf-1"}


async def test_a_mail_with_an_unsubscribe_link_carries_the_one_click_headers(
    provider: SendgridProvider, peer: SendgridPeer
) -> None:
    link = "https://notify.example.com/v1/unsubscribe/AQAAAAAFRU1BSUwJbWFya2V0aW5n"
    await provider.send(email(unsubscribe_url=link))
    [mail] = peer.accepted
    assert mail.headers == {
        DELIVERY_HEADER: "dlv-1",
        "List-Unsubscribe": f"<{link}>",
        "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
    }


async def test_a_text_only_mail_has_one_content_block(
    provider: SendgridProvider, peer: SendgridPeer
) -> None:
    await provider.send(email(html=""))
    assert peer.accepted[0].content == [{"type": "text/plain", "value": "It is on its way."}]


async def test_a_mail_without_subject_or_body_fails_for_good_without_a_call(
    provider: SendgridProvider, peer: SendgridPeer
) -> None:
    for message in (email(title=""), email(body="", html="")):
        error = await refusal(provider, message)
        assert (error.error_class, error.reason) == (ErrorClass.PERMANENT, Reason.REJECTED)
    assert peer.requests == 0


async def test_a_refused_recipient_address_is_invalid(provider: SendgridProvider) -> None:
    error = await refusal(provider, email(INVALID_ADDRESS))
    assert (error.error_class, error.reason) == (ErrorClass.PERMANENT, Reason.INVALID_ADDRESS)
    assert "Does not contain a valid address" in error.message


async def test_an_address_sendgrid_cannot_parse_is_invalid(
    provider: SendgridProvider, peer: SendgridPeer
) -> None:
    error = await refusal(provider, email("jane.doe@example"))
    assert error.reason is Reason.INVALID_ADDRESS
    assert peer.accepted == []


async def test_any_other_bad_request_is_rejected(provider: SendgridProvider) -> None:
    error = await refusal(provider, email(REJECTED_ADDRESS))
    assert (error.error_class, error.reason) == (ErrorClass.PERMANENT, Reason.REJECTED)


async def test_an_echoed_address_is_masked_in_the_error(
    provider: SendgridProvider, peer: SendgridPeer
) -> None:
    echo = f"Each email address should be unique. We found [{ADDRESS}] twice."
    peer.script(ADDRESS, Answer.json(400, {"errors": [{"message": echo, "field": None}]}))
    error = await refusal(provider, email())
    assert "<address>" in error.message


async def test_a_payload_too_large_is_rejected(
    provider: SendgridProvider, peer: SendgridPeer
) -> None:
    peer.max_body_bytes = 100
    error = await refusal(provider, email())
    assert (error.error_class, error.reason) == (ErrorClass.PERMANENT, Reason.REJECTED)
    assert "HTTP 413" in error.message


async def test_a_wrong_key_is_transient_and_another_provider_may_send(served: Served) -> None:
    adapter = make_provider(served.base_url, key="SG.wrong-key")
    error = await refusal(adapter, email())
    await adapter.close()
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, True)
    assert "HTTP 401" in error.message
    assert "SG.wrong-key" not in error.message


async def test_a_rate_limit_honours_retry_after(
    provider: SendgridProvider, peer: SendgridPeer
) -> None:
    peer.fail(Fault.RATE_LIMITED, times=1, retry_after="7")
    error = await refusal(provider, email())
    assert (error.error_class, error.not_accepted, error.retry_after) == (
        ErrorClass.TRANSIENT, True, 7.0,
    )  # fmt: skip
    assert await provider.send(email())  # the next one goes through


async def test_without_retry_after_the_rate_limit_reset_is_used(
    provider: SendgridProvider, peer: SendgridPeer
) -> None:
    peer.fail(Fault.RATE_LIMITED, retry_after=None)
    peer.rate_limit_reset_seconds = 60
    error = await refusal(provider, email())
    assert error.retry_after is not None
    assert 58 <= error.retry_after <= 60


@pytest.mark.parametrize(
    ("fault", "not_accepted"), [(Fault.ERROR, False), (Fault.UNAVAILABLE, True)]
)
async def test_a_server_error_is_transient(
    provider: SendgridProvider, peer: SendgridPeer, fault: Fault, not_accepted: bool
) -> None:
    peer.fail(fault)
    error = await refusal(provider, email())
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, not_accepted)


async def test_a_closed_port_is_transient_and_not_accepted() -> None:
    adapter = make_provider(f"http://127.0.0.1:{free_port()}")
    error = await refusal(adapter, email())
    await adapter.close()
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, True)


async def test_a_read_timeout_is_transient_and_may_have_sent(
    served: Served, peer: SendgridPeer
) -> None:
    adapter = make_provider(served.base_url, timeout_seconds=0.3)
    peer.fail(Fault.HANG)
    error = await refusal(adapter, email())
    await adapter.close()
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, False)
    assert "ReadTimeout" in error.message


async def test_many_sends_reuse_few_connections(
    provider: SendgridProvider, peer: SendgridPeer
) -> None:
    for i in range(30):
        await provider.send(email(delivery_id=f"dlv-{i}"))
    assert len(peer.connections) == 1
    await asyncio.gather(*(provider.send(email(delivery_id=f"c-{i}")) for i in range(200)))
    assert len(peer.accepted) == 230
    # At most max_in_flight (32) connections, each used for many mails.
    assert len(peer.connections) <= 32


async def test_an_answer_without_message_id_is_a_send_and_logs_nothing_personal(
    provider: SendgridProvider, peer: SendgridPeer
) -> None:
    peer.script(ADDRESS, Answer(202))
    with structlog.testing.capture_logs() as logs:
        assert await provider.send(email()) == ""
    assert [line["event"] for line in logs] == ["provider_answer_without_id"]
    assert ADDRESS not in str(logs)
    assert PEER_KEY not in str(logs)


async def test_the_peer_refuses_what_sendgrid_refuses(served: Served) -> None:
    url = f"{served.base_url}/v3/mail/send"
    good = {
        "personalizations": [{"to": [{"email": ADDRESS}]}],
        "from": {"email": SENDER},
        "subject": "s",
        "content": [{"type": "text/plain", "value": "b"}],
    }
    auth = {"Authorization": f"Bearer {PEER_KEY}"}
    async with httpx.AsyncClient() as client:
        assert (await client.post(url, json=good)).status_code == 401
        assert (await client.post(url, content=b"{", headers=auth)).status_code == 400
        for broken, field in [
            ({"subject": ""}, "subject"),
            ({"from": {"email": "nobody"}}, "from.email"),
            ({"content": [{"type": "text/html", "value": "<p>"}, {"type": "text/plain",
              "value": "b"}]}, "content.0.type"),
            ({"headers": {"Subject": "x"}}, "headers.Subject"),
            ({"custom_args": {"n": 1}}, "custom_args"),
            # One-click unsubscribe needs an https link, and its one exact value.
            ({"headers": {"List-Unsubscribe-Post": "List-Unsubscribe=One-Click"}},
             "headers.List-Unsubscribe-Post"),
            ({"headers": {"List-Unsubscribe": "<https://x.example/u>",
                          "List-Unsubscribe-Post": "One-Click"}}, "headers.List-Unsubscribe-Post"),
            ({"headers": {"List-Unsubscribe": "https://x.example/u"}}, "headers.List-Unsubscribe"),
            ({"headers": {"List-Unsubscribe": "<http://x.example/u>",
                          "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"}},
             "headers.List-Unsubscribe-Post"),
        ]:  # fmt: skip
            answer = await client.post(url, json={**good, **broken}, headers=auth)
            assert answer.status_code == 400
            assert [e["field"] for e in answer.json()["errors"]] == [field]
        ok = await client.post(url, json=good, headers=auth)
    assert (ok.status_code, ok.content) == (202, b"")
    assert ok.headers["x-message-id"]
