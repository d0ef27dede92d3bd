"""The SERVER span of each request that sends notifications (tracing on only).

``create_app`` installs this middleware only while ``app.tracing.ENABLED``; without it a
request does not pass through one more layer. A producer's W3C ``traceparent`` (and
``tracestate``) makes the span its child, else the span starts a new trace. The ingest path
describes the notifications on it (``Ingestor``, ``app.tracing.note_ingest``) and writes its
``traceparent`` into their work items; the answer echoes it, so the producer can find the
trace. Nothing of the body or the ``Authorization`` header goes on the span.
"""

from __future__ import annotations

from litestar.datastructures import Headers, MutableScopeHeaders
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from opentelemetry.trace import SpanKind, StatusCode

from app import tracing

# The routes that accept notifications: the request, not each notification, is a span.
TRACED_PATHS = frozenset({"/v1/notifications", "/v1/notifications/batch"})


class RequestSpans:
    """ASGI middleware: a SERVER span around each POST that sends notifications."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != ScopeType.HTTP
            or scope["method"] != "POST"
            or scope["path"] not in TRACED_PATHS
        ):
            await self.app(scope, receive, send)
            return
        headers = Headers.from_scope(scope)
        parent = tracing.context_of(
            headers.get("traceparent") or "", headers.get("tracestate") or ""
        )
        with tracing.tracer().start_as_current_span(
            f"POST {scope['path']}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={"http.request.method": "POST", "url.path": scope["path"]},
            # An exception's text may quote the body: the span gets its class only.
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            echo = tracing.traceparent()

            async def noting(message: Message) -> None:
                if message["type"] == "http.response.start":
                    span.set_attribute("http.response.status_code", message["status"])
                    if message["status"] >= 500:
                        span.set_status(StatusCode.ERROR)
                    MutableScopeHeaders.from_message(message)["traceparent"] = echo
                await send(message)

            try:
                await self.app(scope, receive, noting)
            except BaseException as error:
                span.set_attribute("error.type", type(error).__name__)
                span.set_status(StatusCode.ERROR, type(error).__name__)
                raise
