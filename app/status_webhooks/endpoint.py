"""One producer's status webhook URL: where it may connect, how a POST is signed, and what
an answer means.

The URL passes the same guard as the ``webhook`` provider's (``app.providers.ssrf``, with
``[status_webhooks]``'s ``allow_http_hosts`` and ``allow_networks``): ``Policy.target``
judges it when it is configured, and the HTTP client, the providers' own
(``app.providers.http``: aiohttp, at most one keep-alive connection per lane, redirects not
followed, answers read up to 64 KiB), connects only to the addresses its ``GuardedResolver``
checked. Each POST is signed as the ``webhook`` provider signs
(``app.providers.webhook.signature``): ``webhook-id`` (``<delivery id>.<version>``, or a
batch's id), ``webhook-timestamp`` (this attempt's Unix time) and ``webhook-signature``.

Any 2xx answer is success; any other answer, a time-out, a broken or refused connection,
or a URL the guard refuses is a failure to retry (``Retry-After`` read from the answer):
the producer can fix its endpoint while the status waits, until it is given up. Error texts
name the host, never the URL's path or query, which may hold the producer's tokens.
"""

from __future__ import annotations

import base64
import secrets
import time
from dataclasses import dataclass

import aiohttp
from yarl import URL

from app import __version__
from app.catalog.providers import signing_key
from app.catalog.status_webhooks import StatusWebhooksConfig
from app.providers import http
from app.providers.base import ProviderError
from app.providers.ssrf import (
    GuardedResolver,
    Policy,
    Refused,
    Resolver,
    Target,
    Unresolvable,
    system_resolver,
)
from app.providers.webhook import signature
from streams.core.vocabulary import ErrorClass
from streams.status_webhooks.store import StatusWebhook

USER_AGENT = f"Clarion-Webhooks/{__version__}"
# Standard Webhooks secrets are 24 to 64 random bytes; Clarion makes them 32.
NEW_SECRET_BYTES = 32


def new_secret() -> str:
    """A fresh signing secret: ``whsec_`` and the base64 of 32 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(NEW_SECRET_BYTES)).decode()


class UrlGuard:
    """Judges a producer's URL as its endpoint will (without resolving the host: that is
    checked, and refused if it must be, at every connection)."""

    def __init__(self, config: StatusWebhooksConfig) -> None:
        self.policy = Policy(config.guard())

    def refusal(self, url: str) -> str | None:
        """Why ``url`` may not be called, or None."""
        try:
            self.policy.target(url)
        except Refused as refusal:
            return str(refusal)
        return None


@dataclass(frozen=True, slots=True)
class Answer:
    """How one POST went."""

    ok: bool
    status_code: int = 0  # 0: no answer
    error: str = ""  # why it failed, naming the host only
    retry_after: float | None = None  # what the answer asked to wait, in seconds


class Endpoint:
    """Signs and POSTs to one producer's URL, over connections of its own (at most one per
    lane of its sender: each lane makes one POST at a time)."""

    def __init__(
        self, producer: str, config: StatusWebhooksConfig, *, resolver: Resolver = system_resolver
    ) -> None:
        self.producer = producer
        guard = config.guard()
        self.policy = Policy(guard, resolver)
        self._client = http.Client(
            producer,
            guard,
            ca_file=guard.ca_file,
            resolver=GuardedResolver(self.policy, guard.connect_timeout_seconds),
            failure=_unanswered,
        )
        self._target: Target | None = None
        self._url: URL | None = None
        self._headers: dict[str, str] = {}  # the headers every POST shares
        self._key = b""
        self._refused = "no URL configured"

    def configure(self, hook: StatusWebhook) -> None:
        """Send to ``hook``'s URL, signed with its secret, from the next POST on."""
        try:
            target = self.policy.target(hook.url)
            self._key = signing_key(hook.secret)
        except Refused as refusal:
            self._target, self._refused = None, f"URL refused: {refusal}"
            return
        except ValueError as error:
            self._target, self._refused = None, f"secret {error}"
            return
        self._target, self._url, self._refused = target, target.url, ""
        self._headers = {
            "Host": target.host_header,
            "User-Agent": USER_AGENT,
            "Content-Type": "application/json",
        }

    async def post(self, webhook_id: str, body: bytes) -> Answer:
        """POST ``body`` once; how it went."""
        target, url = self._target, self._url
        if target is None or url is None:
            return Answer(ok=False, error=self._refused)
        timestamp = int(time.time())
        headers = {
            **self._headers,
            "webhook-id": webhook_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signature(self._key, webhook_id, timestamp, body).decode(),
        }
        try:
            answer = await self._client.post(url, data=body, headers=headers)
        except (ProviderError, Refused, Unresolvable) as error:
            return Answer(ok=False, error=str(error))
        if 200 <= answer.status < 300:
            return Answer(ok=True, status_code=answer.status)
        return Answer(
            ok=False,
            status_code=answer.status,
            error=f"{target.host} answered {answer.status}",
            retry_after=http.retry_after(answer),
        )

    async def close(self) -> None:
        """Close the connections."""
        await self._client.close()


def _unanswered(error: BaseException, host: str) -> ProviderError:
    """Why a POST got no (readable) answer, naming ``host``: as the ``webhook`` provider words
    it, and an answer that is not HTTP said as such."""
    if isinstance(error, aiohttp.ClientResponseError):
        return ProviderError(
            ErrorClass.TRANSIENT, f"an answer that is not HTTP from {host} ({http.kind(error)})"
        )
    return http.unreachable(error, host)
