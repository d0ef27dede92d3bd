"""An HTTP/2 peer (``tests.peers.apns``, ``tests.peers.fcm``) in a process of its own, for
benchmarks: the same ``Http2Peer`` checks of every request, served over HTTP/2 and TLS (ALPN
``h2``) by granian, an HTTP server written in Rust (hyper and rustls), through its RSGI
interface.

Why not the ``h2`` server the tests use (``tests.peers.http2_serving``): a benchmark runs the
peer on the same two cores as the client it measures, and ``h2``'s server side cost 300 to
430 µs of CPU a request here, more than the client; the providers' servers cost Clarion
nothing. Served by granian a peer costs about 100 µs a request, almost all of it the peer's
own checks in Python. The protocol-level faults of the tests (GOAWAY, stream limits, a hung
request, a dead connection) stay with the ``h2`` server; here a request meets only the
faults a peer answers itself.

``serve_forever(peer, port, directory)`` writes ``ca.pem`` (the authority a client trusts)
and the server's certificate chain and key into ``directory`` and serves until interrupted;
``GET /_peer/stats`` answers the peer's ``stats()`` (connections: those that sent a
request). Each peer's ``*_standalone`` module writes the secrets a client needs beside them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import uvloop
from granian.http import HTTP2Settings
from granian.server.embed import Server

from tests.peers.http2_serving import Http2Peer


class Handler:
    """The RSGI application: each request through the peer's ``reply``."""

    def __init__(self, peer: Http2Peer) -> None:
        self.peer = peer
        self.clients: set[str] = set()

    async def __call__(self, scope: Any, protocol: Any) -> None:
        body = await protocol()
        peer = self.peer
        if scope.client not in self.clients:
            self.clients.add(scope.client)
            peer.connections += 1
        fields = [(":method", scope.method), (":path", scope.path), *scope.headers.items()]
        status, headers, answer = peer.reply(fields, body, peer.received(fields))
        protocol.response_bytes(status, list(headers.items()), answer)


def arguments(description: str) -> argparse.Namespace:
    """``--port`` and ``--cert-dir``, as every standalone peer takes them."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--cert-dir", type=Path, required=True)
    return parser.parse_args()


def write_certificates(peer: Http2Peer, directory: Path) -> tuple[Path, Path]:
    """``ca.pem`` for clients, and the server's certificate chain and key."""
    directory.mkdir(parents=True, exist_ok=True)
    peer.ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    chain, key = directory / "server-chain.pem", directory / "server-key.pem"
    with chain.open("wb") as out:
        for blob in peer.certificate.cert_chain_pems:
            out.write(blob.bytes())
    peer.certificate.private_key_pem.write_to_path(str(key))
    return chain, key


def serve_forever(peer: Http2Peer, port: int, directory: Path) -> None:
    """Serve ``peer`` on 127.0.0.1:``port`` until interrupted (see the module documentation)."""
    chain, key = write_certificates(peer, directory)
    server = Server(
        Handler(peer),
        address="127.0.0.1",
        port=port,
        http="2",
        http2_settings=HTTP2Settings(max_concurrent_streams=peer.max_streams),
        ssl_cert=chain,
        ssl_key=key,
        log_enabled=False,
    )
    uvloop.run(server.serve())
