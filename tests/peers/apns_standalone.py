"""The local APNs peer (``tests.peers.apns``) in a process of its own, for benchmarks: the same
``ApnsPeer`` checks of every request (ES256 provider token, topic, push type, priority,
expiration, apns-id, payload), served over HTTP/2 and TLS (ALPN ``h2``) by granian, an HTTP
server written in Rust (hyper and rustls), through its RSGI interface.

Why not the ``h2`` server the tests use: a benchmark runs the peer on the same two cores as
the client it measures, and ``h2``'s server side cost 300 to 430 µs of CPU a request here,
more than the client; Apple's servers cost Clarion nothing. Served by granian the peer costs
about 100 µs a request, almost all of it ``ApnsPeer.handle`` in Python. The protocol-level
faults of the tests (GOAWAY, stream limits, a dead connection) stay with the ``h2`` server.

    python -m tests.peers.apns_standalone --port 8443 --cert-dir DIR

writes ``ca.pem`` (the authority to trust), ``key.p8`` (the signing key it accepts) and
``peer.json`` ({"team_id", "key_id", "topic"}) into DIR, with the server's own certificate
and key, and serves until interrupted; ``GET /_peer/stats`` answers {"accepted",
"requests", "connections"} (connections: those that sent a request).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import uvloop
from granian.http import HTTP2Settings
from granian.server.embed import Server

from tests.peers.apns import PEER_KEY_ID, PEER_TEAM_ID, PEER_TOPIC, ApnsPeer


class Handler:
    """The RSGI application: each request through ``ApnsPeer.handle``."""

    def __init__(self, peer: ApnsPeer) -> None:
        self.peer = peer
        self.clients: set[str] = set()

    async def __call__(self, scope: Any, protocol: Any) -> None:
        body = await protocol()
        peer = self.peer
        if scope.client not in self.clients:
            self.clients.add(scope.client)
            peer.connections += 1
        fields = [(":method", scope.method), (":path", scope.path), *scope.headers.items()]
        peer.requests += 1
        fault = peer.take_fault() if scope.path != "/_peer/stats" else None
        status, headers, answer = peer.handle(fields, body, fault)
        protocol.response_bytes(status, list(headers.items()), answer)


def write_files(peer: ApnsPeer, directory: Path) -> tuple[Path, Path]:
    """The files a client needs, and the server's certificate chain and key."""
    directory.mkdir(parents=True, exist_ok=True)
    peer.ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    (directory / "key.p8").write_text(peer.key_pem)
    ids = {"team_id": PEER_TEAM_ID, "key_id": PEER_KEY_ID, "topic": PEER_TOPIC}
    (directory / "peer.json").write_text(json.dumps(ids))
    chain, key = directory / "server-chain.pem", directory / "server-key.pem"
    with chain.open("wb") as out:
        for blob in peer.certificate.cert_chain_pems:
            out.write(blob.bytes())
    peer.certificate.private_key_pem.write_to_path(str(key))
    return chain, key


def main() -> None:
    parser = argparse.ArgumentParser(description="A local APNs provider API (HTTP/2, TLS)")
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--cert-dir", type=Path, required=True)
    arguments = parser.parse_args()
    peer = ApnsPeer()
    chain, key = write_files(peer, arguments.cert_dir)
    server = Server(
        Handler(peer),
        address="127.0.0.1",
        port=arguments.port,
        http="2",
        http2_settings=HTTP2Settings(max_concurrent_streams=peer.max_streams),
        ssl_cert=chain,
        ssl_key=key,
        log_enabled=False,
    )
    uvloop.run(server.serve())


if __name__ == "__main__":
    main()
