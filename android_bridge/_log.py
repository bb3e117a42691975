"""Loggers for the bridge and the simulated phone: silent unless the application asks.

The library never configures logging. While the application has not configured structlog,
an event becomes a record of the standard ``logging`` tree (logger ``android_bridge.<part>``),
where a ``NullHandler`` on ``android_bridge`` keeps it silent until the application adds a
handler; once the application configures structlog, events follow that configuration. The
routing is :mod:`android_bridge.log_route`'s, which ``starebrain_actions._logging`` builds on
too, with redaction on top. The bridge never puts numbers or bodies in events.
"""

from __future__ import annotations

import logging
from typing import Any

from android_bridge.log_route import route_logger

#: The parent of every logger of this package.
LOGGER_NAME = "android_bridge"

# A library adds no handler but this one: the application decides where records go.
logging.getLogger(LOGGER_NAME).addHandler(logging.NullHandler())


def get_logger(name: str) -> Any:
    """A structlog logger for ``name`` (under ``android_bridge``) that stays silent until the
    application configures logging."""
    return route_logger(name)
