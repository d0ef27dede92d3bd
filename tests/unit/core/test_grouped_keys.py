"""Keys that share a hash tag of their own: a recipient's inbox and a producer's status
webhook, each key of one group in one slot."""

from __future__ import annotations

from streams.core.keys import KeySpace


def slot_tag(key: str) -> str:
    return key[key.index("{") : key.index("}") + 1]


def test_an_inboxs_keys_share_their_shards_tag() -> None:
    inbox = KeySpace("t").shard(3).inbox("r-1")
    keys = [inbox.messages, inbox.order, inbox.feed, inbox.revoked]
    assert len({slot_tag(key) for key in keys}) == 1
    assert len(set(keys)) == 4


def test_a_status_webhooks_keys_share_their_producers_tag() -> None:
    hooks = KeySpace("t").status_webhooks("shop")
    keys = [hooks.config, hooks.outbox, hooks.positions, hooks.dlq]
    assert {slot_tag(key) for key in keys} == {"{hooks:shop}"}
    assert len(set(keys)) == 4
