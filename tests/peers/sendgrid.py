"""A local SendGrid v3 Mail Send API: ``POST /v3/mail/send``, as strict as the real one.

It checks the ``Authorization: Bearer <key>`` header (401 otherwise), the JSON content type,
and the body: personalizations with valid ``to`` addresses, a valid ``from``, a subject, text
content before HTML, string-valued ``custom_args`` and ``headers`` with no reserved header
and well-formed one-click unsubscribe fields (``tests.peers.list_unsubscribe``).
A refusal is a 400 listing every problem in SendGrid's shape,
``{"errors": [{"message", "field", "help"}]}``. An accepted mail is kept in ``accepted`` and
answered 202 with an empty body and an ``X-Message-Id``.

With ``event_webhook_url`` set, each accepted mail's events are POSTed there as SendGrid's
signed Event Webhook posts them: a JSON array (``processed``, then ``delivered``, or what
``outcome(address, event, type)`` scripts for a recipient: a ``bounce`` of type bounce or
blocked, a ``spamreport``, an ``unsubscribe``), each with ``sg_event_id``, ``sg_message_id``
(the ``X-Message-Id`` and a filter's suffix), ``email``, ``timestamp`` and the mail's
``custom_args``, signed with ECDSA P-256 over the timestamp header and the body
(``X-Twilio-Email-Event-Webhook-Signature``, ``…-Timestamp``); ``verification_key`` is the
key to give the receiver, as SendGrid's settings show it. ``events_posted`` keeps each
batch's answer status (0: no answer).

Scripted failures: per recipient (``INVALID_ADDRESS``: a 400 about its email field,
``REJECTED_ADDRESS``: a 400 about something else, or ``script(address, answer)``) and the
switchable faults of ``tests.peers.serving``.

    python -m tests.peers.sendgrid --port 8025   # key: PEER_KEY
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any, Final

import httpx
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.peers import list_unsubscribe
from tests.peers.serving import Answer, Fault, HttpPeer, Request, main

PEER_KEY: Final = "SG.peer-test-key.0123456789abcdef"
INVALID_ADDRESS: Final = "no-such-mailbox@invalid.test"
REJECTED_ADDRESS: Final = "rejected@peer.test"
# SendGrid's own limits.
MAX_BODY_BYTES: Final = 30 * 1024 * 1024
MAX_CUSTOM_ARGS_BYTES: Final = 10_000
RESERVED_HEADERS: Final = frozenset(
    {"x-sg-id", "x-sg-eid", "received", "dkim-signature", "content-type",
     "content-transfer-encoding", "to", "from", "subject", "reply-to", "cc", "bcc"}
)  # fmt: skip
EMPTY_CONTENT: Final = "The content value must be a string at least one character in length."
_HELP = "http://sendgrid.com/docs/API_Reference/Web_API_v3/Mail/errors.html"


@dataclass(frozen=True)
class Mail:
    """One accepted mail."""

    message_id: str
    to: list[str]
    sender: dict[str, Any]
    subject: str
    content: list[dict[str, Any]]
    headers: dict[str, str]
    custom_args: dict[str, str]


def errors(status: int, *problems: tuple[str | None, str], **headers: str) -> Answer:
    """An answer in SendGrid's error shape: (field, message) per problem."""
    listed = [{"message": m, "field": f, "help": _HELP if f else None} for f, m in problems]
    return Answer.json(status, {"errors": listed}, **headers)


def valid_email(value: Any) -> bool:
    """An address SendGrid's syntax check takes: local@domain.tld, no spaces (linear time)."""
    if not isinstance(value, str) or len(value) > 320 or value.count("@") != 1:
        return False
    local, domain = value.split("@")
    labels = domain.split(".")
    return (
        0 < len(local) <= 64
        and not any(c.isspace() for c in value)
        and len(labels) >= 2
        and all(labels)
        and labels[-1].isalpha()
    )


class SendgridPeer(HttpPeer):
    """The peer; ``accepted`` holds a ``Mail`` per accepted request."""

    max_body_bytes = MAX_BODY_BYTES

    def __init__(self, api_key: str = PEER_KEY) -> None:
        super().__init__()
        self.api_key = api_key
        # A 429 gives the end of the rate limit's period this far ahead (X-RateLimit-Reset).
        self.rate_limit_reset_seconds = 60
        self.by_address: dict[str, Answer] = {
            INVALID_ADDRESS: errors(
                400, ("personalizations.0.to.0.email", "Does not contain a valid address.")
            ),
            REJECTED_ADDRESS: errors(400, ("content.0.value", EMPTY_CONTENT)),
        }
        self.event_webhook_url = ""
        self.outcomes: dict[str, tuple[str, str]] = {}
        self.events_posted: list[int] = []
        self._event_key = ec.generate_private_key(ec.SECP256R1())
        self._posting: set[asyncio.Task[None]] = set()

    def script(self, address: str, answer: Answer) -> None:
        """Answer every mail to ``address`` with ``answer``."""
        self.by_address[address] = answer

    def outcome(self, address: str, event: str, kind: str = "") -> None:
        """What the Event Webhook reports for mail to ``address`` after ``processed``."""
        self.outcomes[address] = (event, kind)

    @property
    def verification_key(self) -> str:
        """The Event Webhook's public key, base64 DER, as SendGrid's settings show it."""
        raw = self._event_key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return base64.b64encode(raw).decode()

    async def _post_events(self, mail: Mail) -> None:
        now = int(time.time())
        events = []
        for address in mail.to:
            event, kind = self.outcomes.get(address, ("delivered", ""))
            for name in ("processed", event):
                found = {
                    "email": address, "timestamp": now, "event": name,
                    "sg_event_id": secrets.token_urlsafe(16),
                    "sg_message_id": f"{mail.message_id}.filterdrecv-p3mdw1-756b745b58-kmzbl-18",
                    **mail.custom_args,
                }  # fmt: skip
                if name == "bounce":
                    found |= {"type": kind or "bounce", "status": "5.1.1",
                              "reason": f"550 5.1.1 The email account that you tried to reach "
                                        f"does not exist: {address}"}  # fmt: skip
                events.append(found)
        body = json.dumps(events).encode()
        timestamp = str(now)
        signature = self._event_key.sign(timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
        headers = {
            "Content-Type": "application/json",
            "X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(signature).decode(),
            "X-Twilio-Email-Event-Webhook-Timestamp": timestamp,
        }
        try:
            async with httpx.AsyncClient(timeout=5) as client:
                answer = await client.post(self.event_webhook_url, content=body, headers=headers)
            self.events_posted.append(answer.status_code)
        except httpx.HTTPError:
            self.events_posted.append(0)

    def fault_answer(self, fault: Fault) -> Answer:
        if fault is Fault.RATE_LIMITED:
            reset = str(int(time.time() + self.rate_limit_reset_seconds))
            headers = {"X-RateLimit-Limit": "600", "X-RateLimit-Remaining": "0"}
            headers["X-RateLimit-Reset"] = reset
            if self.retry_after is not None:
                headers["Retry-After"] = self.retry_after
            return errors(429, (None, "too many requests"), **headers)
        if fault is Fault.UNAVAILABLE:
            return errors(503, (None, "service unavailable"))
        return errors(500, (None, "internal server error"))

    def too_large(self) -> Answer:
        return errors(413, (None, "Payload Too Large"))

    async def handle(self, request: Request) -> Answer:
        if request.path != "/v3/mail/send":
            return errors(404, (None, "resource not found"))
        if request.method != "POST":
            return errors(405, (None, "method not allowed"))
        authorization = request.headers.get("authorization")
        if authorization is None:
            return errors(401, (None, "authorization required"))
        if authorization != f"Bearer {self.api_key}":
            return errors(401, (None, "The provided authorization grant is invalid, expired, "
                                      "or revoked"))  # fmt: skip
        content_type = request.headers.get("content-type", "").split(";")[0].strip()
        if content_type != "application/json":
            return errors(400, (None, "Content-Type should be application/json."))
        try:
            body = json.loads(request.body)
        except ValueError:
            return errors(400, (None, "Bad Request"))
        if not isinstance(body, dict):
            return errors(400, (None, "Invalid type. Expected: object."))
        problems = _problems(body)
        if problems:
            return errors(400, *problems)
        return self._take(body)

    def _take(self, body: dict[str, Any]) -> Answer:
        recipients = [to["email"] for p in body["personalizations"] for to in p["to"]]
        for address in recipients:
            if address in self.by_address:
                return self.by_address[address]
        mail = Mail(
            message_id=secrets.token_urlsafe(16),
            to=recipients,
            sender=body["from"],
            subject=body.get("subject", ""),
            content=body["content"],
            headers=body.get("headers", {}),
            custom_args=body.get("custom_args", {}),
        )
        self.accepted.append(mail)
        if self.event_webhook_url:
            task = asyncio.get_running_loop().create_task(self._post_events(mail))
            self._posting.add(task)
            task.add_done_callback(self._posting.discard)
        return Answer(202, b"", {"X-Message-Id": mail.message_id})


Problem = tuple[str | None, str]


def _problems(body: dict[str, Any]) -> list[Problem]:
    """Every reason SendGrid would refuse ``body``, as (field, message)."""
    return [
        *_personalization_problems(body.get("personalizations")),
        *_sender_problems(body.get("from")),
        *_subject_problems(body),
        *_content_problems(body.get("content")),
        *_string_map_problems("headers", body.get("headers", {})),
        *_string_map_problems("custom_args", body.get("custom_args", {})),
    ]


def _personalization_problems(value: Any) -> list[Problem]:
    if not isinstance(value, list) or not value:
        return [("personalizations", "The personalizations field is required and must have at "
                 "least one personalization.")]  # fmt: skip
    problems: list[Problem] = []
    for i, item in enumerate(value):
        to = item.get("to") if isinstance(item, dict) else None
        if not isinstance(to, list) or not to:
            problems.append((f"personalizations.{i}.to", "The to array is required for all "
                             "personalization objects, and must have at least one email object "
                             "with a valid email address."))  # fmt: skip
            continue
        for j, recipient in enumerate(to):
            email = recipient.get("email") if isinstance(recipient, dict) else None
            if not valid_email(email):
                field = f"personalizations.{i}.to.{j}.email"
                problems.append((field, "Does not contain a valid address."))
    return problems


def _sender_problems(value: Any) -> list[Problem]:
    if not isinstance(value, dict) or "email" not in value:
        return [("from", "The from object must be provided for every email send. It is an "
                 "object that requires the email parameter, but may also contain a name "
                 "parameter.")]  # fmt: skip
    if not valid_email(value["email"]):
        return [("from.email", "The from email does not contain a valid address.")]
    if "name" in value and not isinstance(value["name"], str):
        return [("from.name", "Invalid type. Expected: string.")]
    return []


def _subject_problems(body: dict[str, Any]) -> list[Problem]:
    subject = body.get("subject")
    if isinstance(subject, str) and subject:
        return []
    personalizations = body.get("personalizations")
    if (
        isinstance(personalizations, list)
        and personalizations
        and all(
            isinstance(p, dict) and isinstance(p.get("subject"), str) and p["subject"]
            for p in personalizations
        )
    ):
        return []
    return [("subject", "The subject is required. You can get around this requirement if you "
             "use a template with a subject defined or if every personalization has a subject "
             "defined.")]  # fmt: skip


def _content_problems(value: Any) -> list[Problem]:
    if not isinstance(value, list) or not value:
        return [("content", "Unless a valid template_id is provided, the content parameter is "
                 "required. There must be at least one defined content block.")]  # fmt: skip
    problems: list[Problem] = []
    types = []
    for i, block in enumerate(value):
        kind = block.get("type") if isinstance(block, dict) else None
        text = block.get("value") if isinstance(block, dict) else None
        if not isinstance(kind, str) or not kind:
            problems.append((f"content.{i}.type", "The content type cannot be blank."))
        if not isinstance(text, str) or not text:
            problems.append((f"content.{i}.value", EMPTY_CONTENT))
        types.append(kind)
    if "text/plain" in types and types.index("text/plain") != 0:
        problems.append(("content.0.type", "The text/plain content type must be first, "
                         "followed by text/html, then any other content."))  # fmt: skip
    if len(types) != len(set(types)):
        problems.append(("content", "Each content type may only be provided once."))
    return problems


def _string_map_problems(name: str, value: Any) -> list[Problem]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        return [(name, "Invalid type. Expected: object of strings.")]
    if name == "headers":
        reserved = sorted(k for k in value if k.lower() in RESERVED_HEADERS)
        if reserved:
            return [(f"headers.{reserved[0]}", "This header is reserved and cannot be set.")]
        wrong = list_unsubscribe.problems(value.items())
        return [(f"headers.{field}", f"The {field} header {says}.") for field, says in wrong]
    if len(json.dumps(value).encode()) > MAX_CUSTOM_ARGS_BYTES:
        return [(name, "The custom_args are too large (10,000 bytes at most).")]
    return []


if __name__ == "__main__":
    main(SendgridPeer(), "A local SendGrid Mail Send API")
