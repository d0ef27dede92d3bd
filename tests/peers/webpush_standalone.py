"""The local push service (``tests.peers.webpush``) in a process of its own, for benchmarks:
the same ``WebPushPeer`` checks (VAPID, the headers, every message decrypted as the browser
would), served over HTTP/2 and TLS by granian (``tests.peers.http2_standalone`` says how and
why). It takes every subscription number.

    python -m tests.peers.webpush_standalone --port 8443 --cert-dir DIR

writes ``ca.pem`` (the authority to trust) into DIR, with the server's own certificate and
key, and serves until interrupted; the origin its subscriptions' endpoints name is
``https://127.0.0.1:<port>``. ``GET /_peer/stats`` answers {"accepted", "requests",
"connections", "decrypted"}.
"""

from __future__ import annotations

from tests.peers.http2_standalone import arguments, serve_forever
from tests.peers.webpush import WebPushPeer


def main() -> None:
    options = arguments("A local Web Push service (RFC 8030, 8291, 8292; HTTP/2, TLS)")
    peer = WebPushPeer(f"https://127.0.0.1:{options.port}", any_number=True)
    serve_forever(peer, options.port, options.cert_dir)


if __name__ == "__main__":
    main()
