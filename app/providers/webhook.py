"""The ``webhook`` provider: signed POSTs to the recipient's or the type's URL, as Standard
Webhooks (https://www.standardwebhooks.com) specifies them.

Every send POSTs the message's JSON body (``Content-Type: application/json``) with:

- ``webhook-id``: the delivery id, the same on every attempt, so a receiver dedupes on it;
- ``webhook-timestamp``: this attempt's Unix time in seconds (receivers refuse stale ones);
- ``webhook-signature``: ``v1,`` and the base64 HMAC-SHA256 of ``{id}.{timestamp}.{body}``,
  keyed with the decoded ``whsec_`` secret;
- ``User-Agent: Clarion-Webhooks/<version>``.

Answers, as the specification advises: 2xx is sent (the message id is the webhook-id: no
header for a receiver's own id is common enough to read); a redirect is not followed and
fails for good (the URL should be updated); 410 Gone fails for good and marks the address
dead; 408, 429 and 5xx are retried, after ``Retry-After`` if given; any other 4xx fails for
good. A time-out or broken connection is retried; only a failure before the request left
(no address, refused or timed-out connection, TLS refused) is ``not_accepted``.

Where it may connect is ``ssrf``'s decision: its ``GuardedResolver`` is the name lookup of
the adapter's ``http.Client``, which connects only to the addresses the guard checked and
keeps connections per host name. Writing the checked IP into the URL instead would key
pooled connections by IP: a TLS connection verified for one host name could then carry
another's request. Connections stay open between sends (keep-alive), at most
``max_in_flight`` of them. The whole call, connecting included, is bounded by
``timeout_seconds``.
"""

from __future__ import annotations

import base64
import hmac
import time
from collections.abc import Mapping

from app import __version__
from app.catalog.providers import WebhookConfig, signing_key
from app.providers import http
from app.providers.base import Message, ProviderError, Reason
from app.providers.ssrf import (
    GuardedResolver,
    Policy,
    Refused,
    Resolver,
    Target,
    Unresolvable,
    system_resolver,
)
from streams.core.vocabulary import ErrorClass


def signature(key: bytes, webhook_id: str, timestamp: int, body: bytes) -> bytes:
    """The ``webhook-signature`` value of one request."""
    signed = b"%s.%d.%s" % (webhook_id.encode(), timestamp, body)
    return b"v1," + base64.b64encode(hmac.digest(key, signed, "sha256"))


class WebhookProvider:
    """Signs and POSTs webhooks to the URL each message is addressed to."""

    def __init__(
        self,
        name: str,
        config: WebhookConfig,
        secrets: Mapping[str, str],
        *,
        resolver: Resolver = system_resolver,
    ) -> None:
        self.name = name
        try:
            self._key = signing_key(secrets.get("secret_env", ""))
        except ValueError as error:
            raise ValueError(f"{name}: secret_env ({config.secret_env}) {error}") from None
        self.policy = Policy(config, resolver)
        self._client = http.Client(
            name,
            config,
            ca_file=config.ca_file,
            resolver=GuardedResolver(self.policy, config.connect_timeout_seconds),
            failure=http.unreachable,
        )
        self._user_agent = f"Clarion-Webhooks/{__version__}"

    async def send(self, message: Message) -> str:
        """POST ``message.body`` to ``message.address``; the webhook-id, or ``ProviderError``."""
        if "." in message.delivery_id:  # the signed content is split on dots
            raise ValueError("a webhook-id may not contain '.'")
        try:
            target = self.policy.target(message.address)
        except Refused as refusal:
            raise _refused(refusal) from None
        body = message.body.encode()
        headers = self._headers(target, message, body)
        try:
            answer = await self._client.post(target.url, data=body, headers=headers)
        except Refused as refusal:
            raise _refused(refusal) from None
        except Unresolvable as error:
            raise ProviderError(ErrorClass.TRANSIENT, str(error), not_accepted=True) from None
        _judge(answer, target.host)
        return message.delivery_id

    def _headers(self, target: Target, message: Message, body: bytes) -> dict[str, str]:
        timestamp = int(time.time())
        return {
            "Host": target.host_header,
            "User-Agent": self._user_agent,
            "Content-Type": "application/json",
            "webhook-id": message.delivery_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signature(
                self._key, message.delivery_id, timestamp, body
            ).decode(),
        }

    async def close(self) -> None:
        """Close the pooled connections."""
        await self._client.close()


def _refused(refusal: Refused) -> ProviderError:
    # Nothing was sent, but another attempt would be refused the same way.
    return ProviderError(
        ErrorClass.PERMANENT,
        f"webhook refused: {refusal}",
        reason=Reason.REJECTED,
        not_accepted=True,
    )


def _judge(answer: http.Answer, host: str) -> None:
    """Nothing for a 2xx answer, else the ``ProviderError`` it stands for."""
    status = answer.status
    if 200 <= status < 300:
        return
    if 300 <= status < 400:
        raise ProviderError(
            ErrorClass.PERMANENT,
            f"{host} answered {status}, a redirect: redirects are not followed, "
            "update the webhook URL",
            reason=Reason.REJECTED,
        )
    if status == 410:
        raise ProviderError(
            ErrorClass.PERMANENT,
            f"{host} answered 410 Gone: it wants no more webhooks at this URL",
            reason=Reason.INVALID_ADDRESS,
        )
    # 408: the receiver gave up waiting for our request, which says nothing against it.
    if status in (408, 429) or status >= 500:
        wait = http.retry_after(answer)
        raise ProviderError(ErrorClass.TRANSIENT, f"{host} answered {status}", retry_after=wait)
    raise ProviderError(ErrorClass.PERMANENT, f"{host} answered {status}", reason=Reason.REJECTED)
