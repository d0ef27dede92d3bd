"""Rendering a work item's message from the catalog's template for its type, channel and locale.

The templates were compiled with the catalog (``app.catalog.templates``); what one delivery's
data does to its template (a missing field, a value the template cannot use, an SMS over the
channel's ``max_segments``, a WEBHOOK body that is not JSON) fails that delivery alone.
"""

from __future__ import annotations

from typing import Any

import msgspec

from app.catalog import Catalog
from app.catalog.sms import measure_sms
from app.catalog.templates import FillError
from app.providers.base import PushContent
from streams.core.errors import ClarionError
from streams.core.vocabulary import Channel
from streams.delivery.work_items import WorkItem

_SMS = Channel.SMS  # bound once: compared on every delivery
_NO_PUSH = PushContent()


class RenderError(ClarionError):
    """The template cannot be filled for this delivery (a PERMANENT failure of it alone)."""


class Rendered(msgspec.Struct, frozen=True):
    """A delivery's message as its channel's template made it (a Struct: one is made per
    delivery, and a frozen dataclass takes ten times as long to make)."""

    # EMAIL: the subject; PUSH and IN_APP: the title (one line); "" for SMS and WEBHOOK.
    title: str
    # EMAIL: the text body; SMS: the text; WEBHOOK: the JSON body.
    body: str
    # EMAIL: the HTML body; "" elsewhere.
    html: str = ""
    # SMS: the encoding the text needs (GSM-7 or UCS-2) and its segments; "" and 0 elsewhere.
    sms_encoding: str = ""
    sms_segments: int = 0
    # PUSH: the template's push parts (data, badge, sound, link, collapse key).
    push: PushContent = _NO_PUSH


def render(catalog: Catalog, item: WorkItem, data: dict[str, Any] | None) -> Rendered:
    """``item``'s message, filled from ``data`` (None: the notification's
    shared data is gone)."""
    if data is None:
        raise RenderError("the notification's template data is no longer in Redis")
    type_name, channel = item.notification_type, item.channel
    if type_name not in catalog.types:
        raise RenderError(f"type {type_name!r} is no longer in the catalog")
    locale = catalog.template_locale(type_name, channel, item.locale)
    if locale is None:
        raise RenderError(f"type {type_name!r} has no {channel} template")
    template = catalog.compiled[(type_name, locale, channel)]
    try:
        title, body, html = template.fill(data)
        filled = template.fill_push(data) if template.push else None
    except FillError as error:
        raise RenderError(str(error)) from None
    if filled is not None:
        push = PushContent(
            filled.data, filled.badge, filled.sound, filled.link, filled.collapse_key
        )
        return Rendered(title, body, html, push=push)
    if channel != _SMS:
        return Rendered(title, body, html)
    encoding, segments = measure_sms(body)
    limit = catalog.channels[channel].max_segments
    if segments > limit:
        raise RenderError(
            f"the SMS takes {segments} segments ({encoding}), over the channel's "
            f"max_segments of {limit}"
        )
    return Rendered(title, body, html, sms_encoding=encoding, sms_segments=segments)
