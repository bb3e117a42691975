"""Loggers for the bridge and the simulated phone: silent unless the application asks.

The library never configures logging. While the application has not configured structlog,
an event becomes a record of the standard ``logging`` tree (logger ``android_bridge.<part>``),
where a ``NullHandler`` on ``android_bridge`` keeps it silent until the application adds a
handler; once the application configures structlog, events follow that configuration.
(``starebrain_actions._logging`` holds the same routing, with redaction on top: the bridge
does not import the ledger's package.) The bridge never puts numbers or bodies in events.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, MutableMapping
from typing import Any

import structlog

#: The parent of every logger of this package.
LOGGER_NAME = "android_bridge"
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "msg": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}

# A library adds no handler but this one: the application decides where records go.
logging.getLogger(LOGGER_NAME).addHandler(logging.NullHandler())


class _Route:
    """Where an event goes: structlog's configured chain once the application configured
    structlog (so ``structlog.testing.capture_logs`` sees it too), else the standard logging
    tree, rendered as ``logfmt`` text."""

    _render = structlog.processors.LogfmtRenderer(key_order=["event"], bool_as_flag=False)

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, method_name: str) -> Callable[..., Any]:
        if method_name.startswith("_"):
            raise AttributeError(method_name)
        if structlog.is_configured():
            return getattr(structlog.get_logger(self.name), method_name)  # type: ignore[no-any-return]
        return functools.partial(self._to_logging, method_name)

    def _to_logging(self, method_name: str, event: str, **fields: Any) -> None:
        logger = logging.getLogger(self.name)
        level = _LEVELS.get(method_name, logging.INFO)
        if not logger.isEnabledFor(level):
            return
        exc_info = fields.pop("exc_info", None)
        message = self._render(None, method_name, {"event": event, **fields})
        logger.log(level, message, exc_info=exc_info)


def _drop_when_silent(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Skip the work for an event the logging tree would drop anyway."""
    if (
        isinstance(logger, _Route)
        and not structlog.is_configured()
        and not logging.getLogger(logger.name).isEnabledFor(_LEVELS.get(method_name, logging.INFO))
    ):
        raise structlog.DropEvent
    return event_dict


def _pass_through(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    data = dict(event_dict)
    event = data.pop("event", "")
    return (event,), data


def get_logger(name: str) -> Any:
    """A structlog logger for ``name`` (under ``android_bridge``) that stays silent until the
    application configures logging."""
    return structlog.wrap_logger(_Route(name), processors=[_drop_when_silent, _pass_through])
