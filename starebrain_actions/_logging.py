"""Logging for the I/O layers: silent unless the application asks, personal data redacted.

The library never configures logging. Its events go through structlog: while the application
has not configured structlog, each event becomes a record of the standard ``logging`` tree
(logger ``starebrain.<layer>``), where a ``NullHandler`` on ``starebrain`` keeps it silent
until the application adds a handler; once the application configures structlog, events
follow that configuration (the route :mod:`android_bridge.log_route` draws, which the bridge's
own loggers take too). ``configure_logging`` is the set-up the ``starebrain`` command uses:
structlog rendered through the standard logging tree to stderr.

Redaction happens in every logger returned by ``get_logger``, whatever the configuration:
values under ``SENSITIVE_KEYS`` are replaced, and phone numbers inside other free text are
found with ``phonenumbers.PhoneNumberMatcher`` (so an address such as ``127.0.0.1:5555`` stays
readable).

structlog and phonenumbers are imported on first use: the first event that would be written,
the first ``configure_logging``. A command whose events may all be below its level (``status``,
``send`` at the default ``warning``) asks for ``configure_logging_on_first_event`` instead, and
runs without them unless something is written (structlog's console renderer alone imports
rich, pygments among it).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
from collections.abc import Callable, MutableMapping
from typing import Any, Final, TextIO

from android_bridge.log_route import route_logger, set_first_event_hook

#: The parent of every logger of this package.
LOGGER_NAME = "starebrain"
#: Event keys whose values are personal data: redacted unless the user opts in.
SENSITIVE_KEYS: frozenset[str] = frozenset(
    {"address", "body", "number", "phone", "recipient", "text", "to", "sms_body"}
)
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
#: Region whose national numbers are redacted in free text unless ``configure_logging`` says
#: otherwise (the same default the Android adapter reads national numbers in).
DEFAULT_REDACTION_REGION = "US"
_SHOW_SENSITIVE_ENV = "STAREBRAIN_LOG_SENSITIVE"
_DIGIT = re.compile(r"\d")

_show_sensitive = os.environ.get(_SHOW_SENSITIVE_ENV, "") == "1"
_redaction_region: str | None = DEFAULT_REDACTION_REGION

# A library adds no handler but this one: the application decides where records go.
logging.getLogger(LOGGER_NAME).addHandler(logging.NullHandler())


def redact_value(value: object) -> str:
    """A stable stand-in for personal data: its length and a short hash, never the text."""
    text = str(value)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
    return f"<redacted len={len(text)} sha256={digest}>"


#: A "+" and digits, with the separators numbers are written with.
_PLUS_NUMBER = re.compile(r"\+\d[\d ()./-]{3,}\d")


#: Brackets read as spaces by a second reading of ``redact_phone_numbers``.
_BLANK_BRACKETS: Final = str.maketrans("()[]", "    ")
#: Plus signs (ASCII and fullwidth) read as spaces by another reading.
_BLANK_PLUSES: Final = str.maketrans("+\uff0b", "  ")


def redact_phone_numbers(
    text: str,
    region: str | None = DEFAULT_REDACTION_REGION,
    replace: Callable[[str], str] = redact_value,
) -> str:
    """``text`` with every phone number in it replaced by ``replace(number)``.

    International numbers (``+`` and a country code) are found whatever ``region`` is, even
    when they are only possible, not valid; national numbers only when they are valid numbers
    of ``region`` grouped as that region writes them (so ``23.120.10.100`` is an address, not
    the US number 231-201-0100). IP addresses, ports, dates and ids are left as they are.
    """
    if not _DIGIT.search(text):
        return text
    import phonenumbers

    passes: list[tuple[str | None, int]] = [(None, phonenumbers.Leniency.POSSIBLE)]
    if region is not None:
        passes.append((region, phonenumbers.Leniency.STRICT_GROUPING))
    spans: list[tuple[int, int]] = []
    # the matcher gives up on a candidate next to brackets it cannot balance ("() 07400
    # 123000"), and on a national number after a stray plus ("\uff0b 07400 123000" reads as
    # "+07400…", no country's): the text is also read with every bracket, then every plus,
    # blanked (same length, same spans)
    texts = [text]
    if any(bracket in text for bracket in "()[]"):
        texts.append(text.translate(_BLANK_BRACKETS))
    if region is not None and any(plus in text for plus in "+\uff0b"):
        texts += [candidate.translate(_BLANK_PLUSES) for candidate in list(texts)]
    for pass_region, leniency in passes:
        for candidate in texts:
            spans.extend(
                (match.start, match.end)
                for match in phonenumbers.PhoneNumberMatcher(
                    candidate, pass_region, leniency=leniency
                )
            )
    # the matcher gives up on a candidate it cannot balance (an unpaired "(" just before it,
    # say): a "+" number it missed is still redacted when it is a possible number
    for found in _PLUS_NUMBER.finditer(text):
        try:
            parsed = phonenumbers.parse(found.group(), None)
        except phonenumbers.NumberParseException:
            continue
        if phonenumbers.is_possible_number(parsed):
            spans.append((found.start(), found.end()))
    if not spans:
        return text
    pieces: list[str] = []
    position = 0
    for start, end in sorted(spans):
        if end <= position:
            continue
        start = max(start, position)
        pieces.append(text[position:start])
        pieces.append(replace(text[start:end]))
        position = end
    pieces.append(text[position:])
    return "".join(pieces)


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
            event_dict[key] = redact_phone_numbers(value, _redaction_region)
    return event_dict


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler writing to whatever ``sys.stderr`` is when a record is emitted."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        """The stream is always the current ``sys.stderr``."""


def configure_logging(
    *,
    json: bool | None = None,
    level: int = logging.INFO,
    show_sensitive: bool | None = None,
    redaction_region: str | None = DEFAULT_REDACTION_REGION,
) -> None:
    """The application's set-up (the ``starebrain`` command, the nightly job, the demo): events
    of this package and of ``android_bridge`` at ``level`` and above, rendered on stderr, as
    JSON lines when ``json`` (default: when stderr is not a terminal), else pretty.

    structlog is configured to log through the standard ``logging`` tree, and one handler on
    the root logger renders every record (calling this again replaces it). Other libraries'
    records still need WARNING: adb-shell logs raw packets, message bodies included, at DEBUG.
    ``show_sensitive`` (or ``STAREBRAIN_LOG_SENSITIVE=1``) turns redaction off;
    ``redaction_region`` is the region whose national numbers are redacted in free text.
    """
    import structlog

    global _show_sensitive, _redaction_region
    _pending.clear()
    set_first_event_hook(None)
    if show_sensitive is not None:
        _show_sensitive = show_sensitive
    _redaction_region = redaction_region
    if json is None:
        json = not sys.stderr.isatty()
    renderers: list[Any] = (
        [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
        if json
        else [structlog.dev.ConsoleRenderer()]
    )
    shared: list[Any] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            *shared,
            redact_sensitive,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )
    _stderr_handler().setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderers],
            foreign_pre_chain=shared,
        )
    )
    for name in (LOGGER_NAME, "android_bridge"):
        logging.getLogger(name).setLevel(level)


def _stderr_handler() -> logging.Handler:
    """The root logger's one handler of ours (named ``starebrain``), added if missing; kept
    when set up again (its formatter is replaced), so that a record being handled while the
    set-up runs is never handed to a second handler."""
    root = logging.getLogger()
    ours = [handler for handler in root.handlers if handler.get_name() == "starebrain"]
    for extra in ours[1:]:
        root.removeHandler(extra)
    if ours:
        return ours[0]
    handler = _StderrHandler()
    handler.set_name("starebrain")
    root.addHandler(handler)
    return handler


#: ``configure_logging``'s arguments, kept by ``configure_logging_on_first_event``.
_pending: dict[str, Any] = {}


def configure_logging_on_first_event(
    *,
    json: bool | None = None,
    level: int = logging.INFO,
    show_sensitive: bool | None = None,
    redaction_region: str | None = DEFAULT_REDACTION_REGION,
) -> None:
    """``configure_logging`` with these arguments, done before the first event that would be
    written (or at once, if structlog is already imported), so that a command whose events
    are all below ``level`` never imports structlog: an event of this package or of
    ``android_bridge`` (their loggers' levels are set at once, and events below them are
    dropped unmade, ``android_bridge.log_route``), or a record of another library reaching
    the root logger's handler, which is installed at once and does the set-up on its first
    record."""
    arguments: dict[str, Any] = {
        "json": json,
        "level": level,
        "show_sensitive": show_sensitive,
        "redaction_region": redaction_region,
    }
    if "structlog" in sys.modules:
        configure_logging(**arguments)
        return
    _pending.clear()
    _pending.update(arguments)
    set_first_event_hook(_configure_pending)
    handler = _stderr_handler()
    handler.setFormatter(_ConfigureOnFirstRecord(handler))
    for name in (LOGGER_NAME, "android_bridge"):
        logging.getLogger(name).setLevel(level)


def _configure_pending() -> None:
    """The pending ``configure_logging_on_first_event``, if it is still pending."""
    if _pending:
        configure_logging(**_pending)


class _ConfigureOnFirstRecord(logging.Formatter):
    """The formatter ``configure_logging_on_first_event`` gives the root handler: the first
    record it formats does the pending set-up, which gives the handler its real formatter,
    and is formatted by it, as every later record is."""

    def __init__(self, handler: logging.Handler) -> None:
        super().__init__()
        self._handler = handler

    def format(self, record: logging.LogRecord) -> str:
        _configure_pending()
        formatter = self._handler.formatter
        if formatter is None or formatter is self:  # pragma: no cover - set up above
            return super().format(record)
        return formatter.format(record)


def get_logger(name: str) -> Any:
    """A logger for ``name`` (under ``starebrain``) that always redacts, whatever the
    configuration, and stays silent until the application configures logging; structlog is
    imported for the first event it would write (``android_bridge.log_route``)."""
    return route_logger(name, [redact_sensitive])
