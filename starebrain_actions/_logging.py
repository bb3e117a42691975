"""structlog set-up for the I/O layers, with phone numbers and bodies redacted by default."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

#: Event keys whose values are personal data: redacted unless the user opts in.
SENSITIVE_KEYS: frozenset[str] = frozenset(
    {"address", "body", "number", "phone", "recipient", "text", "to", "sms_body"}
)
#: Phone-number-like runs inside free text (error messages): 7+ digits, not part of a word,
#: an id, an address or a hash.
#: Keys whose values are identifiers or states, never personal data: not scanned.
SAFE_KEYS: frozenset[str] = frozenset(
    {
        "event",
        "timestamp",
        "level",
        "action_id",
        "dispatch_id",
        "actor",
        "delivery",
        "acceptance",
        "event_type",
        "fingerprint",
        "attempt",
    }
)
_PHONE_LIKE = re.compile(r"(?<![\w.:/-])[(+]?\d[\d ().-]{5,}\d(?![\w:/-]|\.\d)")
_SHOW_SENSITIVE_ENV = "STAREBRAIN_LOG_SENSITIVE"

_show_sensitive = os.environ.get(_SHOW_SENSITIVE_ENV, "") == "1"


def redact_value(value: object) -> str:
    """A stable stand-in for personal data: its length and a short hash, never the text."""
    text = str(value)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
    return f"<redacted len={len(text)} sha256={digest}>"


def redact_sensitive(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: replace personal data unless showing it was asked for."""
    if _show_sensitive:
        return event_dict
    for key in list(event_dict):
        value = event_dict[key]
        if key in SENSITIVE_KEYS and value is not None:
            event_dict[key] = redact_value(value)
        elif key not in SAFE_KEYS and isinstance(value, str):
            event_dict[key] = _PHONE_LIKE.sub(lambda match: redact_value(match.group()), value)
    return event_dict


def configure_logging(
    *, json: bool | None = None, level: int = logging.INFO, show_sensitive: bool | None = None
) -> None:
    """Configure structlog: JSON lines in production, pretty output on a TTY.

    ``show_sensitive`` (or ``STAREBRAIN_LOG_SENSITIVE=1``) turns redaction off.
    """
    global _show_sensitive
    if show_sensitive is not None:
        _show_sensitive = show_sensitive
    if json is None:
        json = not sys.stderr.isatty()
    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact_sensitive,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> Any:
    """A structlog logger that always redacts, whatever the global configuration."""
    return structlog.wrap_logger(
        structlog.get_logger(name), processors=[redact_sensitive, _pass_through]
    )


def _pass_through(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    data = dict(event_dict)
    event = data.pop("event", "")
    return (event,), data
