"""A producer's status webhook: ``PUT``, ``GET`` and ``DELETE /v1/status-webhook``.

Each producer configures its own, with its own key (scope ``send``): the URL its final
statuses and feedback changes are POSTed to and the Standard Webhooks secret they are
signed with. The URL must pass the same checks as a webhook URL (``[status_webhooks]`` in
the catalog says which hosts may be plain http or private); without a secret Clarion makes
one and shows it in that answer only. The status-webhooks process picks a change up within
about a second.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, delete, get, put, route
from litestar.datastructures import State
from litestar.enums import HttpMethod
from litestar.exceptions import ClientException

from app.api.auth import authorize
from app.api.body import documented_body, read_json
from app.api.errors import AUTHENTICATED, BodyTooLarge, NotFound, NotJson
from app.api.methods import allowed
from app.api.schemas import StatusWebhookBody, StatusWebhookView
from app.catalog.providers import signing_key
from app.status_webhooks.endpoint import UrlGuard, new_secret
from streams.status_webhooks.store import StatusWebhookStore

Req = Request[Any, Any, State]


class StatusWebhook(Controller):
    """The calling producer's status webhook."""

    path = "/v1/status-webhook"

    @route(http_method=HttpMethod.OPTIONS, include_in_schema=False, status_code=204)
    async def allowed_methods(self, request: Req) -> Response[None]:
        """Which methods this path supports (``app.api.methods``)."""
        return allowed(request)

    @put(
        status_code=200,
        dependencies=documented_body(StatusWebhookBody),
        raises=[*AUTHENTICATED, BodyTooLarge, NotJson],
    )
    async def put_status_webhook(self, request: Req) -> StatusWebhookView:
        """Set where the producer's statuses go; a secret made here is shown this once."""
        key = authorize(request, "send")
        body = await read_json(request, StatusWebhookBody)
        guard: UrlGuard = request.app.state.status_webhook_guard
        refusal = guard.refusal(body.url)
        if refusal is not None:
            raise ClientException(status_code=422, detail=f"url: {refusal}")
        secret = body.secret
        if secret is not None:
            try:
                signing_key(secret)
            except ValueError as error:  # the text never holds the secret
                raise ClientException(status_code=422, detail=f"secret: {error}") from None
        made = new_secret() if secret is None else None
        store: StatusWebhookStore = request.app.state.status_webhooks
        hook = await store.put(key.producer, body.url, secret or made or "", body.max_batch)
        return StatusWebhookView(
            url=hook.url, secret_set=True, max_batch=hook.max_batch, secret=made
        )

    @get(raises=[*AUTHENTICATED, NotFound])
    async def get_status_webhook(self, request: Req) -> StatusWebhookView:
        """The producer's status webhook (never its secret), with how many statuses wait
        and how many were given up."""
        key = authorize(request, "send")
        store: StatusWebhookStore = request.app.state.status_webhooks
        hook = await store.get(key.producer)
        if hook is None:
            raise NotFound(detail="no status webhook is set for this producer")
        waiting, dead_letters = await store.counts(key.producer)
        return StatusWebhookView(
            url=hook.url,
            secret_set=bool(hook.secret),
            max_batch=hook.max_batch,
            waiting=waiting,
            dead_letters=dead_letters,
        )

    @delete(status_code=204, raises=AUTHENTICATED)
    async def delete_status_webhook(self, request: Req) -> None:
        """Stop sending the producer's statuses; what still waited is dropped."""
        key = authorize(request, "send")
        store: StatusWebhookStore = request.app.state.status_webhooks
        await store.remove(key.producer)
