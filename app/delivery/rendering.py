"""Rendering a work item's message from the catalog's template for its type, channel and locale."""

from __future__ import annotations

from typing import Any

from app.catalog import Catalog
from streams.work_items import WorkItem


class RenderError(Exception):
    """The template cannot be filled for this delivery (a PERMANENT failure of it alone)."""


def render(catalog: Catalog, item: WorkItem, data: dict[str, Any] | None) -> tuple[str, str]:
    """(title, body) of ``item``'s message, filled from ``data`` (None: the notification's
    shared data is gone)."""
    if data is None:
        raise RenderError("the notification's template data is no longer in Redis")
    type_config = catalog.types.get(item.notification_type)
    if type_config is None:
        raise RenderError(f"type {item.notification_type!r} is no longer in the catalog")
    locale = catalog.template_locale(item.notification_type, item.channel, item.locale)
    if locale is None:
        raise RenderError(f"type {item.notification_type!r} has no {item.channel} template")
    template = type_config.templates[locale][item.channel]
    try:
        # Placeholders are plain names (checked when the catalog is loaded), so format_map
        # only ever looks up keys of data.
        title, body = template.title.format_map(data), template.body.format_map(data)
    except KeyError as missing:
        raise RenderError(f"the template needs data.{missing.args[0]}") from None
    except (ValueError, TypeError) as error:
        raise RenderError(f"the template cannot be filled: {error}") from None
    # A title is one line (an email's Subject header, a push title): a line break from the
    # data would start a header of its own, so every control character becomes a space.
    return (title if title.isprintable() else title.translate(_ONE_LINE)), body


_ONE_LINE = dict.fromkeys((*range(32), 127), " ")
