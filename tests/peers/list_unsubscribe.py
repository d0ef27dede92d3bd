"""RFC 8058 one-click unsubscribe header fields, checked as a mailbox provider reads them.

The email peers refuse a message whose fields are malformed instead of delivering a link no
mail client would offer: ``List-Unsubscribe`` a list of ``<URI>``s, at most once;
``List-Unsubscribe-Post`` exactly ``List-Unsubscribe=One-Click``, at most once and only
beside a ``List-Unsubscribe`` with an https URI (plain http only for a loopback host, which
Clarion allows for tests).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

LINK: Final = "List-Unsubscribe"
POST: Final = "List-Unsubscribe-Post"
ONE_CLICK: Final = "List-Unsubscribe=One-Click"
_URI = re.compile(r"<([^<>\s]*)>")
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def problems(fields: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """(field, what is wrong) for each problem of a message's header ``fields``."""
    fields = list(fields)
    links = [value.strip() for name, value in fields if name.lower() == LINK.lower()]
    posts = [value.strip() for name, value in fields if name.lower() == POST.lower()]
    found = [
        (name, "appears more than once") for name, v in ((LINK, links), (POST, posts)) if len(v) > 1
    ]
    uris = [match[1] for match in _URI.finditer(links[0])] if links else []
    if links and (not uris or _URI.sub("", links[0]).replace(",", "").strip()):
        found.append((LINK, "must be a comma-separated list of <URI>s"))
    if posts and posts[0] != ONE_CLICK:
        found.append((POST, f"must be {ONE_CLICK!r}"))
    if posts and not any(_one_click(uri) for uri in uris):
        found.append((POST, f"needs a {LINK} with an https URI"))
    return found


def _one_click(uri: str) -> bool:
    parts = urlsplit(uri)
    if not parts.hostname:
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in _LOOPBACK)
