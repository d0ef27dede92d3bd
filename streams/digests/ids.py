"""How a digest's own notification is known: the idempotency key it is ingested under,
``digest:<digest id>``, so a close repeated after a crash makes it once. Producers may not
use keys with this prefix (the API refuses them), so the key alone tells a digest's
notification from the notifications that joined digests.
"""

from __future__ import annotations

from typing import Final

DIGEST_KEY_PREFIX: Final = "digest:"


def digest_key(digest_id: str) -> str:
    """The idempotency key of the notification a digest closes into."""
    return f"{DIGEST_KEY_PREFIX}{digest_id}"


def is_digest_close(idempotency_key: str) -> bool:
    """Whether a notification is a digest's own (made when it closed)."""
    return idempotency_key.startswith(DIGEST_KEY_PREFIX)


def digest_of(idempotency_key: str) -> str:
    """The digest a notification was made of ("" for any other notification)."""
    return (
        idempotency_key.removeprefix(DIGEST_KEY_PREFIX) if is_digest_close(idempotency_key) else ""
    )
