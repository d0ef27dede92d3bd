"""The layout of one ``streams/inbox/page.lua`` call: three keys and four arguments per page, the
revocation epoch only where a token asks (``""``: nothing to check)."""

from __future__ import annotations

from streams.core.keys import KeySpace
from streams.inbox.pages import PageAsk, inbox_page_call


def test_each_page_names_its_inbox_and_the_epoch_its_token_carries() -> None:
    shard = KeySpace("p").shard(0)
    asks = [
        PageAsk(shard, "u-1", "", 20, "inbox", 1_765_000_000_000),
        PageAsk(shard, "u-2", "0190-id", 0, "unread"),
    ]
    keys, args = inbox_page_call(asks)
    assert keys == [
        "p:{s0}:inbox:u-1", "p:{s0}:inbox:u-1:order", "p:{s0}:inbox:u-1:revoked",
        "p:{s0}:inbox:u-2", "p:{s0}:inbox:u-2:order", "p:{s0}:inbox:u-2:revoked",
    ]  # fmt: skip
    assert args == ["+", 20, "inbox", 1_765_000_000_000, "(0190-id", 0, "unread", ""]
