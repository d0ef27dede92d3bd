"""Error answers as the client raises them: the class by status code, the server's detail."""

from __future__ import annotations

import pytest

from clarion_client.errors import (
    AuthError,
    ClarionError,
    ConflictError,
    ConnectionFailedError,
    InvalidRequestError,
    NotFoundError,
    RateLimitedError,
    ServerError,
    UnavailableError,
    error_for,
)


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, InvalidRequestError), (401, AuthError), (403, AuthError), (404, NotFoundError),
     (409, ConflictError), (413, InvalidRequestError), (415, InvalidRequestError),
     (422, InvalidRequestError),
     (429, RateLimitedError), (500, ServerError), (502, ServerError), (503, UnavailableError)],
)  # fmt: skip
def test_each_status_has_its_class_with_the_servers_detail(
    status: int, kind: type[ClarionError]
) -> None:
    body = b'{"status_code": %d, "detail": "recipient.phone: Expected `str`"}' % status
    error = error_for(status, body, retry_after_s=2.0)
    assert type(error) is kind
    assert isinstance(error, ClarionError)
    assert error.status_code == status
    assert error.detail == "recipient.phone: Expected `str`"
    assert error.retry_after_s == 2.0
    assert str(error) == f"{status}: recipient.phone: Expected `str`"


def test_a_body_that_is_not_clarions_gives_its_start_as_the_detail() -> None:
    error = error_for(502, b"<html>Bad Gateway</html>" + b"x" * 500)
    assert isinstance(error, ServerError)
    assert error.detail.startswith("<html>Bad Gateway</html>")
    assert len(error.detail) == 200
    assert error_for(503, b"").detail == "no detail in the answer"
    assert error_for(400, b'{"detail": 5}').detail == '{"detail": 5}'


def test_no_answer_at_all_has_no_status_code() -> None:
    error = ConnectionFailedError("POST http://127.0.0.1:1/v1/notifications: refused")
    assert error.status_code is None
    assert str(error) == "POST http://127.0.0.1:1/v1/notifications: refused"
