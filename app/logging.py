"""structlog set-up: JSON lines in production, readable console output in development.

Ids come from structlog's context variables: the delivery worker binds ``notification_id``,
``delivery_id`` and ``channel`` for everything logged about one delivery, and every API
request starts with a fresh context (``app.api.app.bind_request_context``).

A last processor masks anything that looks like an email address, a phone number, a bearer
secret or a push token, in nested values and tracebacks too, so a value passed to a log call
by mistake still never leaves in clear.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any

import structlog

# An address starts where a run of address characters starts (the lookbehind): tried from
# inside a run too, the pattern would rescan the rest of the run from every character of it,
# quadratic in the run's length (2.3 s for 16 KB without an "@"). So every character is
# read a bounded number of times: the local part's run and the domain's run each once.
_EMAIL = re.compile(r"(?<![^@\s\"'<>])[^@\s\"'<>]+@[^@\s\"'<>]+\.[A-Za-z]{2,}")
_PHONE = re.compile(r"\+[1-9][0-9]{6,14}")
_BEARER = re.compile(r"(?i)bearer\s+\S+")
# Push tokens are long opaque strings (APNs: 64 hex digits, FCM: ~150 characters with a
# colon). Nothing Clarion logs on purpose looks like that: ids and stream names are shorter
# or contain other characters.
_TOKEN = re.compile(r"(?<![A-Za-z0-9_:-])[A-Za-z0-9_:-]{64,}")
_SENSITIVE_KEYS = frozenset(
    {
        "address",
        "email",
        "phone",
        "push_token",
        "push_tokens",
        "push_targets",
        "endpoint",
        "p256dh",
        "auth",
        "token",
        "authorization",
        "api_key",
        "secret",
        "data",
    }
)


def mask(text: str) -> str:
    """Replace email addresses, E.164 numbers, bearer secrets and push tokens in ``text``.

    Every pattern runs in time linear in the text: the texts come from providers and
    requests, and a pattern that backtracks over a long run would freeze the event loop.
    """
    text = _EMAIL.sub("<email>", text)
    text = _PHONE.sub("<phone>", text)
    text = _BEARER.sub("Bearer <secret>", text)
    return _TOKEN.sub("<token>", text)


def _masked(value: Any) -> Any:
    """``value`` with every string inside it masked (lists, tuples, sets and dicts too)."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, dict):
        return {
            key: "<redacted>" if key in _SENSITIVE_KEYS else _masked(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [_masked(item) for item in value]
    return value


def _redact(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    for key, value in event.items():
        event[key] = "<redacted>" if key in _SENSITIVE_KEYS else _masked(value)
    return event


def configure_logging(log_format: str = "json", level: str = "INFO") -> None:
    """Route structlog and the standard library's logging through one pipeline."""
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        _redact,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Access logs would repeat every request line; errors still come through.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
