"""A local APNs provider API, ``POST /3/device/<token>`` over HTTP/2 and TLS, as strict as
Apple's ("Sending notification requests to APNs", "Establishing a token-based connection to
APNs", "Handling notification responses from APNs").

It speaks HTTP/2 itself (``h2``, server side, on asyncio) over TLS with ALPN ``h2``, with a
certificate for 127.0.0.1 from a ``trustme`` CA (one per process; clients trust
``peer.ca.cert_pem``). The first check a request fails is answered ``{"reason": ...}``:
405 MethodNotAllowed but for POST; 404 BadPath; 400 BadDeviceToken unless 64 hex digits;
403 MissingProviderToken, InvalidProviderToken (the JWT's header is not {alg ES256, kid} of
a key it knows, ``iss`` not that key's team, or the ES256 signature fails: verified once per
token, as APNs keeps a connection's token), ExpiredProviderToken (``iat`` over an hour old,
or expired by the fault); 400 DuplicateHeaders, MissingTopic, TopicDisallowed, InvalidPushType
(``apns-push-type`` alert with an alert, badge or sound, or background with only
``content-available: 1``), BadPriority (5 or 10; 5 for background), BadExpirationDate (not
digits), BadMessageId (``apns-id`` not a canonical UUID; one is made when absent),
BadCollapseId (over 64 bytes); 413 PayloadTooLarge over 4096 bytes; 400 PayloadEmpty for a
body that is no JSON object with an ``aps`` dictionary (APNs names no reason for that); then
``unregister(token)`` (410 Unregistered, with a timestamp) and ``script(token, status,
reason)``. An accepted request is kept in ``accepted`` as a ``Push`` (token, header fields,
decoded payload) and answered 200 with its ``apns-id``.

``fail(Fault.X, times=n)`` answers 429 TooManyRequests, 500 InternalServerError, 503
ServiceUnavailable or 403 ExpiredProviderToken (the token stays expired: only a new one
passes), holds requests until ``released`` (HANG) or drops the connection (DROP);
``mute`` stops reading (a dead server). ``max_streams`` is the SETTINGS_MAX_CONCURRENT_STREAMS
it announces (more breaks the connection), ``delay`` holds every answer, ``goaway_after = n``
sends GOAWAY at a connection's n-th stream, answers the streams up to it and closes.
``requests``, ``connections`` and ``max_open`` (most streams open at once) count.

``serve(peer)`` puts it on the network for tests, on ``h2`` (so every frame a client writes
is read by the protocol library, strictly). ``tests.peers.apns_standalone`` serves the same
checks on another HTTP/2 implementation, in a process of its own, for benchmarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, cast

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hpack
import jwt
import trustme
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from hyperframe.frame import GoAwayFrame

PEER_TEAM_ID: Final = "PEERTEAM01"
PEER_KEY_ID: Final = "PEERKEY001"
PEER_TOPIC: Final = "com.example.clarion"
TOKEN_MAX_AGE: Final = 3600
MAX_PAYLOAD: Final = 4096
MAX_COLLAPSE_ID: Final = 64
HANG_SECONDS: Final = 30.0
_DEVICE = re.compile(r"/3/device/([^/]*)")
_TOKEN = re.compile(r"[0-9a-fA-F]{64}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")

Reply = tuple[int, dict[str, str], bytes]
_CONFIG: Final = h2.config.H2Configuration(client_side=False, header_encoding=None)


class _Encoder(hpack.Encoder):  # Huffman coding would cost the peer 20 µs an answer
    def encode(self, headers: Any, huffman: bool = False) -> bytes:
        return super().encode(headers, huffman=False)


# Every peer of a process has its certificate from this one authority.
_AUTHORITY: Final = trustme.CA()


class Fault(StrEnum):
    TOO_MANY_REQUESTS = "429 TooManyRequests"
    ERROR = "500 InternalServerError"
    UNAVAILABLE = "503 ServiceUnavailable"
    EXPIRED_TOKEN = "403 ExpiredProviderToken"
    HANG = "hang"
    DROP = "drop"


@dataclass(frozen=True)
class Push:
    """One accepted notification."""

    token: str
    headers: dict[str, str]
    payload: dict[str, Any]
    apns_id: str


def refusal(status: int, reason: str, timestamp: int | None = None) -> Reply:
    body: dict[str, Any] = {"reason": reason}
    if timestamp is not None:
        body["timestamp"] = timestamp
    return status, {"content-type": "application/json"}, json.dumps(body).encode()


class ApnsPeer:
    """The peer's state and its checks; ``serve`` or ``main`` put it on the network."""

    def __init__(
        self,
        *,
        key: ec.EllipticCurvePrivateKey | None = None,
        topics: tuple[str, ...] = (PEER_TOPIC,),
        max_streams: int = 1000,
        delay: float = 0.0,
        goaway_after: int = 0,
    ) -> None:
        self.key = key or ec.generate_private_key(ec.SECP256R1())
        # kid -> (team id, public key)
        self.keys = {PEER_KEY_ID: (PEER_TEAM_ID, self.key.public_key())}
        self.topics = set(topics)
        self.max_streams = max_streams
        self.delay = delay
        self.goaway_after = goaway_after
        self.ca = _AUTHORITY
        self.certificate = self.ca.issue_cert("127.0.0.1", "localhost")
        self.accepted: list[Push] = []
        self.requests = 0
        self.connections = 0
        self.max_open = 0
        self.retry_after: str | None = None
        # Every distinct provider token that verified, in the order first seen.
        self.provider_tokens: list[str] = []
        self.scripted: dict[str, Reply] = {}
        self.expired: set[str] = set()
        self._verified: dict[str, int] = {}
        self._fault: Fault | None = None
        self._fault_times: int | None = None
        self.released = threading.Event()
        self.mute = False
        self.live: set[_Server] = set()

    @property
    def key_pem(self) -> str:
        """The signing key as Apple hands it out (a ``.p8`` file: PKCS#8 PEM)."""
        raw = self.key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        return raw.decode()

    def tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.certificate.configure_cert(context)
        context.set_alpn_protocols(["h2"])
        return context

    def unregister(self, token: str, timestamp_ms: int | None = None) -> None:
        """Answer ``token`` 410 Unregistered from now on."""
        stamp = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        self.scripted[token.lower()] = refusal(410, "Unregistered", stamp)

    def script(self, token: str, status: int, reason: str) -> None:
        self.scripted[token.lower()] = refusal(status, reason)

    def fail(
        self, fault: Fault, *, times: int | None = None, retry_after: str | None = None
    ) -> None:
        """Answer the next ``times`` requests (all, if None) with ``fault``."""
        self._fault, self._fault_times, self.retry_after = fault, times, retry_after

    def heal(self) -> None:
        self._fault = None

    def take_fault(self) -> Fault | None:
        fault = self._fault
        if fault is not None and self._fault_times is not None:
            self._fault_times -= 1
            if self._fault_times <= 0:
                self._fault = None
        return fault

    def stats(self) -> dict[str, int]:
        return {
            "accepted": len(self.accepted),
            "requests": self.requests,
            "connections": self.connections,
        }

    def handle(self, fields: list[tuple[str, str]], body: bytes, fault: Fault | None) -> Reply:
        """The answer to one request (``fault``: the switched-on fault it met, if any)."""
        headers = dict(fields)
        if headers.get(":path") == "/_peer/stats" and headers.get(":method") == "GET":
            return 200, {"content-type": "application/json"}, json.dumps(self.stats()).encode()
        if fault is not None:
            if fault is Fault.EXPIRED_TOKEN:
                self.expired.add(headers.get("authorization", "").partition(" ")[2])
            status, reason = fault.split()
            reply = refusal(int(status), reason)
            if self.retry_after is not None and status in {"429", "503"}:
                reply[1]["retry-after"] = self.retry_after
            return reply
        if headers.get(":method") != "POST":
            return refusal(405, "MethodNotAllowed")
        device = _DEVICE.fullmatch(headers.get(":path", ""))
        if device is None:
            return refusal(404, "BadPath")
        token = device.group(1)
        if not _TOKEN.fullmatch(token):
            return refusal(400, "BadDeviceToken")
        refused = self._authorized(headers.get("authorization", ""))
        if refused:
            return refusal(403, refused)
        if len(headers) != len(fields):
            return refusal(400, "DuplicateHeaders")
        payload, problem = _payload(body)
        if problem:
            return refusal(413 if problem == "PayloadTooLarge" else 400, problem)
        problem = self._fields(headers, payload)
        if problem:
            return refusal(400, problem)
        if token.lower() in self.scripted:
            return self.scripted[token.lower()]
        apns_id = headers.get("apns-id") or str(uuid.uuid4()).upper()
        kept = {name: value for name, value in headers.items() if not name.startswith(":")}
        self.accepted.append(Push(token, kept, payload, apns_id))
        return 200, {"apns-id": apns_id}, b""

    def _authorized(self, authorization: str) -> str:
        """ "" when the provider token passes, else APNs' reason."""
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return "MissingProviderToken"
        if token in self.expired:
            return "ExpiredProviderToken"
        issued = self._verified.get(token)
        if issued is None:
            issued = self._verify(token)
            if issued is None:
                return "InvalidProviderToken"
        if time.time() - issued > TOKEN_MAX_AGE:
            return "ExpiredProviderToken"
        return ""

    def _verify(self, token: str) -> int | None:
        """The token's ``iat`` when its header, issuer and signature are right."""
        try:
            header = jwt.get_unverified_header(token)
            team, public_key = self.keys[header.get("kid", "")]
            if header.get("alg") != "ES256":
                return None
            claims = jwt.decode(
                token,
                public_key,
                algorithms=["ES256"],
                issuer=team,
                options={"require": ["iss", "iat"], "verify_iat": False},
            )
        except (jwt.PyJWTError, KeyError):
            return None
        issued = claims["iat"]
        if not isinstance(issued, int):
            return None
        if len(self._verified) > 10_000:
            self._verified.clear()
        self._verified[token] = issued
        self.provider_tokens.append(token)
        return issued

    def _fields(self, headers: dict[str, str], payload: dict[str, Any]) -> str:
        """ "" when the apns-* fields are right for the payload, else APNs' reason."""
        topic = headers.get("apns-topic")
        if not topic:
            return "MissingTopic"
        if topic not in self.topics:
            return "TopicDisallowed"
        push_type, priority = headers.get("apns-push-type"), headers.get("apns-priority", "10")
        aps = payload["aps"]
        if push_type == "background":
            if aps != {"content-available": 1}:
                return "InvalidPushType"
            if priority != "5":
                return "BadPriority"
        elif push_type != "alert" or not {"alert", "badge", "sound"} & aps.keys():
            return "InvalidPushType"
        if priority not in {"5", "10"}:
            return "BadPriority"
        if not headers.get("apns-expiration", "0").isdigit():
            return "BadExpirationDate"
        if "apns-id" in headers and not _UUID.fullmatch(headers["apns-id"]):
            return "BadMessageId"
        if len(headers.get("apns-collapse-id", "").encode()) > MAX_COLLAPSE_ID:
            return "BadCollapseId"
        return ""


def _payload(body: bytes) -> tuple[dict[str, Any], str]:
    if len(body) > MAX_PAYLOAD:
        return {}, "PayloadTooLarge"
    try:
        payload = json.loads(body) if body else None
    except ValueError:
        payload = None
    if not isinstance(payload, dict) or not isinstance(payload.get("aps"), dict):
        return {}, "PayloadEmpty"
    return payload, ""


class _Server(asyncio.Protocol):
    """One client connection to the peer."""

    transport: asyncio.Transport

    def __init__(self, peer: ApnsPeer) -> None:
        self.peer = peer
        self.h2 = h2.connection.H2Connection(_CONFIG)
        self.h2.encoder = _Encoder()
        limit = {h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: peer.max_streams}
        self.h2.local_settings = h2.settings.Settings(client=False, initial_values=limit)
        self.streams: dict[int, tuple[list[tuple[str, str]], bytearray]] = {}
        self.pending: set[int] = set()  # taken, not answered yet
        self.received = self.answered = 0
        self.last_stream: int | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.peer.connections += 1
        self.peer.live.add(self)
        self.h2.initiate_connection()
        self._write()

    def data_received(self, data: bytes) -> None:
        if self.peer.mute:
            return
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError:
            self._write()
            self.close()
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                self._opened(event.stream_id or 0, event.headers or [])
            elif isinstance(event, h2.events.DataReceived):
                stream_id = event.stream_id or 0
                self.h2.acknowledge_received_data(event.flow_controlled_length or 0, stream_id)
                stream = self.streams.get(stream_id)
                if stream is not None and len(stream[1]) <= MAX_PAYLOAD:
                    stream[1].extend(event.data or b"")
            elif isinstance(event, h2.events.StreamEnded):
                self._request(event.stream_id or 0)
            elif isinstance(event, h2.events.StreamReset):
                self.streams.pop(event.stream_id or 0, None)
                self.pending.discard(event.stream_id or 0)
        self._write()

    def _opened(self, stream_id: int, headers: Any) -> None:
        if self.last_stream is not None and stream_id > self.last_stream:
            return  # after GOAWAY: not processed
        fields = [(bytes(k).decode(), bytes(v).decode()) for k, v in headers]
        self.streams[stream_id] = (fields, bytearray())
        self.pending.add(stream_id)
        self.peer.max_open = max(self.peer.max_open, len(self.pending))
        self.received += 1
        if self.received == self.peer.goaway_after:
            self.last_stream = stream_id
            self._write()
            frame = GoAwayFrame(0)
            frame.last_stream_id = stream_id
            self.transport.write(frame.serialize())

    def _request(self, stream_id: int) -> None:
        stream = self.streams.pop(stream_id, None)
        if stream is None:
            return
        self.peer.requests += 1
        fault = self.peer.take_fault() if dict(stream[0]).get(":path") != "/_peer/stats" else None
        loop = asyncio.get_running_loop()
        if fault is Fault.DROP:
            self.transport.abort()
        elif fault is Fault.HANG:
            loop.run_in_executor(None, self.peer.released.wait, HANG_SECONDS).add_done_callback(
                lambda _: self._answer(stream_id, refusal(500, "InternalServerError"))
            )
        else:
            reply = self.peer.handle(stream[0], bytes(stream[1]), fault)
            if self.peer.delay:
                loop.call_later(self.peer.delay, self._answer, stream_id, reply)
            else:
                self._answer(stream_id, reply, flush=False)

    def _answer(self, stream_id: int, reply: Reply, *, flush: bool = True) -> None:
        if stream_id not in self.pending or self.transport.is_closing():
            return
        self.pending.discard(stream_id)
        status, headers, body = reply
        fields = [(":status", str(status)), *headers.items()]
        with contextlib.suppress(h2.exceptions.ProtocolError):  # the client reset it
            self.h2.send_headers(stream_id, fields, end_stream=not body)
            if body:
                self.h2.send_data(stream_id, body, end_stream=True)
        self.answered += 1
        if flush or self.answered % 8 == 0:  # a batch goes out in parts, as APNs answers
            self._write()
        if self.last_stream is not None and not self.pending:
            self._write()
            self.close()

    def _write(self) -> None:
        data = self.h2.data_to_send()
        if data and not self.transport.is_closing():
            self.transport.write(data)

    def close(self) -> None:
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.peer.live.discard(self)


@dataclass(frozen=True)
class Served:
    """A running peer's address."""

    port: int

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"


@contextlib.contextmanager
def serve(peer: ApnsPeer) -> Iterator[Served]:
    """Serve ``peer`` on a free port of 127.0.0.1 in a thread of its own; stop it after."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    listening = loop.create_server(lambda: _Server(peer), "127.0.0.1", 0, ssl=peer.tls())
    server = asyncio.run_coroutine_threadsafe(listening, loop).result(10)
    try:
        yield Served(server.sockets[0].getsockname()[1])
    finally:
        peer.released.set()
        asyncio.run_coroutine_threadsafe(_stop(peer, server), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def _stop(peer: ApnsPeer, server: asyncio.Server) -> None:
    server.close()
    for connection in list(peer.live):
        connection.close()
    await asyncio.sleep(0.05)
    for connection in list(peer.live):
        connection.transport.abort()
    await server.wait_closed()
    await asyncio.get_running_loop().shutdown_default_executor()
