"""API keys: who is calling (401 otherwise) and may it do this (403 otherwise).

Secrets are compared as SHA-256 digests in constant time, against every configured key, so
neither a key's existence nor its prefix shows in the response time. No secret is logged.
"""

from __future__ import annotations

import hashlib
import hmac

from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.handlers.base import BaseRouteHandler
from litestar.middleware import AbstractAuthenticationMiddleware, AuthenticationResult
from litestar.types import Guard

from app.settings import ApiKey, Scope

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="clarion"'}


def find_key(keys: tuple[ApiKey, ...], authorization: str | None) -> ApiKey | None:
    """The key a ``Bearer`` header presents, or None."""
    if not authorization:
        return None
    scheme, _, secret = authorization.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        return None
    digest = hashlib.sha256(secret.strip().encode()).digest()
    found = None
    for key in keys:  # no early exit: every key is compared
        if hmac.compare_digest(digest, key.secret_sha256):
            found = key
    return found


class ApiKeyAuthentication(AbstractAuthenticationMiddleware):
    """Sets ``request.user`` to the caller's ``ApiKey``; answers 401 without a valid one."""

    async def authenticate_request(self, connection: ASGIConnection) -> AuthenticationResult:  # type: ignore[type-arg]
        key = find_key(connection.app.state.api_keys, connection.headers.get("authorization"))
        if key is None:
            raise NotAuthorizedException(
                detail="Authorization: a valid 'Bearer <api key>' header is required",
                headers=_CHALLENGE,
            )
        return AuthenticationResult(user=key, auth=None)


def requires(scope: Scope) -> Guard:
    """A guard answering 403 unless the caller's key has ``scope``."""

    def guard(connection: ASGIConnection, _: BaseRouteHandler) -> None:  # type: ignore[type-arg]
        key: ApiKey = connection.user
        if scope not in key.scopes:
            raise PermissionDeniedException(detail=f"this API key lacks the {scope!r} scope")

    return guard
