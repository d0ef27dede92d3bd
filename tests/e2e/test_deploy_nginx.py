"""The reverse-proxy example (deploy/nginx/clarion.conf), run by a real nginx in front of a
real API: the file is valid, requests pass, the inbox stream's events come through unbuffered,
and a head or body past Clarion's limits is refused at the proxy. Skipped without nginx
(Debian: ``apt-get install nginx-light``)."""

from __future__ import annotations

import re
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme

from tests.conftest import REPO
from tests.e2e.api_service import API_KEY, running_api
from tests.servers import free_port, wait_for_port

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed"),
]
EXAMPLE = REPO / "deploy" / "nginx" / "clarion.conf"


def _main_config(work: Path, api_port: int, port: int) -> Path:
    """nginx.conf for a private nginx in ``work``: the example as a site, pointed at the
    test's API, listening on ``port`` with a certificate of a throwaway authority."""
    authority = trustme.CA()
    certificate = authority.issue_cert("notify.example.com", "127.0.0.1")
    certificate.private_key_and_cert_chain_pem.write_to_path(str(work / "server.pem"))
    authority.cert_pem.write_to_path(str(work / "ca.pem"))
    site = EXAMPLE.read_text()
    site = site.replace("server 127.0.0.1:8000;", f"server 127.0.0.1:{api_port};")
    site = site.replace("listen 443 ssl;", f"listen 127.0.0.1:{port} ssl;")
    site = re.sub(r"ssl_certificate(_key)? +\S+;", rf"ssl_certificate\1 {work}/server.pem;", site)
    (work / "clarion.conf").write_text(site)
    kinds = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    temp = " ".join(f"{kind}_temp_path {work}/{kind};" for kind in kinds)
    main = work / "nginx.conf"
    main.write_text(
        f"daemon off;\nmaster_process off;\npid {work}/nginx.pid;\nerror_log {work}/error.log;\n"
        f"events {{ worker_connections 256; }}\n"
        f"http {{ access_log off; {temp} include {work}/clarion.conf; }}\n"
    )
    return main


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A client of nginx (the example) in front of a running API."""
    work = tmp_path_factory.mktemp("nginx")
    with running_api() as api_url:
        port = free_port()
        main = _main_config(work, int(httpx.URL(api_url).port or 0), port)
        checked = subprocess.run(
            ["nginx", "-t", "-p", str(work), "-c", str(main)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert checked.returncode == 0, checked.stderr
        nginx = subprocess.Popen(["nginx", "-p", str(work), "-c", str(main)])
        try:
            wait_for_port(port, timeout=10)
            trust = ssl.create_default_context(cafile=str(work / "ca.pem"))
            with httpx.Client(
                base_url=f"https://127.0.0.1:{port}", verify=trust, timeout=10
            ) as client:
                yield client
        finally:
            nginx.terminate()
            nginx.wait(timeout=10)


def test_requests_pass_through_the_proxy(proxied: httpx.Client) -> None:
    assert proxied.get("/v1/ops/health").status_code == 200


def test_a_head_past_the_limit_is_refused_at_the_proxy(proxied: httpx.Client) -> None:
    answer = proxied.get("/v1/ops/health", headers={"X-Padding": "a" * (64 << 10)})
    assert answer.status_code in (400, 431), answer.text[:200]
    many = {f"X-Header-{n}": "b" * 20 for n in range(2000)}  # 32 KiB of short lines
    assert proxied.get("/v1/ops/health", headers=many).status_code in (400, 431)


def test_a_body_past_the_limit_is_refused_at_the_proxy_but_a_batch_may_be_larger(
    proxied: httpx.Client,
) -> None:
    auth = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    body = b'{"pad": "' + b"x" * (100 << 10) + b'"}'
    assert proxied.post("/v1/notifications", content=body, headers=auth).status_code == 413
    # Past 64 KiB but within the batch limit: the API, not the proxy, judges it.
    batch = proxied.post("/v1/notifications/batch", content=body, headers=auth)
    assert batch.status_code == 422, batch.text[:200]  # no notifications in it


def test_the_inbox_stream_comes_through_unbuffered(proxied: httpx.Client) -> None:
    answer = proxied.post(
        "/v1/recipients/u-1/inbox-tokens", json={}, headers={"Authorization": f"Bearer {API_KEY}"}
    )
    token = answer.json()["token"]
    with proxied.stream("GET", f"/v1/inbox/stream?token={token}") as stream:
        assert stream.status_code == 200
        # The first event arrives while the stream stays open: nothing waits for a buffer.
        assert any(line == "event: counts" for line in stream.iter_lines())
