"""One producer's status webhook URL against a real receiver (tests/peers/webhook.py) that
verifies every signature with the ``standardwebhooks`` library: what a POST carries, what
each answer means, TLS for the URL's own host name, keep-alive, and what the SSRF guard
refuses. ``hooks.test`` resolves to 127.0.0.1 through an injected resolver."""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import pytest
import trustme
from standardwebhooks import Webhook

from app import __version__
from app.catalog import parse_catalog
from app.catalog.status_webhooks import StatusWebhooksConfig
from app.status_webhooks.endpoint import Endpoint, UrlGuard, new_secret
from streams.status_webhooks import StatusWebhook
from tests.peers.webhook import Answer, Receiver, Served, serve

SECRET = "whsec_" + base64.b64encode(b"clarion-status-hook-key-32-bytes").decode()
OTHER_SECRET = "whsec_" + base64.b64encode(b"somebody-else-s-key-of-32-bytes!").decode()
BODY = b'{"type":"delivery.sent","data":{"delivery_id":"d-1","version":3}}'


async def resolve_locally(host: str, port: int) -> Sequence[str]:
    if host == "hooks.test":
        return ["127.0.0.1"]
    if host == "inside.test":
        return ["10.1.2.3"]
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def config(extra: str = "") -> StatusWebhooksConfig:
    text = (
        '[status_webhooks]\nallow_http_hosts = ["hooks.test", "127.0.0.1", "inside.test"]\n'
        'allow_networks = ["127.0.0.0/8"]\ntimeout_seconds = 1\nconnect_timeout_seconds = 1\n'
    )
    return parse_catalog(text + extra).status_webhooks


def hook(url: str, secret: str = SECRET) -> StatusWebhook:
    return StatusWebhook(url=url, secret=secret, updated_ms=1)


@pytest.fixture
def served() -> Iterator[Served]:
    with serve(Receiver(SECRET)) as running:
        yield running


@pytest.fixture
async def endpoint(served: Served) -> AsyncIterator[Endpoint]:
    made = Endpoint("shop", config(), resolver=resolve_locally)
    made.configure(hook(served.url("/statuses?account=7", host="hooks.test")))
    yield made
    await made.close()


async def test_a_post_is_signed_so_a_standard_webhooks_library_verifies_it(
    served: Served, endpoint: Endpoint
) -> None:
    answer = await endpoint.post("d-1.3", BODY)
    assert (answer.ok, answer.status_code) == (True, 200)
    kept = served.receiver.deliveries["d-1.3"]
    assert (kept.path, kept.body) == ("/statuses", BODY)
    assert kept.headers["host"] == f"hooks.test:{served.port}"
    assert kept.headers["content-type"] == "application/json"
    assert kept.headers["user-agent"] == f"Clarion-Webhooks/{__version__}"
    # Verified again here, as a producer's receiver would: the id with its dot included.
    assert Webhook(SECRET).verify(kept.body, kept.headers) == json.loads(BODY)
    assert served.receiver.unverified == 0


async def test_another_secret_is_refused_by_the_receiver(served: Served) -> None:
    impostor = Endpoint("shop", config(), resolver=resolve_locally)
    impostor.configure(hook(served.url(host="hooks.test"), OTHER_SECRET))
    answer = await impostor.post("d-1.3", BODY)
    await impostor.close()
    assert (answer.ok, answer.status_code, answer.error) == (False, 401, "hooks.test answered 401")
    assert served.receiver.unverified == 1


@pytest.mark.parametrize(
    ("scripted", "status", "retry_after"),
    [
        (Answer(503, {"Retry-After": "7"}), 503, 7.0),
        (Answer(429), 429, None),
        (Answer(410), 410, None),
        (Answer(302, {"Location": "https://elsewhere.example/"}), 302, None),
        (Answer(400), 400, None),
    ],
)
async def test_any_answer_but_2xx_is_a_failure_to_retry(
    served: Served, endpoint: Endpoint, scripted: Answer, status: int, retry_after: float | None
) -> None:
    served.receiver.script("/statuses", scripted)
    answer = await endpoint.post("d-1.3", BODY)
    assert (answer.ok, answer.status_code, answer.retry_after) == (False, status, retry_after)
    assert answer.error == f"hooks.test answered {status}"
    assert (await endpoint.post("d-1.3", BODY)).ok  # the script is used up: 200 again


async def test_no_answer_in_time(served: Served, endpoint: Endpoint) -> None:
    served.receiver.script("/statuses", Answer(hang_seconds=5))
    answer = await endpoint.post("d-1.3", BODY)
    assert (answer.ok, answer.status_code) == (False, 0)
    assert answer.error == "hooks.test did not answer in time"
    assert (await endpoint.post("d-1.4", BODY)).ok  # a new connection, not the hung one


async def test_a_refused_connection_and_an_unknown_name() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    endpoint = Endpoint("shop", config(), resolver=resolve_locally)
    endpoint.configure(hook(f"http://hooks.test:{port}/s"))
    refused = await endpoint.post("d-1.3", BODY)
    assert refused.error == "cannot connect to hooks.test: Connection refused"
    endpoint.configure(hook("https://nowhere.test/s"))
    unknown = await endpoint.post("d-1.3", BODY)
    assert unknown.error.startswith("nowhere.test did not resolve")
    await endpoint.close()


async def test_the_guard_refuses_private_addresses_at_every_connection(served: Served) -> None:
    endpoint = Endpoint("shop", config(), resolver=resolve_locally)
    endpoint.configure(hook("http://inside.test/s"))
    answer = await endpoint.post("d-1.3", BODY)
    await endpoint.close()
    assert answer.error == (
        "inside.test resolves to 10.1.2.3, a private address (see allow_networks)"
    )
    assert not served.receiver.attempts


def test_a_url_or_secret_it_cannot_use_fails_every_post_saying_why() -> None:
    endpoint = Endpoint("shop", StatusWebhooksConfig())
    endpoint.configure(hook("http://hooks.example.com/s"))
    assert endpoint._refused.startswith("URL refused: plain http to hooks.example.com: use https")
    endpoint.configure(hook("https://hooks.example.com/s", secret="nope"))
    assert endpoint._refused.startswith("secret is not a Standard Webhooks secret")


async def test_connections_are_kept_alive(served: Served, endpoint: Endpoint) -> None:
    for number in range(20):
        assert (await endpoint.post(f"d-{number}.1", BODY)).ok
    assert len(served.receiver.connections) == 1


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


async def test_https_checks_the_certificate_for_the_url_s_host(
    ca: trustme.CA, tmp_path: Path
) -> None:
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    with serve(Receiver(SECRET), ca.issue_cert("hooks.test")) as served:
        trusting = Endpoint("shop", config(f'ca_file = "{ca_file}"'), resolver=resolve_locally)
        trusting.configure(hook(served.url("/s", host="hooks.test")))
        assert (await trusting.post("d-1.3", BODY)).ok
        assert (await trusting.post("d-1.4", BODY)).ok
        # The same address, another name: the certificate is not for it.
        trusting.configure(hook(served.url("/s", host="127.0.0.1")))
        wrong_name = await trusting.post("d-1.5", BODY)
        await trusting.close()
        system = Endpoint("shop", config(), resolver=resolve_locally)
        system.configure(hook(served.url("/s", host="hooks.test")))
        unknown_ca = await system.post("d-1.6", BODY)
        await system.close()
    assert set(served.receiver.deliveries) == {"d-1.3", "d-1.4"}
    assert len(served.receiver.connections) == 1
    assert wrong_name.error.startswith("TLS with 127.0.0.1 refused: ")
    assert unknown_ca.error.startswith("TLS with hooks.test refused: ")


async def test_no_error_text_holds_the_url_s_path_or_query() -> None:
    endpoint = Endpoint("shop", config(), resolver=resolve_locally)
    endpoint.configure(hook("https://nowhere.test/in/tok3n?key=s3cret"))
    answer = await endpoint.post("d-1.3", BODY)
    await endpoint.close()
    assert answer.error.startswith("nowhere.test did not resolve")
    assert "tok3n" not in answer.error
    assert "s3cret" not in answer.error


def test_the_api_judges_urls_as_the_endpoint_does() -> None:
    guard = UrlGuard(StatusWebhooksConfig())
    assert guard.refusal("https://hooks.example.com/s") is None
    assert guard.refusal("https://169.254.169.254/latest") == (
        "169.254.169.254 is a link-local address (as cloud metadata services use) "
        "(see allow_networks)"
    )


def test_a_new_secret_is_32_random_bytes_a_library_takes() -> None:
    made = {new_secret() for _ in range(3)}
    assert len(made) == 3
    for secret in made:
        assert len(base64.b64decode(secret.removeprefix("whsec_"))) == 32
        Webhook(secret)  # a Standard Webhooks library reads it
