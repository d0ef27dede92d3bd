"""The Twilio adapter against the local Twilio peer: the message arrives as a form-encoded
Messages create with Basic auth (the peer checks it as Twilio would), each Twilio error code
maps to its error class and reason, connections are kept alive, and no number or token
appears in an error or a log line."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import msgspec
import pytest
import structlog

from app.catalog.providers import TwilioConfig
from app.providers.base import Message, ProviderError, Reason
from app.providers.twilio import TwilioProvider
from streams.core.vocabulary import ErrorClass
from tests.peers.serving import Answer, Fault, Served, serve
from tests.peers.twilio import PEER_SID, PEER_TOKEN, STOP_NUMBER, TwilioPeer
from tests.servers import free_port

NUMBER = "+14155550123"
SENDER = "+15005550006"
SERVICE = "MG" + "0123456789abcdef" * 2


@pytest.fixture
def peer() -> TwilioPeer:
    return TwilioPeer()


@pytest.fixture
def served(peer: TwilioPeer) -> Iterator[Served]:
    with serve(peer) as running:
        yield running


def make_provider(base_url: str, token: str = PEER_TOKEN, **settings: Any) -> TwilioProvider:
    values = {"from": SENDER, **settings}
    config = msgspec.convert(
        {"kind": "twilio", "account_sid": PEER_SID, "auth_token_env": "TWILIO_AUTH_TOKEN",
         "base_url": base_url, **values},
        TwilioConfig,
    )  # fmt: skip
    return TwilioProvider("sms", config, {"auth_token_env": token})


@pytest.fixture
async def provider(served: Served) -> AsyncIterator[TwilioProvider]:
    adapter = make_provider(served.base_url)
    yield adapter
    await adapter.close()


def sms(address: str = NUMBER, body: str = "Your code is 123456") -> Message:
    return Message(
        delivery_id="dlv-1",
        idempotency_key="idem-1",
        channel="SMS",
        address=address,
        title="",
        body=body,
        attempt=1,
        notification_id="ntf-1",
    )


async def refusal(provider: TwilioProvider, message: Message) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await provider.send(message)
    text = caught.value.message
    assert message.address not in text
    assert PEER_TOKEN not in text
    assert PEER_SID not in text
    return caught.value


async def test_a_message_arrives_as_twilio_takes_it_and_its_sid_comes_back(
    provider: TwilioProvider, peer: TwilioPeer
) -> None:
    sid = await provider.send(sms())
    [taken] = peer.accepted
    assert sid == taken.sid
    assert sid.startswith("SM")
    assert len(sid) == 34
    assert (taken.to, taken.sender, taken.messaging_service_sid, taken.body) == (
        NUMBER, SENDER, "", "Your code is 123456",
    )  # fmt: skip


async def test_a_messaging_service_sends_instead_of_a_number(
    served: Served, peer: TwilioPeer
) -> None:
    adapter = make_provider(served.base_url, **{"from": "", "messaging_service_sid": SERVICE})
    await adapter.send(sms())
    await adapter.close()
    [taken] = peer.accepted
    assert (taken.sender, taken.messaging_service_sid) == ("", SERVICE)


@pytest.mark.parametrize(
    ("number", "error_class", "reason"),
    [
        ("+15005550001", ErrorClass.PERMANENT, Reason.INVALID_ADDRESS),  # 21211
        ("+15005550009", ErrorClass.PERMANENT, Reason.INVALID_ADDRESS),  # 21614
        ("+15005550002", ErrorClass.PERMANENT, Reason.INVALID_ADDRESS),  # 21612
        ("14155550123", ErrorClass.PERMANENT, Reason.INVALID_ADDRESS),  # 21211: not E.164
        (STOP_NUMBER, ErrorClass.PERMANENT, Reason.UNSUBSCRIBED),  # 21610
        ("+15005550003", ErrorClass.PERMANENT, Reason.REJECTED),  # 21408
    ],
)
async def test_a_refused_number_fails_with_its_reason(
    provider: TwilioProvider,
    peer: TwilioPeer,
    number: str,
    error_class: ErrorClass,
    reason: Reason,
) -> None:
    error = await refusal(provider, sms(number))
    assert (error.error_class, error.reason, error.not_accepted) == (error_class, reason, False)
    assert peer.accepted == []


async def test_twilios_echo_of_the_number_is_masked(provider: TwilioProvider) -> None:
    error = await refusal(provider, sms("+15005550001"))
    assert error.message == (
        "sms: HTTP 400: 21211 The 'To' number <address> is not a valid phone number."
    )


async def test_a_carrier_filter_and_a_too_long_body_are_rejected(
    provider: TwilioProvider, peer: TwilioPeer
) -> None:
    peer.script(NUMBER, 30007)
    assert (await refusal(provider, sms())).reason is Reason.REJECTED
    error = await refusal(provider, sms("+14155550100", body="x" * 1601))
    assert (error.reason, "21617" in error.message) == (Reason.REJECTED, True)


@pytest.mark.parametrize(
    ("sender", "error_class", "not_accepted"),
    [
        ("+15005550007", ErrorClass.PERMANENT, False),  # 21606: not the account's number
        ("+15005550008", ErrorClass.TRANSIENT, True),  # 21611: its queue is full
    ],
)
async def test_a_sender_refusal(
    served: Served, sender: str, error_class: ErrorClass, not_accepted: bool
) -> None:
    adapter = make_provider(served.base_url, **{"from": sender})
    error = await refusal(adapter, sms())
    await adapter.close()
    assert (error.error_class, error.not_accepted) == (error_class, not_accepted)


async def test_a_wrong_token_is_transient_and_another_provider_may_send(served: Served) -> None:
    adapter = make_provider(served.base_url, token="wrong-token")
    error = await refusal(adapter, sms())
    await adapter.close()
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, True)
    assert "20003" in error.message
    assert "wrong-token" not in error.message


async def test_a_rate_limit_honours_retry_after(provider: TwilioProvider, peer: TwilioPeer) -> None:
    peer.fail(Fault.RATE_LIMITED, times=1, retry_after="12")
    error = await refusal(provider, sms())
    assert (error.error_class, error.not_accepted, error.retry_after) == (
        ErrorClass.TRANSIENT, True, 12.0,
    )  # fmt: skip
    assert "20429" in error.message
    assert await provider.send(sms())


@pytest.mark.parametrize(
    ("fault", "not_accepted"), [(Fault.ERROR, False), (Fault.UNAVAILABLE, True)]
)
async def test_a_server_error_is_transient(
    provider: TwilioProvider, peer: TwilioPeer, fault: Fault, not_accepted: bool
) -> None:
    peer.fail(fault, retry_after="4")
    error = await refusal(provider, sms())
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, not_accepted)


async def test_a_closed_port_is_transient_and_not_accepted() -> None:
    adapter = make_provider(f"http://127.0.0.1:{free_port()}")
    error = await refusal(adapter, sms())
    await adapter.close()
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, True)


async def test_a_read_timeout_is_transient_and_may_have_sent(
    served: Served, peer: TwilioPeer
) -> None:
    adapter = make_provider(served.base_url, timeout_seconds=0.3)
    peer.fail(Fault.HANG)
    error = await refusal(adapter, sms())
    await adapter.close()
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, False)


async def test_many_sends_reuse_few_connections(provider: TwilioProvider, peer: TwilioPeer) -> None:
    for _ in range(30):
        await provider.send(sms())
    assert len(peer.connections) == 1
    await asyncio.gather(*(provider.send(sms()) for _ in range(200)))
    assert len(peer.accepted) == 230
    assert len(peer.connections) <= 32


async def test_an_answer_that_is_not_twilios_json_logs_nothing_personal(
    provider: TwilioProvider, peer: TwilioPeer
) -> None:
    original = peer.handle

    async def proxy_page(request: Any) -> Answer:
        await original(request)
        return Answer(201, b"<html>created</html>", {"content-type": "text/html"})

    peer.handle = proxy_page  # type: ignore[method-assign]
    with structlog.testing.capture_logs() as logs:
        assert await provider.send(sms()) == ""
    assert [line["event"] for line in logs] == ["provider_answer_without_id"]
    assert NUMBER not in str(logs)
    assert PEER_TOKEN not in str(logs)


async def test_the_peer_refuses_what_twilio_refuses(served: Served) -> None:
    url = f"{served.base_url}/2010-04-01/Accounts/{PEER_SID}/Messages.json"
    auth = (PEER_SID, PEER_TOKEN)
    good = {"To": NUMBER, "From": SENDER, "Body": "b"}
    async with httpx.AsyncClient() as client:
        assert (await client.post(url, data=good)).json()["code"] == 20003
        for broken, code in [
            ({"To": ""}, 21604),
            ({"From": ""}, 21603),
            ({"From": "not a number!"}, 21212),
            ({"From": "", "MessagingServiceSid": "MG1"}, 21705),
            ({"Body": ""}, 21602),
        ]:
            answer = await client.post(url, data={**good, **broken}, auth=auth)
            assert (answer.status_code, answer.json()["code"]) == (400, code)
        assert (await client.post(url, json=good, auth=auth)).json()["code"] == 21604
        ok = await client.post(url, data=good, auth=auth)
    assert ok.status_code == 201
    assert ok.json()["status"] == "queued"
