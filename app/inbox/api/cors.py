"""CORS for the inbox API: pages of the configured origins (``CLARION_INBOX_ORIGINS``) may
call ``/v1/inbox`` from a browser; no other path of the API is opened to other origins.

A preflight (``OPTIONS`` with ``Access-Control-Request-Method``) to an inbox path is
answered here, 204 with the allowed methods and headers for an allowed origin, 403 for any
other; an actual request from an allowed origin gets ``Access-Control-Allow-Origin`` on its
answer. Credentials are a token in a header or the query, never cookies, so none are
allowed.
"""

from __future__ import annotations

from typing import Final

from litestar.enums import ScopeType
from litestar.types import (
    ASGIApp,
    HTTPResponseBodyEvent,
    HTTPResponseStartEvent,
    Message,
    Receive,
    Scope,
    Send,
)

PREFIX: Final = "/v1/inbox"
_METHODS: Final = b"GET, POST, OPTIONS"
_HEADERS: Final = b"Authorization, Content-Type, Last-Event-ID"
_MAX_AGE: Final = b"600"


class InboxCors:
    """An ASGI middleware (``DefineMiddleware(InboxCors, origins=...)``)."""

    def __init__(self, app: ASGIApp, origins: tuple[str, ...]) -> None:
        self.app = app
        self.origins = frozenset(origin.encode("latin-1") for origin in origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP or not scope["path"].startswith(PREFIX):
            await self.app(scope, receive, send)
            return
        origin = _header(scope, b"origin")
        if origin is None:  # not a cross-origin request
            await self.app(scope, receive, send)
            return
        allowed = origin in self.origins
        preflight = scope.get("method") == "OPTIONS"
        if preflight and _header(scope, b"access-control-request-method"):
            await _preflight(send, origin if allowed else None)
            return
        if not allowed:
            await self.app(scope, receive, send)
            return

        async def send_with_origin(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(b"access-control-allow-origin", origin), (b"vary", b"Origin")]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_origin)


async def _preflight(send: Send, origin: bytes | None) -> None:
    headers: list[tuple[bytes, bytes]]
    if origin is None:
        status, headers = 403, [(b"content-length", b"0"), (b"vary", b"Origin")]
    else:
        status, headers = (
            204,
            [
                (b"access-control-allow-origin", origin),
                (b"access-control-allow-methods", _METHODS),
                (b"access-control-allow-headers", _HEADERS),
                (b"access-control-max-age", _MAX_AGE),
                (b"vary", b"Origin"),
                (b"content-length", b"0"),
            ],
        )
    start: HTTPResponseStartEvent = {
        "type": "http.response.start",
        "status": status,
        "headers": headers,
    }
    await send(start)
    end: HTTPResponseBodyEvent = {"type": "http.response.body", "body": b"", "more_body": False}
    await send(end)


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None
