"""Whether a URL from a request (a webhook URL, a Web Push endpoint) may be called, and where
to connect for it (no server-side request forgery).

A webhook URL comes from whoever sends a notification, so Clarion must not become their way
into its own network: ``Policy.target`` refuses what is not a plain http(s) URL (user
information, other schemes, hosts written as bare numbers the way ``inet_aton`` reads them,
ports of other protocols), plain http unless the host is in ``allow_http_hosts``, and a host
written as an IP address that may not be called.

``GuardedResolver`` is the name lookup of the webhook adapter's HTTP client (aiohttp's
connector). When the connector opens a connection it asks the resolver, which resolves the
host, refuses if *any* address is not public (loopback, private, link-local and cloud
metadata, CGNAT, multicast, reserved..., and IPv6 forms that embed such an IPv4 address)
unless it is inside ``allow_networks``, and answers with exactly the addresses it checked;
the connector connects to one of those, resolving nothing itself. Check and connect use the
same answer, so a name whose DNS answer changes in between (rebinding) cannot steer the
connection elsewhere. The request still names the host (Host header, TLS SNI and the
certificate checked), and the connector keeps connections per host name, so a connection
verified for one name never carries another's. The connector asks no resolver for a host
that is an IP address: ``target`` checks such a host itself.

The Web Push adapter's HTTP/2 client (``app.providers.http2``, one per push service origin)
asks ``Policy.addresses`` the same question for each connection it opens and connects by
number to what it answers, with TLS for the host name, resolving nothing itself; a host
that is an IP address is answered as it is, already checked by ``target``.

Texts of ``Refused`` and ``Unresolvable`` name the host, never the URL: its path and query
may hold the receiver's tokens.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import SplitResult, urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from app.catalog.providers import GuardedConfig
from streams.core.errors import ClarionError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# Host name and port in, addresses out (as ``getaddrinfo`` gives them); tests inject one.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

DEFAULT_PORTS: Final = {"http": 80, "https": 443}
MAX_URL_LENGTH: Final = 2048
MAX_KEPT_AUTHORITIES: Final = 4096
# RFC 3986 characters only: anything else (spaces, backslashes, non-ASCII) is where URL
# parsers disagree, and a URL one parser reads differently from another is how checks are
# bypassed.
_URL_CHARACTERS = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+")
_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST_NAME = re.compile(rf"{_LABEL}(\.{_LABEL})*\.?")
# A last label that ``inet_aton`` (and so ``getaddrinfo``) reads as a number: "2130706433",
# "0x7f.1" and "127.1" all reach 127.0.0.1.
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")
# Ports whose services read a POST body as commands (SMTP, IRC, ...): the Fetch standard's
# "bad ports", which browsers refuse for the same cross-protocol reason.
BAD_PORTS: Final = frozenset({
    0, 1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95,
    101, 102, 103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179,
    389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601,
    636, 989, 990, 993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000,
    6566, 6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080,
})  # fmt: skip
CGNAT: Final = ipaddress.IPv4Network("100.64.0.0/10")
NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")
IPV4_COMPATIBLE: Final = ipaddress.IPv6Network("::/96")


class Refused(ClarionError):
    """The URL, or an address its host resolves to, may not be called."""


class Unresolvable(ClarionError):
    """The host name did not resolve (in time): nothing was sent."""


@dataclass(frozen=True, slots=True)
class Target:
    """A checked URL: where the request goes and what it asks for."""

    scheme: str
    # Lower case, ASCII; an IPv6 address without its brackets.
    host: str
    port: int
    # Path and query, as the request line sends them.
    path: str

    @property
    def host_header(self) -> str:
        """The Host header: the host as the URL names it, with a port that is not the
        scheme's default."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"

    @property
    def url(self) -> URL:
        """The checked URL, taken as it is written (``encoded``: not quoted again, so the
        request line sends the path and query that were checked)."""
        return URL(f"{self.scheme}://{self.host_header}{self.path}", encoded=True)


async def system_resolver(host: str, port: int) -> list[str]:
    """The host's addresses from the system resolver (``getaddrinfo``, off the loop)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, compatible, 6to4, NAT64), if any:
    a packet to it reaches that IPv4 address, so it is judged as that address."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64 or address in IPV4_COMPATIBLE:
        return ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    return None


def why_not_public(address: IPAddress) -> str | None:
    """Why ``address`` is not a public unicast address, or None if it is one."""
    if isinstance(address, ipaddress.IPv6Address):
        # ::1 and :: lie inside ::/96 too: they are what they are, not IPv4-compatible.
        if address.is_loopback or address.is_unspecified:
            return "a loopback address" if address.is_loopback else "the unspecified address"
        embedded = embedded_ipv4(address)
        if embedded is not None:
            reason = why_not_public(embedded)
            return None if reason is None else f"{reason} (embedded in IPv6)"
        if address.is_site_local:
            return "a site-local address"
    checks = (
        (address.is_loopback, "a loopback address"),
        (address.is_unspecified, "the unspecified address"),
        (address.is_link_local, "a link-local address (as cloud metadata services use)"),
        (address in CGNAT, "a shared (CGNAT) address"),
        (address.is_multicast, "a multicast address"),
        (address.is_reserved, "a reserved address"),
        (address.is_private, "a private address"),
        (not address.is_global, "not a public address"),
    )
    return next((reason for failed, reason in checks if failed), None)


class Policy:
    """What one webhook provider may call, as its configuration says."""

    def __init__(self, config: GuardedConfig, resolver: Resolver = system_resolver) -> None:
        self.allow_http_hosts = frozenset(host.lower() for host in config.allow_http_hosts)
        self.allow_networks: tuple[IPNetwork, ...] = config.networks
        self.resolver = resolver
        # (scheme, authority) -> (host, port), or why it is refused
        self._authorities: dict[tuple[str, str], tuple[str, int] | str] = {}

    def target(self, url: str) -> Target:
        """The checked target of ``url``; ``Refused`` saying why not."""
        if len(url) > MAX_URL_LENGTH or not _URL_CHARACTERS.fullmatch(url):
            raise Refused("the URL is not an ASCII URL of at most 2048 characters")
        try:
            parts = urlsplit(url)
        except ValueError:
            raise Refused("the URL does not parse (host or port)") from None
        scheme = parts.scheme.lower()
        if scheme not in DEFAULT_PORTS:
            raise Refused("the URL must be http or https")
        # Many URLs name the same few hosts (a push service's endpoints): each scheme and
        # authority is judged once, the verdict kept.
        authority = (scheme, parts.netloc)
        verdict = self._authorities.get(authority)
        if verdict is None:
            try:
                verdict = self._authority(parts, scheme)
            except Refused as refused:
                verdict = str(refused)
            if len(self._authorities) >= MAX_KEPT_AUTHORITIES:
                self._authorities.clear()
            self._authorities[authority] = verdict
        if isinstance(verdict, str):
            raise Refused(verdict)
        path = parts.path or "/"
        return Target(scheme, *verdict, f"{path}?{parts.query}" if parts.query else path)

    def _authority(self, parts: SplitResult, scheme: str) -> tuple[str, int]:
        """The host and port of a URL's authority, if it may be called."""
        try:
            port = parts.port
        except ValueError:
            raise Refused("the URL does not parse (host or port)") from None
        if "@" in parts.netloc:
            raise Refused("the URL may not hold user information (user:password@)")
        host = _checked_host(parts.hostname or "", bracketed="[" in parts.netloc)
        port = DEFAULT_PORTS[scheme] if port is None else port
        if port in BAD_PORTS:
            raise Refused(f"port {port} of {host} belongs to another protocol")
        if scheme == "http" and host not in self.allow_http_hosts:
            raise Refused(f"plain http to {host}: use https or list it in allow_http_hosts")
        self._check_literal(host)
        return host, port

    def _check_literal(self, host: str) -> None:
        """``Refused`` if ``host`` is an IP address that may not be called (no resolver is
        asked about one)."""
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return
        reason = self.why_refused(address)
        if reason is not None:
            raise Refused(f"{host} is {reason} (see allow_networks)")

    def why_refused(self, address: IPAddress) -> str | None:
        """Why ``address`` may not be called, or None: public, or inside allow_networks."""
        embedded = embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
        for candidate in (address, embedded):
            if candidate is not None and any(candidate in net for net in self.allow_networks):
                return None
        return why_not_public(address)

    async def addresses(self, host: str, port: int, within: float | None) -> list[str]:
        """Every address of ``host`` (resolved ``within`` seconds), each allowed; ``Refused``
        if any is not, or ``Unresolvable``."""
        try:
            literal: IPAddress | None = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None:
            found: Sequence[str] = [host]
        else:
            try:
                async with asyncio.timeout(within):
                    found = await self.resolver(host, port)
            except TimeoutError:
                raise Unresolvable(f"{host} did not resolve within {within:g} s") from None
            except OSError as error:  # socket.gaierror: no such name, no DNS answer
                raise Unresolvable(f"{host} did not resolve ({error.strerror})") from None
        if not found:
            raise Unresolvable(f"{host} has no address")
        for text in found:
            address = ipaddress.ip_address(text.partition("%")[0])
            reason = self.why_refused(address)
            if reason is not None:
                raise Refused(f"{host} resolves to {address}, {reason} (see allow_networks)")
        return list(found)


def _checked_host(host: str, *, bracketed: bool) -> str:
    """``host`` (lower case, from ``urlsplit``) if it is a name or a canonical IP address."""
    if not host:
        raise Refused("the URL has no host")
    # urlsplit also takes "[v1.x]" (an "IPvFuture"), which would then be looked up as a name.
    if bracketed:
        try:
            address = ipaddress.IPv6Address(host)
        except ValueError:
            raise Refused("the URL's host is not an IPv6 address") from None
        if address.scope_id:
            raise Refused("the URL's host may not name a network interface")
        return str(address)
    if len(host) > 253 or not _HOST_NAME.fullmatch(host):
        raise Refused("the URL's host is not a valid host name")
    if _NUMERIC_LABEL.fullmatch(host.rstrip(".").rpartition(".")[2]):
        # What getaddrinfo would make of "0x7f.1" is not what a reader sees: only the
        # dotted-decimal form is accepted, and then it is checked as the address it is.
        try:
            canonical = str(ipaddress.IPv4Address(host))
        except ValueError:
            canonical = ""
        if canonical != host:
            raise Refused(f"host {host} is a number: write an IPv4 address as a.b.c.d")
    return host


class GuardedResolver(AbstractResolver):
    """Resolves a host name for a connection, answering only addresses ``policy`` allows,
    each checked (``Refused`` or ``Unresolvable`` otherwise), within ``within`` seconds."""

    def __init__(self, policy: Policy, within: float | None) -> None:
        self.policy = policy
        self.within = within

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_UNSPEC
    ) -> list[ResolveResult]:
        """The checked addresses of ``host``, in the resolver's order."""
        addresses = await self.policy.addresses(host, port, self.within)
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=socket.IPPROTO_TCP,
                # Numbers: nothing may look them up again.
                flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
            )
            for address in addresses
        ]

    async def close(self) -> None:
        """Nothing to release: the lookups are the policy's resolver's."""
