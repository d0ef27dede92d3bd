"""The email an ``smtp`` provider sends (``app.providers.smtp`` hands it to the relay): its
sender, its Message-ID, the recipient as an SMTP envelope takes it, and the bytes of DATA.

The message: From, To, Subject, Date, ``Message-ID``, ``X-Clarion-Delivery-Id`` (and RFC
8058's ``List-Unsubscribe`` and ``List-Unsubscribe-Post`` given an unsubscribe link), text
and HTML as multipart/alternative (text alone without HTML), quoted-printable UTF-8. It is
built with the ``email`` package's compat32 API (``email.mime``): the default policy parses
and refolds every header, 1 ms per message here against 0.15 ms. The Message-ID,
``<{delivery id}@{domain of from}>``, is the same on every attempt, so a copy sent again
after an ambiguous failure can be recognised; ``send`` returns it. Not the relay's queue
id: its final reply has no standard shape.

Addresses are those SMTP carries without SMTPUTF8: a dot-atom local part and a host name
(IDNA for an international domain); anything else is refused before it can reach a header.
"""

from __future__ import annotations

import email.charset
import email.policy
import email.utils
import random
import re
from email.mime.base import MIMEBase
from email.mime.multipart import MIMEMultipart
from email.mime.nonmultipart import MIMENonMultipart
from typing import Final

from app.providers.base import DELIVERY_HEADER, Message, ProviderError, Reason
from streams.core.vocabulary import ErrorClass


class _Policy(email.policy.Compat32):
    """compat32, but a short printable ASCII header is written as it is: what its folding
    would write too, without its cost (two thirds of building a message). So is a longer one
    without a space (a link), within RFC 5322's 998 octets a line: compat32 would only move it
    whole to a line of its own, and a reader would see it with a space in front."""

    def fold_binary(self, name: str, value: str) -> bytes:
        fits = len(name) + len(value) < (76 if " " in value else 997)
        if value.isascii() and value.isprintable() and fits:
            return f"{name}: {value}{self.linesep}".encode("ascii")
        return super().fold_binary(name, value)


_POLICY: Final = _Policy(linesep="\r\n")
_UTF8_QP: Final = email.charset.Charset("utf-8")
_UTF8_QP.body_encoding = email.charset.QP
# What SMTP can carry without SMTPUTF8: a dot-atom local part (RFC 5322 atext) and a
# host name. Anything else (quotes, commas, controls) is refused before it can reach a header.
_LOCAL_PART = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}")
_DOMAIN = re.compile(r"[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_NOT_ATEXT = re.compile(r"[^A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]")
# Every character str.splitlines() breaks at: compat32 breaks a header's line there, and
# raises if what follows looks like a header of its own (a subject could smuggle one in).
_LINE_BREAKS = re.compile("[\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]+")
_LEADING_DOT = re.compile(rb"^\.", re.MULTILINE)


def sender_parts(name: str, from_address: str) -> tuple[str, str, str]:
    """The From header, the envelope's sender and its domain of provider ``name``'s
    ``from_address``; ``ValueError`` naming the setting if SMTP cannot carry it."""
    display, sender = email.utils.parseaddr(from_address)
    local, _, domain = sender.rpartition("@")
    good = _LOCAL_PART.fullmatch(local) and _DOMAIN.fullmatch(domain)
    if not good or not from_address.isprintable():
        raise ValueError(f"providers.{name}.from: not an email address SMTP can carry")
    # Encoded once: a display name may need RFC 2047.
    return email.utils.formataddr((display, sender)), sender, domain


def message_id(delivery_id: str, domain: str) -> str:
    """The Message-ID of every attempt of a delivery: ``<{delivery id}@{domain}>``."""
    return f"<{_NOT_ATEXT.sub('-', delivery_id)}@{domain}>"


def smtp_address(name: str, address: str) -> str:
    """``address`` as an SMTP envelope takes it (IDNA domain); ``ProviderError`` if it cannot."""
    local, at, domain = address.rpartition("@")
    if not domain.isascii():
        try:
            domain = domain.encode("idna").decode("ascii")
        except UnicodeError:
            domain = ""
    if not local.isascii():
        raise ProviderError(
            ErrorClass.PERMANENT, f"{name}: a non-ASCII local part needs SMTPUTF8, not sent",
            reason=Reason.REJECTED, not_accepted=True,
        )  # fmt: skip
    if not (at and _LOCAL_PART.fullmatch(local) and _DOMAIN.fullmatch(domain)):
        raise ProviderError(
            ErrorClass.PERMANENT, f"{name}: the address is not one SMTP can carry",
            reason=Reason.INVALID_ADDRESS, not_accepted=True,
        )  # fmt: skip
    return f"{local}@{domain}"


def _text_part(text: str, subtype: str) -> MIMENonMultipart:
    part = MIMENonMultipart("text", subtype, policy=_POLICY, charset="utf-8")
    part.set_payload(text, _UTF8_QP)
    return part


def build_email(message: Message, recipient: str, sender: str, msg_id: str) -> bytes:
    """The message as the DATA command carries it: CRLF lines, dot-stuffed, ended by "."."""
    top: MIMEBase
    if message.html:
        # Quoted-printable never has "=_" in it: no part can contain this boundary.
        top = MIMEMultipart(
            "alternative", boundary=f"=_{random.getrandbits(96):024x}", policy=_POLICY
        )
        for text, subtype in ((message.body, "plain"), (message.html, "html")):
            part = _text_part(text, subtype)
            del part["MIME-Version"]  # once, at the top
            top.attach(part)
    else:
        top = _text_part(message.body, "plain")
    top["From"] = sender
    top["To"] = recipient
    # compat32 writes a non-ASCII value as RFC 2047 encoded words.
    top["Subject"] = _LINE_BREAKS.sub(" ", message.title)
    top["Date"] = email.utils.formatdate(usegmt=True)
    top["Message-ID"] = msg_id
    top[DELIVERY_HEADER] = _NOT_ATEXT.sub("-", message.delivery_id)
    for name, value in message.unsubscribe_headers.items():
        top[name] = value
    content = top.as_bytes()
    if not content.endswith(b"\r\n"):
        content += b"\r\n"
    return _LEADING_DOT.sub(b"..", content) + b".\r\n"
