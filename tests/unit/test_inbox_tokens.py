"""Recipient tokens: what one grants, and every way one is refused."""

from __future__ import annotations

import base64

import pytest

from app.inbox_tokens import Grant, InboxTokens, TokenRefused
from app.unsubscribe import OptOut, UnsubscribeTokens
from streams.vocabulary import Channel

SECRET = b"inbox-token-test-secret"
NOW = 1_800_000_000


def test_a_token_grants_its_recipient_until_it_expires() -> None:
    tokens = InboxTokens(SECRET)
    token = tokens.make(Grant("user-42 ünïcode", NOW + 60))
    assert tokens.read(token, NOW) == Grant("user-42 ünïcode", NOW + 60)
    with pytest.raises(TokenRefused) as refused:
        tokens.read(token, NOW + 60)
    assert refused.value.why == "expired"


def test_a_changed_token_or_one_of_another_key_is_forged() -> None:
    token = InboxTokens(SECRET).make(Grant("user-42", NOW + 60))
    raw = bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    raw[6] ^= 1  # the recipient id's first byte
    changed = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    for forged in (changed, InboxTokens(b"another-secret-key").make(Grant("user-42", NOW + 60))):
        with pytest.raises(TokenRefused) as refused:
            InboxTokens(SECRET).read(forged, NOW)
        assert refused.value.why == "forged"


def test_an_unsubscribe_token_of_the_same_secret_is_no_recipient_token() -> None:
    unsubscribe = UnsubscribeTokens(SECRET).make(
        OptOut("user-42", "order_confirmed", Channel.EMAIL, NOW + 60)
    )
    with pytest.raises(TokenRefused):
        InboxTokens(SECRET).read(unsubscribe, NOW)


@pytest.mark.parametrize("text", ["", "not a token", "a" * 2000, "AQ", "####"])
def test_anything_else_is_malformed(text: str) -> None:
    with pytest.raises(TokenRefused) as refused:
        InboxTokens(SECRET).read(text, NOW)
    assert refused.value.why == "malformed"


def test_the_key_is_never_shown() -> None:
    assert "secret" not in repr(InboxTokens(SECRET)).replace("<secret>", "")
    with pytest.raises(ValueError, match="secret"):
        InboxTokens(b"")
