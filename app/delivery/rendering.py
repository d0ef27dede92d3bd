"""Rendering a work item's message from the catalog's template for its type, channel and locale."""

from __future__ import annotations

from app.catalog import Catalog
from streams.work_items import WorkItem


class RenderError(Exception):
    """The template cannot be filled for this delivery (a PERMANENT failure of it alone)."""


def render(catalog: Catalog, item: WorkItem) -> tuple[str, str]:
    """(title, body) of ``item``'s message."""
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
        return template.title.format_map(item.data), template.body.format_map(item.data)
    except KeyError as missing:
        raise RenderError(f"the template needs data.{missing.args[0]}") from None
    except (ValueError, TypeError) as error:
        raise RenderError(f"the template cannot be filled: {error}") from None
