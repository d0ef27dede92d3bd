"""``AsyncClarion``: the asyncio client, on ``httpx.AsyncClient``; the same calls as
``Clarion``."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from types import TracebackType

import httpx

from clarion_client import calls
from clarion_client.batches import PartProgress, keyed_items, parts, upload_parts
from clarion_client.errors import ConnectionFailedError, error_for
from clarion_client.models import (
    Accepted,
    BatchItem,
    BatchResponse,
    BatchResult,
    CampaignSpec,
    CancellationRequest,
    CancelledNotification,
    InboxToken,
    InboxTokensRevoked,
    KeyCancellation,
    Notification,
    NotificationStatus,
    Progress,
    RecipientDeliveryPage,
    Upload,
    UploadAnswer,
)
from clarion_client.retry import (
    IDEMPOTENT,
    UNREPEATABLE,
    UPLOAD,
    Attempts,
    Retried,
    RetryPolicy,
    retry_after_s,
)


class AsyncClarion:
    """A producer's client: ``AsyncClarion("https://clarion.example.com", api_key)``.

    ``http_client`` replaces the one made here (for proxies, TLS settings or transports);
    it is then the caller's to close. Use as a context manager, or call ``aclose()``.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        retry: RetryPolicy | None = None,
        timeout_s: float = 10.0,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._base_url = calls.checked_base_url(base_url)
        self._api_key = calls.checked_api_key(api_key)
        self._retry = retry or RetryPolicy()
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(timeout=timeout_s)

    async def send(
        self, notification: Notification, *, idempotency_key: str | None = None
    ) -> Accepted:
        """Send one notification; the same ``idempotency_key`` and body again answer the same
        id. Without a key a new one is made for this call (and reused by its retries)."""
        key = idempotency_key if idempotency_key is not None else calls.new_key()
        body = calls.encode(notification)
        response = await self._call("POST", calls.NOTIFICATIONS, body=body, key=key)
        return calls.decoded(response, Accepted)

    async def send_batch(
        self, notifications: Sequence[Notification], *, idempotency_key: str | None = None
    ) -> list[BatchResult]:
        """Send any number of notifications, ``BATCH_LIMIT`` per request; one result per
        notification, in order. Item ``i`` is sent under ``<idempotency_key>:<i>`` (a
        ``BatchItem`` under its own key): give a key to make the whole call safe to repeat."""
        base_key = idempotency_key if idempotency_key is not None else calls.new_key()
        results: list[BatchResult] = []
        for part in parts(keyed_items(notifications, base_key)):
            results += await self._send_part(part)
        return results

    async def get_notification(self, notification_id: str) -> NotificationStatus:
        """A notification and each delivery's current state (NotFoundError for an id that is
        unknown, or another producer's)."""
        response = await self._call("GET", calls.status_path(notification_id))
        return calls.decoded(response, NotificationStatus)

    async def cancel(self, notification_id: str) -> CancelledNotification:
        """Cancel every delivery of a notification that has not been handed to a provider
        (NotFoundError for an unknown id, or another producer's). Repeating it is harmless:
        it answers the same. A delivery ``SENDING`` in the answer was being handed to the
        provider at that moment: it may go, but a retry of it will not."""
        response = await self._call("POST", calls.cancel_path(notification_id))
        return calls.decoded(response, CancelledNotification)

    async def cancel_by_key(self, key: str) -> KeyCancellation:
        """Cancel every pending delivery of the notifications sent with ``cancellation_key``
        ``key`` (yours only; none found: an answer of zeros). Repeating it is harmless."""
        body = calls.encode(CancellationRequest(key=key))
        response = await self._call("POST", calls.CANCELLATIONS, body=body)
        return calls.decoded(response, KeyCancellation)

    async def recipient_deliveries(
        self,
        recipient_id: str,
        *,
        status: str | None = None,
        channel: str | None = None,
        notification_type: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> RecipientDeliveryPage:
        """What was sent to the recipient, by every producer (scope ``recipients``): one page
        of its deliveries, newest change first, narrowed by the filters given (``since`` and
        ``until`` bound ``updated_at``; ``limit`` 1 to 500, the server's default 50). Pass the
        page's ``next_cursor`` as ``cursor`` for the next one."""
        path = calls.recipient_deliveries_path(
            recipient_id, status=status, channel=channel, notification_type=notification_type,
            since=since, until=until, limit=limit, cursor=cursor,
        )  # fmt: skip
        response = await self._call("GET", path)
        return calls.decoded(response, RecipientDeliveryPage)

    async def create_campaign(self, spec: CampaignSpec) -> Progress:
        """Create a draft campaign. It takes no idempotency key, so it is tried again only
        when the connection was never made."""
        body = calls.encode(spec)
        response = await self._call("POST", calls.CAMPAIGNS, body=body, retried=UNREPEATABLE)
        return calls.decoded(response, Progress)

    async def upload_recipients(
        self, campaign_id: str, recipients: Sequence[str], *, idempotency_key: str | None = None
    ) -> UploadAnswer:
        """Add recipient ids to a draft, ``UPLOAD_LIMIT`` per request, part ``p`` under
        ``<idempotency_key>:<p>``: the same upload again adds nobody twice. The answer: how
        many all parts added, and the audience after the last."""
        if not recipients:
            raise ValueError("recipients: at least one recipient id is required")
        base_key = idempotency_key if idempotency_key is not None else calls.new_key()
        path = calls.campaign_path(campaign_id, "recipients")
        added = audience = 0
        for key, ids in upload_parts(recipients, base_key):
            body = calls.encode(Upload(recipients=ids))
            response = await self._call("POST", path, body=body, key=key, retried=UPLOAD)
            answer = calls.decoded(response, UploadAnswer)
            added, audience = added + answer.added, answer.audience
        return UploadAnswer(added=added, audience=audience)

    async def start_campaign(self, campaign_id: str) -> Progress:
        """Start a draft: generated now, or from its ``start_at`` (tried again only when the
        connection was never made; ConflictError when it is no draft)."""
        path = calls.campaign_path(campaign_id, "start")
        response = await self._call("POST", path, retried=UNREPEATABLE)
        return calls.decoded(response, Progress)

    async def get_campaign(self, campaign_id: str) -> Progress:
        """A campaign's progress."""
        response = await self._call("GET", calls.campaign_path(campaign_id))
        return calls.decoded(response, Progress)

    async def create_inbox_token(
        self, recipient_id: str, *, ttl_seconds: int | None = None
    ) -> InboxToken:
        """A token for the recipient's app (scope ``recipients``): it reads that recipient's
        inbox until it expires (``ttl_seconds``, 60 s to 12 h; default the server's) or is
        revoked. Each call makes a new one; the earlier ones keep working."""
        body = calls.encode({"ttl_seconds": ttl_seconds} if ttl_seconds is not None else {})
        path = calls.inbox_tokens_path(recipient_id)
        response = await self._call("POST", path, body=body)
        return calls.decoded(response, InboxToken)

    async def revoke_inbox_tokens(self, recipient_id: str) -> InboxTokensRevoked:
        """Refuse every token of the recipient made until now (scope ``recipients``), e.g.
        when it signs out everywhere: its apps' requests are 401 and their open streams end.
        Tokens made afterwards work. Repeating it is harmless."""
        response = await self._call("POST", calls.inbox_tokens_path(recipient_id, "revoke"))
        return calls.decoded(response, InboxTokensRevoked)

    async def aclose(self) -> None:
        """Close the connections, unless the caller gave the HTTP client."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClarion:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _send_part(self, items: list[BatchItem]) -> list[BatchResult]:
        """One request's worth of items; those answered 409 or 503 are sent again while the
        call's attempts last."""
        progress = PartProgress(items)
        attempts = Attempts(self._retry)
        while True:
            response = await self._call(
                "POST", calls.BATCH, body=progress.body(), attempts=attempts
            )
            progress.record(calls.decoded(response, BatchResponse).results)
            delay = None if progress.settled else attempts.next_delay(None)
            if delay is None:
                return progress.results()
            await asyncio.sleep(delay)

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        key: str | None = None,
        attempts: Attempts | None = None,
        retried: Retried = IDEMPOTENT,
    ) -> httpx.Response:
        """The success answer to one call, tried again after what ``retried`` names, as
        often as the policy lets; else its error."""
        attempts = attempts or Attempts(self._retry)
        headers = calls.headers(self._api_key, key, json_body=body is not None)
        url = self._base_url + path
        while True:
            try:
                response = await self._http.request(method, url, content=body, headers=headers)
            except httpx.TransportError as failure:
                again = isinstance(failure, retried.failures)
                delay = attempts.next_delay(None) if again else None
                if delay is None:
                    raise ConnectionFailedError(f"{method} {url}: {failure!r}") from failure
            else:
                if response.is_success:
                    return response
                wait = retry_after_s(response)
                again = retried.again(response.status_code, wait)
                delay = attempts.next_delay(wait) if again else None
                if delay is None:
                    raise error_for(response.status_code, response.content, wait)
            await asyncio.sleep(delay)
