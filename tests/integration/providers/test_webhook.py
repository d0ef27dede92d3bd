"""The webhook provider against a real receiver (tests/peers/webhook.py) on 127.0.0.1 that
verifies every signature with the ``standardwebhooks`` library: what it sends, how each
answer is classified, TLS for the URL's own host name, keep-alive, and what its configuration
refuses. Names such as ``hooks.test`` resolve to 127.0.0.1 through an injected resolver, and
``allow_networks`` lets 127.0.0.0/8 through."""

from __future__ import annotations

import base64
import json
import re
import socket
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import trustme
from standardwebhooks import Webhook

from app import __version__
from app.catalog import CatalogError, parse_catalog
from app.catalog.providers import SecretInvalid, WebhookConfig
from app.providers.base import Message, ProviderError, Reason
from app.providers.webhook import WebhookProvider
from streams.core.vocabulary import Channel, ErrorClass
from tests.peers.webhook import Answer, Receiver, Served, serve

SECRET = "whsec_" + base64.b64encode(b"clarion-webhook-test-key-32-byte").decode()
OTHER_SECRET = "whsec_" + base64.b64encode(b"somebody-else-s-key-of-32-bytes!").decode()
LOCAL_NAMES = {"hooks.test", "other.test"}


async def resolve_locally(host: str, port: int) -> Sequence[str]:
    if host in LOCAL_NAMES:
        return ["127.0.0.1"]
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def config(**overrides: object) -> WebhookConfig:
    settings: dict[str, object] = {
        "secret_env": "HOOK_SECRET",
        "allow_http_hosts": ["hooks.test", "other.test", "127.0.0.1"],
        "allow_networks": ["127.0.0.0/8"],
        "timeout_seconds": 5.0,
        "connect_timeout_seconds": 2.0,
    }
    return WebhookConfig(**(settings | overrides))  # type: ignore[arg-type]


def provider(secret: str = SECRET, **overrides: object) -> WebhookProvider:
    return WebhookProvider(
        "hooks", config(**overrides), {"secret_env": secret}, resolver=resolve_locally
    )


def message(
    url: str, delivery_id: str = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", attempt: int = 1
) -> Message:
    body = json.dumps({"type": "order.shipped", "data": {"order": "A-17", "note": "né"}})
    return Message(
        delivery_id=delivery_id, idempotency_key=delivery_id, channel=Channel.WEBHOOK,
        address=url, title="", body=body, attempt=attempt, notification_type="order.shipped",
    )  # fmt: skip


@pytest.fixture
def served() -> Iterator[Served]:
    with serve(Receiver(SECRET)) as running:
        yield running


@pytest.fixture
async def hooks() -> AsyncIterator[WebhookProvider]:
    adapter = provider()
    yield adapter
    await adapter.close()


async def test_a_send_is_signed_so_the_receiver_verifies_it_and_names_the_host(
    served: Served, hooks: WebhookProvider
) -> None:
    sent = message(served.url("/orders?account=7", host="hooks.test"))
    assert await hooks.send(sent) == sent.delivery_id
    kept = served.receiver.deliveries[sent.delivery_id]
    assert kept.body == sent.body.encode()
    assert kept.path == "/orders"
    # Connected to the address the name resolved to, but the request names the host.
    assert kept.headers["host"] == f"hooks.test:{served.port}"
    assert kept.headers["content-type"] == "application/json"
    assert kept.headers["user-agent"] == f"Clarion-Webhooks/{__version__}"
    assert kept.headers["webhook-signature"].startswith("v1,")
    assert served.receiver.unverified == 0


async def test_a_signature_made_with_another_secret_is_refused_by_the_receiver(
    served: Served,
) -> None:
    impostor = provider(OTHER_SECRET)
    with pytest.raises(ProviderError) as refused:
        await impostor.send(message(served.url(host="hooks.test")))
    await impostor.close()
    assert (refused.value.error_class, refused.value.reason) == (
        ErrorClass.PERMANENT,
        Reason.REJECTED,
    )
    assert refused.value.message == "hooks.test answered 401"
    assert served.receiver.unverified == 1
    assert not served.receiver.deliveries


async def test_the_receiver_refuses_a_stale_timestamp(served: Served) -> None:
    body = '{"type": "old"}'
    then = datetime.now(UTC) - timedelta(minutes=10)
    headers = {
        "webhook-id": "msg-old",
        "webhook-timestamp": str(int(then.timestamp())),
        "webhook-signature": Webhook(SECRET).sign("msg-old", then, body),
        "content-type": "application/json",
    }
    async with httpx.AsyncClient() as client:
        answer = await client.post(served.url(), content=body, headers=headers)
    assert answer.status_code == 401
    assert served.receiver.unverified == 1


async def test_every_attempt_carries_the_same_webhook_id_so_the_receiver_dedupes(
    served: Served, hooks: WebhookProvider
) -> None:
    served.receiver.script("/flaky", Answer(500))
    url = served.url("/flaky", host="hooks.test")
    with pytest.raises(ProviderError):
        await hooks.send(message(url, attempt=1))
    await hooks.send(message(url, attempt=2))
    await hooks.send(message(url, attempt=3))  # as after a crash before the send was recorded
    ids = {attempt.webhook_id for attempt in served.receiver.attempts}
    assert ids == {"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"}
    assert len(served.receiver.attempts) == 3
    assert (len(served.receiver.deliveries), served.receiver.duplicates) == (1, 1)


@pytest.mark.parametrize(
    ("answer", "error_class", "reason", "retry_after", "text"),
    [
        (Answer(410), ErrorClass.PERMANENT, Reason.INVALID_ADDRESS, None, "410 Gone"),
        (Answer(429, {"Retry-After": "7"}), ErrorClass.TRANSIENT, None, 7.0, "answered 429"),
        (Answer(500), ErrorClass.TRANSIENT, None, None, "answered 500"),
        (Answer(503, {"Retry-After": "2"}), ErrorClass.TRANSIENT, None, 2.0, "answered 503"),
        (Answer(408), ErrorClass.TRANSIENT, None, None, "answered 408"),
        (Answer(302, {"Location": "/elsewhere"}), ErrorClass.PERMANENT, Reason.REJECTED, None,
         "302, a redirect: redirects are not followed"),
        (Answer(308, {"Location": "/elsewhere"}), ErrorClass.PERMANENT, Reason.REJECTED, None,
         "308, a redirect"),
        (Answer(404), ErrorClass.PERMANENT, Reason.REJECTED, None, "answered 404"),
        (Answer(422), ErrorClass.PERMANENT, Reason.REJECTED, None, "answered 422"),
    ],
)  # fmt: skip
async def test_each_answer_is_classified(
    served: Served,
    hooks: WebhookProvider,
    answer: Answer,
    error_class: ErrorClass,
    reason: Reason | None,
    retry_after: float | None,
    text: str,
) -> None:
    served.receiver.script("/scripted", answer)
    with pytest.raises(ProviderError) as failed:
        await hooks.send(message(served.url("/scripted", host="hooks.test")))
    error = failed.value
    assert (error.error_class, error.reason, error.retry_after) == (
        error_class,
        reason,
        retry_after,
    )
    assert text in error.message
    # The receiver had the request: another provider must not send it again.
    assert not error.not_accepted
    assert [attempt.path for attempt in served.receiver.attempts] == ["/scripted"]


async def test_a_receiver_that_does_not_answer_in_time_is_retried_but_had_the_request(
    served: Served,
) -> None:
    served.receiver.script("/hang", Answer(hang_seconds=10))
    slow = provider(timeout_seconds=0.3)
    with pytest.raises(ProviderError) as failed:
        await slow.send(message(served.url("/hang", host="hooks.test")))
    await slow.close()
    assert failed.value.error_class is ErrorClass.TRANSIENT
    assert failed.value.message == "hooks.test did not answer in time"
    assert not failed.value.not_accepted


async def test_a_refused_connection_or_an_unknown_name_was_not_accepted(
    hooks: WebhookProvider,
) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(ProviderError) as refused:
        await hooks.send(message(f"http://hooks.test:{port}/"))
    assert refused.value.error_class is ErrorClass.TRANSIENT
    assert refused.value.not_accepted
    assert refused.value.message.startswith("cannot connect to hooks.test")
    with pytest.raises(ProviderError) as unknown:
        await hooks.send(message("https://nowhere.example/hook"))
    assert unknown.value.error_class is ErrorClass.TRANSIENT
    assert unknown.value.not_accepted
    assert unknown.value.message == "nowhere.example did not resolve (Name or service not known)"


async def test_a_connection_that_does_not_open_in_time_was_not_accepted() -> None:
    # A listener whose backlog is full: the kernel drops further connection attempts.
    with socket.socket() as full, socket.socket() as first:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        first.connect(full.getsockname())
        blocked = provider(connect_timeout_seconds=0.3)
        with pytest.raises(ProviderError) as failed:
            await blocked.send(message(f"http://hooks.test:{full.getsockname()[1]}/"))
        await blocked.close()
    assert failed.value.error_class is ErrorClass.TRANSIENT
    assert failed.value.not_accepted
    assert failed.value.message == "no connection to hooks.test in time"


async def test_an_address_outside_allow_networks_is_refused_and_never_called(
    served: Served,
) -> None:
    strict = provider(allow_networks=[])
    with pytest.raises(ProviderError) as refused:
        await strict.send(message(served.url("/in?token=tok3n", host="hooks.test")))
    await strict.close()
    error = refused.value
    assert (error.error_class, error.reason) == (ErrorClass.PERMANENT, Reason.REJECTED)
    assert error.not_accepted
    assert error.message == (
        "webhook refused: hooks.test resolves to 127.0.0.1, a loopback address (see allow_networks)"
    )
    assert not served.receiver.attempts


async def test_a_host_written_as_an_address_outside_allow_networks_is_never_called(
    served: Served,
) -> None:
    strict = provider(allow_networks=[])
    with pytest.raises(ProviderError) as refused:
        await strict.send(message(served.url("/in", host="127.0.0.1")))
    await strict.close()
    assert (refused.value.error_class, refused.value.not_accepted) == (ErrorClass.PERMANENT, True)
    assert refused.value.message == (
        "webhook refused: 127.0.0.1 is a loopback address (see allow_networks)"
    )
    assert not served.receiver.attempts


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def served_tls(ca: trustme.CA) -> Iterator[Served]:
    with serve(Receiver(SECRET), ca.issue_cert("hooks.test")) as running:
        yield running


@pytest.fixture
async def hooks_tls(ca: trustme.CA, tmp_path: Path) -> AsyncIterator[WebhookProvider]:
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    adapter = provider(allow_http_hosts=[], ca_file=str(ca_file))
    yield adapter
    await adapter.close()


async def test_https_checks_the_certificate_for_the_url_s_own_host_name(
    served_tls: Served, hooks_tls: WebhookProvider
) -> None:
    sent = message(served_tls.url("/secure", host="hooks.test"))
    assert await hooks_tls.send(sent) == sent.delivery_id
    assert served_tls.receiver.deliveries[sent.delivery_id].headers["host"] == (
        f"hooks.test:{served_tls.port}"
    )
    # Same address and port, and a connection to it is pooled, but the certificate is not
    # for these names: each gets its own TLS connection, verified for its own name.
    for host in ("other.test", "127.0.0.1"):
        with pytest.raises(ProviderError) as refused:
            await hooks_tls.send(message(served_tls.url("/secure", host=host)))
        assert refused.value.error_class is ErrorClass.TRANSIENT
        assert refused.value.not_accepted
        assert refused.value.message.startswith(f"TLS with {host} refused: ")
        assert f"mismatch, certificate is not valid for '{host}'" in refused.value.message
    assert len(served_tls.receiver.attempts) == 1


async def test_https_to_a_certificate_of_an_unknown_ca_is_refused(served_tls: Served) -> None:
    trusting_the_system = provider(allow_http_hosts=[])
    with pytest.raises(ProviderError) as refused:
        await trusting_the_system.send(message(served_tls.url(host="hooks.test")))
    await trusting_the_system.close()
    assert refused.value.message.startswith("TLS with hooks.test refused: ")
    assert refused.value.not_accepted
    assert not served_tls.receiver.attempts


async def test_plain_http_is_refused_unless_the_host_is_allowed(served: Served) -> None:
    https_only = provider(allow_http_hosts=[])
    with pytest.raises(ProviderError, match=r"plain http to hooks\.test: use https"):
        await https_only.send(message(served.url(host="hooks.test")))
    await https_only.close()
    assert not served.receiver.attempts


async def test_connections_are_kept_alive_between_sends(
    served: Served, served_tls: Served, hooks: WebhookProvider, hooks_tls: WebhookProvider
) -> None:
    for number in range(20):
        await hooks.send(message(served.url(host="hooks.test"), delivery_id=f"plain-{number}"))
        await hooks_tls.send(
            message(served_tls.url(host="hooks.test"), delivery_id=f"tls-{number}")
        )
    assert len(served.receiver.deliveries) == len(served_tls.receiver.deliveries) == 20
    assert len(served.receiver.connections) == len(served_tls.receiver.connections) == 1


async def test_no_error_text_holds_the_secret_or_the_url_s_credentials(served: Served) -> None:
    url = served.url("/in?token=tok3n", host="hooks.test")
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed = unused.getsockname()[1]
    cases = [
        (provider(), url, Answer(500)),
        (provider(), url, Answer(410)),
        (provider(), url, Answer(302, {"Location": "/elsewhere?token=tok3n"})),
        (provider(timeout_seconds=0.2), url, Answer(hang_seconds=5)),
        (provider(OTHER_SECRET), url, None),
        (provider(allow_networks=[]), url, None),
        (provider(), f"https://user:pa55@hooks.test:{served.port}/in?token=tok3n", None),
        (provider(), "https://nowhere.example/in?token=tok3n", None),
        (provider(), f"http://hooks.test:{closed}/in?token=tok3n", None),
        (provider(), "https://hooks.test:25/in?token=tok3n", None),
    ]
    texts = []
    for adapter, target, answer in cases:
        if answer is not None:
            served.receiver.script("/in", answer)
        with pytest.raises(ProviderError) as failed:
            await adapter.send(message(target))
        await adapter.close()
        texts.append(failed.value.message)
    assert len(set(texts)) == len(cases), texts
    for secret in (SECRET, SECRET.removeprefix("whsec_"), OTHER_SECRET, "tok3n", "pa55", "/in"):
        assert not [text for text in texts if secret in text], secret


def test_a_secret_that_is_not_a_standard_webhooks_secret_is_named_never_shown() -> None:
    hooks_config = config()
    for bad in (
        "not-a-secret-at-all",
        "whsec_@@@@",
        "whsec_" + base64.b64encode(b"short").decode(),
    ):
        with pytest.raises(
            SecretInvalid, match="secret_env: environment variable HOOK_SECRET"
        ) as invalid:
            hooks_config.secrets({"HOOK_SECRET": bad})
        assert bad not in str(invalid.value)
        with pytest.raises(ValueError, match=r"hooks: secret_env \(HOOK_SECRET\)") as refused:
            WebhookProvider("hooks", hooks_config, {"secret_env": bad})
        assert bad not in str(refused.value)
    assert hooks_config.secrets({"HOOK_SECRET": SECRET}) == {"secret_env": SECRET}
    # Unpadded base64, as some generators write it, is the same key.
    unpadded = SECRET.rstrip("=")
    assert unpadded != SECRET
    assert hooks_config.secrets({"HOOK_SECRET": unpadded}) == {"secret_env": unpadded}


def hooks_catalog(networks: str) -> str:
    return f'[providers.hooks]\nkind = "webhook"\nsecret_env = "H"\nallow_networks = [{networks}]\n'


def test_allow_networks_must_be_networks_in_cidr_form() -> None:
    for bad in ("10.0.0.1/8", "example.com", "10.0.0.0/33"):
        refused = rf"providers\.hooks.*allow_networks: '{re.escape(bad)}' is not a network"
        with pytest.raises(CatalogError, match=refused):
            parse_catalog(hooks_catalog(f'"{bad}"'), "hooks.toml")
    hooks = parse_catalog(hooks_catalog('"10.0.0.0/8", "fd00::/8"')).providers["hooks"]
    assert isinstance(hooks, WebhookConfig)
    assert [str(network) for network in hooks.networks] == ["10.0.0.0/8", "fd00::/8"]
