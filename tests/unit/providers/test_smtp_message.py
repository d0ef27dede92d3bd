"""The email an smtp provider sends, built on its own; how a relay receives it is checked in
tests/integration/providers/test_smtp.py."""

from __future__ import annotations

import email
from typing import Any

import pytest

from app.catalog import Channel
from app.providers.base import Message, ProviderError, Reason
from app.providers.smtp_message import build_email, message_id, sender_parts, smtp_address


def message(**fields: Any) -> Message:
    values: dict[str, Any] = {
        "delivery_id": "dlv-1", "idempotency_key": "idem-dlv-1", "channel": Channel.EMAIL,
        "address": "bob@example.com", "title": "Hi", "body": "Hello", "attempt": 1,
    }  # fmt: skip
    values.update(fields)
    return Message(**values)


def test_the_sender_gives_the_from_header_the_envelope_and_its_domain() -> None:
    header, sender, domain = sender_parts("mail", "Clarion <noreply@clarion.test>")
    assert (header, sender, domain) == (
        "Clarion <noreply@clarion.test>", "noreply@clarion.test", "clarion.test",
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"providers\.mail\.from"):
        sender_parts("mail", "not an address")


def test_the_message_id_is_the_delivery_id_at_the_senders_domain() -> None:
    assert message_id("dlv 1<x>", "clarion.test") == "<dlv-1-x-@clarion.test>"


def test_an_address_is_taken_in_its_ascii_form_or_refused() -> None:
    assert smtp_address("mail", "bob@bücher.example") == "bob@xn--bcher-kva.example"
    with pytest.raises(ProviderError) as refused:
        smtp_address("mail", "bob,eve@example.com")
    assert refused.value.reason is Reason.INVALID_ADDRESS


def test_the_data_is_dot_stuffed_and_ends_with_a_dot_line() -> None:
    data = build_email(message(body=".hidden\n.line"), "bob@example.com", "a@b.test", "<m@b>")
    assert data.endswith(b"\r\n.\r\n")
    parsed = email.message_from_bytes(data[: -len(b".\r\n")].replace(b"\r\n..", b"\r\n."))
    assert parsed["Message-ID"] == "<m@b>"
    assert parsed.get_payload(decode=True) == b".hidden\r\n.line\r\n"
    assert b"\r\n.hidden" not in data


def test_a_subject_cannot_carry_a_header_of_its_own() -> None:
    data = build_email(message(title="Hi\r\nBcc: eve@example.com"), "b@c.test", "a@b.test", "<m>")
    assert email.message_from_bytes(data)["Bcc"] is None
