"""The chaos service's SMTP relay: the EMAIL channel's provider, and its record of every message.

The chaos catalog sends the whole EMAIL channel through an ``smtp`` provider (``RELAY``)
pointed at this relay, a ``tests.peers.smtp.SmtpPeer`` on 127.0.0.1 with STARTTLS (its
trustme CA) and AUTH, the password reaching the service's processes only through the
environment variable ``PASSWORD_ENV``. The other channels stay on the sandbox.

Each planned recipient address may have a ``Mailbox``: how the relay treats it, as the
sandbox directives steer the other channels — greylisting (451 at RCPT for the first few
tries, then accepted), an unknown mailbox (550 5.1.1 at RCPT), a message refused at the end
of data (554 5.7.1), or a late answer (the message is taken at once, the 250 comes later, so
a worker killed meanwhile has handed over a message whose outcome it never recorded).

What the relay took is recorded as it took it (``Relayed``): when, for whom, and the
``Message-ID`` and ``X-Clarion-Delivery-Id`` headers, which is the evidence the verdict holds
against the delivery states. Only the headers are parsed: the peer's full parse of every
message would cost this suite's process, on a small machine, a share of a core.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from email.parser import BytesHeaderParser
from email.policy import compat32
from typing import Any, Literal

from aiosmtpd.smtp import SMTP, Envelope, Session

from app.providers.base import DELIVERY_HEADER
from tests.peers.smtp import Script, SmtpPeer

RELAY = "relay"  # the provider's name in the chaos catalog
RELAY_CHANNEL = "EMAIL"  # the one channel the chaos catalog sends through it
PASSWORD_ENV = "CHAOS_SMTP_PASSWORD"
SENDER = "Clarion chaos <chaos@clarion.test>"
# Far more than the sandbox needs: every send holds a connection for its round trips and
# any late answer, and the EMAIL backlog must drain within the suite's deadline.
POOL_SIZE = 16
CONNECT_TIMEOUT_S = 2.0
GREYLISTED = "451 4.7.1 <{address}>: Recipient address rejected: Greylisted, try again later"

_headers = BytesHeaderParser(policy=compat32)


@dataclass(frozen=True, slots=True)
class Mailbox:
    """How the relay treats one recipient address instead of a plain 250."""

    greylist: int = 0  # refuse this many RCPTs with a 451 (then accept)
    refuse_rcpt: str = ""  # a reply to every RCPT TO, e.g. a 550 5.1.1
    refuse_data: str = ""  # a reply to every final "." (the message is not kept)
    answer_delay_s: float = 0.0  # take the message, answer 250 this much later


@dataclass(frozen=True, slots=True)
class Relayed:
    """One message the relay took (``at``: seconds since the epoch, when it was taken)."""

    at: float
    rcpt_tos: tuple[str, ...]
    message_id: str
    delivery_id: str


@dataclass
class ChaosRelay(SmtpPeer):
    """The relay (see the module documentation); a context manager, as its base is."""

    tls: Literal["none", "starttls", "tls"] = "starttls"
    parse: bool = False  # ``taken`` holds what the verdict needs
    mailboxes: dict[str, Mailbox] = field(default_factory=dict)
    taken: list[Relayed] = field(default_factory=list, repr=False)
    # Only the relay's own event loop (one thread) touches this.
    greylisted: Counter[str] = field(default_factory=Counter, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        # The lasting refusals are the peer's own scripts; greylisting counts, so it is here.
        self.scripts = {
            address: Script(rcpt=box.refuse_rcpt, data=box.refuse_data)
            for address, box in self.mailboxes.items()
            if box.refuse_rcpt or box.refuse_data
        }

    def record(self) -> dict[str, list[Relayed]]:
        """What the relay took so far, per ``X-Clarion-Delivery-Id``, in the order taken."""
        by_delivery: dict[str, list[Relayed]] = defaultdict(list)
        for relayed in list(self.taken):  # a copy: the relay's thread appends meanwhile
            by_delivery[relayed.delivery_id].append(relayed)
        return dict(by_delivery)

    def catalog_entry(self, timeout_s: float) -> str:
        """The ``[providers.relay]`` table that sends through this relay (once started)."""
        assert self.ca_file, "start the relay first: its CA is made at start"
        values: dict[str, Any] = {
            "kind": "smtp", "host": self.host, "port": self.port, "tls": self.tls,
            "from": SENDER, "username": self.username, "password_env": PASSWORD_ENV,
            "ca_file": self.ca_file, "pool_size": POOL_SIZE, "timeout_seconds": timeout_s,
            "connect_timeout_seconds": CONNECT_TIMEOUT_S,
        }  # fmt: skip
        # A JSON string or number is a TOML value too.
        lines = [f"{key} = {json.dumps(value)}" for key, value in values.items()]
        return "\n".join([f"\n[providers.{RELAY}]", *lines, ""])

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        box = self.mailboxes.get(address)
        if box is not None and self.greylisted[address] < box.greylist:
            self.greylisted[address] += 1
            return GREYLISTED.format(address=address)
        return await super().handle_RCPT(server, session, envelope, address, options)

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        reply = await super().handle_DATA(server, session, envelope)
        if not reply.startswith("250"):
            return reply
        headers = _headers.parsebytes(envelope.original_content or b"")
        self.taken.append(
            Relayed(
                at=time.time(),
                rcpt_tos=tuple(envelope.rcpt_tos),
                message_id=str(headers["Message-ID"] or ""),
                delivery_id=str(headers[DELIVERY_HEADER] or ""),
            )
        )
        delay = max(
            (self.mailboxes[a].answer_delay_s for a in envelope.rcpt_tos if a in self.mailboxes),
            default=0.0,
        )
        if delay:
            # Cancelled when the client goes away meanwhile (a killed worker): the message
            # stays taken, as a relay's queue keeps what it wrote.
            await asyncio.sleep(delay)
        return reply
