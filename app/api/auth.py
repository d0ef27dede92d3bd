"""API keys: who is calling (401 otherwise) and may it do this (403 otherwise).

A presented secret is hashed with SHA-256 and looked up by its digest: the work does not
depend on how much of a secret is right, and no secret is kept or logged in clear.

The secret comes as ``Authorization: Bearer <secret>``. Only the dashboard's pages take it
as HTTP Basic ``base64(<producer>:<secret>)`` as well (the user part is informational), and
only for the ``read`` scope: a browser keeps Basic credentials and sends them with every
request to the service, whichever site's page made the request, so credentials a browser
holds must not be able to change anything (cross-site request forgery). A page of another
site cannot set a ``Bearer`` header.
"""

from __future__ import annotations

import binascii
import hashlib

from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException

from app.settings import ApiKey, Scope

_BEARER = "Authorization: a valid 'Bearer <api key>' header is required"
_BASIC_HERE = "a valid API key is required: user name your producer, password the key's secret"
_BASIC_ELSEWHERE = (
    "Authorization: HTTP Basic credentials are accepted only by the dashboard; "
    "send 'Bearer <api key>'"
)


class KeyRing:
    """The configured API keys, found by the digest of their secret."""

    def __init__(self, keys: tuple[ApiKey, ...]) -> None:
        self._by_digest = {key.secret_sha256: key for key in keys}

    def find(self, authorization: bytes | None, *, basic: bool = False) -> ApiKey | None:
        """The key a ``Bearer`` header presents (or, with ``basic``, a ``Basic`` one), or None."""
        if not authorization:
            return None
        scheme, _, secret = authorization.partition(b" ")
        secret = secret.strip()
        scheme = scheme.lower()
        if basic and scheme == b"basic":
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
) -> ApiKey:
    """The caller's key, presented as ``Bearer``; 401 without a valid one, 403 when it has
    none of the scopes (``scope`` or any of ``other_scopes``).

    Called first thing in every protected handler. (A Litestar guard would do the same, but
    Litestar copies the route handler object for every guard call, which costs more than the
    whole check.)
    """
    keys: KeyRing = connection.app.state.key_ring
    authorization = _authorization(connection)
    key = keys.find(authorization)
    if key is None:
        basic = authorization is not None and authorization[:6].lower() == b"basic "
        raise NotAuthorizedException(
            detail=_BASIC_ELSEWHERE if basic else _BEARER,
            headers={"WWW-Authenticate": 'Bearer realm="clarion"'},
        )
    if scope not in key.scopes and key.scopes.isdisjoint(other_scopes):
        raise _missing(scope, *other_scopes)
    return key


def authorize_reader(connection: ASGIConnection) -> ApiKey:  # type: ignore[type-arg]
    """The key of a dashboard page's caller, presented as ``Bearer`` or as HTTP Basic; it
    must have the ``read`` scope, the only one such a page needs (403 otherwise).

    A 401 challenges with ``Basic``, so that a browser asks for the credentials.
    """
    keys: KeyRing = connection.app.state.key_ring
    key = keys.find(_authorization(connection), basic=True)
    if key is None:
        raise NotAuthorizedException(
            detail=_BASIC_HERE, headers={"WWW-Authenticate": 'Basic realm="clarion"'}
        )
    if "read" not in key.scopes:
        raise _missing("read")
    return key


def _missing(*scopes: Scope) -> PermissionDeniedException:
    wanted = " or ".join(repr(s) for s in scopes)
    return PermissionDeniedException(detail=f"this API key lacks the {wanted} scope")
