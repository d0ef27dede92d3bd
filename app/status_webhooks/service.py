"""The status-webhooks role: one active process, its dispatcher and a sender per producer.

Only the process holding the lease (``streams.core.leases``, ``status_webhook_lease``) reads
``events`` and sends: a second process (a standby, or the next one during a restart) waits
and takes over when the lease runs out, so two processes never send one producer's statuses
side by side, out of order. The active one renews the lease every ``LEASE_RENEW_S``; when it
cannot, it stops everything it runs and goes back to waiting.

While active it rereads the producers' webhooks whenever their version changed (checked
every ``CONFIG_REFRESH_S``): a sender starts for each new one, a changed one is sent to at
its new URL with its new secret from the next POST on, a removed one's sender stops. On
``stop()`` the dispatcher finishes its batch and every sender the POSTs it is making (up to
the POST time limit); the lease is handed back.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.catalog.status_webhooks import StatusWebhooksConfig
from app.providers.ssrf import Resolver, system_resolver
from app.status_webhooks.dispatcher import Dispatcher
from app.status_webhooks.endpoint import Endpoint
from app.status_webhooks.owners import Owners, ReadModelOwners
from app.status_webhooks.sender import Sender
from streams.core.connection import being_cancelled
from streams.core.keys import KeySpace
from streams.core.leases import Lease
from streams.metrics.recorder import MetricsRecorder
from streams.status_webhooks.store import StatusWebhook, StatusWebhookStore

log = structlog.get_logger(__name__)

LEASE_TTL_MS = 6_000
LEASE_RENEW_S = 2.0
CONFIG_REFRESH_S = 1.0


class _Running:
    """A producer's sender, its task and the webhook it was configured with."""

    __slots__ = ("endpoint", "hook", "sender", "task")

    def __init__(self, sender: Sender, endpoint: Endpoint, hook: StatusWebhook) -> None:
        self.sender = sender
        self.endpoint = endpoint
        self.hook = hook
        self.task = asyncio.create_task(sender.run())


class StatusWebhookService:
    """Runs the role while it holds the lease, until ``stop()``."""

    def __init__(
        self,
        redis: Redis,
        keys: KeySpace,
        config: StatusWebhooksConfig,
        *,
        consumer: str,
        dlq_retention_ms: int,
        read_model: ReadModelOwners | None = None,
        recorder: MetricsRecorder | None = None,
        resolver: Resolver = system_resolver,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.config = config
        self.consumer = consumer
        self.dlq_retention_ms = dlq_retention_ms
        self.read_model = read_model
        self.recorder = recorder
        self.resolver = resolver
        self.store = StatusWebhookStore(redis, keys)
        self.owners = Owners(redis, keys, read_model)
        # Unique per process: a restarted one waits for its predecessor's lease to run out.
        holder = f"{consumer}-{os.getpid()}-{secrets.token_hex(4)}"
        self.lease = Lease(redis, keys.status_webhook_lease, holder, LEASE_TTL_MS)
        self.active = asyncio.Event()
        self._running: dict[str, _Running] = {}
        self._wanted: frozenset[str] = frozenset()
        self._version = -1
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """Wait for the lease, run while holding it, again until stopped."""
        try:
            while not self._stopping.is_set():
                if await self._take_lease():
                    await self._run_active()
                else:
                    await _wait(self._stopping, LEASE_RENEW_S)
        finally:
            with contextlib.suppress(RedisError, OSError):
                await self.lease.release()
            if self.read_model is not None:
                await self.read_model.close()

    async def _take_lease(self) -> bool:
        try:
            return await self.lease.take()
        except (RedisError, OSError) as error:
            if being_cancelled():  # the client turned a cancellation into an error
                raise asyncio.CancelledError from error
            log.warning(
                "status_webhooks.redis_unavailable", error=str(error) or type(error).__name__
            )
            return False

    async def _run_active(self) -> None:
        log.info("status_webhooks.active", holder=self.lease.holder)
        self.active.set()
        dispatcher = Dispatcher(
            self.redis, self.keys, self.owners, self.consumer,
            wanted=lambda: self._wanted, wake=self._wake,
        )  # fmt: skip
        self._version = -1
        tasks = {
            asyncio.create_task(self._keep()),
            asyncio.create_task(dispatcher.run()),
            asyncio.create_task(self._stopping.wait()),
        }
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            dispatcher.stop()
            await self._stop_senders(set(self._running))
        finally:
            self.active.clear()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for task in done:  # a bug in one of them ends the process, which is restarted
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]

    async def _keep(self) -> None:
        """Renew the lease and follow configuration changes; return when the lease is lost."""
        loop = asyncio.get_running_loop()
        renewed = loop.time()
        while not self._stopping.is_set() and not being_cancelled():
            try:
                await self._refresh()
                if loop.time() - renewed >= LEASE_RENEW_S:
                    if not await self.lease.take():
                        log.warning("status_webhooks.lease_lost", holder=self.lease.holder)
                        return
                    renewed = loop.time()
            except (RedisError, OSError) as error:
                if being_cancelled():  # the client turned a cancellation into an error
                    raise asyncio.CancelledError from error
                log.warning(
                    "status_webhooks.redis_unavailable", error=str(error) or type(error).__name__
                )
                if (loop.time() - renewed) * 1000 >= LEASE_TTL_MS:
                    log.warning("status_webhooks.lease_lost", holder=self.lease.holder)
                    return
            await _wait(self._stopping, CONFIG_REFRESH_S)

    async def _refresh(self) -> None:
        """Start, reconfigure and stop senders as the webhooks changed."""
        version = await self.store.version()
        ended = {p for p, running in self._running.items() if running.task.done()}
        if version == self._version and not ended:
            return
        hooks = await self.store.all()
        self._version = version
        await self._stop_senders({p for p in self._running if p not in hooks} | ended)
        for producer, hook in hooks.items():
            running = self._running.get(producer)
            if running is None:
                self._start_sender(producer, hook)
            elif running.hook != hook:
                running.sender.configure(hook)
                running.hook = hook
        self._wanted = frozenset(hooks)

    def _start_sender(self, producer: str, hook: StatusWebhook) -> None:
        endpoint = Endpoint(producer, self.config, resolver=self.resolver)
        sender = Sender(
            self.redis, self.keys, producer, endpoint, self.config,
            dlq_retention_ms=self.dlq_retention_ms, recorder=self.recorder,
        )  # fmt: skip
        sender.configure(hook)
        self._running[producer] = _Running(sender, endpoint, hook)
        log.info("status_webhooks.sender_started", producer=producer)

    async def _stop_senders(self, producers: set[str]) -> None:
        """Stop these senders, letting each finish the POSTs it is making."""
        stopping = [self._running.pop(p) for p in producers if p in self._running]
        for running in stopping:
            running.sender.stop()
        tasks = [running.task for running in stopping]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=self.config.timeout_seconds + 1)
            for task in late:
                task.cancel()
            for task, result in zip(
                tasks, await asyncio.gather(*tasks, return_exceptions=True), strict=True
            ):
                if isinstance(result, Exception):
                    log.error(
                        "status_webhooks.sender_failed", exc_info=result, task=task.get_name()
                    )
        for running in stopping:
            await running.endpoint.close()
        self._wanted = self._wanted - producers

    def _wake(self, producer: str) -> None:
        running = self._running.get(producer)
        if running is not None:
            running.sender.wake()


async def _wait(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
