"""The HTTP/2 client against the local APNs peer (HTTP/2 over TLS, its own certificate
authority): many requests share one connection, requests beyond the server's stream limit
wait for a free stream, a GOAWAY fails the streams the server did not process as not sent
and the next request opens a new connection, a lost connection is classified by whether the
request's frames had left, and a certificate nobody trusts is refused before anything is
sent. A client given ``addresses`` connects only to the numbers it is given, asks for each
connection, and still checks the certificate for the host name it sent by SNI; a failure at
a recipient's server (a Web Push endpoint's) is worded with its host and classed as sent or
not."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import jwt
import pytest

from app.catalog.providers import ProviderLimits
from app.providers.base import ProviderError
from app.providers.http2 import Client, Failed, Response, unreachable
from streams.core.vocabulary import ErrorClass
from tests.peers.apns import PEER_KEY_ID, PEER_TEAM_ID, PEER_TOPIC, ApnsPeer, Fault
from tests.peers.http2_serving import Served, serve
from tests.servers import free_port

DEVICE = "/3/device/" + "0123456789abcdef" * 4


@pytest.fixture
def peer() -> ApnsPeer:
    return ApnsPeer()


@pytest.fixture
def served(peer: ApnsPeer) -> Iterator[Served]:
    with serve(peer) as running:
        yield running


@pytest.fixture
def ca_file(peer: ApnsPeer, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    peer.ca.cert_pem.write_to_path(str(path))
    return str(path)


def make_client(served: Served, ca_file: str = "", connections: int = 1, **limits: float) -> Client:
    settings = {"timeout_seconds": 5.0, "connect_timeout_seconds": 2.0, **limits}
    return Client(
        "apns",
        ProviderLimits(**settings),
        served.base_url,
        ca_file=ca_file,
        connections=connections,
    )


@pytest.fixture
async def client(served: Served, ca_file: str) -> AsyncIterator[Client]:
    made = make_client(served, ca_file)
    yield made
    await made.close()


def fields(peer: ApnsPeer, number: int = 0) -> list[tuple[bytes, bytes]]:
    token = jwt.encode(
        {"iss": PEER_TEAM_ID, "iat": int(time.time())},
        peer.key,
        algorithm="ES256",
        headers={"kid": PEER_KEY_ID},
    )
    return [
        (b"authorization", b"bearer " + token.encode()),
        (b"apns-topic", PEER_TOPIC.encode()),
        (b"apns-push-type", b"alert"),
        (b"apns-priority", b"10"),
        (b"apns-expiration", b"%d" % (time.time() + 3600)),
        (b"apns-collapse-id", b"n%d" % number),
    ]


def body(number: int = 0, padding: int = 0) -> bytes:
    alert = {"title": f"Notification {number}", "body": "x" * padding}
    return json.dumps({"aps": {"alert": alert}, "n": number}).encode()


async def post(client: Client, peer: ApnsPeer, number: int = 0, padding: int = 0) -> Response:
    return await client.request(b"POST", DEVICE, fields(peer, number), body(number, padding))


async def failure(call: asyncio.Future[Response] | Response | object) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await call  # type: ignore[misc]
    assert caught.value.error_class is ErrorClass.TRANSIENT
    return caught.value


async def test_a_request_gets_its_answer(client: Client, peer: ApnsPeer) -> None:
    answer = await post(client, peer, 7)
    assert answer.status == 200
    assert answer.body == b""
    [push] = peer.accepted
    assert answer.headers == {"apns-id": push.apns_id}
    assert push.payload == {"aps": {"alert": {"title": "Notification 7", "body": ""}}, "n": 7}
    assert push.headers["apns-collapse-id"] == "n7"


async def test_five_hundred_concurrent_requests_share_one_connection(
    client: Client, peer: ApnsPeer
) -> None:
    # 500 bodies of over 1 KB: ten times the connection's first send window.
    answers = await asyncio.gather(*(post(client, peer, n, padding=1000) for n in range(500)))
    assert {answer.status for answer in answers} == {200}
    assert sorted(push.payload["n"] for push in peer.accepted) == list(range(500))
    assert len({answer.headers["apns-id"] for answer in answers}) == 500
    assert peer.stats() == {"accepted": 500, "requests": 500, "connections": 1}


async def test_requests_beyond_the_stream_limit_wait_for_a_free_stream(ca_file: str) -> None:
    peer = ApnsPeer(max_streams=4, delay=0.05)
    with serve(peer) as limited:
        client = make_client(limited, ca_file)
        answers = await asyncio.gather(*(post(client, peer, n) for n in range(24)))
        await client.close()
    assert {answer.status for answer in answers} == {200}
    # Over the limit the peer would have broken the connection.
    assert (peer.max_open, peer.connections, len(peer.accepted)) == (4, 1, 24)


async def test_no_free_stream_in_time_is_not_sent(ca_file: str) -> None:
    peer = ApnsPeer(max_streams=1)
    with serve(peer) as limited:
        client = make_client(limited, ca_file, timeout_seconds=3.0, connect_timeout_seconds=0.3)
        await post(client, peer)
        peer.fail(Fault.HANG, times=1)
        hung = asyncio.ensure_future(post(client, peer, 1))
        await asyncio.sleep(0.1)
        started = time.monotonic()
        error = await failure(post(client, peer, 2))
        assert 0.15 < time.monotonic() - started < 1.0
        assert (error.message, error.not_accepted) == ("apns: not sent (NoFreeStream)", True)
        peer.released.set()
        assert (await hung).status == 500  # the peer's answer once released
        await client.close()


async def test_a_goaway_fails_the_unprocessed_streams_as_not_sent_and_a_new_connection_follows(
    ca_file: str,
) -> None:
    peer = ApnsPeer(goaway_after=3)
    with serve(peer) as served:
        client = make_client(served, ca_file)
        results = await asyncio.gather(
            *(post(client, peer, n) for n in range(10)), return_exceptions=True
        )
        answered = [result for result in results if isinstance(result, Response)]
        refused = [result for result in results if isinstance(result, ProviderError)]
        assert [answer.status for answer in answered] == [200, 200, 200]
        assert {(error.message, error.not_accepted) for error in refused} == {
            ("apns: not sent (GoAway)", True)
        }
        assert len(refused) == 7
        assert peer.connections == 1
        assert (await post(client, peer, 10)).status == 200
        assert peer.connections == 2
        assert sorted(push.payload["n"] for push in peer.accepted) == [0, 1, 2, 10]
        await client.close()


async def test_a_connection_lost_after_the_request_left_may_have_sent(
    client: Client, peer: ApnsPeer
) -> None:
    await post(client, peer)
    peer.fail(Fault.DROP, times=1)
    error = await failure(post(client, peer, 1))
    assert (error.message, error.not_accepted) == (
        "apns: no answer (ConnectionLost): it may have sent", False,
    )  # fmt: skip
    assert (await post(client, peer, 2)).status == 200
    assert peer.connections == 2


async def test_a_connection_lost_before_the_request_was_written_did_not_send(
    client: Client, peer: ApnsPeer
) -> None:
    await post(client, peer)
    [connection] = client._all
    request = asyncio.ensure_future(post(client, peer, 1))
    await asyncio.sleep(0)  # the request's frames are queued, not written yet
    assert connection.transport is not None
    connection.transport.abort()
    error = await failure(request)
    assert (error.message, error.not_accepted) == ("apns: not sent (ConnectionLost)", True)
    assert len(peer.accepted) == 1


async def test_no_answer_in_time_may_have_sent_and_the_connection_stays(
    served: Served, ca_file: str, peer: ApnsPeer
) -> None:
    client = make_client(served, ca_file, timeout_seconds=0.3)
    peer.fail(Fault.HANG, times=1)
    error = await failure(post(client, peer))
    assert (error.message, error.not_accepted) == (
        "apns: no answer (ReadTimeout): it may have sent", False,
    )  # fmt: skip
    assert (await post(client, peer, 1)).status == 200
    assert peer.connections == 1
    await client.close()


async def test_an_untrusted_certificate_is_refused_before_sending(
    served: Served, peer: ApnsPeer
) -> None:
    client = make_client(served)  # certifi's CAs: not the peer's
    error = await failure(post(client, peer))
    await client.close()
    assert error.not_accepted
    assert error.message.startswith("apns: not sent (TLSError: ")
    assert "certificate" in error.message
    assert peer.requests == 0


async def test_a_closed_port_is_not_sent(ca_file: str) -> None:
    client = Client("apns", ProviderLimits(), f"https://127.0.0.1:{free_port()}", ca_file=ca_file)
    error = await failure(client.request(b"POST", DEVICE, [], b"{}"))
    await client.close()
    assert (error.message, error.not_accepted) == (
        "apns: not sent (ConnectError: Connection refused)", True,
    )  # fmt: skip


async def test_an_answer_over_the_size_bound_is_cut(served: Served, ca_file: str) -> None:
    client = Client("apns", ProviderLimits(), served.base_url, ca_file)
    client.max_body_bytes = 10
    error = await failure(client.request(b"GET", "/_peer/stats", [], b""))
    await client.close()
    assert error.message == "apns: no answer (AnswerTooLarge): it may have sent"


async def test_the_pool_takes_its_connections_in_turn(
    served: Served, ca_file: str, peer: ApnsPeer
) -> None:
    client = make_client(served, ca_file, connections=3)
    for number in range(6):
        await post(client, peer, number)
    assert peer.connections == 3
    answers = await asyncio.gather(*(post(client, peer, n) for n in range(300)))
    assert {answer.status for answer in answers} == {200}
    assert peer.connections == 3
    await client.close()


async def test_an_idle_connection_is_kept_alive_by_ping(
    served: Served, ca_file: str, peer: ApnsPeer
) -> None:
    client = Client("apns", ProviderLimits(), served.base_url, ca_file)
    client.keepalive_seconds = 0.05
    await post(client, peer)
    await asyncio.sleep(0.4)  # several PINGs, each answered
    assert (await post(client, peer, 1)).status == 200
    assert peer.connections == 1
    await client.close()


async def test_the_peer_answers_its_stats(client: Client, peer: ApnsPeer) -> None:
    await post(client, peer)
    answer = await client.request(b"GET", "/_peer/stats", [], b"")
    assert json.loads(answer.body) == {"accepted": 1, "requests": 2, "connections": 1}


async def test_a_connection_that_stops_answering_is_closed_and_replaced(
    served: Served, ca_file: str, peer: ApnsPeer
) -> None:
    client = Client("apns", ProviderLimits(), served.base_url, ca_file)
    client.keepalive_seconds = 0.05
    await post(client, peer)
    peer.mute = True  # PINGs go unanswered
    await asyncio.sleep(0.3)
    assert client._all == set()
    peer.mute = False
    assert (await post(client, peer, 1)).status == 200
    assert peer.connections == 2
    await client.close()


class Addresses:
    """An ``addresses`` source that answers as told, one answer per connection opened."""

    def __init__(self, *answers: list[str] | Exception) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append((host, port))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def named_client(served: Served, ca_file: str, host: str, addresses: Addresses) -> Client:
    limits = ProviderLimits(timeout_seconds=5.0, connect_timeout_seconds=2.0)
    url = f"https://{host}:{served.port}"
    return Client("webpush", limits, url, ca_file, addresses=addresses)


async def test_given_addresses_a_connection_goes_to_them_by_number_with_tls_for_the_host_name(
    ca_file: str,
) -> None:
    # push.test resolves nowhere but through ``addresses``; nothing listens on 127.0.0.2, so
    # that address refuses and the next one is tried.
    apns = ApnsPeer()
    apns.certificate = apns.ca.issue_cert("push.test")
    addresses = Addresses(["127.0.0.2", "127.0.0.1"])
    with serve(apns) as served:
        client = named_client(served, ca_file, "push.test", addresses)
        for number in range(3):
            assert (await post(client, apns, number)).status == 200
        await client.close()
    assert addresses.asked == [("push.test", served.port)]
    assert (apns.connections, apns.server_names, len(apns.accepted)) == (1, ["push.test"], 3)


async def test_each_new_connection_asks_again_and_connects_only_where_it_was_told(
    served: Served, ca_file: str, peer: ApnsPeer
) -> None:
    # The second connection is told 127.0.0.3, where nothing listens: it fails there rather
    # than find the server by the name.
    addresses = Addresses(["127.0.0.1"], ["127.0.0.3"])
    client = named_client(served, ca_file, "localhost", addresses)
    assert (await post(client, peer)).status == 200
    await client.close()
    error = await failure(post(client, peer, 1))
    await client.close()
    assert (error.message, error.not_accepted) == (
        "webpush: not sent (ConnectError: Connection refused)", True,
    )  # fmt: skip
    assert (len(addresses.asked), peer.connections) == (2, 1)


async def test_a_certificate_for_another_name_is_refused_at_the_address_given(
    served: Served, ca_file: str, peer: ApnsPeer
) -> None:
    client = named_client(served, ca_file, "push.test", Addresses(["127.0.0.1"]))
    error = await failure(post(client, peer))
    await client.close()
    assert error.not_accepted
    assert error.message.startswith("webpush: not sent (TLSError: ")
    assert "push.test" in error.message  # Hostname mismatch, certificate is not valid for it
    assert peer.requests == 0


async def test_what_the_addresses_source_raises_reaches_the_caller_and_nothing_connects(
    served: Served, ca_file: str, peer: ApnsPeer
) -> None:
    class Forbidden(Exception):
        pass

    client = named_client(served, ca_file, "push.test", Addresses(Forbidden("private")))
    for _ in range(2):  # and the next request asks again
        with pytest.raises(Forbidden, match="private"):
            await post(client, peer)
    await client.close()
    assert (peer.connections, peer.requests) == (0, 0)


def test_an_ipv6_server_is_named_in_brackets() -> None:
    limits = ProviderLimits()
    assert Client("x", limits, "https://[2001:db8::1]:8443").authority == "[2001:db8::1]:8443"
    assert Client("x", limits, "https://[2001:db8::1]").authority == "[2001:db8::1]"
    assert Client("x", limits, "https://push.example").authority == "push.example"


@pytest.mark.parametrize(
    ("failure", "text", "not_accepted"),
    [
        (Failed("ConnectError", sent=False, detail="Connection refused"),
         "cannot connect to push.test: Connection refused", True),
        (Failed("TLSError", sent=False, detail="certificate has expired"),
         "TLS with push.test refused: certificate has expired", True),
        (Failed("ConnectTimeout", sent=False), "no connection to push.test in time", True),
        (Failed("NoFreeStream", sent=False), "no free stream to push.test in time", True),
        (Failed("NoHttp2", sent=False, detail="the server does not speak HTTP/2"),
         "push.test does not speak HTTP/2", True),
        (Failed("RefusedStream", sent=False),
         "the request to push.test never left (RefusedStream)", True),
        (Failed("ReadTimeout", sent=True), "push.test did not answer in time", False),
        (Failed("StreamReset", sent=True), "connection to push.test broke (StreamReset)", False),
    ],
)  # fmt: skip
def test_a_recipient_s_server_without_an_answer_is_worded_with_its_host(
    failure: Failed, text: str, not_accepted: bool
) -> None:
    error = unreachable(failure, "push.test")
    assert (error.error_class, error.message, error.not_accepted) == (
        ErrorClass.TRANSIENT, text, not_accepted,
    )  # fmt: skip
