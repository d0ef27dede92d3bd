"""API keys: who is calling (401 otherwise) and may it do this (403 otherwise).

A presented secret is hashed with SHA-256 and looked up by its digest: the work does not
depend on how much of a secret is right, and no secret is kept or logged in clear.

The secret comes as ``Authorization: Bearer <secret>`` or, for a browser (the dashboard),
as HTTP Basic ``base64(<producer>:<secret>)``; the user part of Basic is informational.
"""

from __future__ import annotations

import binascii
import hashlib
from typing import Literal

from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException

from app.settings import ApiKey, Scope

AuthScheme = Literal["Bearer", "Basic"]
_DETAIL: dict[AuthScheme, str] = {
    "Bearer": "Authorization: a valid 'Bearer <api key>' header is required",
    "Basic": "a valid API key is required: user name your producer, password the key's secret",
}


class KeyRing:
    """The configured API keys, found by the digest of their secret."""

    def __init__(self, keys: tuple[ApiKey, ...]) -> None:
        self._by_digest = {key.secret_sha256: key for key in keys}

    def find(self, authorization: bytes | None) -> ApiKey | None:
        """The key a ``Bearer`` or ``Basic`` header presents, or None."""
        if not authorization:
            return None
        scheme, _, secret = authorization.partition(b" ")
        secret = secret.strip()
        scheme = scheme.lower()
        if scheme == b"basic":
            secret = _basic_password(secret)
        elif scheme != b"bearer":
            return None
        if not secret:
            return None
        return self._by_digest.get(hashlib.sha256(secret).digest())


def _basic_password(credentials: bytes) -> bytes:
    """The password of Basic credentials ``base64(user:password)``; empty when malformed."""
    try:
        decoded = binascii.a2b_base64(credentials, strict_mode=True)
    except binascii.Error:
        return b""
    _, colon, password = decoded.partition(b":")
    return password if colon else b""


def _authorization(connection: ASGIConnection) -> bytes | None:  # type: ignore[type-arg]
    # Straight from the ASGI scope: building Litestar's Headers object costs more than the
    # whole key check, on every request.
    for name, value in connection.scope["headers"]:
        if name == b"authorization":
            return value
    return None


def authorize(
    connection: ASGIConnection,  # type: ignore[type-arg]
    scope: Scope,
    *other_scopes: Scope,
    challenge: AuthScheme = "Bearer",
) -> ApiKey:
    """The caller's key; 401 without a valid one, 403 when it has none of the scopes
    (``scope`` or any of ``other_scopes``).

    A 401 challenges with ``challenge``: ``Basic`` makes a browser ask for the credentials.

    Called first thing in every protected handler. (A Litestar guard would do the same, but
    Litestar copies the route handler object for every guard call, which costs more than the
    whole check.)
    """
    keys: KeyRing = connection.app.state.key_ring
    key = keys.find(_authorization(connection))
    if key is None:
        raise NotAuthorizedException(
            detail=_DETAIL[challenge],
            headers={"WWW-Authenticate": f'{challenge} realm="clarion"'},
        )
    if scope not in key.scopes and key.scopes.isdisjoint(other_scopes):
        wanted = " or ".join(repr(s) for s in (scope, *other_scopes))
        raise PermissionDeniedException(detail=f"this API key lacks the {wanted} scope")
    return key
