"""What a call that did not succeed raises: a ``ClarionError`` carrying the server's status
code and ``detail`` (the server names the field or header that is wrong), one subclass per
kind of failure a caller handles differently."""

from __future__ import annotations

import msgspec

from clarion_client.models import ErrorBody


class ClarionError(Exception):
    """A call Clarion refused, or one that never got an answer (``status_code`` None)."""

    def __init__(
        self, status_code: int | None, detail: str, *, retry_after_s: float | None = None
    ) -> None:
        super().__init__(f"{status_code}: {detail}" if status_code else detail)
        self.status_code = status_code
        self.detail = detail
        # What the last answer's Retry-After asked for, when the retries ran out first.
        self.retry_after_s = retry_after_s


class AuthError(ClarionError):
    """401: no valid API key; 403: the key lacks the scope, or the producer may not send
    this type."""


class NotFoundError(ClarionError):
    """404: no such notification, or one of another producer."""


class InvalidRequestError(ClarionError):
    """400, 413, 415 or 422: the request itself is wrong; sending it again will not help."""


class ConflictError(ClarionError):
    """409: a request with the same idempotency key was still in flight after every retry, or a
    campaign is in a state that refuses the call (final: not retried)."""


class RateLimitedError(ClarionError):
    """429: the producer stayed over its ingest quota after every retry."""


class UnavailableError(ClarionError):
    """503: Clarion's event log or read model stayed unavailable after every retry."""


class ServerError(ClarionError):
    """Any other answer Clarion should not give (a 500 is a bug in the server)."""


class ConnectionFailedError(ClarionError):
    """No answer at all (refused, reset, timed out) after every retry."""

    def __init__(self, detail: str) -> None:
        super().__init__(None, detail)


_BY_STATUS: dict[int, type[ClarionError]] = {
    400: InvalidRequestError,
    401: AuthError,
    403: AuthError,
    404: NotFoundError,
    409: ConflictError,
    413: InvalidRequestError,
    415: InvalidRequestError,
    422: InvalidRequestError,
    429: RateLimitedError,
    503: UnavailableError,
}
_error_decoder = msgspec.json.Decoder(ErrorBody)
MAX_UNREADABLE_DETAIL = 200


def error_for(status_code: int, body: bytes, retry_after_s: float | None = None) -> ClarionError:
    """The exception for an error answer: its ``detail`` from the JSON body, or, for a body
    that is not Clarion's (a proxy's page), the start of it."""
    try:
        detail = _error_decoder.decode(body).detail
    except msgspec.DecodeError:  # a ValidationError is a DecodeError too
        text = body[:MAX_UNREADABLE_DETAIL].decode(errors="replace").strip()
        detail = text or "no detail in the answer"
    kind = _BY_STATUS.get(status_code, ServerError)
    return kind(status_code, detail, retry_after_s=retry_after_s)
