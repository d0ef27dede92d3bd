"""Recipient tokens and IN_APP links with real processes (``clarion run``: API, delivery
worker, projector), Redis and PostgreSQL: a revoked token, or one of a recipient since
erased, reads nothing anywhere and its open stream ends, while a token made afterwards
works; ``?token=`` opens the stream only; an IN_APP message whose link is ``javascript:``
never reaches the inbox, its delivery FAILED saying why. Nothing logged holds a token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO
from tests.e2e.api.test_unsubscribe import PROFILES, eventually, running_service, send
from tests.e2e.inbox.api.test_demo import delivery_status, in_app_id, token_for
from tests.e2e.inbox.api.test_stream import EventStream

pytestmark = pytest.mark.timeout(180)

RECIPIENT = "user-66"


def linked_catalog(path: Path) -> Path:
    """The shipped catalog, the English IN_APP order confirmation linking to ``data.url``."""
    text = (REPO / "clarion.toml").read_text()
    template = 'IN_APP = { title = "Order confirmed", body = "Order {{ order_id }} is confirmed." }'
    assert template in text, "clarion.toml changed: update this test"
    path.write_text(text.replace(template, template[:-2] + ', link = "{{ url }}" }'))
    return path


def order(order_id: str, url: str) -> dict[str, Any]:
    return {
        "recipient": {"id": RECIPIENT},
        "type": "order_confirmed",
        "data": {"order_id": order_id, "url": url},
    }


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def refused(client: httpx.Client, token: str) -> set[str]:
    """What each inbox endpoint says to ``token`` (a set of one detail when all agree)."""
    answers = [
        client.get("/v1/inbox", headers=bearer(token)),
        client.get("/v1/inbox/counts", headers=bearer(token)),
        client.post("/v1/inbox/read-all", headers=bearer(token)),
        client.get(f"/v1/inbox/stream?token={token}"),
    ]
    assert {answer.status_code for answer in answers} == {401}
    return {answer.json()["detail"] for answer in answers}


def test_revoked_and_erased_recipients_tokens_read_nothing_and_their_streams_end(
    key_prefix: str, tmp_path: Path
) -> None:
    catalog = linked_catalog(tmp_path / "catalog.toml")
    log_path = tmp_path / "service.log"
    with (
        running_service(key_prefix, catalog, log_path) as (base_url, _),
        httpx.Client(base_url=base_url, timeout=10) as client,
    ):
        first = token_for(client, RECIPIENT)
        send(client, "order-1", order("T-1", "https://shop.example/orders/T-1"))
        eventually(
            lambda: client.get("/v1/inbox/counts", headers=bearer(first)).json()["unread"] == 1,
            10, "the message in the inbox",
        )  # fmt: skip
        # A token in the query opens the stream only.
        query = client.get(f"/v1/inbox?token={first}")
        assert query.status_code == 401
        assert "Authorization: Bearer" in query.json()["detail"]

        with EventStream(base_url, first) as events:
            assert next(events)["event"] == "counts"
            revoked = client.post(
                f"/v1/recipients/{RECIPIENT}/inbox-tokens/revoke", headers=PROFILES
            )
            assert revoked.status_code == 200, revoked.text
            with pytest.raises(StopIteration):  # the server ended it (no read timeout)
                next(events)
        assert refused(client, first) == {"the recipient token is revoked"}

        second = token_for(client, RECIPIENT)
        [message] = client.get("/v1/inbox", headers=bearer(second)).json()["messages"]
        assert message["action_url"] == "https://shop.example/orders/T-1"
        with EventStream(base_url, second) as events:
            assert next(events)["event"] == "counts"
            erased = client.delete(f"/v1/recipients/{RECIPIENT}", headers=PROFILES)
            assert erased.status_code == 200, erased.text
            with pytest.raises(StopIteration):
                next(events)
        assert refused(client, second) == {"the recipient token is revoked"}
        third = token_for(client, RECIPIENT)
        assert client.get("/v1/inbox/counts", headers=bearer(third)).json()["unread"] == 0
    logged = log_path.read_text()
    for token in (first, second, third):
        assert token.partition(".")[2] not in logged


def test_an_in_app_link_that_could_run_script_fails_its_delivery(
    key_prefix: str, tmp_path: Path
) -> None:
    catalog = linked_catalog(tmp_path / "catalog.toml")
    with (
        running_service(key_prefix, catalog, tmp_path / "service.log") as (base_url, _),
        httpx.Client(base_url=base_url, timeout=10) as client,
    ):
        token = token_for(client, RECIPIENT)
        hostile = send(client, "order-x", order("X-1", "javascript:alert(document.cookie)"))
        fine = send(client, "order-y", order("Y-1", "https://shop.example/orders/Y-1"))
        hostile_id, fine_id = in_app_id(hostile), in_app_id(fine)
        # Until the read model has caught up, the status API may answer from Redis first and
        # from a read model still behind it next: wait for the failure with its reason.
        failed = eventually(
            lambda: failed_delivery(client, hostile["id"], hostile_id),
            20, "the javascript: link's delivery FAILED, saying why",
        )  # fmt: skip
        assert "the scheme 'javascript' is not allowed" in str(failed)
        eventually(lambda: delivery_status(client, fine["id"], fine_id) == "SENT", 20, "SENT")
        urls = [
            m["action_url"]
            for m in client.get("/v1/inbox", headers=bearer(token)).json()["messages"]
        ]
        assert urls == ["https://shop.example/orders/Y-1"]


def failed_delivery(
    client: httpx.Client, notification_id: str, delivery_id: str
) -> dict[str, Any] | None:
    """The delivery once the status API shows it FAILED with its error; None before."""
    answer = client.get(
        f"/v1/notifications/{notification_id}", headers={"Authorization": "Bearer shop-secret-key"}
    ).json()
    [delivery] = [d for d in answer["deliveries"] if d["id"] == delivery_id]
    shown: dict[str, Any] = delivery
    return shown if delivery["status"] == "FAILED" and delivery["last_error"] else None
