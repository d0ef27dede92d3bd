"""Refusing what a page of another site makes a browser send: cross-site request forgery.

A page of any site may make a browser ``POST`` a form to Clarion, without asking Clarion
first, and the browser adds what it holds for Clarion's origin (HTTP Basic credentials of
the dashboard). So a request that would change something (``POST``, ``PUT``, ``PATCH``,
``DELETE``) is refused with 403 when the browser says another site's page made it:

- ``Sec-Fetch-Site: cross-site`` or ``same-site``. Same-site is another origin of the same
  registrable domain (``user-content.example.com`` for ``notify.example.com``): such a host
  may serve pages nobody here wrote, and nothing of Clarion's own posts from one.
- without ``Sec-Fetch-Site`` (an older browser): an ``Origin`` other than the service's own,
  which is ``CLARION_PUBLIC_URL``'s origin or the host the request was sent to (``Host``; its
  scheme is not compared, as behind a TLS-terminating proxy the service sees plain http).
  ``Origin: null`` (a sandboxed or privacy-minded page) is not the service's own.

Excepted: the pages of ``CLARION_INBOX_ORIGINS`` on the inbox API they are allowed to call
(``app.inbox.api.cors``), and the paths whose credential no browser holds for them: a
provider's signed feedback callback and an unsubscribe link's token, which a mail provider's
server posts (RFC 8058) without any of these headers. A request without ``Origin`` and
``Sec-Fetch-Site`` comes from no browser (a server, curl, the client library) and passes:
nothing is held for it but what it sends itself.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

import msgspec
from litestar.types import (
    ASGIApp,
    HTTPResponseBodyEvent,
    HTTPResponseStartEvent,
    Receive,
    Scope,
    Send,
)

from app.inbox.api.cors import PREFIX as INBOX_PREFIX

# Methods that change nothing: never refused here.
SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
# ... and None: a scope that is no HTTP request (a WebSocket's has no method).
_UNCHECKED: Final = frozenset({*SAFE_METHODS, None})
# Paths authenticated by what the request itself carries, never by what a browser holds.
EXEMPT_PREFIXES: Final = ("/v1/feedback/", "/v1/unsubscribe/")
# What only a browser sends (a server may too, but then it holds nothing a page could use).
_BROWSER_HEADERS: Final = frozenset({b"origin", b"sec-fetch-site"})
# Sec-Fetch-Site values of the service's own pages (or, "none", of the user's own doing).
_OWN_SITES: Final = frozenset({b"same-origin", b"none"})
_OTHER_SITES: Final = frozenset({b"cross-site", b"same-site"})
_WHY: Final = {
    b"cross-site": "Sec-Fetch-Site: cross-site",
    b"same-site": "Sec-Fetch-Site: same-site (another origin of this site)",
    b"origin": "Origin: not this service's origin",
}
_DEFAULT_PORTS: Final = {"https": 443, "http": 80}


class CrossSiteGuard:
    """An ASGI middleware (``DefineMiddleware(CrossSiteGuard, public_url=..., inbox_origins=...)``).

    A safe method passes after one comparison; a state-changing one costs one pass over the
    request's header names (0.3 µs for a server's six), and a second one only when a browser
    sent it.
    """

    def __init__(self, app: ASGIApp, *, public_url: str, inbox_origins: tuple[str, ...]) -> None:
        self.app = app
        self.own_origin = public_origin(public_url)
        self.inbox_origins = frozenset(origin.encode("latin-1") for origin in inbox_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Cheapest first: this runs on every request, ingest's included.
        if scope.get("method") not in _UNCHECKED:
            for name, _ in scope["headers"]:
                if name in _BROWSER_HEADERS:  # else no browser sent it: nothing to look at
                    why = self.refusal(scope)
                    if why is not None:
                        await _forbidden(send, why)
                        return
                    break
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> str | None:
        """Why the state-changing request ``scope`` is refused as another site's, or None."""
        if scope["path"].startswith(EXEMPT_PREFIXES):
            return None
        origin = site = host = None
        for name, value in scope["headers"]:
            if name == b"origin":
                origin = value
            elif name == b"sec-fetch-site":
                site = value
            elif name == b"host":
                host = value
        if site in _OWN_SITES:
            return None
        if site in _OTHER_SITES:
            why = site
        elif origin is None or self._own(origin, host):
            return None
        else:
            why = b"origin"
        if origin in self.inbox_origins and scope["path"].startswith(INBOX_PREFIX):
            return None
        return (
            f"{_WHY[why]}: a page of another site may not change anything here; "
            "call the API from a server, with a Bearer key"
        )

    def _own(self, origin: bytes, host: bytes | None) -> bool:
        origin = origin.lower()
        if origin == self.own_origin:
            return True
        authority = origin.partition(b"://")[2]  # empty for "null"
        return bool(authority) and host is not None and authority == host.lower()


def public_origin(public_url: str) -> bytes | None:
    """The origin (``scheme://host[:port]``) browsers name for ``public_url``; None without one."""
    if not public_url:
        return None
    parts = urlsplit(public_url.lower())
    port = parts.port
    netloc = parts.hostname or ""
    if ":" in netloc:  # an IPv6 address
        netloc = f"[{netloc}]"
    if port is not None and port != _DEFAULT_PORTS.get(parts.scheme):
        netloc = f"{netloc}:{port}"
    return f"{parts.scheme}://{netloc}".encode("latin-1")


async def _forbidden(send: Send, detail: str) -> None:
    body = msgspec.json.encode({"status_code": 403, "detail": detail})
    start: HTTPResponseStartEvent = {
        "type": "http.response.start",
        "status": 403,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
    }
    await send(start)
    end: HTTPResponseBodyEvent = {"type": "http.response.body", "body": body, "more_body": False}
    await send(end)
