"""One-click unsubscribe (RFC 8058): ``GET``, ``HEAD`` and ``POST /v1/unsubscribe/{token}``.

The link comes in an email (``List-Unsubscribe``, made by the delivery worker, see
``app.unsubscribe``). Its token is the only credential, so no API key is asked for. ``GET``
shows a small page naming what the link switches off, with one button; it changes nothing, so
a mail scanner that follows links does no harm. ``POST`` (that button, or a mail client's
one-click POST) switches the recipient's (type, channel) pair off only when its body is the
form RFC 8058 names, ``List-Unsubscribe=One-Click`` (``application/x-www-form-urlencoded``, as
the page's button sends it, or ``multipart/form-data``); any other body is answered 400 and
changes nothing. The change is recorded as a ``PreferenceChanged`` event with source
``unsubscribe_link`` and counted (``clarion_unsubscribes_total``, source ``link``), and a short
confirmation page answers; repeated, it changes and counts nothing more.

A token that is cut short, changed, signed with another key or expired is answered 404 with
a page saying so; nothing here answers a 5xx but an outage (503). The token is never logged
(these routes have their own error handlers, which log no path), and every page is
``no-store`` and sends no ``Referer``, so the link does not leave the page either.
"""

from __future__ import annotations

from typing import Any, Final

import structlog
from litestar import Controller, MediaType, Request, Response, get, head, post, route
from litestar.datastructures import State
from litestar.enums import HttpMethod
from litestar.exceptions import HTTPException
from litestar.params import FromPath
from litestar.types import ExceptionHandlersMap
from redis.exceptions import RedisError

from app.api.html_pages import HTML_HEADERS, render
from app.catalog import Catalog
from app.metrics import UNSUBSCRIBES
from app.signed_tokens import TokenRefused
from app.unsubscribe import OptOut, UnsubscribeTokens
from streams.core.vocabulary import Channel
from streams.metrics.recorder import MetricsRecorder
from streams.recipients.settings import RecipientSettingsStore

log = structlog.get_logger(__name__)

Req = Request[Any, Any, State]

# A one-click POST's body is "List-Unsubscribe=One-Click": anything much larger is no such POST.
MAX_BODY_BYTES: Final = 1024
# How a page says where the notifications went.
_BY_CHANNEL = {
    Channel.EMAIL: "by email",
    Channel.SMS: "by text message",
    Channel.PUSH: "as push notifications",
    Channel.IN_APP: "in the app",
    Channel.WEBHOOK: "by webhook",
}
# Why a link does not work: the page's title and text.
_REFUSED = {
    "malformed": ("This link does not work", "This unsubscribe link is not valid. It may have "
                  "been cut short: open the whole link from the email, or the one in a more "
                  "recent email."),
    "forged": ("This link does not work", "This unsubscribe link is not valid. It may have been "
               "changed: open the whole link from the email, or the one in a more recent "
               "email."),
    "expired": ("This link has expired", "This unsubscribe link has expired. Use the one in a "
                "more recent email, or change your notification settings where you manage "
                "your account."),
    "unknown_type": ("Nothing to unsubscribe from", "These notifications are no longer sent: "
                     "there is nothing to unsubscribe from."),
    "not_one_click": ("This did not work", "An unsubscribe request must send the form "
                      "List-Unsubscribe=One-Click (RFC 8058). Nothing was changed: open the "
                      "link and press the button."),
    "not_opt_out": ("This cannot be switched off", "These notifications cannot be switched off: "
                    "they are ones you need for your account, such as sign-in codes."),
}  # fmt: skip


class LinkRefused(HTTPException):
    """A link that switches nothing off: 404 (400 for a type that cannot be switched off,
    or a POST that is no one-click request), with the page's title."""

    def __init__(self, why: str) -> None:
        self.title, detail = _REFUSED[why]
        status = 400 if why in ("not_opt_out", "not_one_click") else 404
        super().__init__(detail=detail, status_code=status)
        self.why = why


class Unsubscribing:
    """What a valid link is about: the opt-out and how to name it to the recipient."""

    def __init__(self, opt_out: OptOut, label: str) -> None:
        self.opt_out = opt_out
        self.label = label
        self.channel_words = _BY_CHANNEL[opt_out.channel]


def _unsubscribing(request: Req, token: str) -> Unsubscribing:
    """What ``token`` switches off; ``LinkRefused`` if nothing."""
    tokens: UnsubscribeTokens = request.app.state.unsubscribe_tokens
    try:
        opt_out = tokens.read(token, request.app.state.clock().timestamp())
    except TokenRefused as refused:
        raise LinkRefused(refused.why) from None
    catalog: Catalog = request.app.state.catalog
    type_config = catalog.types.get(opt_out.notification_type)
    if type_config is None:
        raise LinkRefused("unknown_type")
    if not type_config.opt_out:  # the catalog changed since the email was sent
        raise LinkRefused("not_opt_out")
    return Unsubscribing(opt_out, type_config.label_of(opt_out.notification_type))


async def _one_click(request: Req) -> None:
    """``LinkRefused`` unless the body is RFC 8058's form: one field ``List-Unsubscribe``
    whose value is ``One-Click`` (other fields are ignored). Litestar parses the form, urlencoded
    (``urllib.parse.parse_qsl``) or multipart (the ``multipart`` package), both in linear time,
    within MAX_BODY_BYTES (413 beyond); a body no form (or another content type) is refused."""
    await request.body()  # whatever its type: 413 beyond MAX_BODY_BYTES
    try:
        form = await request.form()
    except (UnicodeDecodeError, LookupError):  # a part in bytes its charset does not decode
        raise LinkRefused("not_one_click") from None
    if form.getall("List-Unsubscribe", []) != ["One-Click"]:
        raise LinkRefused("not_one_click")


# --- pages for what went wrong: never the token in a log line ------------------------------


def _refused_page(_: Req, error: HTTPException) -> Response[str]:
    if isinstance(error, LinkRefused):
        log.info("unsubscribe.refused", why=error.why)
        title = error.title
    else:  # a body over MAX_BODY_BYTES (413), or what Litestar refuses on its own
        title = "This did not work"
    detail = error.detail
    if error.status_code == 413:
        detail = f"An unsubscribe request has a body of at most {MAX_BODY_BYTES} bytes."
    response = render("unsubscribe.html", error.status_code, step="refused", title=title,
                      detail=detail)  # fmt: skip
    response.headers.update(error.headers or {})
    return response


def _outage_page(_: Req, error: Exception) -> Response[str]:
    log.warning("unsubscribe.redis_unavailable", error=type(error).__name__)
    response = render(
        "unsubscribe.html", 503, step="refused", title="Please try again in a minute",
        detail="We could not record this just now. Nothing was changed; please try again.",
    )  # fmt: skip
    response.headers["Retry-After"] = "60"
    return response


def _bug_page(_: Req, error: Exception) -> Response[str]:
    # As the API's own handler, but without the request's path: it holds the token.
    if isinstance(error, HTTPException):  # raised on purpose, e.g. the client hung up
        log.info("unsubscribe.aborted", detail=error.detail)
    else:
        log.error("unsubscribe.unhandled_error", exc_info=error)
    return render(
        "unsubscribe.html", 500, step="refused", title="This did not work",
        detail="Something went wrong on our side. Nothing was changed; please try again later.",
    )  # fmt: skip


_HANDLERS: ExceptionHandlersMap = {
    HTTPException: _refused_page,
    RedisError: _outage_page,
    OSError: _outage_page,
    500: _bug_page,
}


class Unsubscribe(Controller):
    """The one-click unsubscribe link: the page, its button, and a mail client's POST."""

    path = "/v1/unsubscribe/{token:str}"
    include_in_schema = False  # for recipients' browsers and mail clients, not producers
    exception_handlers = _HANDLERS

    @route(http_method=HttpMethod.OPTIONS, include_in_schema=False, status_code=204)
    async def allowed_methods(self) -> Response[None]:
        """The methods of this path (Litestar's own answer would list only the first)."""
        return Response(None, status_code=204, headers={"Allow": "GET, HEAD, POST, OPTIONS"})

    @get(media_type=MediaType.HTML)
    async def page(self, request: Req, token: FromPath[str]) -> Response[str]:
        """A page naming what the link switches off, with one button that POSTs."""
        what = _unsubscribing(request, token)
        return render("unsubscribe.html", step="ask", title=f"Unsubscribe from “{what.label}”?",
                      what=what)  # fmt: skip

    @head()
    async def page_head(self, request: Req, token: FromPath[str]) -> Response[None]:
        """The page's status and headers, without it (some mail scanners ask so)."""
        try:
            _unsubscribing(request, token)
        except HTTPException as error:
            return Response(None, status_code=error.status_code, headers=HTML_HEADERS,
                            media_type=MediaType.HTML)  # fmt: skip
        return Response(None, headers=HTML_HEADERS, media_type=MediaType.HTML)

    @post(status_code=200, media_type=MediaType.HTML, request_max_body_size=MAX_BODY_BYTES)
    async def unsubscribe(self, request: Req, token: FromPath[str]) -> Response[str]:
        """Switch the pair off (again: no change) and confirm it."""
        what = _unsubscribing(request, token)
        await _one_click(request)
        store: RecipientSettingsStore = request.app.state.recipient_settings
        opt_out = what.opt_out
        pair = (opt_out.notification_type, str(opt_out.channel))
        # Counted once: a pair that is off already (a repeated POST) is no new unsubscribe.
        was_on = pair not in (await store.get(opt_out.recipient_id)).disabled
        settings = await store.switch_off(
            opt_out.recipient_id, opt_out.notification_type, opt_out.channel, "unsubscribe_link"
        )
        if was_on:
            metrics: MetricsRecorder = request.app.state.metrics
            metrics.inc(UNSUBSCRIBES, (*pair, "link"))
        log.info(
            "unsubscribe.recorded", recipient_id=opt_out.recipient_id,
            notification_type=opt_out.notification_type, channel=opt_out.channel,
            settings_version=settings.version,
        )  # fmt: skip
        return render("unsubscribe.html", step="done", title="You are unsubscribed", what=what)


UNSUBSCRIBE_ROUTES = [Unsubscribe]
