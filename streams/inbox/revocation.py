"""Revoking a recipient's tokens: a revocation epoch per recipient, in Redis.

Recipient tokens (``app.inbox.tokens``) are stateless: a token names its recipient, its
expiry and the recipient's epoch when it was made. Revoking (the API's
``POST /v1/recipients/{id}/inbox-tokens/revoke``, and every erasure) raises the epoch
(``revoke.lua``); the inbox's reads compare it with the token's in the same script
or pipeline that reads the inbox (``streams.inbox.store``), so a revoked token reads nothing, and
the API processes end the recipient's open realtime streams (``streams.inbox.live``).

The epoch lives under the recipient's home shard (``InboxKeys.revoked``) for ``KEEP_MS``
after the last revocation, longer than any token lives: by then every token of an older
epoch has expired, so a recipient never revoked, or not for a day, costs no key. A token made
while no key is there carries epoch 0.
"""

from __future__ import annotations

from typing import Final

from redis.asyncio import Redis

from streams.core import scripts
from streams.core.errors import Unauthenticated
from streams.core.keys import KeySpace
from streams.core.scripts import Call

# How long a revocation is remembered: longer than a token's longest life (12 h,
# ``app.inbox.tokens.MAX_TTL_SECONDS``), with an hour for API hosts whose clocks differ.
KEEP_MS: Final = 13 * 3600 * 1000
# What ``page.lua`` answers for a page a revoked token asked for.
REVOKED_PAGE: Final = b"revoked"
# What ``revoke.lua`` publishes, before the recipient id (a recipient id is never
# empty, so no inbox change starts so).
REVOKED_PREFIX: Final = b"\x1frevoked\x1f"


class TokensRevoked(Unauthenticated):
    """The recipient's tokens of this epoch were revoked (the message names no token)."""

    def __init__(self) -> None:
        super().__init__("recipient token revoked")


def revoked(stored: bytes | str | None, epoch: int) -> bool:
    """Whether a token of ``epoch`` is revoked, the stored epoch being ``stored``."""
    return stored is not None and int(stored) > epoch


class InboxRevocations:
    """Recipients' revocation epochs: read when a token is made, raised to revoke."""

    def __init__(self, redis: Redis, keys: KeySpace) -> None:
        self.redis = redis
        self.keys = keys

    def key(self, recipient_id: str) -> str:
        return self.keys.home_of_recipient(recipient_id).inbox(recipient_id).revoked

    async def epoch(self, recipient_id: str) -> int:
        """The recipient's epoch now: what a token made now carries."""
        stored = await self.redis.get(self.key(recipient_id))
        return int(stored) if stored is not None else 0

    async def check(self, recipient_id: str, epoch: int) -> None:
        """``TokensRevoked`` if a token of ``epoch`` was revoked."""
        if revoked(await self.redis.get(self.key(recipient_id)), epoch):
            raise TokensRevoked

    async def revoke(self, recipient_id: str) -> int:
        """Refuse every token of the recipient made until now; the new epoch."""
        call = inbox_revoke_call(self.key(recipient_id), self.keys.inbox_live, recipient_id)
        return int(await scripts.INBOX_REVOKE(self.redis, *call))


def inbox_revoke_call(key: str, live: str, recipient_id: str) -> Call:
    """The keys and arguments of one ``revoke.lua`` call."""
    return [key], [KEEP_MS, live, recipient_id]
