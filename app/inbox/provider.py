"""The inbox provider: IN_APP deliveries go into Clarion's own inbox (``streams.inbox.store``).

There is nobody to call: the worker asks this adapter for the delivery's decision
(``decision``), which it records as SENT with the message put into the recipient's inbox,
in one step. The message is the IN_APP template's title and body, with its ``link`` as the action
URL and its ``data`` for the app.

An app opens the action URL when the recipient taps the message, so only links that cannot
run script there are written: ``https://<host>…``, or a scheme the provider's
``link_schemes`` names (an app's own, e.g. ``myapp:``); no link at all is fine too. Anything
else (``javascript:``, ``data:``, ``http:``, a relative or scheme-less link, one holding a
space or control character, which browsers strip before they read the scheme) fails the
delivery PERMANENT, naming only the scheme.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from urllib.parse import urlsplit

from app.catalog.providers import InboxConfig
from app.providers.base import Message, ProviderError
from streams.core.vocabulary import ErrorClass
from streams.delivery.decisions import SentToInbox
from streams.delivery.leases import LeasedDelivery
from streams.inbox.messages import InboxMessage

_DAY_MS = 86_400_000
# What a link may not hold anywhere: C0 controls, space and DEL (browsers drop tabs and
# line breaks inside a scheme, so "java\tscript:" would run).
_UNSAFE_CHARACTER = re.compile(r"[\x00-\x20\x7f]")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def link_refusal(link: str, schemes: frozenset[str]) -> str:
    """Why an IN_APP message may not carry ``link`` as its action URL ("": it may): it is
    https with a host, or of one of ``schemes`` (lower case), or empty. Linear time."""
    if not link:
        return ""
    if _UNSAFE_CHARACTER.search(link):
        return "link: holds a space or control character"
    scheme, colon, _ = link.partition(":")
    if not colon or not _SCHEME.fullmatch(scheme):
        return "link: not an absolute URL (https://…, or a scheme of the provider's link_schemes)"
    scheme = scheme.lower()
    if scheme == "https":
        try:
            host = urlsplit(link).hostname
        except ValueError:
            host = None
        return "" if host else "link: an https link without a host"
    if scheme in schemes:
        return ""
    allowed = "https, or the provider's link_schemes"
    return f"link: the scheme {scheme[:20]!r} is not allowed ({allowed})"


class InboxProvider:
    """Clarion's own inbox, as the provider of the IN_APP channel."""

    def __init__(self, name: str, config: InboxConfig) -> None:
        self.name = name
        self.config = config
        self._schemes = frozenset(config.link_schemes)

    def decision(self, leased: LeasedDelivery, message: Message, now_ms: int) -> SentToInbox:
        """SENT, with ``message`` in its recipient's inbox; ``ProviderError`` (PERMANENT)
        when its link may not be an action URL."""
        refusal = link_refusal(message.push.link, self._schemes)
        if refusal:
            raise ProviderError(ErrorClass.PERMANENT, f"{self.name}: {refusal}")
        item = leased.item
        stored = InboxMessage(
            id=item.delivery_id,
            notification_id=item.notification_id,
            type=item.notification_type,
            title=message.title,
            body=message.body,
            created_at=datetime.fromtimestamp(now_ms / 1000, UTC),
            action_url=message.push.link,
            data=message.push.data,
        )
        config = self.config
        return SentToInbox(
            self.name, stored, keep=config.keep, ttl_ms=config.keep_days * _DAY_MS,
            feed=config.feed,
        )  # fmt: skip

    async def send(self, message: Message) -> str:
        """Never called: the worker records an inbox delivery through ``decision``."""
        raise ProviderError(
            ErrorClass.PERMANENT, f"{self.name}: inbox messages are written with their outcome"
        )

    async def close(self) -> None:
        return None
