"""A real SMTP relay on 127.0.0.1 for tests and benchmarks: aiosmtpd in a thread of its own.

It behaves like a submission relay: with ``tls="starttls"`` it refuses every command but
EHLO, NOOP, STARTTLS and QUIT before STARTTLS (530) and offers AUTH only after it; with
``tls="tls"`` it speaks TLS from the first byte. Its certificate is issued by a throwaway CA
(trustme) whose certificate is in ``ca_file``. With a ``password`` it requires AUTH before
MAIL (530 5.7.0) and refuses a wrong one (535 5.7.8). ``scripts`` says what it answers for
a recipient address: a refusal at RCPT or at the end of data, silence after the end of data,
or a dropped connection. Every message it took is parsed with the ``email`` package and kept
in ``received`` (set ``parse=False`` for a benchmark: only ``count`` is kept), and
``connections`` counts the SMTP sessions clients opened. A parsed message with malformed
one-click unsubscribe fields (``tests.peers.list_unsubscribe``) is refused at the end of
data (554 5.6.0), as a message no mailbox provider would read as meant.

``python -m tests.peers.smtp [--port N] [--password P]`` runs one (plain text) until stopped
and prints its port on the first line and ``accepted <count>`` on the last, for a benchmark
that wants the relay in a process of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import email
import email.policy
import signal
import socket
import ssl
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any, Literal

import trustme
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from tests.peers import list_unsubscribe
from tests.servers import free_port

HOST = "127.0.0.1"
USERNAME = "clarion"


@dataclass(frozen=True)
class Script:
    """What the relay answers for one recipient address instead of 250."""

    rcpt: str = ""  # the reply to RCPT TO, e.g. "550 5.1.1 <a@b.example>: no such user"
    data: str = ""  # the reply to the final "." (the message is not kept)
    silent_after_data: bool = False  # takes the message, never answers the final "."
    drop_after_data: bool = False  # takes the message, closes the connection instead


@dataclass(frozen=True)
class Received:
    """One message the relay took: its envelope and its parsed content."""

    mail_from: str
    rcpt_tos: tuple[str, ...]
    mail_options: tuple[str, ...]
    message: EmailMessage
    raw: bytes
    text: str = ""
    html: str = ""

    def header(self, name: str) -> str:
        value = self.message[name]
        return "" if value is None else str(value)


def _parse(envelope: Envelope) -> Received:
    raw = envelope.original_content or b""
    message = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    bodies = {}
    for kind in ("plain", "html"):
        part = message.get_body((kind,))
        if part is not None:
            bodies[kind] = part.get_content().replace("\r\n", "\n")
    return Received(
        mail_from=envelope.mail_from or "",
        rcpt_tos=tuple(envelope.rcpt_tos),
        mail_options=tuple(envelope.mail_options),
        message=message,
        raw=raw,
        text=bodies.get("plain", ""),
        html=bodies.get("html", ""),
    )


class _Session(SMTP):
    """One client connection; tells the peer when it opens, greets and closes."""

    def __init__(self, peer: SmtpPeer, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._peer = peer
        self._counted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        with self._peer.changed:
            self._peer.live.add(self)

    def connection_lost(self, error: Exception | None) -> None:
        with self._peer.changed:
            self._peer.live.discard(self)
            self._peer.changed.notify_all()
        super().connection_lost(error)

    def _count(self) -> None:
        # Counted at the first EHLO/HELO: the controller's own start-up probe never says one.
        if not self._counted:
            self._counted = True
            self._peer.connections += 1

    async def smtp_EHLO(self, hostname: str) -> None:
        self._count()
        await super().smtp_EHLO(hostname)

    async def smtp_HELO(self, hostname: str) -> None:
        self._count()
        await super().smtp_HELO(hostname)


class _Controller(Controller):
    def __init__(self, peer: SmtpPeer, **kwargs: Any) -> None:
        self._peer = peer
        super().__init__(peer, **kwargs)

    def factory(self) -> SMTP:
        return _Session(self._peer, self.handler, **self.SMTP_kwargs)


@dataclass
class SmtpPeer:
    """The relay (see the module documentation); use it as a context manager."""

    tls: Literal["none", "starttls", "tls"] = "none"
    password: str = ""
    scripts: dict[str, Script] = field(default_factory=dict)
    parse: bool = True
    port: int = field(default_factory=free_port)
    host: str = HOST
    username: str = USERNAME
    received: list[Received] = field(default_factory=list, repr=False)
    count: int = 0
    connections: int = 0
    # Drop the connection at the next n MAIL commands (a relay that just timed a client out).
    drop_at_mail: int = 0
    live: set[_Session] = field(default_factory=set, repr=False)
    changed: threading.Condition = field(default_factory=threading.Condition, repr=False)
    ca_file: str = ""

    def __post_init__(self) -> None:
        self._workdir = tempfile.TemporaryDirectory(prefix="clarion-smtp-peer-")
        self._controller: _Controller | None = None

    def __enter__(self) -> SmtpPeer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def start(self) -> None:
        server_tls = self._certificate() if self.tls != "none" else None
        self._controller = _Controller(
            self,
            hostname=self.host,
            port=self.port,
            server_hostname="relay.clarion.test",
            ssl_context=server_tls if self.tls == "tls" else None,
            tls_context=server_tls if self.tls == "starttls" else None,
            require_starttls=self.tls == "starttls",
            # Implicit TLS is TLS too, which aiosmtpd cannot tell: AUTH is refused over
            # plain text only when STARTTLS is on offer.
            auth_require_tls=self.tls == "starttls",
            authenticator=self._authenticate,
        )
        self._controller.start()

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None
        self._workdir.cleanup()

    def drop_connections(self) -> int:
        """Close every open client connection, as a relay timing idle clients out does."""
        assert self._controller is not None
        with self.changed:
            sessions = list(self.live)

        def drop() -> None:
            for session in sessions:
                if session.transport is not None:
                    session.transport.close()

        self._controller.loop.call_soon_threadsafe(drop)
        assert self.wait_for_no_connections()
        return len(sessions)

    def wait_for_no_connections(self, timeout: float = 5.0) -> bool:
        """Whether every client connection closed within ``timeout`` seconds (blocks)."""
        with self.changed:
            return self.changed.wait_for(lambda: not self.live, timeout)

    def to(self, address: str) -> list[Received]:
        """The messages received for ``address``."""
        return [r for r in self.received if address in r.rcpt_tos]

    def _certificate(self) -> ssl.SSLContext:
        authority = trustme.CA()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        authority.issue_cert(self.host, "localhost").configure_cert(context)
        path = Path(self._workdir.name) / "ca.pem"
        authority.cert_pem.write_to_path(str(path))
        self.ca_file = str(path)
        return context

    def _authenticate(
        self, _server: SMTP, _session: Session, _envelope: Envelope, _mechanism: str, data: Any
    ) -> AuthResult:
        good = (
            bool(self.password)
            and isinstance(data, LoginPassword)
            and data.login == self.username.encode()
            and data.password == self.password.encode()
        )
        # handled=False: aiosmtpd answers 535 5.7.8, as relays do.
        return AuthResult(success=good, handled=False)

    # aiosmtpd's handler hooks.

    async def handle_MAIL(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        if self.drop_at_mail > 0:
            self.drop_at_mail -= 1
            assert server.transport is not None
            server.transport.close()
            await asyncio.Event().wait()  # cancelled when the connection is lost
        if self.password and not session.authenticated:
            return "530 5.7.0 Authentication required"
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 OK"

    async def handle_RCPT(
        self, _server: SMTP, _session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        script = self.scripts.get(address)
        if script is not None and script.rcpt:
            return script.rcpt
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(options)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, _session: Session, envelope: Envelope) -> str:
        scripts = [self.scripts[a] for a in envelope.rcpt_tos if a in self.scripts]
        refusal = next((s.data for s in scripts if s.data), "")
        if refusal:
            return refusal
        received = _parse(envelope) if self.parse else None
        if received is not None:
            fields = [(name, str(value)) for name, value in received.message.items()]
            for field_name, wrong in list_unsubscribe.problems(fields)[:1]:
                return f"554 5.6.0 {field_name} {wrong}"
            self.received.append(received)
        self.count += 1
        if any(s.drop_after_data for s in scripts):
            assert server.transport is not None
            server.transport.close()
        if any(s.silent_after_data or s.drop_after_data for s in scripts):
            await asyncio.Event().wait()  # never answers; cancelled when the peer stops
        return f"250 2.0.0 Ok: queued as Q{self.count}"


@contextlib.contextmanager
def silent_port() -> Iterator[int]:
    """A port where TCP connections are accepted (by the kernel) but nothing is ever said."""
    with socket.socket() as listener:
        listener.bind((HOST, 0))
        listener.listen(16)
        yield int(listener.getsockname()[1])


def main() -> None:
    """Run a relay that keeps no messages until SIGTERM or SIGINT; print its port first
    and, when stopped, ``accepted <count>``."""
    parser = argparse.ArgumentParser(description="A local SMTP relay")
    parser.add_argument("--port", type=int, default=0, help="default: a free port")
    parser.add_argument("--password", default="", help=f"require AUTH as {USERNAME!r}")
    args = parser.parse_args()
    done = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: done.set())
    with SmtpPeer(parse=False, password=args.password, port=args.port or free_port()) as peer:
        print(peer.port, flush=True)
        done.wait()
        print(f"accepted {peer.count}", flush=True)


if __name__ == "__main__":
    main()
