"""The producer: a known mix of notifications, sent over HTTP until each one is acknowledged.

Every notification is planned up front from a seeded generator, with what each of its
channels is expected to end as: the sandbox directives say it (``fail_permanent`` → FAILED,
PERMANENT; ``raise_bug`` → FAILED, BUG; ``fail_transient`` below the retry bound → SENT).
EMAIL goes through the SMTP relay (``relay``), so the same draws become the recipient
address's ``Mailbox`` there: an unknown mailbox (550 5.1.1 at RCPT) → FAILED, PERMANENT
(invalid_address); a message refused at the end of data (554 5.7.1) → FAILED, PERMANENT
(rejected), in place of a bug no relay can provoke; greylisting below the retry bound →
SENT; a late answer for a latency.
The producer paces the requests over the send period and re-sends every request that got no
answer, a 503 or a 409 with the same Idempotency-Key and the same body, as a well-behaved
client would, until it gets a 202. Only a 202 is an acknowledgement: a 503 (Redis down,
out of memory, restarting) is retried after its Retry-After for as long as it lasts, up to
``GIVE_UP_AFTER_S``. The same key makes a retry safe while Redis keeps its data (what was
written is answered again, nothing is doubled); after Redis lost its dataset the key is
forgotten and a retry is accepted anew, with a new id, which is what a 202 then says.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.chaos.relay import RELAY_CHANNEL, Mailbox

# (type, share, its channels): priorities come from the catalog (HIGH, HIGH, NORMAL, LOW).
TYPES: tuple[tuple[str, float, tuple[str, ...]], ...] = (
    ("otp", 0.30, ("SMS",)),
    ("security_alert", 0.15, ("EMAIL", "PUSH")),
    ("order_confirmed", 0.35, ("EMAIL", "PUSH", "IN_APP")),
    ("marketing", 0.20, ("EMAIL", "PUSH")),
)
# Per channel of a notification: the chance of each directive (the rest is a plain send).
FAIL_PERMANENT = 0.04
RAISE_BUG = 0.01
FAIL_TRANSIENT = 0.10  # 1 or 2 failures, below every channel's max_attempts
LATENCY = 0.25  # 100-600 ms in the provider: sends are in flight when a worker dies

REQUEST_TIMEOUT_S = 10.0
GIVE_UP_AFTER_S = 180.0


@dataclass(frozen=True, slots=True)
class Planned:
    """One notification to send and what each channel is expected to end as."""

    key: str
    body: dict[str, Any]
    # Channel -> "SENT", or the error class of the failure its directive asks for.
    expected: dict[str, str]
    # How the relay treats the recipient's email address (None: as any other).
    mailbox: Mailbox | None = None

    @property
    def email(self) -> str:
        """The recipient's email address ("" without one: EMAIL is SUPPRESSED)."""
        return str(self.body["recipient"].get("email", ""))


def plan(count: int, seed: int) -> list[Planned]:
    """``count`` notifications: mixed types, priorities, channels, recipients and directives."""
    rng = random.Random(seed)
    shares = [share for _, share, _ in TYPES]
    plans = []
    for n in range(count):
        type_name, _, channels = rng.choices(TYPES, weights=shares)[0]
        recipient: dict[str, Any] = {"id": f"user-{rng.randrange(5000)}"}
        if rng.random() < 0.92:  # the rest: EMAIL is SUPPRESSED (no_address)
            recipient["email"] = f"user{n}@example.com"
        if type_name == "otp" or rng.random() < 0.5:
            recipient["phone"] = f"+49151{n:08d}"
        tokens = rng.choice((0, 1, 1, 1, 2))  # one PUSH delivery per token
        if tokens:
            recipient["push_tokens"] = [f"{n:032x}{t:032x}" for t in range(tokens)]
        directives: dict[str, dict[str, Any]] = {}
        expected: dict[str, str] = {}
        mailbox = None
        for channel in channels:
            directive, expected[channel] = _directive(rng)
            if channel == RELAY_CHANNEL:
                mailbox = _mailbox(directive, recipient.get("email", ""))
                if expected[channel] == "BUG":  # the relay refuses it instead: no bug
                    expected[channel] = "PERMANENT"
            elif directive:
                directives[channel] = directive
        data: dict[str, Any] = {
            "otp": {"code": f"{n % 1_000_000:06d}"},
            "security_alert": {"message": f"New sign-in {n}"},
            "order_confirmed": {"order_id": f"A-{n}"},
            "marketing": {"subject": "Sale", "body": f"Offer {n}"},
        }[type_name]
        if directives:
            data["sandbox"] = directives
        body = {"recipient": recipient, "type": type_name, "data": data}
        plans.append(Planned(f"chaos-{seed}-{n}", body, expected, mailbox))
    return plans


def _directive(rng: random.Random) -> tuple[dict[str, Any], str]:
    """One channel's sandbox directive, and what it makes of the delivery: "SENT" or the
    error class of its failure."""
    directive: dict[str, Any] = {}
    roll = rng.random()
    if roll < FAIL_PERMANENT:
        directive["fail_permanent"] = "mailbox does not exist"
        outcome = "PERMANENT"
    elif roll < FAIL_PERMANENT + RAISE_BUG:
        directive["raise_bug"] = True
        outcome = "BUG"
    else:
        if roll < FAIL_PERMANENT + RAISE_BUG + FAIL_TRANSIENT:
            directive["fail_transient"] = rng.choice((1, 2))
        outcome = "SENT"
    if rng.random() < LATENCY:
        directive["latency_ms"] = rng.randrange(100, 600)
    return directive, outcome


def _mailbox(directive: dict[str, Any], address: str) -> Mailbox | None:
    """The relay's counterpart of a sandbox directive for ``address`` (None: a plain 250)."""
    if not directive or not address:
        return None
    return Mailbox(
        greylist=directive.get("fail_transient", 0),
        refuse_rcpt=(
            f"550 5.1.1 <{address}>: Recipient address rejected: User unknown"
            if "fail_permanent" in directive
            else ""
        ),
        refuse_data="554 5.7.1 Message rejected: content" if "raise_bug" in directive else "",
        answer_delay_s=directive.get("latency_ms", 0) / 1000,
    )


@dataclass(frozen=True, slots=True)
class Acknowledged:
    """What a 202 said: the notification id and each delivery (id, channel, status)."""

    planned: Planned
    notification_id: str
    deliveries: tuple[tuple[str, str, str], ...]
    answered: float  # when the 202 came (seconds since the epoch)


@dataclass(frozen=True, slots=True)
class Answer:
    """One HTTP answer with its times (seconds since the epoch), to set beside the faults'."""

    sent: float
    answered: float
    status: int
    replayed: bool


@dataclass(slots=True)
class ProducerStats:
    requests: int = 0
    answers: Counter[int] = field(default_factory=Counter)
    replayed: int = 0  # 202 with Idempotent-Replayed: a retry of something already written
    no_answer: int = 0  # timeouts and broken connections, each re-sent
    gave_up: list[str] = field(default_factory=list)
    # Answers a well-behaved service never gives here: 4xx other than 409 (a bad plan,
    # never retried), 5xx other than 503, a 503 without Retry-After.
    unexpected: list[str] = field(default_factory=list)
    timeline: list[Answer] = field(default_factory=list)


class Producer:
    """Sends planned notifications at a steady rate with bounded concurrency."""

    def __init__(self, base_url: str, api_key: str, *, concurrency: int = 128) -> None:
        self.base_url = base_url
        self.api_key = api_key
        self.concurrency = concurrency
        self.stats = ProducerStats()
        self.acknowledged: dict[str, Acknowledged] = {}
        self.progress = 0.0  # the share of the notifications whose first request went out

    async def send_all(self, plans: list[Planned], seconds: float) -> None:
        """Send every plan, spread evenly over ``seconds``, each until it is answered."""
        rate = len(plans) / seconds
        start = time.monotonic()
        queue = iter(enumerate(plans))
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=32)
        async with httpx.AsyncClient(
            base_url=self.base_url, limits=limits, timeout=REQUEST_TIMEOUT_S
        ) as client:

            async def sender() -> None:
                for index, planned in queue:
                    delay = start + index / rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    self.progress = (index + 1) / len(plans)
                    await self._send_until_answered(client, planned)

            await asyncio.gather(*(sender() for _ in range(self.concurrency)))

    async def _send_until_answered(self, client: httpx.AsyncClient, planned: Planned) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}", "Idempotency-Key": planned.key}
        deadline = time.monotonic() + GIVE_UP_AFTER_S
        pause = 0.0
        for attempt in itertools.count():
            if time.monotonic() > deadline:
                self.stats.gave_up.append(planned.key)
                return
            if attempt:
                await asyncio.sleep(pause)
            self.stats.requests += 1
            sent = time.time()
            try:
                answer = await client.post("/v1/notifications", json=planned.body, headers=headers)
            except httpx.TransportError:  # no answer: it may or may not have been written
                self.stats.no_answer += 1
                pause = 0.5
                continue
            self.stats.answers[answer.status_code] += 1
            replayed = answer.headers.get("Idempotent-Replayed") == "true"
            self.stats.timeline.append(Answer(sent, time.time(), answer.status_code, replayed))
            if answer.status_code == 202:
                self._remember(planned, answer)
                return
            if answer.status_code == 503:
                if "Retry-After" not in answer.headers:
                    self.stats.unexpected.append(f"{planned.key}: 503 without Retry-After")
                pause = float(answer.headers.get("Retry-After", "1"))
            elif answer.status_code == 409:  # the first request with this key is in flight
                pause = 0.2
            elif answer.status_code >= 500:  # a retry may still succeed, but it is a bug
                self.stats.unexpected.append(f"{planned.key}: {answer.status_code}")
                pause = 0.5
            else:
                self.stats.unexpected.append(f"{planned.key}: {answer.status_code} {answer.text}")
                return

    def _remember(self, planned: Planned, answer: httpx.Response) -> None:
        if answer.headers.get("Idempotent-Replayed") == "true":
            self.stats.replayed += 1
        body = answer.json()
        deliveries = tuple((d["id"], d["channel"], d["status"]) for d in body["deliveries"])
        self.acknowledged[planned.key] = Acknowledged(planned, body["id"], deliveries, time.time())
