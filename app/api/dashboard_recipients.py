"""``GET /dashboard/recipients``: the dashboard's recipient search, for support staff who
must answer "what did we send to this person?".

Server-rendered like the rest of the dashboard (no script, the same CSP): a search box, and
for a recipient id the recipient's message log, every producer's deliveries, newest change
first, a page at a time ("older" follows the same cursor as ``GET
/v1/recipients/{id}/deliveries``, whose query it reads). Only a key with the
``recipients`` scope (besides ``read``, the dashboard's own) may search: the dashboard shows
the box to no other key, and this page answers 403 to it. No address is shown: the read model
keeps none.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get
from litestar.datastructures import State
from litestar.exceptions import PermissionDeniedException
from litestar.params import FromQuery

from app.api.auth import authorize_reader
from app.api.cursor import decode_cursor
from app.api.html_pages import HTML_ERRORS, render
from app.recipients.api.deliveries import read_log
from app.recipients.api.settings import recipient_id_of
from app.settings import ApiKey
from projections.recipient_log import RecipientFilter

Req = Request[Any, Any, State]

PAGE_SIZE = 50
_NOT_ALLOWED = "searching recipients needs an API key with the 'recipients' scope"


def may_search_recipients(key: ApiKey) -> bool:
    """Whether the dashboard shows ``key`` the recipient search."""
    return "recipients" in key.scopes


@get("/dashboard/recipients", include_in_schema=False, exception_handlers=HTML_ERRORS)
async def recipient_search(
    request: Req,
    recipient_id: FromQuery[str | None] = None,
    cursor: FromQuery[str | None] = None,
) -> Response[str]:
    """The search box; with ``recipient_id``, that recipient's message log (a page of it)."""
    key = authorize_reader(request)
    if not may_search_recipients(key):
        raise PermissionDeniedException(detail=_NOT_ALLOWED)
    rows: list[Any] = []
    next_cursor = None
    wanted = recipient_id or None
    if wanted is not None:
        selection = RecipientFilter(
            recipient_id=recipient_id_of(wanted),
            after=decode_cursor(cursor) if cursor else None,
            limit=PAGE_SIZE,
        )
        rows, next_cursor = await read_log(request, selection)
    return render(
        "recipients.html",
        producer=key.producer,
        recipient_id=wanted,
        deliveries=rows,
        next_cursor=next_cursor,
        paged=bool(cursor),
        page_size=PAGE_SIZE,
    )


DASHBOARD_RECIPIENT_ROUTES = [recipient_search]
