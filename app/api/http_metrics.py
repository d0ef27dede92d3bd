"""Every HTTP request's duration, by method, route template and status class."""

from __future__ import annotations

import time

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from app.metrics import HTTP_REQUESTS
from streams.metrics.recorder import MetricsRecorder


class HttpMetrics:
    """ASGI middleware: every request's duration by method, route template and status class.

    Litestar runs it after routing, so the route template is known
    (``/v1/notifications/{notification_id}``: one series per route, not per id) and an
    unknown path (404 before any route) is not counted. It costs two clock reads and a few
    dict updates per request.
    """

    def __init__(self, app: ASGIApp, recorder: MetricsRecorder) -> None:
        self.app = app
        self.recorder = recorder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client sees when nothing was answered

        async def noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noting_status)
        finally:
            labels = (scope["method"], scope.get("path_template", ""), f"{status // 100}xx")
            self.recorder.observe(HTTP_REQUESTS, labels, time.perf_counter() - started)
