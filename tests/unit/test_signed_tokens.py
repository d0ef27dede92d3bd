"""The signed tokens' envelope: a body sealed and opened again, and every token it refuses
(its users' formats are tested with them: test_unsubscribe.py, test_inbox_tokens.py)."""

from __future__ import annotations

import pytest

from app.signed_tokens import MAX_TOKEN_CHARS, Seal, SealBroken

SECRET = b"signed-tokens-test-secret"


def seal(purpose: bytes = b"test v1", secret: bytes = SECRET) -> Seal:
    return Seal(secret, purpose, version=1, shortest_body=3)


def test_a_sealed_body_opens_again() -> None:
    token = seal().seal(b"\x01body")
    assert seal().open(token) == b"\x01body"
    assert "secret" not in repr(seal()).replace("<secret>", "")


@pytest.mark.parametrize(
    "other", [seal(b"another purpose"), seal(secret=b"another-secret-key-123")]
)
def test_a_token_of_another_purpose_or_key_is_forged(other: Seal) -> None:
    with pytest.raises(SealBroken) as broken:
        seal().open(other.seal(b"\x01body"))
    assert broken.value.why == "forged"


@pytest.mark.parametrize("token", ["", "not a token", "A" * (MAX_TOKEN_CHARS + 1), "=" * 8, "AQID"])
def test_what_is_no_token_of_this_format_is_malformed(token: str) -> None:
    with pytest.raises(SealBroken) as broken:
        seal().open(token)
    assert broken.value.why == "malformed"


def test_another_version_or_spelling_is_malformed() -> None:
    with pytest.raises(SealBroken):
        seal().open(seal().seal(b"\x02body"))  # version 2
    token = seal().seal(b"\x01body")
    # Its last character changed: other unused bits, or other bytes.
    respelled = token[:-1] + ("B" if token[-1] == "A" else "A")
    with pytest.raises(SealBroken):
        seal().open(respelled)
