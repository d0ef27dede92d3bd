"""The ``smtp`` provider kind: email through an SMTP relay (RFC 5321), with aiosmtplib.

The pool: up to ``pool_size`` connections per process, opened when a send finds none idle,
each carrying one mail transaction at a time and kept open between sends. A broken
connection is closed and forgotten; one idle over ``MAX_IDLE_SECONDS`` is replaced before
use (relays drop idle clients, and one a NAT forgot would only time out). A reused
connection found dead before the message was sent is retried once on a fresh one. TLS is
none, STARTTLS (required: never a fall-back to plain text) or implicit TLS, verified
against ``ca_file`` or the system's store; AUTH when a username is set.

The message: From, To, Subject, Date, ``Message-ID``, ``X-Clarion-Delivery-Id`` (and RFC
8058's ``List-Unsubscribe`` and ``List-Unsubscribe-Post`` given an unsubscribe link), text
and HTML as multipart/alternative (text alone without HTML), quoted-printable UTF-8. It is
built with the ``email`` package's compat32 API (``email.mime``): the default policy parses
and refolds every header, 1 ms per message here against 0.15 ms. The Message-ID,
``<{delivery id}@{domain of from}>``, is the same on every attempt, so a copy sent again
after an ambiguous failure can be recognised; ``send`` returns it. Not the relay's queue
id: its final reply has no standard shape.

Answers (RFC 5321 replies, RFC 3463 enhanced codes):

- Failing to connect, greet, STARTTLS or AUTH (a refused port, a name that does not
  resolve, a timeout, an untrusted certificate, a wrong password; and 530 or 538, "AUTH or
  TLS required", at any stage): TRANSIENT and not accepted. It concerns the relay, not the
  message: a backup provider may send meanwhile, the circuit breaker opens, and an
  operator's fix lets the retries through. Failing every delivery for good would lose all.
- A reply at MAIL, RCPT or the end of data: 4xx TRANSIENT, 5xx PERMANENT. The reason is
  INVALID_ADDRESS for 550/551/553 at RCPT or a 5.1.x code about the recipient, REJECTED for
  5.7.x (policy: the sender or the content, not the mailbox) and any other 5xx. A refusal
  is never accepted: a relay takes responsibility only with its 250 to the end of data
  (RFC 5321 section 6.1).
- No answer to the final "." (a timeout, a dropped connection): TRANSIENT, possibly
  accepted: the relay may have queued the message.

Time limits: opening a connection within ``connect_timeout_seconds``, the whole send
(waiting for a pooled connection included) within ``timeout_seconds``. Error texts carry
the reply code and the relay's text, cut short, with the address masked.
"""

from __future__ import annotations

import asyncio
import email.charset
import email.policy
import email.utils
import random
import re
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.mime.base import MIMEBase
from email.mime.multipart import MIMEMultipart
from email.mime.nonmultipart import MIMENonMultipart
from typing import Final

import aiosmtplib
import structlog

from app.catalog.providers import SmtpConfig
from app.logging import mask
from app.providers.base import DELIVERY_HEADER, Message, ProviderError, Reason
from streams.core.vocabulary import ErrorClass

MAX_IDLE_SECONDS: Final = 30.0
MAX_QUOTED_CHARS: Final = 200
# How long close() waits for each relay's answer to QUIT.
QUIT_SECONDS: Final = 1.0
_WAITING = "waiting for a connection"
_CONNECT = "connect"
_AUTH = "AUTH"
_RESET = "RSET"
_MAIL = "MAIL"
_RCPT = "RCPT"
_DATA = "DATA"
_SENT = "end of data"
_SESSION_STAGES = frozenset({_WAITING, _CONNECT, _AUTH, _RESET})
# AUTH or STARTTLS required (RFC 4954, RFC 3207): the session's set-up, whatever the stage.
_SESSION_CODES = frozenset({530, 538})

_log = structlog.get_logger(__name__)


class _Policy(email.policy.Compat32):
    """compat32, but a short printable ASCII header is written as it is: what its folding
    would write too, without its cost (two thirds of building a message). So is a longer one
    without a space (a link), within RFC 5322's 998 octets a line: compat32 would only move it
    whole to a line of its own, and a reader would see it with a space in front."""

    def fold_binary(self, name: str, value: str) -> bytes:
        fits = len(name) + len(value) < (76 if " " in value else 997)
        if value.isascii() and value.isprintable() and fits:
            return f"{name}: {value}{self.linesep}".encode("ascii")
        return super().fold_binary(name, value)


_POLICY: Final = _Policy(linesep="\r\n")
_UTF8_QP: Final = email.charset.Charset("utf-8")
_UTF8_QP.body_encoding = email.charset.QP
# What SMTP can carry without SMTPUTF8: a dot-atom local part (RFC 5322 atext) and a
# host name. Anything else (quotes, commas, controls) is refused before it can reach a header.
_LOCAL_PART = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}")
_DOMAIN = re.compile(r"[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_NOT_ATEXT = re.compile(r"[^A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]")
# Every character str.splitlines() breaks at: compat32 breaks a header's line there, and
# raises if what follows looks like a header of its own (a subject could smuggle one in).
_LINE_BREAKS = re.compile("[\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]+")
_LEADING_DOT = re.compile(rb"^\.", re.MULTILINE)
_ENHANCED = re.compile(r"([245])\.(\d{1,3})\.(\d{1,3})(?!\S)")


@dataclass(slots=True)
class _Progress:
    """How far one send got: decides whether a failure may have delivered the message."""

    stage: str = _WAITING


@dataclass(slots=True)
class _Connection:
    smtp: aiosmtplib.SMTP
    last_used: float
    # A refused transaction is left open on the relay: RSET before the next one.
    needs_reset: bool = False


def message_id(delivery_id: str, domain: str) -> str:
    """The Message-ID of every attempt of a delivery: ``<{delivery id}@{domain}>``."""
    return f"<{_NOT_ATEXT.sub('-', delivery_id)}@{domain}>"


def smtp_address(name: str, address: str) -> str:
    """``address`` as an SMTP envelope takes it (IDNA domain); ``ProviderError`` if it cannot."""
    local, at, domain = address.rpartition("@")
    if not domain.isascii():
        try:
            domain = domain.encode("idna").decode("ascii")
        except UnicodeError:
            domain = ""
    if not local.isascii():
        raise ProviderError(
            ErrorClass.PERMANENT, f"{name}: a non-ASCII local part needs SMTPUTF8, not sent",
            reason=Reason.REJECTED, not_accepted=True,
        )  # fmt: skip
    if not (at and _LOCAL_PART.fullmatch(local) and _DOMAIN.fullmatch(domain)):
        raise ProviderError(
            ErrorClass.PERMANENT, f"{name}: the address is not one SMTP can carry",
            reason=Reason.INVALID_ADDRESS, not_accepted=True,
        )  # fmt: skip
    return f"{local}@{domain}"


def _text_part(text: str, subtype: str) -> MIMENonMultipart:
    part = MIMENonMultipart("text", subtype, policy=_POLICY, charset="utf-8")
    part.set_payload(text, _UTF8_QP)
    return part


def build_email(message: Message, recipient: str, sender: str, msg_id: str) -> bytes:
    """The message as the DATA command carries it: CRLF lines, dot-stuffed, ended by "."."""
    top: MIMEBase
    if message.html:
        # Quoted-printable never has "=_" in it: no part can contain this boundary.
        top = MIMEMultipart(
            "alternative", boundary=f"=_{random.getrandbits(96):024x}", policy=_POLICY
        )
        for text, subtype in ((message.body, "plain"), (message.html, "html")):
            part = _text_part(text, subtype)
            del part["MIME-Version"]  # once, at the top
            top.attach(part)
    else:
        top = _text_part(message.body, "plain")
    top["From"] = sender
    top["To"] = recipient
    # compat32 writes a non-ASCII value as RFC 2047 encoded words.
    top["Subject"] = _LINE_BREAKS.sub(" ", message.title)
    top["Date"] = email.utils.formatdate(usegmt=True)
    top["Message-ID"] = msg_id
    top[DELIVERY_HEADER] = _NOT_ATEXT.sub("-", message.delivery_id)
    for name, value in message.unsubscribe_headers.items():
        top[name] = value
    content = top.as_bytes()
    if not content.endswith(b"\r\n"):
        content += b"\r\n"
    return _LEADING_DOT.sub(b"..", content) + b".\r\n"


def quoted(text: str, address: str) -> str:
    """A relay's text fit for an error: one line, the address and look-alikes masked, short."""
    text = " ".join(text.split())
    if address:
        text = re.sub(re.escape(address), "<address>", text, flags=re.IGNORECASE)
    text = mask(text)
    return text if len(text) <= MAX_QUOTED_CHARS else text[:MAX_QUOTED_CHARS] + "..."


def reply_error(name: str, stage: str, code: int, text: str, address: str) -> ProviderError:
    """The ``ProviderError`` for a relay's refusal ``code`` at ``stage``."""
    said = f"{name}: {stage} refused: {code} {quoted(text, address)}"
    if not 400 <= code < 600:
        # Not a refusal but a garbled or unexpected answer: after the final "." it may be
        # the relay's acceptance, lost.
        return ProviderError(ErrorClass.TRANSIENT, said, not_accepted=stage != _SENT)
    if code < 500 or stage in _SESSION_STAGES or code in _SESSION_CODES:
        return ProviderError(ErrorClass.TRANSIENT, said, not_accepted=True)
    enhanced = _ENHANCED.match(text.strip())
    subject, detail = enhanced.group(2, 3) if enhanced and enhanced[1] == "5" else ("", "")
    # 5.1.x is about addresses (5.1.7 and 5.1.8: the sender's); 5.7.x is policy.
    senders = subject == "1" and detail in ("7", "8")
    by_code = stage == _RCPT and code in (550, 551, 553) and subject != "7"
    invalid = stage != _MAIL and not senders and (subject == "1" or by_code)
    reason = Reason.INVALID_ADDRESS if invalid else Reason.REJECTED
    return ProviderError(ErrorClass.PERMANENT, said, reason=reason, not_accepted=True)


def failure_error(name: str, stage: str, error: BaseException, address: str) -> ProviderError:
    """The ``ProviderError`` for a failure without a reply (timeout, network, TLS)."""
    causes = [error, error.__cause__, error.__context__]
    tls = next((c for c in causes if isinstance(c, ssl.SSLError)), None)
    if tls is not None:
        detail = getattr(tls, "verify_message", "") or tls.reason or type(tls).__name__
        what = f"TLS handshake failed: {detail}"
    elif any(isinstance(c, TimeoutError) for c in causes):
        what = "timed out"
    elif any(isinstance(c, ConnectionRefusedError) for c in causes):
        what = "connection refused"
    elif any(isinstance(c, socket.gaierror) for c in causes):
        what = "the host name does not resolve"
    elif isinstance(error, aiosmtplib.SMTPServerDisconnected | ConnectionError):
        what = "connection lost"
    elif isinstance(error, aiosmtplib.SMTPException):
        what = quoted(error.message, address)
    else:
        what = type(error).__name__
    if stage == _SENT:
        return ProviderError(
            ErrorClass.TRANSIENT, f"{name}: no answer to the end of data ({what}): the relay "
            "may have queued the message",
        )  # fmt: skip
    return ProviderError(ErrorClass.TRANSIENT, f"{name}: {stage}: {what}", not_accepted=True)


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
        display, self._sender = email.utils.parseaddr(config.from_address)
        local, _, self._domain = self._sender.rpartition("@")
        good = _LOCAL_PART.fullmatch(local) and _DOMAIN.fullmatch(self._domain)
        if not good or not config.from_address.isprintable():
            raise ValueError(f"providers.{name}.from: not an email address SMTP can carry")
        # Encoded once: a display name may need RFC 2047.
        self._from_header = email.utils.formataddr((display, self._sender))
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
            stage = _AUTH if auth else progress.stage
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
                if not reused or progress.stage == _SENT:
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
        progress.stage = _CONNECT
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
                progress.stage = _RESET
                await smtp.rset()
                connection.needs_reset = False
            progress.stage = _MAIL
            size = [f"SIZE={len(payload)}"] if smtp.supports_extension("size") else []
            await smtp.mail(self._sender, options=size)
            progress.stage = _RCPT
            await smtp.rcpt(recipient)
            progress.stage = _DATA
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
        progress.stage = _SENT
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
