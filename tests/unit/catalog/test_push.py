"""Push targets as delivery addresses, read back exactly (a plain FCM token has colons, a
Web Push subscription three parts), and the push kinds' secrets: checked at start-up,
refused naming the variable, never quoting it."""

from __future__ import annotations

import base64
import json

import msgspec
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from app.catalog.providers import SecretInvalid, SecretMissing
from app.catalog.push import (
    ApnsConfig,
    FcmConfig,
    Platform,
    PushAddress,
    WebPushConfig,
    b64url_decode,
    p256_key,
    parse_address,
    platform_of,
    service_account,
    subscription_address,
    token_address,
)

FCM_TOKEN = "bk3RNwTe3H0:CI2k_HHwgIpoDKCIZvvDMExUdFQ3P1-" + "x" * 100
APNS_TOKEN = "a1" * 32
ENDPOINT = "https://updates.push.example/wpush/v2/gAAAAABk-token"
P256DH = "BNcRdreALRFXTkOOUHK1EtK2wtaz5Ry4YfYCA_0QTpQtUbVlUls0VJXg7A8u-Ts1XbjhazAkj7I99e8QcYP7DkM"
AUTH = "tBHItJI5svbpez7KI4CCXg"


def pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def account_json(**overrides: object) -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    account = {
        "type": "service_account",
        "project_id": "clarion-test",
        "private_key_id": "k1",
        "private_key": pem(key),
        "client_email": "clarion@clarion-test.iam.gserviceaccount.com",
        "token_uri": "https://oauth2.googleapis.com/token",
    }
    return json.dumps(account | overrides)


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        (FCM_TOKEN, PushAddress(None, FCM_TOKEN)),  # a plain token, colon and all
        (token_address(Platform.FCM, FCM_TOKEN), PushAddress(Platform.FCM, FCM_TOKEN)),
        (token_address(Platform.APNS, APNS_TOKEN), PushAddress(Platform.APNS, APNS_TOKEN)),
        (
            subscription_address(ENDPOINT, P256DH, AUTH),
            PushAddress(Platform.WEBPUSH, ENDPOINT, P256DH, AUTH),
        ),
        # "fcm:..." is a token that happens to start like a platform: a plain token.
        ("fcm:abc", PushAddress(None, "fcm:abc")),
    ],
)
def test_an_address_reads_back_as_its_target(address: str, expected: PushAddress) -> None:
    assert parse_address(address) == expected


def test_a_plain_token_is_of_the_default_platform() -> None:
    assert platform_of(FCM_TOKEN, Platform.APNS) is Platform.APNS
    assert platform_of(token_address(Platform.FCM, "t"), Platform.APNS) is Platform.FCM
    assert platform_of(subscription_address(ENDPOINT, P256DH, AUTH), Platform.FCM) == "webpush"


def test_base64url_with_or_without_padding() -> None:
    assert len(b64url_decode(P256DH)) == 65
    assert b64url_decode(AUTH) == b64url_decode(AUTH + "==")
    with pytest.raises(ValueError, match="base64url"):
        b64url_decode("not base64url!")


def test_a_service_account_key_gives_its_account_and_rsa_key() -> None:
    account, key = service_account(account_json())
    assert account.client_email.startswith("clarion@")
    assert account.private_key_id == "k1"
    assert key.key_size == 2048


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "is not a service-account key"),
        (json.dumps({"type": "service_account"}), "is not a service-account key"),
        (account_json(type="authorized_user"), "its type is not service_account"),
        (account_json(token_uri="file:///etc/passwd"), "token_uri that is not an https URL"),
        # The token request goes over HTTP/2 and TLS like every FCM request.
        (account_json(token_uri="http://127.0.0.1:8029/token"), "token_uri that is not an https"),
        (account_json(private_key="garbage"), "not an unencrypted PEM private key"),
        (
            account_json(private_key=pem(ec.generate_private_key(ec.SECP256R1()))),
            "not an RSA key",
        ),
    ],
)
def test_a_broken_service_account_is_refused_saying_why(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        service_account(text)


def test_a_p256_key_in_pem_or_as_32_bytes_of_base64url() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    raw = key.private_numbers().private_value.to_bytes(32, "big")
    text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    for written in (pem(key), text):
        assert p256_key(written).private_numbers() == key.private_numbers()
    with pytest.raises(ValueError, match="not a P-256"):
        p256_key(pem(ec.generate_private_key(ec.SECP384R1())))
    with pytest.raises(ValueError, match="neither a PEM key nor 32 bytes"):
        p256_key("c2hvcnQ")


def config_of(struct: type[msgspec.Struct], **values: object) -> object:
    return msgspec.convert(values, struct)


def test_each_push_kind_checks_its_secret_naming_the_variable_only() -> None:
    fcm = config_of(
        FcmConfig, kind="fcm", project_id="clarion-test", service_account_env="FCM_ACCOUNT"
    )
    apns = config_of(
        ApnsConfig, kind="apns", team_id="TEAM123456", key_id="KEY1234567",
        key_env="APNS_KEY", topic="com.example.app",
    )  # fmt: skip
    webpush = config_of(
        WebPushConfig, kind="webpush", vapid_private_key_env="VAPID_KEY",
        subject="mailto:ops@example.com",
    )  # fmt: skip
    secret = "not-a-key-but-a-secret-value-1234"
    for config, variable in ((fcm, "FCM_ACCOUNT"), (apns, "APNS_KEY"), (webpush, "VAPID_KEY")):
        assert isinstance(config, FcmConfig | ApnsConfig | WebPushConfig)
        with pytest.raises(SecretMissing, match=f"environment variable {variable} is not set"):
            config.secrets({})
        with pytest.raises(SecretInvalid, match=f"environment variable {variable} ") as caught:
            config.secrets({variable: secret})
        assert secret not in str(caught.value)
    assert isinstance(fcm, FcmConfig)
    assert fcm.secrets({"FCM_ACCOUNT": account_json()})["service_account_env"].startswith("{")
    key = pem(ec.generate_private_key(ec.SECP256R1()))
    assert isinstance(apns, ApnsConfig)
    assert apns.secrets({"APNS_KEY": key}) == {"key_env": key}


def test_fcm_talks_https_only_over_a_bounded_number_of_connections() -> None:
    fcm = {"kind": "fcm", "project_id": "clarion-test", "service_account_env": "FCM_ACCOUNT"}
    with pytest.raises(msgspec.ValidationError, match=r"https://.*- at `\$.base_url`"):
        config_of(FcmConfig, **fcm, base_url="http://127.0.0.1:8029")
    with pytest.raises(msgspec.ValidationError, match=r"- at `\$.connections`"):
        config_of(FcmConfig, **fcm, connections=0)
    config = config_of(FcmConfig, **fcm, base_url="https://fcm.example.com:8443", connections=4)
    assert isinstance(config, FcmConfig)
    assert (config.base_url, config.connections) == ("https://fcm.example.com:8443", 4)
    assert config_of(FcmConfig, **fcm) == FcmConfig(
        project_id="clarion-test", service_account_env="FCM_ACCOUNT", connections=1
    )


def test_apns_talks_https_only() -> None:
    with pytest.raises(msgspec.ValidationError, match="base_url"):
        config_of(
            ApnsConfig, kind="apns", team_id="TEAM123456", key_id="KEY1234567",
            key_env="K", topic="com.example.app", base_url="http://127.0.0.1:8443",
        )  # fmt: skip


def test_web_push_refuses_plain_http_hosts_and_takes_the_rest_of_the_ssrf_settings() -> None:
    webpush = {"kind": "webpush", "vapid_private_key_env": "K", "subject": "mailto:o@example.com"}
    with pytest.raises(msgspec.ValidationError, match="allow_http_hosts: Web Push endpoints are"):
        config_of(WebPushConfig, **webpush, allow_http_hosts=["push.internal"])
    config = config_of(
        WebPushConfig, **webpush, allow_networks=["10.20.0.0/16"], ca_file="/etc/push-ca.pem"
    )
    assert isinstance(config, WebPushConfig)
    assert (config.allow_http_hosts, config.allow_networks, config.ca_file) == (
        [], ["10.20.0.0/16"], "/etc/push-ca.pem",
    )  # fmt: skip
