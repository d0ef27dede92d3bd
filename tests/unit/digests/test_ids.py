"""A digest's notification is known by its idempotency key."""

from __future__ import annotations

from streams.digests.ids import DIGEST_KEY_PREFIX, digest_key, digest_of, is_digest_close


def test_a_digests_key_names_it_and_only_it_is_a_close() -> None:
    assert digest_key("abc") == f"{DIGEST_KEY_PREFIX}abc" == "digest:abc"
    assert is_digest_close(digest_key("abc"))
    assert not is_digest_close("order-17")
    assert not is_digest_close("campaign:c-1:u-1")


def test_the_digest_a_notification_was_made_of_is_read_back_from_its_key() -> None:
    assert digest_of(digest_key("dg-1")) == "dg-1"
    assert digest_of("order-17") == ""
    assert digest_of("campaign:c-1:u-1") == ""
