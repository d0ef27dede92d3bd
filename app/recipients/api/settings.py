"""A recipient's settings: ``GET /v1/recipients/{id}/settings``, ``PUT …/preferences``,
``PUT`` and ``DELETE …/quiet-hours``.

Recipients belong to the deployment (one organisation's users), not to a producer, so every
one of these needs the ``recipients`` scope: a key that may only send or read notifications
can neither see nor change what a recipient switched off.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, delete, get, put, route
from litestar.datastructures import State
from litestar.enums import HttpMethod
from litestar.exceptions import ClientException
from litestar.params import FromPath

from app.api.auth import authorize
from app.api.body import documented_body, read_json
from app.api.errors import AUTHENTICATED, BodyTooLarge, NotJson
from app.api.methods import allowed
from app.api.schemas import (
    PreferencesBody,
    QuietHoursBody,
    RecipientSettingsView,
)
from app.catalog import Catalog
from app.ingest.quiet_hours import check
from streams.core.events import PreferenceEntry, QuietHoursSetting
from streams.recipients.read import RecipientSettings
from streams.recipients.settings import RecipientSettingsStore

_MAX_ID = 255
Req = Request[Any, Any, State]


def recipient_id_of(recipient_id: str) -> str:
    """The path's recipient id; 422 unless it is 1-255 printable characters."""
    if not recipient_id or len(recipient_id) > _MAX_ID or not recipient_id.isprintable():
        raise ClientException(
            status_code=422, detail="recipient_id: 1-255 printable characters are required"
        )
    return recipient_id


def _view(recipient_id: str, settings: RecipientSettings) -> RecipientSettingsView:
    quiet = settings.quiet_hours
    return RecipientSettingsView(
        recipient_id=recipient_id,
        version=settings.version,
        preferences=settings.preference_entries(),
        quiet_hours=QuietHoursBody(quiet.start, quiet.end, quiet.timezone) if quiet else None,
    )


@get("/v1/recipients/{recipient_id:str}/settings", raises=AUTHENTICATED)
async def get_recipient_settings(
    request: Req, recipient_id: FromPath[str]
) -> RecipientSettingsView:
    """The recipient's switched-off (type, channel) pairs and quiet hours."""
    authorize(request, "recipients")
    store: RecipientSettingsStore = request.app.state.recipient_settings
    recipient_id = recipient_id_of(recipient_id)
    return _view(recipient_id, await store.get(recipient_id))


@put(
    "/v1/recipients/{recipient_id:str}/preferences",
    dependencies=documented_body(PreferencesBody),
    raises=[*AUTHENTICATED, BodyTooLarge, NotJson],
)
async def put_preferences(request: Req, recipient_id: FromPath[str]) -> RecipientSettingsView:
    """Replace the recipient's preferences; pairs not listed are switched on."""
    authorize(request, "recipients")
    recipient_id = recipient_id_of(recipient_id)
    body = await read_json(request, PreferencesBody)
    catalog: Catalog = request.app.state.catalog
    for position, entry in enumerate(body.preferences):
        where = f"preferences[{position}]"
        type_config = catalog.types.get(entry.type)
        if type_config is None:
            raise ClientException(
                status_code=422, detail=f"{where}.type: unknown notification type {entry.type!r}"
            )
        if not entry.enabled and not type_config.opt_out:
            raise ClientException(
                status_code=422,
                detail=f"{where}.enabled: notifications of type {entry.type!r} "
                "cannot be switched off",
            )
    entries = [
        PreferenceEntry(type=e.type, channel=e.channel, enabled=e.enabled) for e in body.preferences
    ]
    store: RecipientSettingsStore = request.app.state.recipient_settings
    return _view(recipient_id, await store.set_preferences(recipient_id, entries))


class QuietHours(Controller):
    """``PUT`` and ``DELETE`` of a recipient's quiet hours.

    Its ``OPTIONS`` answer is written out, by a handler named to sort first
    (``app.api.methods``).
    """

    path = "/v1/recipients/{recipient_id:str}/quiet-hours"

    @route(http_method=HttpMethod.OPTIONS, include_in_schema=False, status_code=204)
    async def allowed_methods(self, request: Req) -> Response[None]:
        """Which methods this path supports (``app.api.methods``)."""
        return allowed(request)

    @put(
        dependencies=documented_body(QuietHoursBody), raises=[*AUTHENTICATED, BodyTooLarge, NotJson]
    )
    async def put_quiet_hours(
        self, request: Req, recipient_id: FromPath[str]
    ) -> RecipientSettingsView:
        """Set the recipient's quiet hours (start, end, IANA time zone)."""
        authorize(request, "recipients")
        recipient_id = recipient_id_of(recipient_id)
        body = await read_json(request, QuietHoursBody)
        setting = QuietHoursSetting(start=body.start, end=body.end, timezone=body.timezone)
        check(setting)  # a ``QuietHoursError`` is a 422 naming the field (``app.api.errors``)
        store: RecipientSettingsStore = request.app.state.recipient_settings
        return _view(recipient_id, await store.set_quiet_hours(recipient_id, setting))

    @delete(status_code=200, raises=AUTHENTICATED)
    async def delete_quiet_hours(
        self, request: Req, recipient_id: FromPath[str]
    ) -> RecipientSettingsView:
        """Remove the recipient's quiet hours."""
        authorize(request, "recipients")
        recipient_id = recipient_id_of(recipient_id)
        store: RecipientSettingsStore = request.app.state.recipient_settings
        return _view(recipient_id, await store.remove_quiet_hours(recipient_id))
