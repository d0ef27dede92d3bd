"""``/inbox/demo``: a small inbox page a recipient's token opens (``#token=…``), for trying
the inbox API and as the page the browser test drives. Static: the HTML and its script, no
third-party code; it reads ``/v1/inbox`` and follows ``/v1/inbox/stream``."""

from __future__ import annotations

from importlib import resources
from typing import Final

from litestar import Response, get

# Scripts from this site only, requests to it only, never framed.
HEADERS: Final = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; "
        "form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_FILES = resources.files("app.inbox.api").joinpath("static")
_HTML: Final = _FILES.joinpath("inbox-demo.html").read_bytes()
_SCRIPT: Final = _FILES.joinpath("inbox-demo.js").read_bytes()


@get("/inbox/demo", include_in_schema=False)
async def inbox_demo() -> Response[bytes]:
    return Response(_HTML, media_type="text/html", headers=HEADERS)


@get("/inbox/demo.js", include_in_schema=False)
async def inbox_demo_script() -> Response[bytes]:
    return Response(_SCRIPT, media_type="text/javascript", headers=HEADERS)


DEMO_ROUTES = [inbox_demo, inbox_demo_script]
