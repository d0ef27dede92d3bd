"""The ``twilio`` provider kind: SMS through the Twilio Messages API.

One ``POST {base_url}/2010-04-01/Accounts/{AccountSid}/Messages.json`` per message, form
encoded (``To``, ``From`` or ``MessagingServiceSid``, ``Body``), HTTP Basic auth with the
account SID and the auth token. The answer 201 is the Message resource; its ``sid`` (``SM...``)
is the message id.

Idempotency: creating a Message takes no idempotency key. The Messages resource documents no
such parameter or header; ``I-Twilio-Idempotency-Token`` is a header Twilio *sends* on its
webhooks so receivers can drop its own retries (twilio.com/docs/usage/webhooks), not one the
REST API honours on a create. A retry after an ambiguous failure (a read timeout, a 500) may
therefore send a second SMS; only a failure that certainly sent nothing is ``not_accepted``.

Errors are read by Twilio's ``code`` in ``{"code", "message", "more_info", "status"}``
(twilio.com/docs/api/errors); codes not in the tables below fall back to the HTTP status:

- the recipient's number is dead or cannot take SMS: PERMANENT INVALID_ADDRESS;
- 21610, the recipient answered STOP: PERMANENT UNSUBSCRIBED;
- sender, region, content or account refusals: PERMANENT REJECTED;
- 20003 (authentication), 20005 and 10001 (account not active), 20404 (no such account):
  TRANSIENT and not accepted, as a wrong key is at SendGrid: an operator can fix it and a
  backup provider may send meanwhile;
- 20429 or HTTP 429, and 21611 (the sender's queue is full): TRANSIENT, not accepted, after
  ``Retry-After`` when given; 5xx: TRANSIENT (503 not accepted).

Twilio's messages echo the number (``The 'To' number +1... is not a valid phone number``):
error texts mask it.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Final
from urllib.parse import quote_plus, urlencode

import msgspec
import structlog
from yarl import URL

from app.catalog.providers import TwilioConfig
from app.providers import http
from app.providers.base import Message, ProviderError, Reason
from streams.core.vocabulary import ErrorClass

INVALID_ADDRESS_CODES: Final = frozenset(
    {
        21211,  # invalid 'To' number
        21217,  # the number does not appear to be valid
        21401,  # invalid phone number
        21407,  # this number type does not support SMS
        21604,  # 'To' is required (an empty address)
        21612,  # 'To' cannot be reached (no route) with this sender
        21614,  # 'To' is not a mobile number
        21635,  # 'To' is a landline
    }
)
UNSUBSCRIBED_CODES: Final = frozenset({21610})
REJECTED_CODES: Final = frozenset(
    {
        21212,  # invalid 'From' number
        21408,  # no permission to send to this region
        21602,  # empty body
        21603,  # no 'From'
        21606,  # 'From' is not an SMS-capable number of the account
        21608,  # a trial account may only send to verified numbers
        21617,  # body over 1,600 characters
        21659,  # 'From' is not a Twilio number or short code
        21701,  # no such Messaging Service in the account
        21705,  # not a Messaging Service SID
        30007,  # filtered by the carrier
        30034,  # sender not registered (US A2P 10DLC)
    }
)
CREDENTIAL_CODES: Final = frozenset({10001, 20003, 20005, 20404})
RATE_CODES: Final = frozenset({20429, 21611})

_log = structlog.get_logger(__name__)


class _Answer(msgspec.Struct):
    sid: str | None = None
    code: int | None = None
    message: str | None = None


_decode = msgspec.json.Decoder(_Answer).decode


class TwilioProvider:
    """Sends SMS messages through Twilio, over one keep-alive ``http.Client``."""

    def __init__(
        self,
        name: str,
        config: TwilioConfig,
        secrets: Mapping[str, str],
        *,
        status_callback: str = "",
    ) -> None:
        self.name = name
        path = f"/2010-04-01/Accounts/{config.account_sid}/Messages.json"
        self._url = URL(config.base_url + path)
        sender = (
            {"From": config.from_number}
            if config.from_number
            else {"MessagingServiceSid": config.messaging_service_sid}
        )
        if status_callback:
            # Twilio POSTs each status change there (``app.feedback``): delivered, failed...
            sender["StatusCallback"] = status_callback
        # The form's fixed part, encoded once: quoting is a measurable share of a send's CPU.
        self._sender = urlencode(sender)
        credentials = f"{config.account_sid}:{secrets['auth_token_env']}".encode()
        self._headers = {
            # Encoded once, not again for every message.
            "Authorization": "Basic " + base64.b64encode(credentials).decode(),
            "Accept": "application/json",
            "Content-Type": "application/x-www-form-urlencoded",
        }
        self._client = http.Client(name, config)

    async def send(self, message: Message) -> str:
        """Hand ``message`` to Twilio; the Message's sid, or ``ProviderError``."""
        # As urlencode() writes {"To", sender, "Body"}, in that order.
        form = f"To={quote_plus(message.address)}&{self._sender}&Body={quote_plus(message.body)}"
        answer = await self._client.post(self._url, data=form.encode(), headers=self._headers)
        parsed = _parsed(answer.body)
        if 200 <= answer.status < 300:
            if not parsed.sid:
                # Accepted all the same: failing now would only send a second copy.
                _log.warning("provider_answer_without_id", provider=self.name)
            return parsed.sid or ""
        raise self._error(answer, parsed, message.address)

    async def close(self) -> None:
        """Close the pooled connections."""
        await self._client.close()

    def _error(self, answer: http.Answer, parsed: _Answer, address: str) -> ProviderError:
        """The ``ProviderError`` for an answer other than 2xx, by Twilio's code first."""
        code = parsed.code
        detail = http.quoted(f"{code or '-'} {parsed.message or ''}".strip(), address)
        text = f"{self.name}: HTTP {answer.status}: {detail}"
        if code in INVALID_ADDRESS_CODES:
            return ProviderError(ErrorClass.PERMANENT, text, reason=Reason.INVALID_ADDRESS)
        if code in UNSUBSCRIBED_CODES:
            return ProviderError(ErrorClass.PERMANENT, text, reason=Reason.UNSUBSCRIBED)
        if code in REJECTED_CODES:
            return ProviderError(ErrorClass.PERMANENT, text, reason=Reason.REJECTED)
        if code in CREDENTIAL_CODES:
            return ProviderError(ErrorClass.TRANSIENT, text, not_accepted=True)
        if code in RATE_CODES:
            wait = http.retry_after(answer)
            return ProviderError(ErrorClass.TRANSIENT, text, retry_after=wait, not_accepted=True)
        return http.status_error(self.name, answer, detail)


def _parsed(body: bytes) -> _Answer:
    """Twilio's JSON answer; an empty one when the body is not that (a proxy's HTML page)."""
    try:
        return _decode(body) if body else _Answer()
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _Answer()
