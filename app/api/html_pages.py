"""The server-rendered pages' HTML: the templates (``templates``) with their filters, the
headers every page is sent with, and an HTTP error shown as a readable page.

The dashboard's pages (``app.api.dashboard``) and the unsubscribe page (``app.api.unsubscribe``)
render through it. Jinja's autoescaping escapes every text they show.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import jinja2
from litestar import MediaType, Request, Response
from litestar.datastructures import State
from litestar.exceptions import HTTPException
from litestar.types import ExceptionHandlersMap

Req = Request[Any, Any, State]

# No script at all; styles only inline; forms only to this site; never framed.
HTML_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def _when(value: datetime | None) -> str:
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(seconds: float) -> str:
    """``seconds`` briefly: ``45 s``, ``3 min 12 s``, ``2 h 5 min``, ``3 d 4 h``."""
    whole = max(0, int(seconds))
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


def _rate(failed: int, ended: int) -> str:
    if not ended:
        return "—"
    return f"{100 * failed / ended:.1f} %"


def field_text(value: Any) -> str:
    """An event field's value as text: lists and mappings flattened, comma-separated."""
    if isinstance(value, list):
        return ", ".join(field_text(item) for item in value) or "[]"
    if isinstance(value, dict):
        return ", ".join(f"{k}={field_text(v)}" for k, v in value.items()) or "{}"
    return str(value)


_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("app.api", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_TEMPLATES.filters["when"] = _when
_TEMPLATES.filters["rate"] = _rate
_TEMPLATES.filters["value"] = field_text
_TEMPLATES.filters["duration"] = duration


def render(template: str, status_code: int = 200, **context: Any) -> Response[str]:
    """An HTML response of ``template`` rendered with ``context``."""
    html = _TEMPLATES.get_template(template).render(**context)
    return Response(html, status_code=status_code, media_type=MediaType.HTML, headers=HTML_HEADERS)


_TITLES = {
    400: "Bad request",
    401: "Sign-in required",
    403: "Not allowed",
    404: "Not found",
    503: "Unavailable",
}


def html_error(request: Req, error: HTTPException) -> Response[str]:
    """An HTTP error of a dashboard page as a readable page, keeping its headers."""
    response = render(
        "error.html",
        status_code=error.status_code,
        title=_TITLES.get(error.status_code, "Error"),
        code=error.status_code,
        detail=error.detail,
        sign_in=error.status_code == 401,
    )
    response.headers.update(error.headers or {})
    return response


HTML_ERRORS: ExceptionHandlersMap = {HTTPException: html_error}
