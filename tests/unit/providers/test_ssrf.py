"""What a webhook may call: URLs refused before any lookup (hosts written as addresses
included), addresses refused after it, the networks an operator allows, and connections made
only to the addresses just checked (so a DNS answer that changes cannot redirect them),
through the HTTP client the webhook adapter uses."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence

import pytest
from yarl import URL

from app.catalog.providers import WebhookConfig
from app.providers import http
from app.providers.ssrf import GuardedResolver, Policy, Refused, Target, Unresolvable

PUBLIC = "93.184.215.14"


def policy(addresses: Sequence[str] = (PUBLIC,), **config: object) -> Policy:
    async def resolve(host: str, port: int) -> Sequence[str]:
        return addresses

    return Policy(WebhookConfig(secret_env="HOOK_SECRET", **config), resolve)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/", "must be http or https"),
        ("file:///etc/passwd", "must be http or https"),
        ("javascript:alert(1)", "must be http or https"),
        ("https://user:hunter2@example.com/", "user information"),
        ("https://example.com@evil.test/", "user information"),
        ("https:///hook", "has no host"),
        ("https://", "has no host"),
        ("https://exa mple.com/", "not an ASCII URL"),
        ("https://example.com\\@evil.test/", "not an ASCII URL"),
        ("https://bücher.example/", "not an ASCII URL"),
        ("https://example.com/\n", "not an ASCII URL"),
        ("https://example.com/" + "a" * 2048, "not an ASCII URL"),
        ("https://example.com:99999/", "does not parse"),
        ("https://example.com:8x/", "does not parse"),
        ("https://[v1.fe]/", "not an IPv6 address"),
        ("https://[127.0.0.1]/", "does not parse"),
        ("https://[fe80::1%25eth0]/", "network interface"),
        ("https://exam%70le.com/", "not a valid host name"),
        ("https://-bad-.example/", "not a valid host name"),
        ("https://example.com:25/", "port 25 of example.com belongs to another protocol"),
        ("https://example.com:6667/", "another protocol"),
        ("http://example.com/", "plain http to example.com"),
        ("http://2130706433/", "host 2130706433 is a number"),
        ("https://0x7f.1/", "is a number"),
        ("https://0x7f000001/", "is a number"),
        ("https://017700000001/", "is a number"),
        ("https://127.1/", "is a number"),
        ("https://127.0.0.01/", "is a number"),
        ("https://1.2.3.4.5/", "is a number"),
        ("https://hooks.0x10/", "is a number"),
    ],
)
def test_a_url_that_is_not_a_plain_https_url_is_refused_saying_why(url: str, why: str) -> None:
    with pytest.raises(Refused, match=why) as refused:
        policy().target(url)
    assert "hunter2" not in str(refused.value)


@pytest.mark.parametrize(
    ("url", "target", "host_header"),
    [
        ("https://example.com/hook?token=1", ("https", "example.com", 443, "/hook?token=1"),
         "example.com"),
        ("HTTPS://Example.COM:8443", ("https", "example.com", 8443, "/"), "example.com:8443"),
        ("https://example.com?x=1#part", ("https", "example.com", 443, "/?x=1"), "example.com"),
        ("https://93.184.215.14/a", ("https", PUBLIC, 443, "/a"), PUBLIC),
        ("https://[2606:4700:0::1]:8443/", ("https", "2606:4700::1", 8443, "/"),
         "[2606:4700::1]:8443"),
        ("http://hooks.internal/in", ("http", "hooks.internal", 80, "/in"), "hooks.internal"),
        ("http://hooks.internal:8080/", ("http", "hooks.internal", 8080, "/"),
         "hooks.internal:8080"),
    ],
)  # fmt: skip
def test_a_plain_url_gives_its_target(
    url: str, target: tuple[str, str, int, str], host_header: str
) -> None:
    checked = policy(allow_http_hosts=["Hooks.Internal"]).target(url)
    assert checked == Target(*target)
    assert checked.host_header == host_header


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("100.64.0.1", "CGNAT"),
        ("100.127.255.254", "CGNAT"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("192.0.2.1", "private"),  # documentation: never a real host
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("fec0::1", "site-local"),
        ("ff02::1", "multicast"),
        ("2001:db8::1", "private"),
        ("::ffff:127.0.0.1", r"loopback address \(embedded in IPv6\)"),
        ("::ffff:169.254.169.254", r"link-local .* \(embedded in IPv6\)"),
        ("::ffff:10.0.0.1", r"private address \(embedded in IPv6\)"),
        ("::127.0.0.1", r"loopback address \(embedded in IPv6\)"),  # IPv4-compatible
        ("64:ff9b::a00:1", r"private address \(embedded in IPv6\)"),  # NAT64 of 10.0.0.1
        ("64:ff9b::7f00:1", r"loopback address \(embedded in IPv6\)"),
        ("2002:a9fe:a9fe::1", r"link-local .* \(embedded in IPv6\)"),  # 6to4 of the metadata
        ("2002:7f00:1::", r"loopback address \(embedded in IPv6\)"),
    ],
)
async def test_a_host_resolving_to_an_address_that_is_not_public_is_refused(
    address: str, why: str
) -> None:
    with pytest.raises(Refused, match=why) as refused:
        await policy([address]).addresses("hooks.example", 443, 1.0)
    shown = ipaddress.ip_address(address.partition("%")[0])
    assert str(refused.value).startswith(f"hooks.example resolves to {shown}, ")


@pytest.mark.parametrize("address", [PUBLIC, "2606:4700::1", "::ffff:8.8.8.8", "64:ff9b::808:808"])
async def test_a_public_address_is_allowed(address: str) -> None:
    assert await policy([address]).addresses("hooks.example", 443, 1.0) == [address]


async def test_one_address_that_is_not_public_among_several_refuses_them_all() -> None:
    with pytest.raises(Refused, match=r"10\.0\.0\.1"):
        await policy([PUBLIC, "2606:4700::1", "10.0.0.1"]).addresses("hooks.example", 443, 1.0)


async def test_allow_networks_lets_those_addresses_through_and_no_others() -> None:
    allowing = policy(allow_networks=["127.0.0.0/8", "fd00::/8"])
    for address in ("127.0.0.1", "::ffff:127.0.0.1", "fd00::5"):
        assert allowing.why_refused(ipaddress.ip_address(address)) is None
    for address in ("10.0.0.1", "169.254.169.254", "::1"):
        assert allowing.why_refused(ipaddress.ip_address(address)) is not None


async def test_an_ip_literal_is_checked_without_a_lookup() -> None:
    asked: list[str] = []

    async def resolve(host: str, port: int) -> Sequence[str]:
        asked.append(host)
        return [PUBLIC]

    literal = Policy(WebhookConfig(secret_env="HOOK_SECRET"), resolve)
    with pytest.raises(Refused, match="loopback"):
        await literal.addresses("127.0.0.1", 443, 1.0)
    assert await literal.addresses(PUBLIC, 443, 1.0) == [PUBLIC]
    assert asked == []


async def test_localhost_through_the_system_resolver_is_refused() -> None:
    with pytest.raises(Refused, match="loopback"):
        await Policy(WebhookConfig(secret_env="HOOK_SECRET")).addresses("localhost", 443, 5.0)


async def test_a_name_that_does_not_resolve_or_not_in_time_is_unresolvable() -> None:
    async def missing(host: str, port: int) -> Sequence[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    async def slow(host: str, port: int) -> Sequence[str]:
        await asyncio.sleep(10)
        return [PUBLIC]

    async def empty(host: str, port: int) -> Sequence[str]:
        return []

    config = WebhookConfig(secret_env="HOOK_SECRET")
    with pytest.raises(Unresolvable, match=r"did not resolve \(Name or service not known\)"):
        await Policy(config, missing).addresses("nowhere.example", 443, 1.0)
    with pytest.raises(Unresolvable, match=r"did not resolve within 0\.05 s"):
        await Policy(config, slow).addresses("slow.example", 443, 0.05)
    with pytest.raises(Unresolvable, match="has no address"):
        await Policy(config, empty).addresses("empty.example", 443, 1.0)


@pytest.mark.parametrize(
    ("url", "host", "why"),
    [
        ("https://127.0.0.1/", "127.0.0.1", "127.0.0.1 is a loopback address"),
        ("https://169.254.169.254/latest/meta-data", "169.254.169.254",
         "169.254.169.254 is a link-local address"),
        ("https://10.0.0.1:8443/", "10.0.0.1", "10.0.0.1 is a private address"),
        ("https://[::1]/", "::1", "::1 is a loopback address"),
        ("https://[::ffff:10.0.0.1]/", "::ffff:a00:1",
         r"::ffff:a00:1 is a private address \(embedded in IPv6\)"),
    ],
)  # fmt: skip
def test_a_host_written_as_an_address_that_is_not_public_is_refused(
    url: str, host: str, why: str
) -> None:
    # No resolver is asked about an IP address: the URL's check is the only one.
    with pytest.raises(Refused, match=why):
        policy().target(url)
    allowing = policy(allow_networks=["10.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "::1/128"])
    assert allowing.target(url).host == host


class Receiver:
    """An HTTP/1.1 server on 127.0.0.1 answering 200 to every request, keeping connections
    alive; counts the connections it accepted."""

    def __init__(self) -> None:
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Receiver:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
                     if line.startswith(b"content-length:")),
                    0,
                )  # fmt: skip
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


class Answers:
    """A resolver that gives its answers in turn and counts the lookups."""

    def __init__(self, *answers: Sequence[str]) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append(host)
        return self.answers.pop(0)


def guarded(answers: Answers, **config: object) -> http.Client:
    settings = WebhookConfig(secret_env="HOOK_SECRET", **config)  # type: ignore[arg-type]
    return http.Client("hooks", settings, resolver=GuardedResolver(Policy(settings, answers), 1.0))


async def post(client: http.Client, url: str) -> int:
    return (await client.post(URL(url), data=b"{}", headers={})).status


async def test_the_guard_answers_only_checked_addresses_as_numbers() -> None:
    guard = GuardedResolver(policy([PUBLIC, "2606:4700::1"]), 1.0)
    found = await guard.resolve("hooks.example", 443)
    assert [(r["hostname"], r["host"], r["port"], r["family"]) for r in found] == [
        ("hooks.example", PUBLIC, 443, socket.AF_INET),
        ("hooks.example", "2606:4700::1", 443, socket.AF_INET6),
    ]
    assert all(r["flags"] & socket.AI_NUMERICHOST for r in found)
    with pytest.raises(Refused, match=r"10\.0\.0\.1"):
        await GuardedResolver(policy([PUBLIC, "10.0.0.1"]), 1.0).resolve("hooks.example", 443)


async def test_a_dns_answer_that_changes_after_the_check_cannot_redirect_a_connection() -> None:
    # rebind.test resolves nowhere but through the guard: a call that reaches the receiver
    # was connected to the address the guard checked, with no lookup of its own.
    answers = Answers(["127.0.0.1"], ["10.0.0.1"])
    async with Receiver() as receiver:
        client = guarded(answers, allow_http_hosts=["rebind.test"], allow_networks=["127.0.0.0/8"])
        url = f"http://rebind.test:{receiver.port}/in"
        assert [await post(client, url) for _ in range(3)] == [200, 200, 200]
        assert (answers.asked, receiver.connections) == (["rebind.test"], 1)
        await client.close()  # the next call needs a new connection, so a new lookup
        with pytest.raises(Refused, match=r"rebind\.test resolves to 10\.0\.0\.1"):
            await post(client, url)
        await client.close()
    # One lookup per connection, checked and used as is: 10.0.0.1 was never dialled.
    assert (answers.asked, receiver.connections) == (["rebind.test"] * 2, 1)


async def test_the_next_checked_address_is_tried_when_one_refuses() -> None:
    # Nothing listens on 127.0.0.2: that connection is refused, then 127.0.0.1 answers.
    answers = Answers(["127.0.0.2", "127.0.0.1"])
    async with Receiver() as receiver:
        client = guarded(answers, allow_http_hosts=["hooks.test"], allow_networks=["127.0.0.0/8"])
        assert await post(client, f"http://hooks.test:{receiver.port}/") == 200
        await client.close()
    assert receiver.connections == 1


async def test_no_resolver_is_asked_about_an_ip_address() -> None:
    answers = Answers()
    async with Receiver() as receiver:
        client = guarded(answers, allow_http_hosts=["127.0.0.1"], allow_networks=["127.0.0.0/8"])
        assert await post(client, f"http://127.0.0.1:{receiver.port}/") == 200
        await client.close()
    # Which is why ``Policy.target`` checks such a host itself.
    assert answers.asked == []
