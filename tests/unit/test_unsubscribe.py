"""Unsubscribe tokens and links: a round trip, and every token that must be refused."""

from __future__ import annotations

import base64
import hmac

import pytest

from app.setting_values import SettingsError
from app.settings import Settings
from app.signed_tokens import MAC_BYTES, MAX_TOKEN_CHARS, TokenRefused
from app.unsubscribe import (
    MAX_URL_CHARS,
    PATH,
    OptOut,
    UnsubscribeLinks,
    UnsubscribeTokens,
    unsubscribe_links,
)
from streams.core.vocabulary import Channel
from tests.conftest import DIGEST, DIGEST_SECRET

NOW = 1_780_000_000  # 2026-05-28
ORDER = OptOut("user-42", "order_confirmed", Channel.EMAIL, NOW + 3600)
TOKENS = UnsubscribeTokens(DIGEST_SECRET)


def refusal(token: str, tokens: UnsubscribeTokens = TOKENS, now: float = NOW) -> str:
    with pytest.raises(TokenRefused) as refused:
        tokens.read(token, now)
    if len(token) > 8:
        assert token not in str(refused.value)  # never repeated in a message or a log
    return refused.value.why


def flip(token: str, at: int) -> str:
    """``token`` with one bit of its decoded byte ``at`` changed, re-encoded."""
    raw = bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    raw[at] ^= 0x01
    return base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()


def test_a_token_round_trips_and_is_compact_and_url_safe() -> None:
    token = TOKENS.make(ORDER)
    assert TOKENS.read(token, NOW) == ORDER
    assert len(token) <= 70
    assert token.replace("-", "").replace("_", "").isalnum()
    # Any recipient id a request may carry: 255 characters of any script.
    long = OptOut("ü🙂" * 127 + "x", "marketing", Channel.EMAIL, NOW + 1)
    assert TOKENS.read(TOKENS.make(long), NOW) == long
    assert len(TOKENS.make(long)) <= MAX_TOKEN_CHARS


def test_every_changed_bit_and_every_cut_is_refused() -> None:
    token = TOKENS.make(ORDER)
    raw_length = len(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    for at in range(1, raw_length):  # byte 0 is the version: a change there is "malformed"
        assert refusal(flip(token, at)) == "forged", at
    assert refusal(flip(token, 0)) == "malformed"
    for length in range(len(token)):
        assert refusal(token[:length]) in ("malformed", "forged"), length
    assert refusal(token + "A") in ("malformed", "forged")


def test_another_spelling_of_the_same_bytes_is_refused() -> None:
    """base64 leaves the last character's low bits unused: only one spelling is the token."""
    token = TOKENS.make(ORDER)
    assert len(token) % 4 != 0  # the length of this token has unused bits at the end
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(token[-1])
    twin = token[:-1] + alphabet[last ^ 1]
    assert base64.urlsafe_b64decode(twin + "==")[-1] == base64.urlsafe_b64decode(token + "==")[-1]
    assert refusal(twin) == "malformed"


@pytest.mark.parametrize(
    "text",
    ["", "a", "not a token", "abc/def", "ä" * 40, "A" * (MAX_TOKEN_CHARS + 1), "=" * 8, "A" * 5],
)
def test_what_is_no_token_at_all_is_malformed(text: str) -> None:
    assert refusal(text) == "malformed"


def test_an_expired_token_is_refused_only_after_it_expired() -> None:
    token = TOKENS.make(ORDER)
    assert TOKENS.read(token, ORDER.expires_at - 1) == ORDER
    assert refusal(token, now=ORDER.expires_at) == "expired"
    assert refusal(token, now=ORDER.expires_at + 86400) == "expired"


def test_a_token_signed_for_another_purpose_or_deployment_is_refused() -> None:
    token = TOKENS.make(ORDER)
    assert refusal(token, UnsubscribeTokens(DIGEST_SECRET, purpose=b"another use")) == "forged"
    assert refusal(token, UnsubscribeTokens(b"another-deployment-secret")) == "forged"
    # A signature keyed with the secret itself (as the address digests are) is no token's.
    body = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))[:-MAC_BYTES]
    raw_keyed = body + hmac.digest(DIGEST_SECRET, body, "sha256")[:MAC_BYTES]
    assert refusal(base64.urlsafe_b64encode(raw_keyed).rstrip(b"=").decode()) == "forged"
    assert DIGEST("user-42") not in token


def test_the_key_is_never_printed() -> None:
    assert DIGEST_SECRET.decode() not in repr(TOKENS)
    links = UnsubscribeLinks("https://notify.example.com", TOKENS, 3600)
    assert DIGEST_SECRET.decode() not in repr(links)


def test_a_link_carries_a_token_valid_for_the_ttl() -> None:
    links = UnsubscribeLinks("https://notify.example.com/clarion", TOKENS, 60 * 86400)
    url = links.url("user-42", "order_confirmed", Channel.EMAIL, NOW + 0.7)
    prefix = f"https://notify.example.com/clarion{PATH}"
    assert url.startswith(prefix)
    opt_out = TOKENS.read(url.removeprefix(prefix), NOW)
    assert opt_out == OptOut("user-42", "order_confirmed", Channel.EMAIL, NOW + 60 * 86400)


def test_a_link_too_long_for_the_header_is_not_made() -> None:
    links = UnsubscribeLinks("https://notify.example.com", TOKENS, 3600)
    assert links.url("u" * 255, "marketing", Channel.EMAIL, NOW)  # ASCII ids always fit
    assert links.url("🙂" * 255, "marketing", Channel.EMAIL, NOW) == ""  # 1020 bytes do not
    assert len(links.url("u" * 255, "marketing", Channel.EMAIL, NOW)) <= MAX_URL_CHARS


def test_links_come_from_the_public_url_setting() -> None:
    assert unsubscribe_links(Settings(digest_secret=DIGEST_SECRET)) is None
    settings = Settings.from_env(
        {
            "CLARION_PUBLIC_URL": "https://notify.example.com/",
            "CLARION_UNSUBSCRIBE_TTL": "86400",
            "CLARION_DIGEST_SECRET": DIGEST_SECRET.decode(),
        }
    )
    links = unsubscribe_links(settings)
    assert links is not None
    assert (links.base_url, links.ttl_seconds) == ("https://notify.example.com", 86400)
    token = links.url("u-1", "marketing", Channel.EMAIL, NOW).rpartition("/")[2]
    assert TOKENS.read(token, NOW).expires_at == NOW + 86400
    with pytest.raises(SettingsError, match="CLARION_DIGEST_SECRET"):
        unsubscribe_links(Settings(public_url="https://notify.example.com"))
