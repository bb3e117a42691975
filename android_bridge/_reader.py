"""Windowed, exact reads of ``content://sms`` that say whether they prove anything.

One read is one shell round trip running five ``content query`` commands over the same
window (``_id`` above a watermark, optionally ``date`` after a time):

1. an integer query (``_id``, ``thread_id``, ``type``, ``status``, ``date``, ``date_sent``,
   ``sub_id``, ``error_code``): unambiguous, it fixes the exact list of rows;
2. three text queries, ``_id`` plus one of ``address``, ``body``, ``creator`` each, parsed
   against that list (see :mod:`android_bridge._parser`);
3. the integer query again: if it differs from the first, the window changed mid-read and the
   read is retried once, then refused.

Completeness: the window always includes the anchor row ``_id == after_id``, a row known to
exist. If it comes back, the provider really answered and the window is whole; if it does not
(``No result found.``, an error, the row deleted), the read proves nothing. With no anchor
(``after_id == 0``: nothing was ever seen on the phone) a read is complete only if it returns
at least one row. A text value that prints as ``NULL`` is resolved by a second round trip.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import structlog

from android_bridge._device import Device
from android_bridge._parser import parse_int_rows, parse_text_column
from android_bridge._records import OUTGOING_TYPES, ProviderRead, SmsMessage
from android_bridge._shell import posix_quote
from android_bridge.exceptions import IncompleteRead, UnparseableOutput

_log = structlog.get_logger("android_bridge.reader")

#: Integer columns read in the integer query, in projection order.
INT_COLUMNS: tuple[str, ...] = (
    "_id",
    "thread_id",
    "type",
    "status",
    "date",
    "date_sent",
    "sub_id",
    "error_code",
)
#: Free-text columns, each read by its own query.
TEXT_COLUMNS: tuple[str, ...] = ("address", "body", "creator")
#: Types the shell user can see through the restricted view.
SHELL_VISIBLE_TYPES: tuple[int, ...] = (1, 2)
ALL_TYPES: tuple[int, ...] = (1, 2, 3, 4, 5, 6)
_MAX_INT = 2**63 - 1


def _checked_int(value: int, name: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int")
    if not minimum <= value <= _MAX_INT:
        raise ValueError(f"{name} out of range: {value}")
    return value


def build_where(after_id: int, *, since_ms: int | None, types: Sequence[int]) -> str:
    """The ``--where`` clause of a window, built only from validated integers.

    ``_id = after_id`` (the anchor) ``OR (_id > after_id AND type IN (…) [AND date >= …])``.
    """
    anchor = _checked_int(after_id, "after_id")
    type_list = sorted({_checked_int(t, "type", minimum=1) for t in types})
    if not type_list:
        raise ValueError("types must not be empty")
    clauses = [f"_id > {anchor}", f"type IN ({','.join(str(t) for t in type_list)})"]
    if since_ms is not None:
        clauses.append(f"date >= {_checked_int(since_ms, 'since_ms')}")
    window = " AND ".join(clauses)
    if anchor == 0:
        return window
    return f"_id = {anchor} OR ({window})"


def content_query(uri: str, projection: Iterable[str], where: str, sort: str = "_id ASC") -> str:
    """The ``content query`` command line, every argument POSIX-quoted."""
    return " ".join(
        [
            "content query --uri",
            posix_quote(uri),
            "--projection",
            posix_quote(":".join(projection)),
            "--where",
            posix_quote(where),
            "--sort",
            posix_quote(sort),
        ]
    )


class SmsReader:
    """Reads windows of ``content://sms`` on one device."""

    def __init__(self, device: Device, *, uri: str = "content://sms") -> None:
        self._device = device
        self._uri = uri

    async def read_since(
        self,
        after_id: int,
        *,
        since_ms: int | None = None,
        types: Sequence[int] = OUTGOING_TYPES,
        anchor_date_ms: int | None = None,
    ) -> ProviderRead:
        """Read rows with ``_id > after_id`` (and ``date >= since_ms``) of the given types.

        ``anchor_date_ms`` is the anchor row's ``date`` when the watermark was taken
        (:attr:`DispatchEvidence.watermark_date_ms`). The provider does not use AUTOINCREMENT,
        so if the anchor row is deleted its ``_id`` can be reused by the next message; a
        row at ``after_id`` with another ``date`` is then reported as a candidate, and the
        read is not complete.

        One round trip (two if a text value reads ``NULL``, three if the window changed while
        it was read). ``complete`` is true only if the anchor row came back (see module doc).

        Raises:
            DeviceUnreachable / OutcomeUnknown: transport failures (a read has no side effect).
            ProviderError: the provider printed an error.
            UnparseableOutput: the output cannot be parsed exactly.
            IncompleteRead: the output was truncated or the window kept changing.
        """
        where = build_where(after_id, since_ms=since_ms, types=types)
        mode = await self._device.mode()
        round_trips = 0
        for attempt in range(2):
            round_trips += 1
            try:
                ints, texts = await self._read_once(where)
            except IncompleteRead:
                if attempt == 1:
                    raise
                _log.info("sms_window_changed_retrying", device=self._device.serial)
                continue
            break
        values = {column: texts[index] for index, column in enumerate(TEXT_COLUMNS)}
        ambiguous = {
            column: [row_id for row_id, text in column_values.items() if text == "NULL"]
            for column, column_values in values.items()
        }
        resolved: dict[str, dict[int, str | None]] = {
            column: dict(column_values) for column, column_values in values.items()
        }
        if any(ambiguous.values()):
            round_trips += 1
            nulls = await self._resolve_nulls(ambiguous)
            for column, ids in ambiguous.items():
                for row_id in ids:
                    resolved[column][row_id] = None if row_id in nulls[column] else "NULL"
        rows: list[SmsMessage] = []
        anchor_seen = False
        anchor_replaced = False
        for row in ints:
            message_id = row[0]
            if message_id is None:
                raise UnparseableOutput("a row has no _id")
            message_type = row[2]
            if message_type is None:
                raise UnparseableOutput(f"row {message_id} has no type")
            if message_id == after_id:
                if anchor_date_ms is None or row[4] == anchor_date_ms:
                    anchor_seen = True
                    continue
                anchor_replaced = True
                if message_type not in types or (since_ms is not None and (row[4] or 0) < since_ms):
                    continue
            rows.append(
                SmsMessage(
                    id=message_id,
                    thread_id=row[1],
                    type=message_type,
                    status=row[3],
                    date_ms=row[4],
                    date_sent_ms=row[5],
                    sub_id=row[6],
                    error_code=row[7],
                    address=resolved["address"][message_id],
                    body=resolved["body"][message_id],
                    creator=resolved["creator"][message_id],
                )
            )
        ids = [row[0] for row in ints if row[0] is not None]
        max_seen = max([after_id, *ids])
        if after_id == 0:
            complete = bool(ids)
            reason = None if complete else "no anchor row and no rows: the read proves nothing"
        elif anchor_replaced:
            complete = False
            reason = f"anchor row _id={after_id} was replaced by another row (id reused)"
        else:
            complete = anchor_seen
            reason = None if complete else f"anchor row _id={after_id} did not come back"
        if ids:
            self._device.known_max_id = max(self._device.known_max_id, max_seen)
        visible = SHELL_VISIBLE_TYPES if mode == "shell" else ALL_TYPES
        _log.info(
            "sms_window_read",
            device=self._device.serial,
            after_id=after_id,
            rows=len(rows),
            complete=complete,
            mode=mode,
        )
        return ProviderRead(
            rows=tuple(rows),
            complete=complete,
            mode=mode,
            visible_types=tuple(t for t in sorted(set(types)) if t in visible),
            after_id=after_id,
            since_ms=since_ms,
            max_seen_id=max_seen,
            round_trips=round_trips,
            incomplete_reason=reason,
        )

    async def _read_once(
        self, where: str
    ) -> tuple[list[tuple[int | None, ...]], list[dict[int, str]]]:
        int_query = content_query(self._uri, INT_COLUMNS, where)
        steps = [int_query]
        steps += [
            content_query(self._uri, ("_id", column), where) + " 2>/dev/null"
            for column in TEXT_COLUMNS
        ]
        steps.append(int_query)
        outputs = await self._device.run(steps)
        first = parse_int_rows(outputs[0].output, INT_COLUMNS)
        last = parse_int_rows(outputs[-1].output, INT_COLUMNS)
        if first != last:
            raise IncompleteRead("the window changed while it was being read")
        ids = [row[0] for row in first if row[0] is not None]
        texts = [
            parse_text_column(outputs[1 + index].output, column, ids)
            for index, column in enumerate(TEXT_COLUMNS)
        ]
        return first, texts

    async def _resolve_nulls(self, ambiguous: dict[str, list[int]]) -> dict[str, set[int]]:
        """For values printed as ``NULL``, ask which are SQL NULL and which the text.

        Both answers are integer queries; their union must cover every ambiguous id, so a
        query that silently failed (``No result found.``) cannot go unnoticed.
        """
        columns = [column for column, ids in ambiguous.items() if ids]
        steps: list[str] = []
        for column in columns:
            id_list = ",".join(str(_checked_int(i, "_id")) for i in ambiguous[column])
            base = f"_id IN ({id_list}) AND {column}"
            steps.append(content_query(self._uri, ("_id",), f"{base} IS NULL"))
            steps.append(content_query(self._uri, ("_id",), f"{base} = 'NULL'"))
        outputs = await self._device.run(steps)
        result: dict[str, set[int]] = {}
        for index, column in enumerate(columns):
            null_ids = {row[0] for row in parse_int_rows(outputs[2 * index].output, ("_id",))}
            text_ids = {row[0] for row in parse_int_rows(outputs[2 * index + 1].output, ("_id",))}
            if null_ids & text_ids or (null_ids | text_ids) != set(ambiguous[column]):
                raise IncompleteRead(f"could not tell SQL NULL from the text NULL in {column}")
            result[column] = {i for i in null_ids if i is not None}
        return result


#: Projection of the watermark query.
LATEST_COLUMNS: tuple[str, ...] = ("_id", "date")


def latest_ids_query(known_max_id: int, uri: str = "content://sms") -> str:
    """The command listing ``_id`` and ``date`` of every visible row at or above
    ``known_max_id`` (0: of every row)."""
    anchor = _checked_int(known_max_id, "known_max_id")
    where = f"_id >= {anchor}" if anchor else "_id > 0"
    return content_query(uri, LATEST_COLUMNS, where)
