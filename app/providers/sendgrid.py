"""The ``sendgrid`` provider kind: email through the SendGrid v3 Mail Send API.

One ``POST {base_url}/v3/mail/send`` per message, JSON, ``Authorization: Bearer <key>``. The
answer 202 (an empty body) means queued; its ``X-Message-Id`` header is the message id.

Idempotency: Mail Send has no idempotency key (neither a header nor a field: its reference,
twilio.com/docs/sendgrid/api-reference/mail-send, names none). A retry after an ambiguous
failure (a read timeout, a 5xx) may therefore send a second copy. The delivery id travels in
``custom_args`` (``clarion_delivery_id``, with ``clarion_notification_id``), which SendGrid
keeps in its activity feed and event webhook, so a duplicate can be found there, and in the
``X-Clarion-Delivery-Id`` header of the mail itself. The one-click unsubscribe header fields
(RFC 8058) travel in ``headers`` too.

Answers, after SendGrid's error shape ``{"errors": [{"message", "field", "help"}]}``
(twilio.com/docs/sendgrid/api-reference/how-to-use-the-sendgrid-v3-api/errors):

- 400: PERMANENT. An error about the recipient's address (``personalizations.N.to...``) is
  INVALID_ADDRESS; anything else about the request is REJECTED.
- 401, 403 (a wrong or revoked key, an unverified sender, a temporary block): TRANSIENT and
  not accepted. An operator fixes the key, and meanwhile a backup provider may send; failing
  every delivery for good because of one bad secret would lose them all.
- 413 (payload too large): PERMANENT REJECTED.
- 429: TRANSIENT after ``Retry-After``, or SendGrid's ``X-RateLimit-Reset`` (a Unix time).
- 5xx: TRANSIENT (503 not accepted; 500, 502 and 504 may have sent).

Error texts quote SendGrid's message with the recipient's address and anything that looks
like an address or a secret masked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec
import structlog
from yarl import URL

from app.catalog.providers import SendgridConfig
from app.providers import http
from app.providers.base import DELIVERY_HEADER, Message, ProviderError, Reason
from streams.core.vocabulary import ErrorClass

PATH: Final = "/v3/mail/send"

_log = structlog.get_logger(__name__)
_encode = msgspec.json.Encoder().encode


class _Error(msgspec.Struct):
    message: str | None = None
    field: str | None = None


class _Errors(msgspec.Struct):
    errors: list[_Error] = []


_decode_errors = msgspec.json.Decoder(_Errors).decode


class SendgridProvider:
    """Sends EMAIL messages through SendGrid, over one keep-alive ``http.Client``."""

    def __init__(self, name: str, config: SendgridConfig, secrets: Mapping[str, str]) -> None:
        self.name = name
        self._from: dict[str, str] = {"email": config.from_address}
        if config.from_name:
            self._from["name"] = config.from_name
        self._url = URL(config.base_url + PATH)
        self._client = http.Client(name, config)
        self._headers = {
            "Authorization": f"Bearer {secrets['api_key_env']}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }

    async def send(self, message: Message) -> str:
        """Hand ``message`` to SendGrid; its message id, or ``ProviderError``."""
        answer = await self._client.post(
            self._url, data=self._payload(message), headers=self._headers
        )
        if 200 <= answer.status < 300:
            message_id: str = answer.headers.get("x-message-id", "")
            if not message_id:
                # Queued all the same: failing now would only send a second copy.
                _log.warning("provider_answer_without_id", provider=self.name)
            return message_id
        raise self._error(answer, message.address)

    async def close(self) -> None:
        """Close the pooled connections."""
        await self._client.close()

    def _payload(self, message: Message) -> bytes:
        """The Mail Send body: one recipient, text before HTML as SendGrid requires."""
        content = [
            {"type": kind, "value": value}
            for kind, value in (("text/plain", message.body), ("text/html", message.html))
            if value
        ]
        if not content or not message.title:
            # SendGrid refuses both with a 400; saying so here spares the call.
            missing = "a subject" if not message.title else "a text or an HTML body"
            raise ProviderError(
                ErrorClass.PERMANENT, f"{self.name}: the email has no {missing}",
                reason=Reason.REJECTED,
            )  # fmt: skip
        custom_args = {"clarion_delivery_id": message.delivery_id}
        if message.notification_id:
            custom_args["clarion_notification_id"] = message.notification_id
        body: dict[str, Any] = {
            "personalizations": [{"to": [{"email": message.address}]}],
            "from": self._from,
            "subject": message.title,
            "content": content,
            "headers": {DELIVERY_HEADER: message.delivery_id, **message.unsubscribe_headers},
            "custom_args": custom_args,
        }
        return _encode(body)

    def _error(self, answer: http.Answer, address: str) -> ProviderError:
        """The ``ProviderError`` for an answer other than 2xx."""
        try:
            errors = _decode_errors(answer.body).errors if answer.body else []
        except (msgspec.DecodeError, msgspec.ValidationError):
            errors = []
        detail = http.quoted("; ".join(e.message for e in errors if e.message), address)
        if answer.status == 400:
            reason = (
                Reason.INVALID_ADDRESS
                if any(_about_recipient(e.field) for e in errors)
                else Reason.REJECTED
            )
            text = f"{self.name}: HTTP 400" + (f": {detail}" if detail else "")
            return ProviderError(ErrorClass.PERMANENT, text, reason=reason)
        error = http.status_error(self.name, answer, detail)
        if answer.status == 429 and error.retry_after is None:
            error.retry_after = http.wait_until(answer.headers.get("x-ratelimit-reset", ""))
        return error


def _about_recipient(field: str | None) -> bool:
    """Whether an error's ``field`` names the recipient (``personalizations.0.to.0.email``)."""
    parts = (field or "").split(".")
    return len(parts) >= 3 and parts[0] == "personalizations" and parts[2] == "to"
