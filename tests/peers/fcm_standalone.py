"""The local FCM peer (``tests.peers.fcm``) in a process of its own, for benchmarks: the same
``FcmPeer`` checks (the OAuth grant's RS256 signature, every access token, the message's
shape and size), served over HTTP/2 and TLS by granian (``tests.peers.http2_standalone``
says how and why).

    python -m tests.peers.fcm_standalone --port 8443 --cert-dir DIR

writes ``ca.pem`` (the authority to trust) and ``account.json`` (the service-account key file
it accepts, whose ``token_uri`` is this server's ``/token``) into DIR, with the server's own
certificate and key, and serves until interrupted; ``GET /_peer/stats`` answers {"accepted",
"requests", "connections", "token_requests"}.
"""

from __future__ import annotations

from tests.peers.fcm import FcmPeer
from tests.peers.http2_standalone import arguments, serve_forever


def main() -> None:
    options = arguments("A local FCM HTTP v1 API with its OAuth token endpoint (HTTP/2, TLS)")
    peer = FcmPeer(f"https://127.0.0.1:{options.port}")
    options.cert_dir.mkdir(parents=True, exist_ok=True)
    (options.cert_dir / "account.json").write_text(peer.service_account_json())
    serve_forever(peer, options.port, options.cert_dir)


if __name__ == "__main__":
    main()
