"""What an SMTP relay's answers mean for a delivery (RFC 5321 replies, RFC 3463 enhanced
codes): each ``ProviderError`` of the ``smtp`` provider (``app.providers.smtp``), by the
stage of the send it failed at.

- Failing to connect, greet, STARTTLS or AUTH (a refused port, a name that does not
  resolve, a timeout, an untrusted certificate, a wrong password; and 530 or 538, "AUTH or
  TLS required", at any stage): TRANSIENT and not accepted. It concerns the relay, not the
  message: a backup provider may send meanwhile, the circuit breaker opens, and an
  operator's fix lets the retries through. Failing every delivery for good would lose all.
- A reply at MAIL, RCPT or the end of data: 4xx TRANSIENT, 5xx PERMANENT. The reason is
  INVALID_ADDRESS for 550/551/553 at RCPT or a 5.1.x code about the recipient, REJECTED for
  5.7.x (policy: the sender or the content, not the mailbox) and any other 5xx. A refusal
  is never accepted: a relay takes responsibility only with its 250 to the end of data
  (RFC 5321 section 6.1).
- No answer to the final "." (a timeout, a dropped connection): TRANSIENT, possibly
  accepted: the relay may have queued the message.

Error texts carry the reply code and the relay's text, cut short, with the address masked.
"""

from __future__ import annotations

import re
import socket
import ssl
from typing import Final

import aiosmtplib

from app.logging import mask
from app.providers.base import ProviderError, Reason
from streams.core.vocabulary import ErrorClass

MAX_QUOTED_CHARS: Final = 200
# The stages of a send, as errors name them.
WAITING = "waiting for a connection"
CONNECT = "connect"
AUTH = "AUTH"
RESET = "RSET"
MAIL = "MAIL"
RCPT = "RCPT"
DATA = "DATA"
SENT = "end of data"
_SESSION_STAGES = frozenset({WAITING, CONNECT, AUTH, RESET})
# AUTH or STARTTLS required (RFC 4954, RFC 3207): the session's set-up, whatever the stage.
_SESSION_CODES = frozenset({530, 538})
_ENHANCED = re.compile(r"([245])\.(\d{1,3})\.(\d{1,3})(?!\S)")


def quoted(text: str, address: str) -> str:
    """A relay's text fit for an error: one line, the address and look-alikes masked, short."""
    text = " ".join(text.split())
    if address:
        text = re.sub(re.escape(address), "<address>", text, flags=re.IGNORECASE)
    text = mask(text)
    return text if len(text) <= MAX_QUOTED_CHARS else text[:MAX_QUOTED_CHARS] + "..."


def reply_error(name: str, stage: str, code: int, text: str, address: str) -> ProviderError:
    """The ``ProviderError`` for a relay's refusal ``code`` at ``stage``."""
    said = f"{name}: {stage} refused: {code} {quoted(text, address)}"
    if not 400 <= code < 600:
        # Not a refusal but a garbled or unexpected answer: after the final "." it may be
        # the relay's acceptance, lost.
        return ProviderError(ErrorClass.TRANSIENT, said, not_accepted=stage != SENT)
    if code < 500 or stage in _SESSION_STAGES or code in _SESSION_CODES:
        return ProviderError(ErrorClass.TRANSIENT, said, not_accepted=True)
    enhanced = _ENHANCED.match(text.strip())
    subject, detail = enhanced.group(2, 3) if enhanced and enhanced[1] == "5" else ("", "")
    # 5.1.x is about addresses (5.1.7 and 5.1.8: the sender's); 5.7.x is policy.
    senders = subject == "1" and detail in ("7", "8")
    by_code = stage == RCPT and code in (550, 551, 553) and subject != "7"
    invalid = stage != MAIL and not senders and (subject == "1" or by_code)
    reason = Reason.INVALID_ADDRESS if invalid else Reason.REJECTED
    return ProviderError(ErrorClass.PERMANENT, said, reason=reason, not_accepted=True)


def failure_error(name: str, stage: str, error: BaseException, address: str) -> ProviderError:
    """The ``ProviderError`` for a failure without a reply (timeout, network, TLS)."""
    causes = [error, error.__cause__, error.__context__]
    tls = next((c for c in causes if isinstance(c, ssl.SSLError)), None)
    if tls is not None:
        detail = getattr(tls, "verify_message", "") or tls.reason or type(tls).__name__
        what = f"TLS handshake failed: {detail}"
    elif any(isinstance(c, TimeoutError) for c in causes):
        what = "timed out"
    elif any(isinstance(c, ConnectionRefusedError) for c in causes):
        what = "connection refused"
    elif any(isinstance(c, socket.gaierror) for c in causes):
        what = "the host name does not resolve"
    elif isinstance(error, aiosmtplib.SMTPServerDisconnected | ConnectionError):
        what = "connection lost"
    elif isinstance(error, aiosmtplib.SMTPException):
        what = quoted(error.message, address)
    else:
        what = type(error).__name__
    if stage == SENT:
        return ProviderError(
            ErrorClass.TRANSIENT, f"{name}: no answer to the end of data ({what}): the relay "
            "may have queued the message",
        )  # fmt: skip
    return ProviderError(ErrorClass.TRANSIENT, f"{name}: {stage}: {what}", not_accepted=True)
