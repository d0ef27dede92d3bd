"""The local APNs peer (``tests.peers.apns``) in a process of its own, for benchmarks: the same
``ApnsPeer`` checks of every request (ES256 provider token, topic, push type, priority,
expiration, apns-id, payload), served over HTTP/2 and TLS by granian
(``tests.peers.http2_standalone`` says how and why).

    python -m tests.peers.apns_standalone --port 8443 --cert-dir DIR

writes ``ca.pem`` (the authority to trust), ``key.p8`` (the signing key it accepts) and
``peer.json`` ({"team_id", "key_id", "topic"}) into DIR, with the server's own certificate
and key, and serves until interrupted; ``GET /_peer/stats`` answers {"accepted",
"requests", "connections"}.
"""

from __future__ import annotations

import json

from tests.peers.apns import PEER_KEY_ID, PEER_TEAM_ID, PEER_TOPIC, ApnsPeer
from tests.peers.http2_standalone import arguments, serve_forever


def main() -> None:
    options = arguments("A local APNs provider API (HTTP/2, TLS)")
    peer = ApnsPeer()
    directory = options.cert_dir
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "key.p8").write_text(peer.key_pem)
    ids = {"team_id": PEER_TEAM_ID, "key_id": PEER_KEY_ID, "topic": PEER_TOPIC}
    (directory / "peer.json").write_text(json.dumps(ids))
    serve_forever(peer, options.port, directory)


if __name__ == "__main__":
    main()
