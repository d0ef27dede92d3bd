"""The notification request's own checks: how deep ``data`` may nest, and what an email
address is."""

from __future__ import annotations

import itertools
import re
from typing import Any

import msgspec
import pytest

from app.ingest.requests import MAX_DATA_DEPTH, Email, NotificationRequest


def request_with(data: Any) -> bytes:
    return msgspec.json.encode({"recipient": {"id": "u"}, "type": "otp", "data": data})


def nested_data(levels: int) -> dict[str, Any]:
    """``data`` that is ``levels`` levels of objects and arrays, itself the first."""
    value: Any = "leaf"
    for level in range(levels - 1):
        value = [value] if level % 2 else {"k": value}
    return {"k": value}


def test_data_may_nest_max_data_depth_levels() -> None:
    decoded = msgspec.json.decode(
        request_with(nested_data(MAX_DATA_DEPTH)), type=NotificationRequest
    )
    assert decoded.data == nested_data(MAX_DATA_DEPTH)


@pytest.mark.parametrize(
    "data",
    [
        nested_data(MAX_DATA_DEPTH + 1),
        {"flat": 1, "last": nested_data(MAX_DATA_DEPTH)},  # one level below data itself
        {"list": [1, [2, nested_data(MAX_DATA_DEPTH - 2)]]},
    ],
)
def test_data_nested_deeper_is_refused_naming_it(data: dict[str, Any]) -> None:
    with pytest.raises(msgspec.ValidationError) as caught:
        msgspec.json.decode(request_with(data), type=NotificationRequest)
    assert str(caught.value) == "data: objects and arrays nest at most 32 levels deep"


def test_wide_flat_data_is_fine() -> None:
    data = {f"k{n}": [n, {"n": n}] for n in range(1000)}
    assert msgspec.json.decode(request_with(data), type=NotificationRequest).data == data


# The pattern as it was written before it was made linear: the one it must agree with.
_OBVIOUS_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def test_the_email_pattern_accepts_exactly_what_the_obvious_one_does() -> None:
    info = msgspec.inspect.type_info(Email)
    assert isinstance(info, msgspec.inspect.StrType)
    assert info.pattern is not None
    linear = re.compile(info.pattern)
    for length in range(9):
        for chars in itertools.product("a.@ ", repeat=length):
            text = "".join(chars)
            assert bool(linear.search(text)) == bool(_OBVIOUS_EMAIL.search(text)), text
