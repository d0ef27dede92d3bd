"""What a process remembers of the digests it saw open: its guess until the digest's time is
up, the latest seen for an open key, and no more than its size (the first seen goes)."""

from __future__ import annotations

from streams.digests.store import OpenDigests


def test_a_digest_is_guessed_until_its_time_is_up() -> None:
    seen = OpenDigests()
    assert seen.guess("open:a", 1_000) == ""
    seen.saw("open:a", "d-1", 5_000)
    assert seen.guess("open:a", 4_999) == "d-1"
    assert seen.guess("open:a", 5_000) == ""  # closing: a new one is asked for
    seen.saw("open:a", "d-2", 9_000)  # the one seen last
    assert seen.guess("open:a", 5_000) == "d-2"


def test_past_its_size_the_first_seen_goes() -> None:
    seen = OpenDigests(size=2)
    seen.saw("open:a", "d-a", 10)
    seen.saw("open:b", "d-b", 10)
    seen.saw("open:a", "d-a2", 10)  # seen again: no room taken
    assert len(seen) == 2
    seen.saw("open:c", "d-c", 10)
    assert len(seen) == 2
    assert [seen.guess(key, 0) for key in ("open:a", "open:b", "open:c")] == ["", "d-b", "d-c"]
