"""API keys: who is calling (401 otherwise) and may it do this (403 otherwise).

A presented secret is hashed with SHA-256 and looked up by its digest: the work does not
depend on how much of a secret is right, and no secret is kept or logged in clear.
"""

from __future__ import annotations

import hashlib

from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException

from app.settings import ApiKey, Scope

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="clarion"'}


class KeyRing:
    """The configured API keys, found by the digest of their secret."""

    def __init__(self, keys: tuple[ApiKey, ...]) -> None:
        self._by_digest = {key.secret_sha256: key for key in keys}

    def find(self, authorization: bytes | None) -> ApiKey | None:
        """The key a ``Bearer`` header presents, or None."""
        if not authorization:
            return None
        scheme, _, secret = authorization.partition(b" ")
        secret = secret.strip()
        if scheme.lower() != b"bearer" or not secret:
            return None
        return self._by_digest.get(hashlib.sha256(secret).digest())


def _authorization(connection: ASGIConnection) -> bytes | None:  # type: ignore[type-arg]
    # Straight from the ASGI scope: building Litestar's Headers object costs more than the
    # whole key check, on every request.
    for name, value in connection.scope["headers"]:
        if name == b"authorization":
            return value
    return None


def authorize(connection: ASGIConnection, scope: Scope) -> ApiKey:  # type: ignore[type-arg]
    """The caller's key; 401 without a valid one, 403 when it lacks ``scope``.

    Called first thing in every protected handler. (A Litestar guard would do the same, but
    Litestar copies the route handler object for every guard call, which costs more than the
    whole check.)
    """
    keys: KeyRing = connection.app.state.key_ring
    key = keys.find(_authorization(connection))
    if key is None:
        raise NotAuthorizedException(
            detail="Authorization: a valid 'Bearer <api key>' header is required",
            headers=_CHALLENGE,
        )
    if scope not in key.scopes:
        raise PermissionDeniedException(detail=f"this API key lacks the {scope!r} scope")
    return key
