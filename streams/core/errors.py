"""The one error hierarchy of Clarion: every error of its own is a ``ClarionError``.

An error that a caller of the API may cause, and may act on, is raised as one of the kinds
below; what it says is ``detail``, and ``retry_after_s`` (when set) is how many whole
seconds to wait before trying again. None of them knows HTTP: the API alone
(``app.api.errors``) turns a kind into a status code, so the domain can be used, tested and
reasoned about without it, and a new kind is added in one place. An error of no kind
(``ClarionError`` itself, or a subclass that is not a kind) is a fault of the server, never
the caller's: the API answers it as any other bug, without its message.

The kinds live here, at the bottom of the layers, so that ``streams`` raises them too;
``app`` and ``projections`` import them from here.
"""

from __future__ import annotations


class ClarionError(Exception):
    """An error of Clarion's own: ``detail`` says what went wrong (never a secret, a token
    or an address), ``retry_after_s`` how long to wait before trying again (None: the same
    request would fail again, or there is no telling)."""

    def __init__(self, detail: str = "", *, retry_after_s: int | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after_s = retry_after_s


class Malformed(ClarionError):
    """The request cannot be read at all (broken encoding, a required part missing)."""


class Unauthenticated(ClarionError):
    """The request does not prove who sent it: a credential or signature missing or wrong."""


class Forbidden(ClarionError):
    """The caller is known, and may not do this."""


class NotFound(ClarionError):
    """No such thing, or none the caller may see."""


class Conflict(ClarionError):
    """The request clashes with the state it met: a state that does not allow it, a twin
    still in flight, a change that raced others (with ``retry_after_s`` when trying again
    may succeed)."""


class TooLarge(ClarionError):
    """The request is larger than a limit allows; a smaller one may be taken."""


class Invalid(ClarionError):
    """The request is readable, and a field or its combination with others is wrong; the
    detail names the field."""


class RateLimited(ClarionError):
    """The caller asks for more than its share; ``retry_after_s`` says when it may again
    (when known)."""


class Unavailable(ClarionError):
    """The server cannot take the request now (a dependency down, a limit of its own
    reached); the same request may succeed later."""


# Every kind: what a caller can be told. Anything else is a fault of the server.
KINDS: tuple[type[ClarionError], ...] = (
    Malformed,
    Unauthenticated,
    Forbidden,
    NotFound,
    Conflict,
    TooLarge,
    Invalid,
    RateLimited,
    Unavailable,
)


def kind_of(error: ClarionError) -> type[ClarionError] | None:
    """The kind ``error`` is of, or None for a fault of the server."""
    for kind in KINDS:
        if isinstance(error, kind):
            return kind
    return None
