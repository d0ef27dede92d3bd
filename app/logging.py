"""structlog set-up: JSON lines in production, readable console output in development.

A last processor masks anything that looks like an email address, a phone number, a bearer
secret or a push token, so a value passed to a log call by mistake still never leaves in
clear.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any

import structlog

_EMAIL = re.compile(r"[^@\s\"'<>]+@[^@\s\"'<>]+\.[A-Za-z]{2,}")
_PHONE = re.compile(r"\+[1-9][0-9]{6,14}")
_BEARER = re.compile(r"(?i)bearer\s+\S+")
_SENSITIVE_KEYS = frozenset(
    {
        "address",
        "email",
        "phone",
        "push_token",
        "push_tokens",
        "token",
        "authorization",
        "api_key",
        "secret",
        "data",
    }
)


def mask(text: str) -> str:
    """Replace email addresses, E.164 numbers and bearer secrets in ``text``."""
    text = _EMAIL.sub("<email>", text)
    text = _PHONE.sub("<phone>", text)
    return _BEARER.sub("Bearer <secret>", text)


def _redact(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    for key, value in event.items():
        if key in _SENSITIVE_KEYS:
            event[key] = "<redacted>"
        elif isinstance(value, str):
            event[key] = mask(value)
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
