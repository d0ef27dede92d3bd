"""Recipient tokens: what one grants, and every way one is refused."""

from __future__ import annotations

import base64

import pytest

from app.inbox.tokens import Grant, InboxTokens
from app.signed_tokens import TokenRefused
from app.unsubscribe import OptOut, UnsubscribeTokens
from streams.core.vocabulary import Channel

SECRET = b"inbox-token-test-secret"
NOW = 1_800_000_000


def test_a_token_grants_its_recipient_until_it_expires() -> None:
    tokens = InboxTokens(SECRET)
    token = tokens.make(Grant("user-42 ünïcode", NOW + 60, epoch=1_765_000_000_123))
    assert token.startswith("d.")  # the key derived from the digest secret
    assert tokens.read(token, NOW) == Grant("user-42 ünïcode", NOW + 60, 1_765_000_000_123)
    with pytest.raises(TokenRefused) as refused:
        tokens.read(token, NOW + 60)
    assert refused.value.why == "expired"


def test_a_changed_token_or_one_of_another_key_is_forged() -> None:
    key_id, _, sealed = InboxTokens(SECRET).make(Grant("user-42", NOW + 60)).partition(".")
    raw = bytearray(base64.urlsafe_b64decode(sealed + "=" * (-len(sealed) % 4)))
    raw[13] ^= 1  # the recipient id's first byte
    changed = f"{key_id}." + base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
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


NEW = ("k2", b"the-new-recipient-token-key")
OLD = ("k1", b"the-old-recipient-token-key")


def test_the_first_key_signs_and_every_key_verifies() -> None:
    rotating = InboxTokens(keys=[NEW, OLD])
    before = InboxTokens(keys=[OLD]).make(Grant("user-42", NOW + 60))
    after = rotating.make(Grant("user-42", NOW + 60))
    assert (before[:3], after[:3]) == ("k1.", "k2.")
    for token in (before, after):
        assert rotating.read(token, NOW).recipient_id == "user-42"
    # The old key dropped: its tokens are refused, the new key's work.
    with pytest.raises(TokenRefused) as refused:
        InboxTokens(keys=[NEW]).read(before, NOW)
    assert refused.value.why == "forged"
    assert InboxTokens(keys=[NEW]).read(after, NOW).recipient_id == "user-42"


def test_a_token_names_its_key_but_cannot_choose_another() -> None:
    token = InboxTokens(keys=[NEW, OLD]).make(Grant("user-42", NOW + 60))
    for other in ("k1." + token[3:], "d." + token[3:], "zz." + token[3:]):
        with pytest.raises(TokenRefused) as refused:
            InboxTokens(SECRET, keys=[NEW, OLD]).read(other, NOW)
        assert refused.value.why == "forged"
    # Configured keys replace the derived one: a token of the digest secret's is refused.
    with pytest.raises(TokenRefused):
        InboxTokens(SECRET, keys=[NEW]).read(InboxTokens(SECRET).make(Grant("u", NOW + 60)), NOW)


def test_a_token_of_the_format_before_key_ids_is_malformed() -> None:
    old_format = "AWtJ7oB1c2VyLTQyq6urq6urq6urq6urq6urqw"
    with pytest.raises(TokenRefused) as refused:
        InboxTokens(SECRET).read(old_format, NOW)
    assert refused.value.why == "malformed"


@pytest.mark.parametrize(
    "text",
    ["", "not a token", "a" * 2000, "AQ", "####", "d.", ".AAAA", "d.####", "k" * 17 + ".AAAA",
     "d." + "A" * 2000, "d\u00e9.AAAA"],
)  # fmt: skip
def test_anything_else_is_malformed(text: str) -> None:
    with pytest.raises(TokenRefused) as refused:
        InboxTokens(SECRET).read(text, NOW)
    assert refused.value.why == "malformed"


def test_the_key_is_never_shown() -> None:
    assert "secret" not in repr(InboxTokens(SECRET)).replace("<secret>", "")
    with pytest.raises(ValueError, match="secret"):
        InboxTokens(b"")
    with pytest.raises(ValueError, match="secret"):
        InboxTokens(keys=[("k1", b"")])
    with pytest.raises(ValueError, match="key id"):
        InboxTokens(keys=[("k.1", SECRET)])
