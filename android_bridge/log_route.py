"""Where a library's event goes when the library never configures logging: one route that
both the bridge (``android_bridge._log``) and the ledger's package
(``starebrain_actions._logging``, which adds redaction on top) build their loggers on.

While the application has not configured structlog, an event becomes a record of the standard
``logging`` tree under the logger's own name, rendered as ``logfmt`` text (and is dropped
before any other work when that logger would not emit it); once the application configures
structlog, events follow that configuration. It lives in the bridge because the bridge never
imports ``starebrain_actions``.

structlog is imported on first use, not with this module: a command of the ledger's package
that logs nothing starts without it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import structlog

#: structlog's method names and the ``logging`` level each logs at (INFO for any other).
LEVELS = {
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


class Route:
    """Where a library event goes (after the package's processors, redaction among them):
    structlog's configured chain once the application configured structlog (so
    ``structlog.testing.capture_logs`` sees it too), else the standard logging tree, rendered
    as ``logfmt`` text."""

    _renderer: structlog.processors.LogfmtRenderer | None = None

    def __init__(self, name: str) -> None:
        self.name = name

    @classmethod
    def _render(cls, logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> str:
        if cls._renderer is None:
            import structlog

            cls._renderer = structlog.processors.LogfmtRenderer(
                key_order=["event"], bool_as_flag=False
            )
        return cls._renderer(logger, method_name, event_dict)

    def __getattr__(self, method_name: str) -> Callable[..., Any]:
        import structlog

        if method_name.startswith("_"):
            raise AttributeError(method_name)
        if structlog.is_configured():
            return getattr(structlog.get_logger(self.name), method_name)  # type: ignore[no-any-return]
        return functools.partial(self._to_logging, method_name)

    def _to_logging(self, method_name: str, event: str, **fields: Any) -> None:
        logger = logging.getLogger(self.name)
        level = LEVELS.get(method_name, logging.INFO)
        if not logger.isEnabledFor(level):
            return
        exc_info = fields.pop("exc_info", None)
        logger.log(
            level, self._render(None, method_name, {"event": event, **fields}), exc_info=exc_info
        )


def drop_when_silent(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Skip the work (redaction included, where a package redacts) for an event the logging
    tree would drop anyway."""
    import structlog

    if (
        isinstance(logger, Route)
        and not structlog.is_configured()
        and not logging.getLogger(logger.name).isEnabledFor(LEVELS.get(method_name, logging.INFO))
    ):
        raise structlog.DropEvent
    return event_dict


def pass_through(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """structlog's last processor: the event as the positional argument, the rest as keywords
    (what :class:`Route`'s methods, and structlog's own loggers, take)."""
    data = dict(event_dict)
    event = data.pop("event", "")
    return (event,), data


def route_logger(name: str, processors: Sequence[Any] = ()) -> Any:
    """A structlog logger for ``name`` going through :class:`Route`: an event the logging tree
    would drop is dropped first, then ``processors`` run (a package's redaction, say)."""
    import structlog

    return structlog.wrap_logger(
        Route(name), processors=[drop_when_silent, *processors, pass_through]
    )
