"""One page of recipients' inboxes per shard, as ``page.lua`` reads them
(``streams.inbox.store.InboxStore`` batches concurrent requests' pages into one call per shard)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from streams.core.keys import ShardKeys
from streams.core.scripts import Call, KeyOrArg

Listing = Literal["inbox", "unread", "archived"]


@dataclass(frozen=True, slots=True)
class PageAsk:
    """One page of one recipient's inbox on one shard: newest first, older than message
    ``before`` ("": from the newest), at most ``limit`` messages of ``listing``; refused if
    the recipient's tokens of ``epoch`` were revoked (None: nothing to check)."""

    shard: ShardKeys
    recipient_id: str
    before: str
    limit: int
    listing: Listing
    epoch: int | None = None


def inbox_page_call(asks: Sequence[PageAsk]) -> Call:
    """The keys and arguments of one ``page.lua`` call (pages of one shard)."""
    keys: list[KeyOrArg] = []
    args: list[KeyOrArg] = []
    for ask in asks:
        inbox = ask.shard.inbox(ask.recipient_id)
        keys += [inbox.messages, inbox.order, inbox.revoked]
        epoch = "" if ask.epoch is None else ask.epoch
        args += [f"({ask.before}" if ask.before else "+", ask.limit, ask.listing, epoch]
    return keys, args
