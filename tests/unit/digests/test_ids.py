"""A digest's notification is known by its idempotency key."""

from __future__ import annotations

from streams.digests.ids import DIGEST_KEY_PREFIX, digest_key, is_digest_close


def test_a_digests_key_names_it_and_only_it_is_a_close() -> None:
    assert digest_key("abc") == f"{DIGEST_KEY_PREFIX}abc" == "digest:abc"
    assert is_digest_close(digest_key("abc"))
    assert not is_digest_close("order-17")
    assert not is_digest_close("campaign:c-1:u-1")
