"""One setting's value from its variable: Redis URLs (a cluster's too) and the public URL,
each refused with a message that names the variable and shows no password; the default
recipient cap."""

from __future__ import annotations

import pytest

from app.setting_values import SettingsError
from app.settings import Settings


def test_a_bad_redis_url_is_named_without_its_password() -> None:
    with pytest.raises(SettingsError) as bad:
        Settings.from_env({"CLARION_REDIS_URL": "http://user:hunter2@host:6379"})
    assert "hunter2" not in str(bad.value)


def test_a_redis_cluster_is_named_by_its_nodes() -> None:
    url = "redis+cluster://ops:hunter2@10.0.0.1:7000,10.0.0.2:7001"
    assert Settings.from_env({"CLARION_REDIS_URL": url}).redis_url == url
    tls = "rediss+cluster://redis-a.internal:6380"
    assert Settings.from_env({"CLARION_REDIS_URL": tls}).redis_url == tls


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis+cluster://ops:hunter2@10.0.0.1", "host:port"),
        ("redis+cluster://ops:hunter2@10.0.0.1:7000,:7001", "host:port"),
        ("redis+cluster://ops:hunter2@10.0.0.1:99999", "host:port"),
        ("redis+cluster://ops:hunter2@10.0.0.1:7000/2", "one database"),
    ],
)
def test_a_bad_cluster_url_names_the_problem_without_its_password(url: str, problem: str) -> None:
    with pytest.raises(SettingsError, match=problem) as bad:
        Settings.from_env({"CLARION_REDIS_URL": url})
    assert "CLARION_REDIS_URL" in str(bad.value)
    assert "hunter2" not in str(bad.value)


@pytest.mark.parametrize(
    ("value", "public_url"),
    [
        ("https://notify.example.com", "https://notify.example.com"),
        (" https://notify.example.com/ ", "https://notify.example.com"),
        ("https://example.com:8443/clarion/", "https://example.com:8443/clarion"),
        ("https://xn--bcher-kva.example/", "https://xn--bcher-kva.example"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://localhost:8000/", "http://localhost:8000"),
        ("", ""),
    ],
)
def test_the_public_url_is_an_https_base_url(value: str, public_url: str) -> None:
    assert Settings.from_env({"CLARION_PUBLIC_URL": value}).public_url == public_url


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("http://notify.example.com", "plain http only for 127.0.0.1 or localhost"),
        ("notify.example.com", "https URL"),
        ("ftp://notify.example.com", "https URL"),
        ("https://", "https URL"),
        ("https://notify.example.com:99999", "not a URL"),
        ("https://notify.example.com/?from=mail", "without a query or fragment"),
        ("https://notify.example.com/#top", "without a query or fragment"),
        ("https://bücher.example", "xn-- form"),
        ("https://notify.example.com/a b", "URL characters"),
        ("https://notify.example.com/<x>", "URL characters"),
        ("https://notify.example.com/a,b;c", "URL characters"),
    ],
)
def test_a_bad_public_url_says_what_is_wrong(value: str, says: str) -> None:
    with pytest.raises(SettingsError, match="CLARION_PUBLIC_URL") as bad:
        Settings.from_env({"CLARION_PUBLIC_URL": value})
    assert says in str(bad.value)


def test_a_public_url_with_a_password_is_refused_without_showing_it() -> None:
    with pytest.raises(SettingsError, match="without a user name or password") as bad:
        Settings.from_env({"CLARION_PUBLIC_URL": "https://ops:hunter2@notify.example.com"})
    assert "hunter2" not in str(bad.value)


def test_the_default_recipient_cap_is_off_unless_given() -> None:
    assert Settings.from_env({}).recipient_cap is None
    assert Settings.from_env({"CLARION_RECIPIENT_CAP": " "}).recipient_cap is None
    assert Settings.from_env({"CLARION_RECIPIENT_CAP": "100/1h"}).recipient_cap == (100, 3600)
    for bad in ("100", "100/1y", "0/1h", "lots/1h"):
        with pytest.raises(SettingsError) as refused:
            Settings.from_env({"CLARION_RECIPIENT_CAP": bad})
        assert str(refused.value).startswith("CLARION_RECIPIENT_CAP: ")
