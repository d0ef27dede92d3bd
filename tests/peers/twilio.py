"""A local Twilio Messages API: ``POST /2010-04-01/Accounts/{AccountSid}/Messages.json``, as
strict as the real one.

It checks HTTP Basic auth against its account SID and auth token (401, code 20003, otherwise),
that the path's account is that account (404, 20404), a form-encoded body, an E.164 ``To``
(21211; 21604 when missing), a ``From`` (an E.164 number or an alphanumeric sender ID, 21212)
or a ``MessagingServiceSid`` (``MG`` and 32 hex digits, 21705), one of them at least (21603),
and a non-empty ``Body`` (21602) of at most 1,600 characters (21617). Errors come in Twilio's
shape ``{"code", "message", "more_info", "status"}``; Twilio's messages echo the number, and
so do these. An accepted message is kept in ``accepted`` and answered 201 with the Message
resource (``sid`` ``SM...``; status ``queued``, or ``accepted`` through a Messaging Service).

With a ``StatusCallback`` URL the message's status changes are POSTed there as Twilio posts
them: ``sent``, then ``delivered``, or ``undelivered`` with an ``ErrorCode`` for a number given
to ``undeliverable(number, code)``; form fields ``MessageSid``, ``MessageStatus``, ``To``,
``From``, ``AccountSid``, ``ApiVersion``, signed in ``X-Twilio-Signature`` (the base64
HMAC-SHA1 of the URL and the sorted fields, keyed with the auth token). ``callbacks`` keeps
each (status, the answer's status code).

Scripted failures: Twilio's magic test numbers (twilio.com/docs/iam/test-credentials), as
``To`` - +15005550001 invalid (21211), +15005550002 unroutable (21612), +15005550003 no
permission for the region (21408), +15005550004 blocked: it answered STOP (21610),
+15005550009 not SMS-capable (21614) - and as ``From`` - +15005550001 invalid (21212),
+15005550007 not the account's (21606), +15005550008 queue full (21611); any number with
``script(number, code)``; and the switchable faults of ``tests.peers.serving``.

    python -m tests.peers.twilio --port 8026   # account PEER_SID, token PEER_TOKEN
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any, Final
from urllib.parse import parse_qs

import httpx

from tests.peers.serving import Answer, Fault, HttpPeer, Request, main

PEER_SID: Final = "AC" + "5ee1" * 8
PEER_TOKEN: Final = "peer-auth-token-0123456789abcdef"
STOP_NUMBER: Final = "+15005550004"
MAX_BODY_CHARS: Final = 1600
TO_CODES: Final = {
    "+15005550001": 21211,
    "+15005550002": 21612,
    "+15005550003": 21408,
    STOP_NUMBER: 21610,
    "+15005550009": 21614,
}
FROM_CODES: Final = {"+15005550001": 21212, "+15005550007": 21606, "+15005550008": 21611}
MESSAGES: Final = {
    20003: "Authenticate",
    20004: "Method not allowed",
    20404: "The requested resource {path} was not found",
    20429: "Too Many Requests",
    20500: "Internal Server Error",
    20503: "Service Unavailable",
    21211: "The 'To' number {to} is not a valid phone number.",
    21212: "The 'From' number {from_} is not a valid phone number, shortcode, or alphanumeric "
    "sender ID.",
    21408: "Permission to send an SMS has not been enabled for the region indicated by the "
    "'To' number: {to}.",
    21602: "Message body is required.",
    21603: "A 'From' phone number is required.",
    21604: "A 'To' phone number is required.",
    21606: "The 'From' phone number provided is not a valid message-capable Twilio phone "
    "number for this destination/account.",
    21610: "Attempt to send to unsubscribed recipient",
    21611: "This 'From' number has exceeded the maximum number of queued messages",
    21612: "The 'To' phone number: {to}, is not currently reachable using the 'From' phone "
    "number via SMS.",
    21614: "'To' number {to} is not a valid mobile number",
    21609: "Invalid StatusCallback URL",
    21617: "The concatenated message body exceeds the 1600 character limit.",
    21705: "The Messaging Service is invalid",
}
_E164 = re.compile(r"\+[1-9][0-9]{1,14}")
_ALPHANUMERIC = re.compile(r"[A-Za-z0-9 ]{1,11}")
_SERVICE = re.compile(r"MG[0-9a-fA-F]{32}")


@dataclass(frozen=True)
class Sms:
    """One accepted message."""

    sid: str
    to: str
    sender: str
    messaging_service_sid: str
    body: str


def error(status: int, code: int, **values: str) -> Answer:
    """An answer in Twilio's error shape."""
    defaults = {"to": "", "from_": "", "path": ""}
    message = MESSAGES.get(code, f"Error {code}").format(**{**defaults, **values})
    headers = {"WWW-Authenticate": 'Basic realm="Twilio API"'} if status == 401 else {}
    more_info = f"https://www.twilio.com/docs/errors/{code}"
    return Answer.json(
        status,
        {"code": code, "message": message, "more_info": more_info, "status": status},
        **headers,
    )


class TwilioPeer(HttpPeer):
    """The peer; ``accepted`` holds an ``Sms`` per accepted request."""

    def __init__(self, account_sid: str = PEER_SID, auth_token: str = PEER_TOKEN) -> None:
        super().__init__()
        self.account_sid = account_sid
        self.auth_token = auth_token
        self.to_codes = dict(TO_CODES)
        self.from_codes = dict(FROM_CODES)
        self.undelivered: dict[str, int] = {}
        # Each status callback made: (status, the answer's status code; 0: no answer).
        self.callbacks: list[tuple[str, int]] = []
        self._callbacks: set[asyncio.Task[None]] = set()

    def script(self, number: str, code: int) -> None:
        """Refuse every message to ``number`` with Twilio error ``code``."""
        self.to_codes[number] = code

    def undeliverable(self, number: str, code: int) -> None:
        """Take messages to ``number``, then call them back undelivered with ``code``."""
        self.undelivered[number] = code

    async def _call_back(self, url: str, sms: Sms) -> None:
        """Post the message's status changes to its StatusCallback, signed."""
        code = self.undelivered.get(sms.to)
        final = ("undelivered", str(code)) if code else ("delivered", "")
        async with httpx.AsyncClient(timeout=5) as client:
            for status, error_code in (("sent", ""), final):
                fields = {
                    "AccountSid": self.account_sid, "ApiVersion": "2010-04-01",
                    "From": sms.sender, "MessageSid": sms.sid, "MessageStatus": status,
                    "SmsSid": sms.sid, "SmsStatus": status, "To": sms.to,
                }  # fmt: skip
                if error_code:
                    fields["ErrorCode"] = error_code
                signed = url + "".join(name + value for name, value in sorted(fields.items()))
                digest = hmac.digest(self.auth_token.encode(), signed.encode(), "sha1")
                headers = {"X-Twilio-Signature": base64.b64encode(digest).decode()}
                try:
                    answer = await client.post(url, data=fields, headers=headers)
                    self.callbacks.append((status, answer.status_code))
                except httpx.HTTPError:
                    self.callbacks.append((status, 0))

    def fault_answer(self, fault: Fault) -> Answer:
        if fault is Fault.RATE_LIMITED:
            answer = error(429, 20429)
            if self.retry_after is not None:
                answer.headers["Retry-After"] = self.retry_after
            return answer
        if fault is Fault.UNAVAILABLE:
            return error(503, 20503)
        return error(500, 20500)

    async def handle(self, request: Request) -> Answer:
        if not self._authenticated(request.headers.get("authorization", "")):
            return error(401, 20003)
        if request.path != f"/2010-04-01/Accounts/{self.account_sid}/Messages.json":
            return error(404, 20404, path=request.path)
        if request.method != "POST":
            return error(405, 20004)
        content_type = request.headers.get("content-type", "").split(";")[0].strip()
        form: dict[str, list[str]] = {}
        if content_type == "application/x-www-form-urlencoded":
            form = parse_qs(request.body.decode("utf-8", "replace"), keep_blank_values=True)
        fields = {name: values[-1] for name, values in form.items()}
        return self._create(fields)

    def _authenticated(self, authorization: str) -> bool:
        scheme, _, encoded = authorization.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        return secrets.compare_digest(f"{user}:{password}", f"{self.account_sid}:{self.auth_token}")

    def _create(self, fields: dict[str, str]) -> Answer:
        to, sender = fields.get("To", ""), fields.get("From", "")
        service, body = fields.get("MessagingServiceSid", ""), fields.get("Body", "")
        if not to:
            return error(400, 21604)
        if not _E164.fullmatch(to):
            return error(400, 21211, to=to)
        if not sender and not service:
            return error(400, 21603)
        if sender and not (_E164.fullmatch(sender) or _alphanumeric(sender)):
            return error(400, 21212, from_=sender)
        if service and not _SERVICE.fullmatch(service):
            return error(400, 21705)
        if not body:
            return error(400, 21602)
        if len(body) > MAX_BODY_CHARS:
            return error(400, 21617)
        code = self.from_codes.get(sender) or self.to_codes.get(to)
        if code is not None:
            return error(400, code, to=to, from_=sender)
        sms = Sms("SM" + secrets.token_hex(16), to, sender, service, body)
        self.accepted.append(sms)
        callback = fields.get("StatusCallback", "")
        if callback:
            if not callback.startswith(("http://", "https://")):
                return error(400, 21609)
            task = asyncio.get_running_loop().create_task(self._call_back(callback, sms))
            self._callbacks.add(task)
            task.add_done_callback(self._callbacks.discard)
        return Answer.json(201, self._resource(sms))

    def _resource(self, sms: Sms) -> dict[str, Any]:
        """The Message resource Twilio answers a create with."""
        now = format_datetime(datetime.now(UTC), usegmt=True)
        uri = f"/2010-04-01/Accounts/{self.account_sid}/Messages/{sms.sid}"
        return {
            "account_sid": self.account_sid, "api_version": "2010-04-01", "body": sms.body,
            "date_created": now, "date_sent": None, "date_updated": now,
            "direction": "outbound-api", "error_code": None, "error_message": None,
            "from": sms.sender or None, "messaging_service_sid": sms.messaging_service_sid or None,
            "num_media": "0", "num_segments": "1", "price": None, "price_unit": "USD",
            "sid": sms.sid, "status": "accepted" if sms.messaging_service_sid else "queued",
            "subresource_uris": {"media": f"{uri}/Media.json"}, "to": sms.to, "uri": f"{uri}.json",
        }  # fmt: skip


def _alphanumeric(sender: str) -> bool:
    """An alphanumeric sender ID: up to 11 letters, digits and spaces, one letter at least."""
    return bool(_ALPHANUMERIC.fullmatch(sender)) and any(c.isalpha() for c in sender)


if __name__ == "__main__":
    main(TwilioPeer(), "A local Twilio Messages API")
