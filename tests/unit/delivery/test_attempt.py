"""One attempt at one leased delivery, without Redis: what a provider's answer means, as the
outcome its decision records, every stored error text masked."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.catalog import Catalog, parse_catalog
from app.delivery.attempt import Attempts
from app.delivery.decide import error_text
from app.delivery.provider_timeouts import ProviderTimeouts
from app.providers.base import Message, ProviderError, Reason
from app.unsubscribe import PATH, OptOut, UnsubscribeLinks, UnsubscribeTokens
from streams.core import codec
from streams.core.events import DeliverySent
from streams.core.vocabulary import Channel, ErrorClass
from streams.delivery import outcomes as delivery_outcomes
from streams.delivery.outcomes import MAX_ERROR_TEXT
from streams.delivery.store import Outcome
from streams.delivery.work_items import WorkItem
from tests.conftest import DIGEST_SECRET, REPO
from tests.unit.delivery_examples import leased

NOW = 100_000


# --- attempts with a provider ----------------------------------------------------------------


class Provider:
    """A provider that answers with ``behaviour`` and remembers each message."""

    def __init__(self, behaviour: Any) -> None:
        self.name = "sandbox"
        self.behaviour = behaviour
        self.messages: list[Message] = []

    async def send(self, message: Message) -> str:
        self.messages.append(message)
        if isinstance(self.behaviour, BaseException):
            raise self.behaviour
        if isinstance(self.behaviour, float):
            await asyncio.sleep(self.behaviour)
        return "provider-id-1"


@pytest.fixture
async def timeouts() -> AsyncIterator[ProviderTimeouts]:
    watchdog = ProviderTimeouts(tick_s=0.01)
    running = asyncio.create_task(watchdog.run())
    yield watchdog
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)


@pytest.fixture
def quick_catalog() -> Catalog:
    """The shipped catalog with a provider that must answer within 0.05 s."""
    text = (REPO / "clarion.toml").read_text()
    assert "timeout_seconds = 10" in text, "clarion.toml changed: update this fixture"
    return parse_catalog(text.replace("timeout_seconds = 10", "timeout_seconds = 0.05"), "t")


async def attempt(
    catalog: Catalog,
    timeouts: ProviderTimeouts,
    provider: Provider,
    links: UnsubscribeLinks | None = None,
    data: dict[str, Any] | None = None,
    **item: Any,
) -> tuple[Outcome, list[WorkItem]]:
    """One attempt of a leased OTP (one attempt made before); the addresses forgotten."""
    forgotten: list[WorkItem] = []

    async def forget(work: WorkItem, provider_name: str) -> None:
        assert provider_name == "sandbox"
        forgotten.append(work)

    attempts = Attempts(catalog, {"sandbox": provider}, timeouts, lambda: NOW, forget, links=links)
    held = leased(attempts=1, data=data or {"code": "4242"}, **item)
    decision, at_ms, _ = await attempts.attempt(held)
    return delivery_outcomes.outcome(held, decision, at_ms), forgotten


async def test_a_send_is_recorded_with_the_providers_message_id(
    quick_catalog: Catalog, timeouts: ProviderTimeouts
) -> None:
    provider = Provider("ok")
    outcome, _ = await attempt(quick_catalog, timeouts, provider)
    assert outcome.status == "SENT"
    assert (outcome.fields["provider"], outcome.fields["provider_message_id"]) == (
        "sandbox", "provider-id-1",
    )  # fmt: skip
    [message] = provider.messages
    # The delivery id is the idempotency key on every attempt; this is the second.
    assert (message.idempotency_key, message.attempt, message.address) == ("d", 2, "+4915112345678")
    assert message.body == "Your code is 4242. It expires in 5 minutes."


async def test_an_sms_reports_its_encoding_and_segments(
    quick_catalog: Catalog, timeouts: ProviderTimeouts
) -> None:
    provider = Provider("ok")
    outcome, _ = await attempt(quick_catalog, timeouts, provider)
    [message] = provider.messages
    assert (message.sms_encoding, message.sms_segments) == ("GSM-7", 1)
    [event] = codec.decode_events(outcome.events)
    assert isinstance(event, DeliverySent)
    assert event.sms_segments == 1


async def test_a_message_that_cannot_be_rendered_fails_without_a_call(
    quick_catalog: Catalog, timeouts: ProviderTimeouts
) -> None:
    provider = Provider("ok")
    outcome, _ = await attempt(quick_catalog, timeouts, provider, notification_type="invoice")
    assert (outcome.status, outcome.fields["error_class"]) == ("FAILED", "PERMANENT")
    assert outcome.fields["last_error"] == "template: type 'invoice' is no longer in the catalog"
    assert provider.messages == []


async def test_no_answer_in_time_is_a_transient_failure_naming_the_limit(
    quick_catalog: Catalog, timeouts: ProviderTimeouts
) -> None:
    outcome, _ = await attempt(quick_catalog, timeouts, Provider(5.0))
    assert (outcome.status, outcome.fields["error_class"]) == ("SCHEDULED", "TRANSIENT")
    assert outcome.fields["last_error"] == "sandbox: no answer within 0.05 s"


async def test_a_providers_failure_keeps_its_class_and_retry_after(
    quick_catalog: Catalog, timeouts: ProviderTimeouts
) -> None:
    limited = ProviderError(ErrorClass.TRANSIENT, "429 from +4915112345678", retry_after=30.0)
    outcome, forgotten = await attempt(quick_catalog, timeouts, Provider(limited))
    assert outcome.status == "SCHEDULED"
    assert outcome.due_ms == NOW + 30_000
    assert outcome.fields["last_error"] == "429 from <phone>"
    assert forgotten == []


async def test_a_dead_address_is_forgotten_and_the_delivery_fails(
    quick_catalog: Catalog, timeouts: ProviderTimeouts
) -> None:
    dead = ProviderError(ErrorClass.PERMANENT, "token invalid", reason=Reason.INVALID_ADDRESS)
    outcome, forgotten = await attempt(quick_catalog, timeouts, Provider(dead))
    assert (outcome.status, outcome.fields["error_class"]) == ("FAILED", "PERMANENT")
    assert [work.delivery_id for work in forgotten] == ["d"]


async def test_an_exception_no_adapter_should_raise_is_a_bug_that_fails_the_delivery(
    quick_catalog: Catalog, timeouts: ProviderTimeouts
) -> None:
    outcome, _ = await attempt(quick_catalog, timeouts, Provider(KeyError("jane@example.com")))
    assert (outcome.status, outcome.fields["error_class"]) == ("FAILED", "BUG")
    assert outcome.fields["last_error"] == "KeyError: '<email>'"
    assert outcome.fields["attempts"] == 2  # a BUG is never retried, whatever the policy


TOKENS = UnsubscribeTokens(DIGEST_SECRET)
LINKS = UnsubscribeLinks("https://notify.example.com", TOKENS, 86400)
EMAIL = {"channel": Channel.EMAIL, "address": "jane@example.com", "recipient_id": "user-7"}


async def test_an_email_of_a_type_one_may_switch_off_carries_its_unsubscribe_link(
    quick_catalog: Catalog, timeouts: ProviderTimeouts
) -> None:
    provider = Provider("ok")
    order = {"order_id": "A-1"}
    await attempt(quick_catalog, timeouts, provider, LINKS, order, **EMAIL,
                  notification_type="order_confirmed")  # fmt: skip
    [message] = provider.messages
    url = message.unsubscribe_url
    assert url.startswith(f"https://notify.example.com{PATH}")
    # The token names this recipient, type and channel, for the TTL from this attempt on.
    assert TOKENS.read(url.rpartition("/")[2], NOW / 1000) == OptOut(
        "user-7", "order_confirmed", Channel.EMAIL, NOW // 1000 + 86400
    )


@pytest.mark.parametrize(
    ("links", "item", "why"),
    [
        (LINKS, EMAIL | {"notification_type": "otp"}, "an OTP cannot be switched off"),
        (LINKS, {"notification_type": "order_confirmed", "channel": Channel.PUSH}, "not email"),
        (None, EMAIL | {"notification_type": "order_confirmed"}, "no CLARION_PUBLIC_URL"),
    ],
)
async def test_other_messages_carry_no_unsubscribe_link(
    quick_catalog: Catalog,
    timeouts: ProviderTimeouts,
    links: UnsubscribeLinks | None,
    item: dict[str, Any],
    why: str,
) -> None:
    provider = Provider("ok")
    data = {"code": "1", "order_id": "A-1"}
    outcome, _ = await attempt(quick_catalog, timeouts, provider, links, data, **item)
    assert outcome.status == "SENT"
    [message] = provider.messages
    assert message.unsubscribe_url == "", why


def test_a_huge_provider_error_is_cut_before_it_is_masked() -> None:
    """A 20,000-character error text once froze a worker's event loop for seconds in masking;
    only what is kept is looked at now, an address across the cut still masked."""
    text = "word " * 98 + " jane@example.com " + "y " * 2_500_000
    started = time.perf_counter()
    kept = error_text(text)
    assert time.perf_counter() - started < 0.02
    assert len(kept) == MAX_ERROR_TEXT
    assert "jane@" not in kept
    assert kept == "word " * 98 + " <email> y"  # the address crossed the cut at 500
