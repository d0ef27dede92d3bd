"""What a callback's caller controls, checked before anything uses it: a header is taken as
ASCII bytes within its bound, or refused with 401 naming it (missing, too long, not ASCII);
a signed time is ASCII digits only; a body over its bound is 413."""

from __future__ import annotations

import pytest

from app.api.errors import status_of
from app.feedback.requests import (
    MAX_SIGNATURE_CHARS,
    Callback,
    header,
    signed_time,
    within,
)
from streams.core.errors import ClarionError


def request(body: bytes = b"", **headers: str) -> Callback:
    return Callback("https://notify.example.com/x", headers, body, 1)


def refusal(check: object) -> tuple[int, str]:
    with pytest.raises(ClarionError) as caught:
        check()  # type: ignore[operator]
    # The status the API answers it with (``app.api.errors``).
    status = status_of(caught.value)
    assert status is not None
    return status, caught.value.detail


def test_a_header_is_taken_as_ascii_bytes_or_refused_naming_what_is_wrong() -> None:
    assert header(request(signature="v1,abc="), "Signature") == b"v1,abc="
    assert refusal(lambda: header(request(), "Signature")) == (401, "Signature: missing")
    assert refusal(lambda: header(request(signature="\xe9abc"), "Signature")) == (
        401, "Signature: not ASCII",
    )  # fmt: skip
    too_long = request(signature="a" * (MAX_SIGNATURE_CHARS + 1))
    assert refusal(lambda: header(too_long, "Signature")) == (
        401, f"Signature: longer than {MAX_SIGNATURE_CHARS} characters",
    )  # fmt: skip


@pytest.mark.parametrize("value", ["\xb2", "\xb9\xb2\xb3", "-1", "1e9", " 17", "1" * 13, "\xe9"])
def test_a_signed_time_is_unix_seconds_in_ascii_digits(value: str) -> None:
    assert signed_time(request(stamp="1700000000"), "Stamp") == b"1700000000"
    status, detail = refusal(lambda: signed_time(request(stamp=value), "Stamp"))
    assert (status, detail.startswith("Stamp: ")) == (401, True)


def test_a_body_over_its_bound_is_refused() -> None:
    within(request(b"x" * 10), 10)
    assert refusal(lambda: within(request(b"x" * 11), 10)) == (
        413, "body: larger than 10 bytes, this provider's bound",
    )  # fmt: skip
