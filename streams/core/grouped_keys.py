"""Key names of things whose keys share one hash tag, so one script may touch them all: a
recipient's inbox on a shard, a producer's status webhook (``streams.core.keys`` hands them
out).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class InboxKeys:
    """The keys of one recipient's inbox on one shard: all share the shard's hash tag, so
    the script that records an IN_APP delivery SENT writes its message too."""

    tag: str

    @property
    def messages(self) -> str:
        """A hash: ``m:<id>`` each message (JSON), ``f:<id>`` its state (read, seen and
        archived times in ms and the delivery's version), ``unread`` and ``unseen`` counts."""
        return self.tag

    @property
    def order(self) -> str:
        """The message ids by creation time (a sorted set, scores in ms), newest last."""
        return f"{self.tag}:order"

    @property
    def feed(self) -> str:
        """Every change, in order (a capped stream): what a realtime client resumes from."""
        return f"{self.tag}:feed"

    @property
    def revoked(self) -> str:
        """The recipient's revocation epoch (a string, on its home shard only): its tokens
        of an older epoch are refused (``streams.inbox.revocation``)."""
        return f"{self.tag}:revoked"


@dataclass(frozen=True, slots=True)
class StatusWebhookKeys:
    """The keys of one producer's status webhook: all share the producer's hash tag
    (``{hooks:<producer>}``), so one script may touch them together."""

    tag: str

    @property
    def config(self) -> str:
        """The URL and signing secret (a string:
        ``streams.status_webhooks.store.StatusWebhook``)."""
        return f"{self.tag}:config"

    @property
    def outbox(self) -> str:
        """Statuses waiting to be POSTed (a stream; an entry is deleted once it is done)."""
        return f"{self.tag}:outbox"

    @property
    def positions(self) -> str:
        """Per shard, the last ``events`` entry whose statuses are in the outbox (a hash), so
        an entry read again after a crash is not put in twice."""
        return f"{self.tag}:positions"

    @property
    def dlq(self) -> str:
        """Statuses given up on, with why (a stream)."""
        return f"{self.tag}:dlq"
