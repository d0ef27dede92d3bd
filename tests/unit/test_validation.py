"""Error messages that name the field."""

from __future__ import annotations

import msgspec
import pytest

from app.ingest.requests import NotificationRequest
from app.validation import describe


def validation_error(raw: bytes) -> msgspec.ValidationError:
    with pytest.raises(msgspec.ValidationError) as caught:
        msgspec.json.decode(raw, type=NotificationRequest)
    return caught.value


def test_describe_names_the_field_first() -> None:
    error = validation_error(b'{"recipient": {"id": "u", "phone": 123}, "type": "otp"}')
    text = describe(error)
    assert text.startswith("recipient.phone: ")
    assert "`$" not in text


def test_describe_names_a_pattern_mismatch() -> None:
    error = validation_error(b'{"recipient": {"id": "u", "phone": "0151 123"}, "type": "otp"}')
    assert describe(error).startswith("recipient.phone: ")


def test_describe_keeps_list_positions() -> None:
    error = validation_error(b'{"recipient": {"id": "u", "push_tokens": ["ok", 5]}, "type": "x"}')
    assert describe(error).startswith("recipient.push_tokens[1]: ")


def test_describe_puts_a_root_in_front() -> None:
    error = validation_error(b'{"recipient": {"id": "u", "phone": 123}, "type": "otp"}')
    assert describe(error, root="notifications[3]").startswith("notifications[3].recipient.phone: ")


def test_describe_names_an_unknown_field() -> None:
    error = validation_error(b'{"recipient": {"id": "u"}, "type": "otp", "colour": "red"}')
    assert "colour" in describe(error)


def test_describe_of_an_error_without_a_path() -> None:
    with pytest.raises(msgspec.DecodeError) as caught:
        msgspec.json.decode(b"{", type=NotificationRequest)
    assert describe(caught.value) == str(caught.value)
    assert describe(caught.value, root="body").startswith("body: ")
