"""Turning msgspec validation errors into messages that name the offending field."""

from __future__ import annotations

import re

import msgspec

_PATH = re.compile(r" - at `\$(?P<path>[^`]*)`$")


def describe(error: msgspec.ValidationError | msgspec.DecodeError, root: str = "") -> str:
    """``"recipient.phone: Expected `str`, got `int`"`` from msgspec's ``"... - at `$.x`"``."""
    message = str(error)
    match = _PATH.search(message)
    if match is None:
        return f"{root}: {message}" if root else message
    path = match.group("path").lstrip(".")
    path = f"{root}.{path}" if root and path else (root or path)
    # msgspec writes list positions as `[3]`; keep them, they name the item.
    text = message[: match.start()]
    return f"{path}: {text}" if path else text
