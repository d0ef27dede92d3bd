"""The ``webpush`` provider kind: push messages to browsers' push services (RFC 8030),
encrypted for the browser (RFC 8291) and signed by the application server (VAPID, RFC 8292).

What a message is made of (the subscription's keys, the Declarative Web Push JSON, the
aes128gcm body, the VAPID JWT, TTL and Topic) is ``app.providers.webpush_message``'s; this
module sends it and reads the answer. A subscription whose keys a browser could not decrypt
with fails for good as INVALID_ADDRESS, and a plaintext over ``MAX_PLAINTEXT_BYTES`` as
PAYLOAD_TOO_LARGE, both before anything is sent: a notification is never cut.

One ``POST`` to the endpoint per message, over HTTP/2 and TLS as the push services speak it
(Mozilla's autopush, FCM's Web Push endpoints, Apple's web.push.apple.com, Microsoft's WNS),
through Clarion's own client (``app.providers.http2``): one ``http2.Client`` per push service
origin (host and port), made on first use with the provider's limits and kept while the
origin is among the ``MAX_ORIGINS`` used last; past that the least recently used one that has
no send in flight is dropped and its connection closed. Many subscriptions share a few
origins, so a worker keeps one TLS connection per push service, each carrying every send to
that service at once as streams, the frames of all the sends of a loop turn written
together. Its headers: ``Authorization`` (VAPID, one JWT per origin for 11 hours), ``TTL``
(the seconds left of the notification's TTL at this attempt), ``Urgency`` (high, normal or
low as the priority), ``Topic`` when the push parts have a collapse key, ``Content-Encoding:
aes128gcm``. It replaced aiohttp's HTTP/1.1 (one request per connection at a time, a
syscall each way per request): against the local push service a send costs 325 to 350 µs of
CPU instead of 410 to 430, of which making the message is about 155
(``bench/webpush_client.py``); end to end the workers spend about 150 µs a delivery less
(``bench/HISTORY.md``, "Real providers"). Most of what is left of the transport is
decoding the answers' header blocks, each unlike the last (its own ``Location``).

Endpoints are https only: push services speak TLS (RFC 8030 section 8), and this client
speaks HTTP/2 over TLS only. An ``http://`` endpoint fails for good (REJECTED, not accepted),
and the catalog refuses ``allow_http_hosts`` for this kind; a private push service is trusted
through ``ca_file`` (the tests' and the benchmark's local push service is).

The endpoint comes from a browser, that is from whoever sends notifications, so it is called
only as ``app.providers.ssrf`` allows, as webhooks are: ``Policy.target`` checks the URL
before anything else, and each connection the client opens asks ``Policy.addresses`` where
to go: the host is resolved and every address checked (loopback, private, link-local...
refused unless inside ``allow_networks``), and the client connects by number to those
addresses only, never resolving the name itself, with TLS sending the host name (SNI) and
verifying the certificate for it. A refusal fails for good (REJECTED, not accepted); a name
that does not resolve is TRANSIENT and not accepted. A request without an answer is read as
``http2.Client`` reads it, worded by ``http2.unreachable`` (naming the host): not accepted
only when it certainly never left (no connection, TLS refused, the stream refused), else it
may have reached the push service, which is then asked again, never another provider.

Answers: 200, 201 and 202 are sent; the message id is the ``Location`` header (the push
message resource), else the delivery id. 404 and 410: the subscription is gone (PERMANENT
INVALID_ADDRESS); 413: PAYLOAD_TOO_LARGE; 400 and redirects (never followed): REJECTED; 401
and 403 (the VAPID token or key refused), 429 and 5xx as ``http.status_error`` classes them.
Error texts name the provider, the status, the push service's host and its reason code
(autopush's ``errno``, Apple's ``reason``), never the endpoint's path, the keys or the JWT.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

import msgspec

from app.catalog.push import WebPushConfig, p256_key
from app.providers import http, http2
from app.providers.base import Message, ProviderError, Reason
from app.providers.ssrf import Policy, Refused, Resolver, Target, Unresolvable, system_resolver
from app.providers.webpush_message import (
    MAX_BODY_BYTES,
    MAX_PLAINTEXT_BYTES,
    Vapid,
    encrypt,
    payload,
    subscription,
    topic,
    ttl_seconds,
)
from streams.core.vocabulary import ErrorClass, Priority

# Push service origins whose client (and connection) a worker keeps.
MAX_ORIGINS: Final = 64
URGENCY: Final = {Priority.HIGH: b"high", Priority.NORMAL: b"normal", Priority.LOW: b"low"}
# A Location longer than this is not kept as the message id (a push service's own URL).
MAX_LOCATION_CHARS: Final = 2048
_CODING: Final = (
    (b"content-encoding", b"aes128gcm"),
    (b"content-type", b"application/octet-stream"),
)

_REASON_CODE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class _Refusal(msgspec.Struct):
    errno: int | None = None
    reason: str | None = None


_decode_refusal = msgspec.json.Decoder(_Refusal).decode


def _reason_code(body: bytes) -> str:
    """The push service's reason code in its answer (autopush's errno, Apple's reason), or ""
    : nothing else of an answer is quoted, it comes from whatever the endpoint names."""
    try:
        refusal = _decode_refusal(body) if body[:1] == b"{" else _Refusal()
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ""
    if refusal.errno is not None:
        return f"errno {refusal.errno}"
    if refusal.reason and _REASON_CODE.fullmatch(refusal.reason):
        return refusal.reason
    return ""


class _Origin:
    """One push service's client and the sends on it now (it is closed only without any)."""

    __slots__ = ("client", "sending")

    def __init__(self, client: http2.Client) -> None:
        self.client = client
        self.sending = 0


class WebPushProvider:
    """Encrypts, signs and POSTs push messages to each subscription's push service."""

    def __init__(
        self,
        name: str,
        config: WebPushConfig,
        secrets: Mapping[str, str],
        *,
        resolver: Resolver = system_resolver,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        try:
            key = p256_key(secrets.get("vapid_private_key_env", ""))
        except ValueError as error:
            variable = config.vapid_private_key_env
            raise ValueError(f"{name}: vapid_private_key_env ({variable}) {error}") from None
        self._config = config
        self._clock = clock
        self.vapid = Vapid(key, config.subject, clock)
        self.policy = Policy(config, resolver)
        self._tls: ssl.SSLContext | None = None  # one for every origin's client
        # (host, port) -> its client, the least recently used first
        self._origins: OrderedDict[tuple[str, int], _Origin] = OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()

    async def send(self, message: Message) -> str:
        """Push ``message`` to its subscription; the push message's Location (or the delivery
        id), or ``ProviderError``."""
        try:
            to = subscription(message.address)
        except ValueError as error:
            raise self._permanent(str(error), Reason.INVALID_ADDRESS) from None
        if to.endpoint[:8].lower() != "https://":
            raise self._refused("the endpoint is not an https URL (push services use TLS)")
        try:
            target = self.policy.target(to.endpoint)
        except Refused as refusal:
            raise self._refused(str(refusal)) from None
        plaintext = payload(message)
        if len(plaintext) > MAX_PLAINTEXT_BYTES:
            raise self._permanent(
                f"the push payload is {len(plaintext)} bytes, over the {MAX_PLAINTEXT_BYTES} "
                f"that fit into Web Push's {MAX_BODY_BYTES} once encrypted",
                Reason.PAYLOAD_TOO_LARGE,
            )
        body = encrypt(plaintext, to.public_key, to.auth, point=to.point)
        fields = self._fields(f"https://{target.host_header}", message)
        origin = self._take(target)
        try:
            response = await origin.client.request(b"POST", target.path, fields, body)
        except Refused as refusal:
            raise self._refused(str(refusal)) from None
        except Unresolvable as error:
            raise ProviderError(
                ErrorClass.TRANSIENT, f"{self.name}: {error}", not_accepted=True
            ) from None
        finally:
            origin.sending -= 1
            if len(self._origins) > MAX_ORIGINS:  # one was kept past the bound while in use
                self._drop_idle()
        if 200 <= response.status < 300:
            location = response.headers.get("location", "")
            return location if 0 < len(location) <= MAX_LOCATION_CHARS else message.delivery_id
        raise self._error(response, target.host)

    def _fields(self, origin: str, message: Message) -> list[tuple[bytes, bytes]]:
        fields = [
            (b"authorization", self.vapid.authorization(origin).encode()),
            (b"ttl", b"%d" % ttl_seconds(message.expires_ms, self._clock())),
            (b"urgency", URGENCY[message.priority]),
            *_CODING,
        ]
        if message.push.collapse_key:
            fields.append((b"topic", topic(message.push.collapse_key).encode()))
        return fields

    def _take(self, target: Target) -> _Origin:
        """The client of ``target``'s origin, counted as sending until the caller is done."""
        key = (target.host, target.port)
        origin = self._origins.get(key)
        if origin is None:
            if self._tls is None:
                self._tls = http2.tls_context(self._config.ca_file)
            client = http2.Client(
                self.name,
                self._config,
                f"https://{target.host_header}",
                tls=self._tls,
                addresses=self._addresses,
                failure=self._unreachable,
            )
            origin = self._origins[key] = _Origin(client)
            self._drop_idle()
        else:
            self._origins.move_to_end(key)
        origin.sending += 1
        return origin

    def _drop_idle(self) -> None:
        """Close the least recently used origins past ``MAX_ORIGINS`` that send nothing now
        (the newest, just made, is not among them)."""
        excess = len(self._origins) - MAX_ORIGINS
        for key in list(self._origins)[:-1]:
            if excess <= 0:
                return
            origin = self._origins[key]
            if not origin.sending:
                del self._origins[key]
                excess -= 1
                self._close_later(origin.client)

    def _close_later(self, client: http2.Client) -> None:
        task = asyncio.get_running_loop().create_task(client.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _addresses(self, host: str, port: int) -> Awaitable[list[str]]:
        """Where a connection to ``host`` may go: ``Policy.addresses``, each checked."""
        return self.policy.addresses(host, port, self._config.connect_timeout_seconds)

    async def close(self) -> None:
        """Close every origin's connection."""
        origins, self._origins = list(self._origins.values()), OrderedDict()
        for origin in origins:
            self._close_later(origin.client)
        if self._closing:
            await asyncio.wait(list(self._closing))

    def _error(self, response: http2.Response, host: str) -> ProviderError:
        """The ``ProviderError`` for an answer other than 2xx."""
        status = response.status
        code = _reason_code(response.body)
        detail = f"{host} ({code})" if code else host
        text = f"{self.name}: HTTP {status}: {detail}"
        if status in (404, 410):
            return ProviderError(
                ErrorClass.PERMANENT,
                f"{text}: the subscription is gone",
                reason=Reason.INVALID_ADDRESS,
            )
        if status == 413:
            return ProviderError(ErrorClass.PERMANENT, text, reason=Reason.PAYLOAD_TOO_LARGE)
        if status == 400 or 300 <= status < 400:
            # A redirect is not followed: the endpoint is the subscription's, not ours to move.
            return ProviderError(ErrorClass.PERMANENT, text, reason=Reason.REJECTED)
        return http.status_error(self.name, http2.answer(response), detail)

    def _permanent(self, text: str, reason: Reason) -> ProviderError:
        # Nothing was sent: the message fails before any request.
        return ProviderError(
            ErrorClass.PERMANENT, f"{self.name}: {text}", reason=reason, not_accepted=True
        )

    def _refused(self, why: str) -> ProviderError:
        return self._permanent(f"subscription endpoint refused: {why}", Reason.REJECTED)

    def _unreachable(self, failure: http2.Failed, host: str) -> ProviderError:
        """``http2.unreachable``'s reading of a request without an answer, naming this
        provider."""
        error = http2.unreachable(failure, host)
        return ProviderError(
            error.error_class, f"{self.name}: {error.message}", not_accepted=error.not_accepted
        )
