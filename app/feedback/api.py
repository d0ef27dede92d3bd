"""``POST /v1/feedback/{provider}``: providers' callbacks about the messages they took.

No API key: each callback is authenticated by its provider's signature (``app.feedback``).
A verified, fresh callback is taken into the feedback inbox and answered 200 with how many
items it held, even when no delivery has the message it names: a provider must not retry a
callback for ever. Refused: an unknown provider or one that takes no feedback (404), a
missing, malformed or wrong signature or signed time (401, naming the header), a stale
callback or a body that is not the scheme's (400), a replay of a callback already taken (409),
a body over the provider's bound (413: the scheme's ``max_bytes``; the rest is never read).
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, post
from litestar.datastructures import State
from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import FromPath

from app.api.params import ANY_QUERY
from app.catalog.providers import MAX_FEEDBACK_BYTES
from app.feedback.callbacks import Scheme
from app.feedback.requests import Callback, too_large
from streams.core import clock
from streams.core.errors import Malformed
from streams.feedback.store import Inbox, VerifiedCallback

Req = Request[Any, Any, State]
# The route's bound, over every provider's: each scheme reads up to its own (``body``).
MAX_CALLBACK_BYTES = MAX_FEEDBACK_BYTES


class FeedbackAnswer(msgspec.Struct, frozen=True):
    # Items of the callback taken (a status callback nobody acts on holds none).
    received: int


def callback_url(request: Req) -> str:
    """The URL the provider called: the public URL Clarion is reached at, when it is set
    (behind a proxy the request's own URL differs from what the provider signed); else the
    request's own, which a ``Host`` such as ``x:99999`` leaves without a valid URL (400)."""
    public: str = request.app.state.public_url
    if not public:
        try:
            return str(request.url)
        except ValueError:  # urllib's "Port out of range"
            raise Malformed("Host: not a host and port a URL can hold") from None
    query = request.scope.get("query_string", b"").decode("latin-1")
    return public + request.url.path + (f"?{query}" if query else "")


async def body(request: Req, max_bytes: int) -> bytes:
    """The request's body, read only while it stays within ``max_bytes``: a callback announced
    or found larger is refused (413) before the rest is read, so an unsigned body costs at
    most its provider's bound."""
    announced = request.content_length  # a malformed Content-Length is Litestar's 400
    if announced is not None and announced > max_bytes:
        raise too_large(max_bytes)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise too_large(max_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


@post(
    "/v1/feedback/{provider:str}",
    status_code=200,
    request_max_body_size=MAX_CALLBACK_BYTES,
    raises=[NotFoundException],
    opt={ANY_QUERY: True},  # the provider owns the callback URL and what it appends to it
)
async def receive_feedback(request: Req, provider: FromPath[str]) -> FeedbackAnswer:
    """Take a provider's signed callback about messages it took (delivery receipts, bounces,
    complaints, unsubscribes)."""
    schemes: dict[str, Scheme] = request.app.state.feedback_schemes
    scheme = schemes.get(provider)
    if scheme is None:
        raise NotFoundException(detail=f"provider: {provider!r} takes no feedback here")
    # ASGI gives header names in lower case; a name given twice keeps its last value.
    headers = {
        name.decode("latin-1"): value.decode("latin-1") for name, value in request.scope["headers"]
    }
    # A callback not taken raises one of ``app.feedback.requests.Refusal``'s kinds, answered
    # with its status (``app.api.errors``).
    url = callback_url(request) if scheme.signs_url else ""
    callback = Callback(url, headers, await body(request, scheme.max_bytes), clock.now_ms())
    taken = scheme.read(callback)
    inbox: Inbox = request.app.state.feedback_inbox
    verified = VerifiedCallback(provider, taken.replay_key, taken.guard_ms, taken.items)
    if not await inbox.take(verified):
        raise HTTPException(status_code=409, detail="callback: already received (a replay)")
    return FeedbackAnswer(received=len(taken.items))
