"""A recipient's profile (scope ``recipients``): ``PUT``, ``GET`` and ``DELETE
/v1/recipients/{id}``, and ``PATCH /v1/recipients/{id}/push-targets`` to add and remove
devices.

A notification may then name only ``recipient.id``: ingest fills in the profile's
addresses and locale (``app.ingest.profiles``). ``DELETE`` erases the recipient
(``app.recipients.erasure``): its profile, settings and addresses, everywhere Clarion kept
them.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Request, Response, delete, get, patch, put, route
from litestar.datastructures import State
from litestar.enums import HttpMethod
from litestar.exceptions import NotFoundException, ServiceUnavailableException
from litestar.params import FromPath

from app.api.auth import authorize
from app.api.body import documented_body, read_json
from app.api.errors import AUTHENTICATED, BodyTooLarge, NotJson
from app.api.methods import allowed
from app.api.read_model import ReadModel, read_model_unavailable
from app.ingest.profiles import Profile
from app.ingest.profiles import decode as decode_profile
from app.recipients.api.settings import recipient_id_of
from app.recipients.erasure import Eraser
from app.recipients.profiles import TargetsPatch, changed, encode, patched
from streams.recipients.read import RecipientSettings
from streams.recipients.settings import RecipientSettingsStore

Req = Request[Any, Any, State]


class ErasureView(msgspec.Struct, frozen=True, kw_only=True):
    """What ``DELETE /v1/recipients/{id}`` did."""

    recipient_id: str
    # Deliveries that were waiting and ended SUPPRESSED ("erased").
    deliveries_ended: int
    dead_letters_removed: int
    # Deliveries a worker was still sending when the erasure stopped waiting for them.
    still_in_flight: int


class ProfileView(Profile, frozen=True, kw_only=True):
    """A recipient's profile as kept, with its id and the settings version it is at."""

    id: str
    version: int


def _view(recipient_id: str, settings: RecipientSettings) -> ProfileView:
    profile = decode_profile(settings.profile)
    if profile is None:
        raise NotFoundException(detail=f"recipient {recipient_id!r} has no profile")
    return ProfileView(id=recipient_id, version=settings.version, **msgspec.structs.asdict(profile))


async def _update(request: Req, recipient_id: str, change: Any) -> RecipientSettings:
    """Apply ``change`` (the stored profile, or None, to the new one) to the profile."""

    def update(stored: bytes) -> tuple[bytes, list[str]]:
        before = decode_profile(stored)
        after = change(before)
        return encode(after), changed(before, after)

    store: RecipientSettingsStore = request.app.state.recipient_settings
    # A profile too large to keep is a ``ProfileError`` (422, ``app.api.errors``).
    return await store.update_profile(recipient_id, update)


class RecipientProfile(Controller):
    """``PUT``, ``GET`` and ``DELETE`` of a recipient.

    Its ``OPTIONS`` answer is written out, by a handler named to sort first
    (``app.api.methods``).
    """

    path = "/v1/recipients/{recipient_id:str}"

    @route(http_method=HttpMethod.OPTIONS, include_in_schema=False, status_code=204)
    async def allowed_methods(self, request: Req) -> Response[None]:
        """Which methods this path supports (``app.api.methods``)."""
        return allowed(request)

    @put(dependencies=documented_body(Profile), raises=[*AUTHENTICATED, BodyTooLarge, NotJson])
    async def put_profile(self, request: Req, recipient_id: FromPath[str]) -> ProfileView:
        """Create or replace the recipient's profile (fields not given are cleared)."""
        authorize(request, "recipients")
        recipient_id = recipient_id_of(recipient_id)
        body = await read_json(request, Profile)
        settings = await _update(request, recipient_id, lambda _: body)
        return _view(recipient_id, settings)

    @get(raises=[*AUTHENTICATED, NotFoundException])
    async def get_profile(self, request: Req, recipient_id: FromPath[str]) -> ProfileView:
        """The recipient's profile; 404 when it has none."""
        authorize(request, "recipients")
        recipient_id = recipient_id_of(recipient_id)
        store: RecipientSettingsStore = request.app.state.recipient_settings
        return _view(recipient_id, await store.get(recipient_id))

    @delete(status_code=200, raises=[*AUTHENTICATED, ServiceUnavailableException])
    async def erase(self, request: Req, recipient_id: FromPath[str]) -> ErasureView:
        """Erase the recipient: its profile, settings and addresses everywhere Clarion kept
        them; its waiting deliveries end SUPPRESSED ("erased"). Later notifications to it
        are as to an unknown recipient. 503 while the read model cannot be reached (it names
        deliveries whose records must go too): nothing was erased then; retry."""
        authorize(request, "recipients")
        recipient_id = recipient_id_of(recipient_id)
        read_model: ReadModel = request.app.state.read_model
        if await read_model.pool() is None:
            raise read_model_unavailable()
        eraser: Eraser = request.app.state.eraser
        done = await eraser.erase(recipient_id)
        return ErasureView(
            recipient_id=recipient_id,
            deliveries_ended=done.deliveries_ended,
            dead_letters_removed=done.dead_letters_removed,
            still_in_flight=done.still_in_flight,
        )


@patch(
    "/v1/recipients/{recipient_id:str}/push-targets",
    dependencies=documented_body(TargetsPatch),
    raises=[*AUTHENTICATED, BodyTooLarge, NotJson],
)
async def patch_push_targets(request: Req, recipient_id: FromPath[str]) -> ProfileView:
    """Add and remove devices of the recipient's profile (a profile is made if it has none);
    a device is matched by platform and token, a Web Push subscription by its endpoint."""
    authorize(request, "recipients")
    recipient_id = recipient_id_of(recipient_id)
    body = await read_json(request, TargetsPatch)
    settings = await _update(request, recipient_id, lambda before: patched(before, body))
    return _view(recipient_id, settings)
