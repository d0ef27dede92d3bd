"""``OPTIONS`` on a path that several handlers serve names all their methods."""

from __future__ import annotations

import httpx
import pytest


@pytest.mark.parametrize(
    ("path", "methods"),
    [
        ("/v1/campaigns", "GET, OPTIONS, POST"),
        ("/v1/suppressions", "GET, OPTIONS, POST"),
        ("/v1/recipients/user-1", "DELETE, GET, OPTIONS, PUT"),
        ("/v1/recipients/user-1/quiet-hours", "DELETE, OPTIONS, PUT"),
        ("/v1/status-webhook", "DELETE, GET, OPTIONS, PUT"),
    ],
)
async def test_options_names_every_method_of_the_path(
    client: httpx.AsyncClient, path: str, methods: str
) -> None:
    answer = await client.options(path)
    assert answer.status_code == 204
    assert answer.headers["Allow"] == methods
