"""The ``smtp`` provider kind: email through an SMTP relay (RFC 5321), with aiosmtplib.

The pool: up to ``pool_size`` connections per process, opened when a send finds none idle,
each carrying one mail transaction at a time and kept open between sends. A broken
connection is closed and forgotten; one idle over ``MAX_IDLE_SECONDS`` is replaced before
use (relays drop idle clients, and one a NAT forgot would only time out). A reused
connection found dead before the message was sent is retried once on a fresh one. TLS is
none, STARTTLS (required: never a fall-back to plain text) or implicit TLS, verified
against ``ca_file`` or the system's store; AUTH when a username is set.

The message it sends is built in ``app.providers.smtp_message``; what the relay's answers
mean for the delivery is decided in ``app.providers.smtp_answers``.

Time limits: opening a connection within ``connect_timeout_seconds``, the whole send
(waiting for a pooled connection included) within ``timeout_seconds``.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import aiosmtplib
import structlog

from app.catalog.providers import SmtpConfig
from app.providers.base import Message
from app.providers.smtp_answers import (
    AUTH,
    CONNECT,
    DATA,
    MAIL,
    RCPT,
    RESET,
    SENT,
    WAITING,
    failure_error,
    reply_error,
)
from app.providers.smtp_message import build_email, message_id, sender_parts, smtp_address

MAX_IDLE_SECONDS: Final = 30.0
# How long close() waits for each relay's answer to QUIT.
QUIT_SECONDS: Final = 1.0

_log = structlog.get_logger(__name__)


@dataclass(slots=True)
class _Progress:
    """How far one send got: decides whether a failure may have delivered the message."""

    stage: str = WAITING


@dataclass(slots=True)
class _Connection:
    smtp: aiosmtplib.SMTP
    last_used: float
    # A refused transaction is left open on the relay: RSET before the next one.
    needs_reset: bool = False


def tls_context(name: str, config: SmtpConfig) -> ssl.SSLContext | None:
    """The client TLS context (``ca_file`` or the system's store), None without TLS."""
    if config.tls == "none":
        return None
    try:
        return ssl.create_default_context(cafile=config.ca_file or None)
    except (OSError, ssl.SSLError) as error:
        raise ValueError(f"providers.{name}.ca_file: cannot load it: {error}") from error


class SmtpProvider:
    """Sends EMAIL messages through one SMTP relay, over a pool of open connections."""

    def __init__(self, name: str, config: SmtpConfig, secrets: Mapping[str, str]) -> None:
        self.name = name
        self._config = config
        self._password = secrets.get("password_env", "")
        self._from_header, self._sender, self._domain = sender_parts(name, config.from_address)
        self._tls = tls_context(name, config)
        self._slots = asyncio.Semaphore(config.pool_size)
        self._idle: list[_Connection] = []
        self._local_hostname = ""
        self._closed = False

    async def send(self, message: Message) -> str:
        """Hand ``message`` to the relay; its Message-ID, or ``ProviderError``."""
        recipient = smtp_address(self.name, message.address)
        msg_id = message_id(message.delivery_id, self._domain)
        payload = build_email(message, recipient, self._from_header, msg_id)
        progress = _Progress()
        try:
            async with asyncio.timeout(self._config.timeout_seconds):
                await self._send(recipient, payload, progress)
        except aiosmtplib.SMTPResponseException as error:
            auth = isinstance(error, aiosmtplib.SMTPAuthenticationError)
            stage = AUTH if auth else progress.stage
            raise reply_error(
                self.name, stage, error.code, error.message, message.address
            ) from error
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as error:
            raise failure_error(self.name, progress.stage, error, message.address) from error
        return msg_id

    async def close(self) -> None:
        """Say QUIT on every idle connection; those in use close when their send ends."""
        self._closed = True
        idle, self._idle = self._idle, []
        await asyncio.gather(*(self._quit(connection.smtp) for connection in idle))

    async def _send(self, recipient: str, payload: bytes, progress: _Progress) -> None:
        async with self._slots:
            connection, reused = await self._checkout(progress)
            try:
                await self._transaction(connection, recipient, payload, progress)
            except (aiosmtplib.SMTPServerDisconnected, ConnectionError):
                if not reused or progress.stage == SENT:
                    raise
                # The relay had closed the idle connection: nothing was sent, so once more on
                # a fresh one.
                _log.info("smtp.connection_dropped", provider=self.name, stage=progress.stage)
                connection = await self._open(progress)
                await self._transaction(connection, recipient, payload, progress)

    async def _checkout(self, progress: _Progress) -> tuple[_Connection, bool]:
        """An idle connection that still looks alive (and whether it was reused), or a new one."""
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if connection.smtp.is_connected and now - connection.last_used < MAX_IDLE_SECONDS:
                return connection, True
            connection.smtp.close()
        return await self._open(progress), False

    async def _open(self, progress: _Progress) -> _Connection:
        progress.stage = CONNECT
        if not self._local_hostname:
            # The name EHLO gives; looked up once, in a thread (it may ask DNS).
            self._local_hostname = await asyncio.to_thread(socket.getfqdn)
        config = self._config
        smtp = aiosmtplib.SMTP(
            hostname=config.host,
            port=config.port,
            username=config.username or None,
            password=self._password if config.username else None,
            local_hostname=self._local_hostname,
            timeout=config.timeout_seconds,
            use_tls=config.tls == "tls",
            start_tls=config.tls == "starttls",
            tls_context=self._tls,
        )
        async with asyncio.timeout(config.connect_timeout_seconds):
            await smtp.connect()
        return _Connection(smtp, time.monotonic())

    async def _transaction(
        self, connection: _Connection, recipient: str, payload: bytes, progress: _Progress
    ) -> None:
        """One mail transaction; the connection goes back to the pool unless it broke."""
        smtp = connection.smtp
        try:
            if connection.needs_reset:
                progress.stage = RESET
                await smtp.rset()
                connection.needs_reset = False
            progress.stage = MAIL
            size = [f"SIZE={len(payload)}"] if smtp.supports_extension("size") else []
            await smtp.mail(self._sender, options=size)
            progress.stage = RCPT
            await smtp.rcpt(recipient)
            progress.stage = DATA
            await self._data(smtp, payload, progress)
        except aiosmtplib.SMTPResponseException:
            connection.needs_reset = True
            self._checkin(connection)
            raise
        except BaseException:
            # Timed out, cancelled or broken: the session's state is unknown.
            smtp.close()
            raise
        self._checkin(connection)

    async def _data(self, smtp: aiosmtplib.SMTP, payload: bytes, progress: _Progress) -> None:
        """DATA in two steps, so a failure is known to come before or after the final "."."""
        reply = await smtp.execute_command(b"DATA")
        if reply.code != 354:
            raise aiosmtplib.SMTPDataError(reply.code, reply.message)
        if smtp.protocol is None:
            raise aiosmtplib.SMTPServerDisconnected("connection lost")
        progress.stage = SENT
        smtp.protocol.write(payload)
        # No time limit of its own: the send's deadline covers it.
        reply = await smtp.protocol.read_response(timeout=None)
        if reply.code != 250:
            raise aiosmtplib.SMTPDataError(reply.code, reply.message)

    def _checkin(self, connection: _Connection) -> None:
        if self._closed or not connection.smtp.is_connected:
            connection.smtp.close()
            return
        connection.last_used = time.monotonic()
        self._idle.append(connection)

    async def _quit(self, smtp: aiosmtplib.SMTP) -> None:
        try:
            async with asyncio.timeout(QUIT_SECONDS):
                await smtp.quit()
        except (aiosmtplib.SMTPException, OSError, TimeoutError):
            pass  # closing anyway
        finally:
            smtp.close()
