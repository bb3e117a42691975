"""Where a library's event goes when the library never configures logging: one route that
both the bridge (``android_bridge._log``) and the ledger's package
(``starebrain_actions._logging``, which adds redaction on top) build their loggers on.

While the application has not configured structlog, an event becomes a record of the standard
``logging`` tree under the logger's own name, rendered as ``logfmt`` text (and is dropped
before any other work when that logger would not emit it); once the application configures
structlog, events follow that configuration. It lives in the bridge because the bridge never
imports ``starebrain_actions``.

structlog is imported on first use, not with this module nor with a logger: a logger is made
(and structlog imported) for the first event its ``logging`` logger would emit, so a program
whose events are all below its level never imports structlog (its console renderer alone
imports rich and pygments). An application whose set-up waits for the first event
(``set_first_event_hook``) is called then, before the event is routed.
"""

from __future__ import annotations

import functools
import logging
import sys
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
    would drop is dropped first, then ``processors`` run (a package's redaction, say). It is
    made on first use (:class:`_LazyRoute`)."""
    return _LazyRoute(name, tuple(processors))


#: Called once, before the first event a logger would emit is routed (``set_first_event_hook``).
_first_event_hook: Callable[[], None] | None = None


def set_first_event_hook(hook: Callable[[], None] | None) -> None:
    """Have ``hook`` called once, before the first event that a logger of this route would
    emit (or the first use of a logger's other methods, ``bind`` say): an application's
    logging set-up, done only if something logs. None: no hook."""
    global _first_event_hook
    _first_event_hook = hook


def _drop(*_args: Any, **_kwargs: Any) -> None:
    """An event dropped before structlog is imported (what ``drop_when_silent`` does)."""


class _LazyRoute:
    """``route_logger``'s logger: structlog's, made when it is first needed. Until then, an
    event at a level its ``logging`` logger would not emit is dropped here, as
    ``drop_when_silent`` would drop it (structlog, not imported, cannot be configured), and
    nothing is imported; the first other use calls the first-event hook, if any, imports
    structlog and makes the logger."""

    __slots__ = ("_logger", "_name", "_processors")

    def __init__(self, name: str, processors: tuple[Any, ...]) -> None:
        self._name = name
        self._processors = processors
        self._logger: Any = None

    def __getattr__(self, method_name: str) -> Any:
        if method_name.startswith("__"):
            raise AttributeError(method_name)
        logger = self._logger
        if logger is None:
            level = LEVELS.get(method_name)
            if (
                level is not None
                and "structlog" not in sys.modules
                and not logging.getLogger(self._name).isEnabledFor(level)
            ):
                return _drop
            global _first_event_hook
            hook, _first_event_hook = _first_event_hook, None
            if hook is not None:
                hook()
            import structlog

            logger = self._logger = structlog.wrap_logger(
                Route(self._name), processors=[drop_when_silent, *self._processors, pass_through]
            )
        return getattr(logger, method_name)
