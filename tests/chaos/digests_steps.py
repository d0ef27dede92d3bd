"""The chaos run of digests and escalation steps: what is sent, and what the producer (and
the recipients' apps) did meanwhile.

- ``thread_digest`` joins each recipient's notifications per thread into a digest (a 3 s
  window, at most ``MAX_ITEMS``): a few recipients, two threads each, so every digest holds
  several. Some joined notifications are cancelled 0 to 1 s after their 202 (while their
  digest is open, mostly): the cancellation's answer says whether one left its digest.
- ``escalating`` goes to the inbox (IN_APP) at once, to PUSH 2 s later unless read, to EMAIL
  4 s later unless read or delivered; a PUSH that fails for good falls back to one SMS. Each
  notification has a recipient of its own. About half are read in the inbox (``READ``) as
  soon as the inbox has them, but only while there is time before the PUSH is due
  (``READ_MARGIN_S``): a read that came later would race a step already being sent, which no
  read can recall. A fifth (never read) push to tokens the sandbox calls invalid
  (``invalid_token``), some to two of them.

The catalog is the chaos catalog with EMAIL back on the sandbox and IN_APP on the inbox
(the shipped providers): the sandbox's record is what was sent, and only an inbox message
can be read.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any

import httpx

from tests.chaos.later import LaterProducer
from tests.chaos.load import Planned
from tests.chaos.relay import RELAY
from tests.chaos.service import SHIPPED_EMAIL, SHIPPED_IN_APP

DIGEST_TYPE = "thread_digest"
STEPS_TYPE = "escalating"
DIGEST_CHANNELS = ("EMAIL", "PUSH", "IN_APP")
SANDBOX_DIGEST_CHANNELS = ("EMAIL", "PUSH")  # IN_APP goes to the inbox
WINDOW_S = 3
MAX_ITEMS = 5
PUSH_AFTER_S, EMAIL_AFTER_S = 2, 4
DIGEST_RECIPIENTS = 10
THREADS = ("alpha", "beta")
DIGEST_SHARE = 0.7  # of the notifications; the rest are ``escalating``
CANCELLED = 0.1  # of the joined notifications
READ = 0.5  # of the ``escalating`` ones
INVALID = 0.2  # of them, never read: every push token invalid
# A read is sent no later than this before the PUSH step is due; past it, it is not sent.
READ_MARGIN_S = 0.5
ITEMS = "{% for i in items %}{{ i.n }};{% endfor %}"
CATALOG = f"""
[types.{DIGEST_TYPE}]
channels = ["EMAIL", "PUSH", "IN_APP"]
priority = "NORMAL"
ttl_seconds = 3600
opt_out = true
digest = {{ window = "{WINDOW_S}s", key = "{{{{ data.thread }}}}", max_items = {MAX_ITEMS} }}

[types.{DIGEST_TYPE}.templates.en]
EMAIL = {{ title = "{{{{ count }}}} on {{{{ key }}}}", body = "{ITEMS}" }}
PUSH = {{ title = "{{{{ count }}}} on {{{{ key }}}}", body = "{ITEMS}" }}
IN_APP = {{ title = "{{{{ count }}}}", body = "{ITEMS}" }}

[types.{STEPS_TYPE}]
channels = ["IN_APP", "PUSH", "EMAIL"]
priority = "NORMAL"
ttl_seconds = 3600
opt_out = true
steps = [
  {{ channel = "IN_APP" }},
  {{ channel = "PUSH", after = "{PUSH_AFTER_S}s", unless = "read" }},
  {{ channel = "EMAIL", after = "{EMAIL_AFTER_S}s", unless = ["read", "delivered"] }},
]
fallback = {{ PUSH = "SMS" }}

[types.{STEPS_TYPE}.templates.en]
IN_APP = {{ title = "Step", body = "{{{{ n }}}}" }}
PUSH = {{ title = "Step", body = "{{{{ n }}}}" }}
EMAIL = {{ title = "Step", body = "{{{{ n }}}}" }}
SMS = {{ body = "Step {{{{ n }}}}" }}
"""


def with_digests_and_steps(catalog: str) -> str:
    """The chaos catalog with EMAIL on the sandbox, IN_APP on the inbox, and both types."""
    relayed = SHIPPED_EMAIL.replace('"sandbox"', f'"{RELAY}"')
    in_sandbox = SHIPPED_IN_APP.replace('"inbox"', '"sandbox"')
    for changed in (relayed, in_sandbox):
        assert catalog.count(changed) == 1, f"the chaos catalog changed: update {changed!r}"
    catalog = catalog.replace(relayed, SHIPPED_EMAIL).replace(in_sandbox, SHIPPED_IN_APP)
    return catalog + CATALOG


@dataclass(frozen=True, slots=True)
class DigestStepsPlan:
    plans: list[Planned]
    cancel: frozenset[str]  # keys of joined notifications to cancel
    read: frozenset[str]  # keys of ``escalating`` notifications to read
    invalid: frozenset[str]  # keys of ``escalating`` notifications whose tokens are invalid


def digest_recipient(number: int) -> dict[str, Any]:
    return {
        "id": f"dg-{number}",
        "email": f"user{900000 + number}@example.com",
        "push_tokens": [f"{900000 + number:064x}"],
    }


def plan_digests_and_steps(count: int, seed: int) -> DigestStepsPlan:
    """``count`` notifications of both types, in a seeded order."""
    rng = random.Random(seed)
    plans: list[Planned] = []
    cancel, read, invalid = set(), set(), set()
    for n in range(count):
        key = f"dgst-{seed}-{n}"
        if rng.random() < DIGEST_SHARE:
            recipient = digest_recipient(rng.randrange(DIGEST_RECIPIENTS))
            data = {"thread": rng.choice(THREADS), "n": n}
            body = {"recipient": recipient, "type": DIGEST_TYPE, "data": data}
            if rng.random() < CANCELLED:
                cancel.add(key)
        else:
            tokens = [f"{n:032x}{t:032x}" for t in range(rng.choice((1, 1, 2)))]
            recipient = {
                "id": f"st-{seed}-{n}", "email": f"user{n}@example.com",
                "phone": f"+49151{n:08d}", "push_tokens": tokens,
            }  # fmt: skip
            step_data: dict[str, Any] = {"n": n}
            roll = rng.random()
            if roll < READ:
                read.add(key)
            elif roll < READ + INVALID:
                invalid.add(key)
                step_data["sandbox"] = {"PUSH": {"invalid_token": True}}
            body = {"recipient": recipient, "type": STEPS_TYPE, "data": step_data}
        plans.append(Planned(key, body, {}))
    return DigestStepsPlan(plans, frozenset(cancel), frozenset(read), frozenset(invalid))


class DigestStepsProducer(LaterProducer):
    """``LaterProducer`` (which cancels the planned ones 0 to 1 s after their 202), which
    also reads the planned ``escalating`` notifications in the recipient's inbox."""

    def __init__(
        self, base_url: str, api_key: str, profiles_key: str, planned: DigestStepsPlan
    ) -> None:
        super().__init__(base_url, api_key, planned.cancel)
        self.profiles_key = profiles_key
        self.read = planned.read
        self.digests: dict[str, str] = {}  # key -> the digest its 202 named
        self.reads: dict[str, float] = {}  # key -> when the read was acknowledged (200)
        # Keys with a read that got no answer, and none acknowledged: read or not.
        self.read_unknown: set[str] = set()
        self.read_too_late: set[str] = set()  # planned, not sent: the PUSH was almost due
        self._reading = random.Random(17)

    def _remember(self, planned: Planned, answer: httpx.Response) -> None:
        super()._remember(planned, answer)
        digest = answer.json().get("digest")
        if digest:
            self.digests[planned.key] = digest["id"]

    async def _send_until_answered(self, client: httpx.AsyncClient, planned: Planned) -> None:
        await super()._send_until_answered(client, planned)
        ack = self.acknowledged.get(planned.key)
        if ack is None or planned.key not in self.read:
            return
        in_app = next(d for d, channel, _ in ack.deliveries if channel == "IN_APP")
        push_due = min(
            (self.due_ms[d] / 1000 for d, channel, _ in ack.deliveries if channel == "PUSH"),
            default=ack.answered + PUSH_AFTER_S,
        )
        await self._read_until_answered(client, planned, in_app, push_due - READ_MARGIN_S)

    async def _read_until_answered(
        self, client: httpx.AsyncClient, planned: Planned, in_app: str, read_by: float
    ) -> None:
        """Read the message once the inbox has it; nothing sent after ``read_by``."""
        recipient = planned.body["recipient"]["id"]
        token = await self._inbox_token(client, recipient, read_by)
        if token is None:
            self.read_too_late.add(planned.key)
            return
        await asyncio.sleep(self._reading.uniform(0.05, 0.3))
        headers = {"Authorization": f"Bearer {token}"}
        while time.time() < read_by:
            try:
                answer = await client.post(f"/v1/inbox/{in_app}/read", headers=headers)
            except httpx.TransportError:
                self.read_unknown.add(planned.key)  # it may have been read
                await asyncio.sleep(0.1)
                continue
            if answer.status_code == 200:
                self.reads[planned.key] = time.time()
                self.read_unknown.discard(planned.key)
                return
            if answer.status_code not in (404, 409, 503):  # 404: not in the inbox yet
                self.stats.unexpected.append(f"read {planned.key}: {answer.status_code}")
                return
            await asyncio.sleep(0.1)
        self.read_too_late.add(planned.key)

    async def _inbox_token(
        self, client: httpx.AsyncClient, recipient: str, until: float
    ) -> str | None:
        headers = {"Authorization": f"Bearer {self.profiles_key}"}
        path = f"/v1/recipients/{recipient}/inbox-tokens"
        while time.time() < until:
            try:
                made = await client.post(path, json={}, headers=headers)
            except httpx.TransportError:
                await asyncio.sleep(0.1)
                continue
            if made.status_code == 201:
                return str(made.json()["token"])
            if made.status_code != 503:
                self.stats.unexpected.append(f"inbox token {recipient}: {made.status_code}")
                return None
            await asyncio.sleep(0.1)
        return None
