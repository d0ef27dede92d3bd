"""What the HTTP adapters (SendGrid, Twilio, webhooks) and the status webhooks' senders
share: one keep-alive HTTP client per adapter (per producer) with its time limits, a POST
that reads the answer with a size bound, and the classes of failures every HTTP API has.

``Client`` wraps one ``aiohttp.ClientSession``, made at the first call inside the running
loop (adapters are built before it) and closed by ``close``. Connections stay open between
sends, at most ``max_in_flight`` of them (100 when unbounded), so a busy provider costs a TLS
handshake per connection, not per message. Redirects are not followed, no cookies are kept,
and nothing is taken from the environment: no proxy, no netrc credentials, no CA settings.

Why aiohttp: on the two cores Clarion is measured on, httpx with httpcore cost 600 to 1,000
µs of CPU per request (some 3,000 Python calls), and httpcore's pool needed two workaround
pools of our own (httpcore #822, #1035); the HTTP adapters delivered 1,300 to 2,900
deliveries/s end to end (``bench/providers.py``). aiohttp's client costs 120 to 200 µs per
request against the same local Twilio peer (8 in flight, one process), one pool of its own
keeps connections per (host, port, TLS), and the webhook adapter's SSRF guard is simply the
resolver that pool connects through (``ssrf.GuardedResolver``); the adapters then deliver
about 4,000/s.

Whether a failed call may have sent the message decides failover (``not_accepted``): a call
that never reached the provider (no connection, the name did not resolve, TLS refused, no
connection free or made within ``connect_timeout_seconds``) certainly did not; one that
failed after the request left (no answer within ``timeout_seconds``, a dropped connection)
may have. The whole call is bounded by ``timeout_seconds``: when that comes first, even
while connecting (a ``connect_timeout_seconds`` as long or longer), the call counts as one
that may have sent. The provider's own answers are classified by ``status_error`` for what
HTTP says alike for every API (429, 5xx, a refused credential); each adapter reads its
provider's error codes first.
"""

from __future__ import annotations

import email.utils
import os
import ssl
import time
from collections.abc import Callable, Mapping
from datetime import UTC
from typing import Final

import aiohttp
import certifi
from aiohttp.abc import AbstractResolver
from multidict import CIMultiDictProxy
from yarl import URL

from app.catalog.providers import ProviderLimits
from app.logging import mask
from app.providers.base import ProviderError, Reason
from streams.core.vocabulary import ErrorClass

# A Retry-After longer than this is taken as this: a retry is still scheduled within the
# TTL and the retry policy's ceiling decides the rest.
MAX_RETRY_AFTER = 3600.0
# An answer body beyond this is cut: error texts and ids are small, and a provider (or what
# poses as one) must not make a worker hold megabytes per call.
MAX_ANSWER_BYTES = 64 * 1024
# An error text quoted from a provider is cut to this many characters (after masking).
MAX_ERROR_DETAIL: Final = 200
MAX_QUOTED_CHARS = 300
# Idle connections are closed after this long: inside the idle limit of most servers and
# load balancers (nginx 75 s, AWS load balancers 60 s), so they rarely close one under a
# request, yet long enough to carry a quiet stretch of sends.
KEEPALIVE_SECONDS: Final = 15.0
# aiohttp rounds time limits over its threshold (5 s) up to a whole second; the limits are
# configuration and the worker's own limit of the same length would then always come first.
_NO_ROUNDING: Final = float("inf")

# What a call that got no (readable) answer means, as the adapter words it: the failure,
# and the host the call went to.
Failure = Callable[[BaseException, str], ProviderError]

# Failures before any byte of the request could have left, by the name texts give them.
# Subclasses come before their bases: a connect timeout is a TimeoutError too.
_NOT_SENT: Final[tuple[tuple[type[BaseException], str], ...]] = (
    # No connection in time: neither a pooled one free nor a new one made.
    (aiohttp.ConnectionTimeoutError, "ConnectTimeout"),
    (aiohttp.ClientConnectorDNSError, "NameNotResolved"),
    (aiohttp.ClientSSLError, "TLSError"),
    (aiohttp.ClientConnectorError, "ConnectError"),
    (aiohttp.InvalidURL, "InvalidURL"),
    (aiohttp.NonHttpUrlClientError, "UnsupportedProtocol"),
)
_MAY_HAVE_SENT: Final[tuple[tuple[type[BaseException], str], ...]] = (
    (aiohttp.ServerDisconnectedError, "ServerDisconnected"),
    (aiohttp.ClientPayloadError, "BrokenAnswer"),
    (aiohttp.ClientResponseError, "BadAnswer"),
    # The whole call's limit, reached after the request left (or while connecting, when
    # connect_timeout_seconds is not shorter: which, the error does not tell).
    (TimeoutError, "ReadTimeout"),
)
_NOT_SENT_TYPES: Final = tuple(cls for cls, _ in _NOT_SENT)


def kind(error: BaseException) -> str:
    """The name of a transport failure in texts (aiohttp's own texts may carry the URL)."""
    for cls, name in _NOT_SENT + _MAY_HAVE_SENT:
        if isinstance(error, cls):
            return name
    return "ReadError"  # a reset or broken connection while sending or reading


def sent_nothing(error: BaseException) -> bool:
    """Whether the call failed before any byte of its request could have left."""
    return isinstance(error, _NOT_SENT_TYPES)


def tls_context(ca_file: str = "") -> ssl.SSLContext:
    """Certificates verified, host name included, against ``ca_file``'s CAs, or certifi's
    (those httpx trusted before)."""
    return ssl.create_default_context(cafile=ca_file or certifi.where())


class Answer:
    """A provider's answer: status, headers (case-insensitive) and the (bounded) body."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: CIMultiDictProxy[str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body


class Client:
    """Keep-alive HTTP/1.1 connections for one adapter (see the module documentation).

    ``resolver`` replaces the system's name lookups (the webhook adapter's SSRF guard); its
    answers are not cached, so each new connection is resolved, and checked, on its own.
    ``failure`` words a transport failure (default: ``transport_error`` for ``name``)."""

    def __init__(
        self,
        name: str,
        limits: ProviderLimits,
        *,
        ca_file: str = "",
        resolver: AbstractResolver | None = None,
        failure: Failure | None = None,
    ) -> None:
        self.name = name
        self._limits = limits
        self._ca_file = ca_file
        self._resolver = resolver
        self._failure = failure or self._transport_error
        self._session: aiohttp.ClientSession | None = None

    async def post(self, url: URL, *, data: bytes, headers: Mapping[str, str]) -> Answer:
        """POST ``data`` to ``url`` and read the answer up to ``MAX_ANSWER_BYTES``; a failure
        of the transport becomes the adapter's ``ProviderError``."""
        session = self._session or self._open()
        try:
            response = await session.post(url, data=data, headers=headers, allow_redirects=False)
            try:
                body = await _bounded(response)
            except BaseException:
                response.close()
                raise
        except (aiohttp.ClientError, OSError) as error:  # TimeoutError is an OSError
            raise self._failure(error, url.raw_host or "") from None
        return Answer(response.status, response.headers, body)

    async def close(self) -> None:
        """Close every connection."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _open(self) -> aiohttp.ClientSession:
        limits = self._limits
        connector = aiohttp.TCPConnector(
            limit=limits.max_in_flight or 100,
            keepalive_timeout=KEEPALIVE_SECONDS,
            ssl=tls_context(self._ca_file),
            resolver=self._resolver,
            # A guard's answer is for the connection it was asked for: cached, it would be
            # used for later ones too, unasked.
            use_dns_cache=self._resolver is None,
        )
        timeout = aiohttp.ClientTimeout(
            total=limits.timeout_seconds,
            # Waiting for a free connection and making one: a pool busy that long is a
            # provider that does not keep up, and another one may take the message.
            connect=limits.connect_timeout_seconds,
            sock_connect=limits.connect_timeout_seconds,
            ceil_threshold=_NO_ROUNDING,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
        )
        return self._session

    def _transport_error(self, error: BaseException, host: str) -> ProviderError:
        return transport_error(self.name, error)


async def _bounded(response: aiohttp.ClientResponse) -> bytes:
    """The body up to ``MAX_ANSWER_BYTES`` (decoded, so a compressed bomb is cut too). Its
    connection goes back to the pool when the body was read to its end, else it is closed."""
    chunks: list[bytes] = []
    room = MAX_ANSWER_BYTES
    while room > 0:
        chunk = await response.content.read(room)
        if not chunk:
            response.release()
            return b"".join(chunks)
        chunks.append(chunk)
        room -= len(chunk)
    if response.content.at_eof():
        response.release()
    else:
        response.close()
    return b"".join(chunks)


def retry_after(answer: Answer) -> float | None:
    """Seconds the answer asks to wait (``Retry-After``: seconds or an HTTP date), or None."""
    return retry_after_seconds(answer.headers.get("retry-after", ""))


def retry_after_seconds(value: str) -> float | None:
    """Seconds a ``Retry-After`` value (seconds or an HTTP date) asks to wait, or None."""
    value = value.strip()
    if not value:
        return None
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return min(max(0.0, when.timestamp() - time.time()), MAX_RETRY_AFTER)


def wait_until(reset: str) -> float | None:
    """Seconds until the Unix time ``reset`` (a rate limit's reset header), or None."""
    value = reset.strip()
    if not value.isdigit():
        return None
    return min(max(0.0, int(value) - time.time()), MAX_RETRY_AFTER)


def quoted(text: str, *hidden: str) -> str:
    """A provider's error text fit for a log line: ``hidden`` values (the address it may echo)
    and anything that looks like an address or a secret masked, then cut short."""
    for value in hidden:
        if value:
            text = text.replace(value, "<address>")
    text = mask(text)
    return text if len(text) <= MAX_QUOTED_CHARS else text[:MAX_QUOTED_CHARS] + "..."


def transport_error(provider: str, error: BaseException) -> ProviderError:
    """The ``ProviderError`` for a call that got no (readable) answer. The text names the
    failure's kind only: aiohttp's own texts may carry the URL, and with it an account id."""
    if sent_nothing(error):
        return ProviderError(
            ErrorClass.TRANSIENT, f"{provider}: not reached ({kind(error)})", not_accepted=True
        )
    return ProviderError(
        ErrorClass.TRANSIENT, f"{provider}: no answer ({kind(error)}): it may have sent"
    )


def status_error(provider: str, answer: Answer, detail: str = "") -> ProviderError:
    """What an unsuccessful HTTP status means for any provider API (``detail``: the provider's
    own words, already ``quoted``)."""
    status = answer.status
    text = f"{provider}: HTTP {status}" + (f": {detail}" if detail else "")
    wait = retry_after(answer)
    if status in {429, 503}:
        # Refused before any work: the provider asks us to come back (or another may send).
        return ProviderError(ErrorClass.TRANSIENT, text, retry_after=wait, not_accepted=True)
    if status >= 500:
        # 500, 502, 504: the request may have been handled before the failure.
        return ProviderError(ErrorClass.TRANSIENT, text, retry_after=wait)
    if status in {401, 403}:
        # A wrong or revoked credential: an operator can fix it, and a second provider of the
        # channel may send meanwhile; failing every delivery for good would lose them all.
        return ProviderError(ErrorClass.TRANSIENT, text, not_accepted=True)
    if status < 400 or status in {404, 405, 408}:
        # A redirect or an unknown path means a wrong base URL; 408: the provider gave up
        # reading the request. Nothing was taken either way.
        return ProviderError(ErrorClass.TRANSIENT, text, retry_after=wait, not_accepted=True)
    # 400, 413, 422... : this message, sent again, would be refused again.
    return ProviderError(ErrorClass.PERMANENT, text, reason=Reason.REJECTED)


def unreachable(error: BaseException, host: str) -> ProviderError:
    """The ``ProviderError`` for a call to a recipient's URL (a webhook's) that got no answer,
    naming ``host`` and the system's reason: ``not_accepted`` when it failed before the
    request could leave (no connection, TLS refused). ``http2.unreachable`` words the same
    for an HTTP/2 server (a Web Push endpoint's)."""
    if isinstance(error, aiohttp.ConnectionTimeoutError):
        # No connection (a pooled one free, or a new one) in time: nothing was sent.
        return ProviderError(
            ErrorClass.TRANSIENT, f"no connection to {host} in time", not_accepted=True
        )
    if isinstance(error, TimeoutError):
        return ProviderError(ErrorClass.TRANSIENT, f"{host} did not answer in time")
    if isinstance(error, aiohttp.ClientConnectorCertificateError):
        verify = error.certificate_error
        reason = getattr(verify, "verify_message", "") or _detail(verify)
        text = f"TLS with {host} refused: {reason}"
    elif isinstance(error, aiohttp.ClientSSLError):
        cause = error.os_error
        reason = getattr(cause, "reason", "") or _detail(cause)
        text = f"TLS with {host} failed: {reason}"
    elif sent_nothing(error):
        text = f"cannot connect to {host}: {_detail(error)}"
    else:
        # The receiver may have had the request: it is retried, never sent elsewhere.
        return ProviderError(ErrorClass.TRANSIENT, f"connection to {host} broke ({kind(error)})")
    return ProviderError(ErrorClass.TRANSIENT, text, not_accepted=True)


def _detail(error: BaseException) -> str:
    """What went wrong, from the system's error number: aiohttp's texts name the address and
    port connected to, and may name the URL."""
    cause = error.os_error if isinstance(error, aiohttp.ClientConnectorError) else error
    if isinstance(cause, OSError) and cause.errno:
        return os.strerror(cause.errno)[:MAX_ERROR_DETAIL]
    return kind(error)
