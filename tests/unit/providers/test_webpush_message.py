"""What a Web Push message is made of, read by other implementations: the aes128gcm body
reproduces RFC 8291's Appendix A example byte for byte and decrypts with the local push
service's own RFC 8291 code (itself checked on the same example) and with ``http_ece``. The
rest (the JSON, VAPID, TTL, Topic) is checked where the push service reads it
(tests/integration/providers/test_webpush.py)."""

from __future__ import annotations

import json

import http_ece
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from app.providers.webpush_message import encrypt
from tests.peers.webpush import b64url, decrypt, raw_public, unb64url


def test_the_peer_decrypts_rfc_8291_s_example_and_the_adapter_encrypts_it_byte_for_byte() -> None:
    # RFC 8291, Appendix A.
    plaintext = b"When I grow up, I want to be a watermelon"
    ua = ec.derive_private_key(
        int.from_bytes(unb64url("q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"), "big"),
        ec.SECP256R1(),
    )
    sender = ec.derive_private_key(
        int.from_bytes(unb64url("yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"), "big"),
        ec.SECP256R1(),
    )
    ua_public = (
        "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    )
    auth = unb64url("BTBZMqHH6r4Tts7J_aSIgg")
    salt = unb64url("DGv6ra1nlYgDCS1FRnbzlw")
    body = unb64url(
        "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLoc"
        "InmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLV"
        "WGNWQexSgSxsj_Qulcy4a-fN"
    )
    assert b64url(raw_public(ua)) == ua_public
    assert b64url(raw_public(sender)) == (
        "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
    )
    assert decrypt(body, ua, auth) == plaintext
    assert encrypt(plaintext, ua.public_key(), auth, sender=sender, salt=salt) == body
    tampered = body[:-1] + bytes([body[-1] ^ 1])
    with pytest.raises(ValueError, match="does not authenticate"):
        decrypt(tampered, ua, auth)


def test_http_ece_decrypts_what_the_adapter_encrypts_with_a_fresh_key_and_salt() -> None:
    # A third reading of RFC 8188/8291 beside the peer's and the adapter's own.
    ua = ec.generate_private_key(ec.SECP256R1())
    auth = b"0123456789abcdef"
    plaintext = json.dumps({"notification": {"title": "Hi", "body": "x" * 3000}}).encode()
    first = encrypt(plaintext, ua.public_key(), auth)
    second = encrypt(plaintext, ua.public_key(), auth)
    assert first[:16] != second[:16]  # the salt
    assert first[21:86] != second[21:86]  # the sender's key
    for body in (first, second):
        assert http_ece.decrypt(body, private_key=ua, auth_secret=auth) == plaintext
