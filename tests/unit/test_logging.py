"""Masking of personal data in logs."""

from __future__ import annotations

from app.logging import mask


def test_mask_replaces_an_email_address() -> None:
    masked = mask("sent to jane.doe+news@example.co.uk today")
    assert masked == "sent to <email> today"


def test_mask_replaces_an_e164_phone_number() -> None:
    masked = mask("SMS to +4915112345678 failed")
    assert masked == "SMS to <phone> failed"


def test_mask_replaces_a_bearer_secret() -> None:
    masked = mask("header Authorization: Bearer xyz was refused")
    assert masked == "header Authorization: Bearer <secret> was refused"
    assert "xyz" not in mask("authorization: bearer xyz")


def test_mask_replaces_everything_in_one_text() -> None:
    text = "jane@example.com +14155550123 Bearer abc.def-ghi"
    masked = mask(text)
    for secret in ("jane@example.com", "+14155550123", "abc.def-ghi"):
        assert secret not in masked


def test_mask_leaves_other_text_alone() -> None:
    text = "delivery 019bc123-4567-7abc-8def-0123456789ab queued at 12:00 (attempt 2)"
    assert mask(text) == text
