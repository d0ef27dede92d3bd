"""Settings from the environment and producer API keys."""

from __future__ import annotations

import hashlib

import pytest

from app.setting_values import SettingsError
from app.settings import ApiKey, Settings, parse_api_keys

SECRET = "s3cret-key"
DIGEST_HEX = hashlib.sha256(b"another-secret").hexdigest()


def test_an_empty_environment_gives_the_defaults() -> None:
    settings = Settings.from_env({})
    assert settings == Settings()
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.key_prefix == "clarion"
    assert settings.shards == 1
    assert settings.port == 8000
    assert settings.config_path == "clarion.toml"
    assert settings.log_format == "json"
    assert settings.api_keys == ()


def test_blank_values_keep_the_defaults() -> None:
    settings = Settings.from_env({"CLARION_SHARDS": "  ", "CLARION_REDIS_URL": ""})
    assert settings.shards == 1
    assert settings.redis_url == "redis://127.0.0.1:6379/0"


def test_good_values_are_read() -> None:
    settings = Settings.from_env(
        {
            "CLARION_SHARDS": "16",
            "CLARION_PORT": "9000",
            "CLARION_REDIS_URL": "rediss://cache:6380/1",
            "CLARION_LOG_FORMAT": "console",
            "CLARION_LOG_LEVEL": "debug",
            "CLARION_KEY_PREFIX": "prod.eu-1",
            "CLARION_API_KEYS": f"orders:{SECRET}:send",
        }
    )
    assert settings.shards == 16
    assert settings.port == 9000
    assert settings.redis_url == "rediss://cache:6380/1"
    assert settings.log_format == "console"
    assert settings.log_level == "DEBUG"
    assert settings.key_prefix == "prod.eu-1"
    assert [key.producer for key in settings.api_keys] == ["orders"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CLARION_SHARDS", "abc"),
        ("CLARION_SHARDS", "0"),
        ("CLARION_SHARDS", "1025"),
        ("CLARION_PORT", "70000"),
        ("CLARION_PORT", "0"),
        ("CLARION_REDIS_URL", "http://x"),
        ("CLARION_DATABASE_URL", "mysql://x"),
        ("CLARION_LOG_FORMAT", "xml"),
        ("CLARION_KEY_PREFIX", "my prefix"),
        ("CLARION_KEY_PREFIX", "a{b}"),
        ("CLARION_UNSUBSCRIBE_TTL", "59"),
        ("CLARION_UNSUBSCRIBE_TTL", "60 days"),
        ("CLARION_MAX_HEADER_BYTES", "1024"),
        ("CLARION_HEADER_TIMEOUT", "0"),
        ("CLARION_MAX_CONNECTIONS", "8"),
        ("CLARION_INBOX_STREAMS_PER_RECIPIENT", "0"),
        ("CLARION_INBOX_STREAMS", "1000"),  # not below CLARION_MAX_CONNECTIONS' 1000
        ("CLARION_BODY_TIMEOUT", "5"),  # below CLARION_HEADER_TIMEOUT's 10
    ],
)
def test_a_bad_value_names_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env({name: value})


def test_a_bad_api_key_entry_stops_settings_too() -> None:
    with pytest.raises(SettingsError, match="CLARION_API_KEYS"):
        Settings.from_env({"CLARION_API_KEYS": "orders:s3cret-key:write"})


def test_an_api_key_gives_producer_scopes_and_digest() -> None:
    (key,) = parse_api_keys(f"orders:{SECRET}:send+read")
    assert key.producer == "orders"
    assert key.scopes == {"send", "read"}
    assert key.secret_sha256 == hashlib.sha256(SECRET.encode()).digest()


def test_an_api_key_may_be_given_as_its_digest() -> None:
    (key,) = parse_api_keys(f"billing:sha256={DIGEST_HEX}:admin")
    assert key.producer == "billing"
    assert key.scopes == {"admin"}
    assert key.secret_sha256 == bytes.fromhex(DIGEST_HEX)


def test_several_api_keys_are_separated_by_commas() -> None:
    keys = parse_api_keys(f" orders:{SECRET}:send , , billing:sha256={DIGEST_HEX}:read ")
    assert [(key.producer, key.scopes) for key in keys] == [
        ("orders", {"send"}),
        ("billing", {"read"}),
    ]


def test_no_api_keys_is_allowed() -> None:
    assert parse_api_keys("") == ()


@pytest.mark.parametrize(
    ("entry", "secret"),
    [
        ("orders:s3cret-key-two-parts", "s3cret-key-two-parts"),
        ("orders:s3cret-key-extra:part:send", "s3cret-key-extra"),
        ("orders:s3cret-key-scope:write", "s3cret-key-scope"),
        ("orders:s3cret-key-empty:", "s3cret-key-empty"),
        ("orders:short7!:send", "short7!"),
        (f"orders:sha256={'z' * 64}:send", "z" * 64),
        (f"orders:sha256={DIGEST_HEX[:40]}:send", DIGEST_HEX[:40]),
        ("bad producer:s3cret-key-producer:send", "s3cret-key-producer"),
    ],
)
def test_a_malformed_api_key_is_refused_without_showing_the_secret(entry: str, secret: str) -> None:
    with pytest.raises(SettingsError) as caught:
        parse_api_keys(entry)
    message = str(caught.value)
    assert "CLARION_API_KEYS" in message
    assert secret not in message


def test_the_repr_of_an_api_key_shows_neither_secret_nor_digest() -> None:
    (key,) = parse_api_keys(f"orders:{SECRET}:send+read")
    digest = key.secret_sha256
    for text in (repr(key), str(key)):
        assert "orders" in text
        assert SECRET not in text
        assert digest.hex() not in text
        assert repr(digest) not in text


def test_the_repr_of_settings_shows_no_api_key() -> None:
    settings = Settings.from_env({"CLARION_API_KEYS": f"orders:{SECRET}:send"})
    assert SECRET not in repr(settings)
    assert settings.api_keys[0].secret_sha256.hex() not in repr(settings)
    assert isinstance(settings.api_keys[0], ApiKey)


def test_the_recipients_scope_is_known() -> None:
    (key,) = parse_api_keys(f"profiles:{SECRET}:recipients")
    assert key.scopes == {"recipients"}
    with pytest.raises(SettingsError, match="send, read, recipients, admin"):
        parse_api_keys(f"profiles:{SECRET}:profiles")


def test_the_digest_secret_is_needed_by_services_and_never_shown() -> None:
    with pytest.raises(SettingsError, match="CLARION_DIGEST_SECRET is not set"):
        Settings.from_env({}).address_digest()
    with pytest.raises(SettingsError, match="at least 16 characters") as short:
        Settings.from_env({"CLARION_DIGEST_SECRET": "short-secret"})
    assert "short-secret" not in str(short.value)
    settings = Settings.from_env({"CLARION_DIGEST_SECRET": "a-long-enough-secret"})
    assert "a-long-enough-secret" not in repr(settings)
    assert "a-long-enough-secret" not in repr(settings.address_digest())


def test_unsubscribe_links_last_60_days_unless_told_otherwise() -> None:
    assert Settings.from_env({}).unsubscribe_ttl_seconds == 60 * 86400
    settings = Settings.from_env({"CLARION_UNSUBSCRIBE_TTL": "86400"})
    assert settings.unsubscribe_ttl_seconds == 86400


def test_recipient_token_keys_are_read_in_order_and_never_shown() -> None:
    env = {"CLARION_INBOX_TOKEN_KEYS": " k2:the-newest-token-secret , k1:an-older-token-secret"}
    settings = Settings.from_env(env)
    assert settings.inbox_token_keys == (
        ("k2", b"the-newest-token-secret"),
        ("k1", b"an-older-token-secret"),
    )
    assert "token-secret" not in repr(settings)
    assert Settings.from_env({}).inbox_token_keys == ()  # derived from the digest secret


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("k1", "must look like <key id>:<secret>"),
        (":a-long-enough-secret-1", "must look like"),
        ("k.1:a-long-enough-secret-1", "must look like"),
        ("k1:short-secret-1", "at least 16 characters"),
        ("k1:a-long-enough-secret-1,k1:a-long-enough-secret-2", "given twice"),
        (",".join(f"k{n}:a-long-enough-secret-{n}" for n in range(9)), "at most 8 keys"),
    ],
)
def test_a_bad_recipient_token_key_is_refused_without_showing_the_secret(
    value: str, says: str
) -> None:
    with pytest.raises(SettingsError, match=says) as refused:
        Settings.from_env({"CLARION_INBOX_TOKEN_KEYS": value})
    assert "secret-" not in str(refused.value)
    assert "short-secret" not in str(refused.value)
