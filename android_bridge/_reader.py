"""Windowed, paged, exact reads of ``content://sms`` that say whether they prove anything.

A window is every row with ``_id`` above a watermark (the *anchor*, a row known to exist),
optionally only of some types and dated at or after a time. Pages are cut by ``LIMIT`` in
``--sort`` (``_id ASC LIMIT n``): ``SmsProvider.query`` hands the caller's sort order to
``SQLiteQueryBuilder.query`` as its ``orderBy``, which appends it after ``ORDER BY``, and the
only check a restricted caller's sort order meets is ``SqlQueryChecker`` (no ``SELECT``
token, no ``;``, no unterminated quote or comment), which ``LIMIT`` passes (TelephonyProvider
``SmsProvider.java`` and ``SqlQueryChecker.java`` at android-10.0.0_r30 and
android-15.0.0_r17; the simulator models it: ``simulator/_telephony.py`` ``_build_query``).

One page is one shell round trip running, over the page's ``--where`` and ``--sort``:

1. an integer query (``_id``, ``thread_id``, ``type``, ``status``, ``date``, ``date_sent``,
   ``sub_id``, ``error_code``) of the page's anchor row and the next ``n`` window rows
   (``LIMIT n+1``): unambiguous, it fixes the exact list of rows;
2. three text queries, ``_id`` plus one of ``address``, ``body``, ``creator`` each, of the
   same ``n`` window rows without the anchor (``LIMIT n``), parsed against that list (see
   :mod:`android_bridge._parser`; stderr is discarded there so a stray warning cannot end up
   inside the last body). The first anchor's text is never read: it is an incoming message
   (text a stranger chose) or the previous outgoing one, and a body quoting the next row's
   header would make every later read refuse; a later page's anchor is the previous page's
   last row, whose text that page read;
3. the integer query again: if it differs from the first, the rows changed mid-read and the
   page is retried once, then refused.

A page that holds ``n`` window rows may not be the last: the next page is anchored at its
last row. Every ``--where`` starts with a plain ``_id`` range (no top-level ``OR``), so
SQLite walks the rowid index from the anchor on: the cost depends on the new rows, not the
box size, and a read of ``r`` rows takes ``r // n + 1`` round trips.

Completeness: every page includes its anchor row, a row known to exist (the read's anchor
``_id == after_id``, then the last row of the page before). If each comes back, the provider
really answered every page, and the window (as of each round trip) is whole; if one does not
(``No result found.``, an error, the row deleted), the read proves nothing. ``_id`` values
are not AUTOINCREMENT on Android, so a deleted anchor's id can be reused: given the anchor's
``date`` the reader tells the two apart. With no anchor (``after_id == 0``: nothing was ever
seen on the phone) the first page has none, and the read is complete only if it returns at
least one row. A text value that prints as ``NULL`` is resolved by one more round trip.

Bounded work: a page's cost on the phone grows with its rows (four queries over them, their
text printed and sent back), and a slow phone (a large box on old flash, a busy provider)
can take longer over a full page than the command timeout allows. A page whose round trip
times out is read again, from the same anchor, in pages a quarter of its size
(``SHRINK_FACTOR``), down to ``MIN_PAGE_SIZE`` rows, before the read gives up: a read has
no side effect, so reading a page again is safe (the smaller size is kept for the rest of
the read). Only a time-out is retried so: a refused connection or a reset link fails the
read at once, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from android_bridge._device import Device, timed_out
from android_bridge._log import get_logger
from android_bridge._mms import parse_pdus, pdu_query, read_details
from android_bridge._parser import content_query, parse_int_rows, parse_text_column
from android_bridge._records import (
    OUTGOING_TYPES,
    DispatchEvidence,
    MmsMessage,
    ProviderRead,
    SmsMessage,
)
from android_bridge.exceptions import IncompleteRead, OutcomeUnknown, UnparseableOutput

_log = get_logger("android_bridge.reader")

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
#: Default page size, in rows (``LIMIT``): about 1 MB of output for rows of a typical size,
#: and a read of 10,000 rows in 3 round trips.
DEFAULT_PAGE_SIZE = 4_000
#: The smallest page a time-out shrinks a read's pages to; a page this small that still times
#: out fails the read (the phone is then reported unreadable).
MIN_PAGE_SIZE = 50
#: A page that timed out is read again in pages this many times smaller.
SHRINK_FACTOR = 4
#: Projection of the watermark query.
LATEST_COLUMNS: tuple[str, ...] = ("_id", "date")
_MAX_INT = 2**63 - 1

IntRow = tuple[int | None, ...]


def _checked_int(value: int, name: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int")
    if not minimum <= value <= _MAX_INT:
        raise ValueError(f"{name} out of range: {value}")
    return value


def window_filter(*, since_ms: int | None, types: Sequence[int]) -> str:
    """``type IN (…) [AND date >= …]``, built only from validated integers.

    Raises:
        TypeError / ValueError: a non-integer or out-of-range value, or no types.
    """
    type_list = sorted({_checked_int(t, "type", minimum=1) for t in types})
    if not type_list:
        raise ValueError("types must not be empty")
    clause = f"type IN ({','.join(str(t) for t in type_list)})"
    if since_ms is not None:
        clause += f" AND date >= {_checked_int(since_ms, 'since_ms')}"
    return clause


def _in_window(row: IntRow, *, types: Sequence[int], since_ms: int | None) -> bool:
    """Whether an integer row passes the window filter, as SQL would judge it."""
    row_type, date = row[2], row[4]
    if row_type is None or row_type not in types:
        return False
    return since_ms is None or (date is not None and date >= since_ms)


def latest_ids_query(uri: str = "content://sms", *, prefix: str = "") -> str:
    """The command giving ``_id`` and ``date`` of the highest visible row (``_id DESC LIMIT
    1``: see the module docstring for why ``LIMIT`` works): a send's watermark, whatever id
    was seen before (ids are reused once the latest rows are deleted)."""
    return content_query(uri, LATEST_COLUMNS, "_id > 0", "_id DESC LIMIT 1", prefix=prefix)


def _gaps(seen: set[int], *, low: int) -> tuple[tuple[int, int], ...]:
    """The ``_id`` ranges (inclusive) above ``low`` and below ``max(seen)`` that ``seen``
    leaves out."""
    gaps = []
    previous = low
    for row_id in sorted(i for i in seen if i > low):
        if row_id > previous + 1:
            gaps.append((previous + 1, row_id - 1))
        previous = row_id
    return tuple(gaps)


def _anchor_reused(
    first_ints: Sequence[IntRow],
    anchor: int,
    anchor_date_ms: int | None,
    *,
    types: Sequence[int],
    since_ms: int | None,
) -> bool:
    """Whether the first page shows the anchor's id held by another row (another ``date``)
    that is in the window."""
    return any(
        anchor
        and row[0] == anchor
        and anchor_date_ms is not None
        and row[4] != anchor_date_ms
        and _in_window(row, types=types, since_ms=since_ms)
        for row in first_ints
    )


def _merged_ints(pages: Sequence[_Page], anchor: int) -> list[IntRow]:
    """The pages' integer rows in ``_id`` order, each once.

    Every page but the first leaves out its anchor: a row of the page before, or (the
    one-row page reading a replaced anchor's text) the first page's own anchor row.
    """
    first = pages[0]
    ints = [
        row
        for page in pages
        for row in page.ints
        if page is first or row[0] != (page.anchor_id or anchor)
    ]
    return sorted(ints, key=lambda row: row[0] or 0)


def _messages(
    ints: Sequence[IntRow],
    texts: dict[str, dict[int, str | None]],
    anchor: int,
    anchor_date_ms: int | None,
    *,
    types: Sequence[int],
    since_ms: int | None,
) -> tuple[list[SmsMessage], bool, bool]:
    """The read's messages (the anchor row left out, unless another row reused its id and is
    in the window), whether the anchor row came back, and whether its id now holds another
    row.

    Raises:
        UnparseableOutput: a row has no ``_id`` or no ``type``.
    """
    rows: list[SmsMessage] = []
    anchor_seen = False
    anchor_replaced = False
    for row in ints:
        message_id, message_type = row[0], row[2]
        if message_id is None or message_type is None:
            raise UnparseableOutput("a row has no _id or no type")
        if message_id == anchor:
            if anchor_date_ms is None or row[4] == anchor_date_ms:
                anchor_seen = True
                continue
            anchor_replaced = True
            if not _in_window(row, types=types, since_ms=since_ms):
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
                address=texts["address"][message_id],
                body=texts["body"][message_id],
                creator=texts["creator"][message_id],
            )
        )
    return rows, anchor_seen, anchor_replaced


def _completeness(
    anchor: int,
    *,
    any_rows: bool,
    anchor_seen: bool,
    anchor_replaced: bool,
    lost_anchor: int | None,
) -> tuple[bool, str | None]:
    """Whether the read proves the window whole, and if not, why (see the module doc)."""
    if anchor == 0 and not any_rows:
        return False, "no anchor row and no rows: the read proves nothing"
    if anchor == 0:
        if lost_anchor is None:
            return True, None
        return False, f"page anchor row _id={lost_anchor} did not come back"
    if anchor_replaced:
        return False, f"anchor row _id={anchor} was replaced by another row (id reused)"
    if not anchor_seen:
        return False, f"anchor row _id={anchor} did not come back"
    if lost_anchor is not None:
        return False, f"page anchor row _id={lost_anchor} did not come back"
    return True, None


def _unseen_and_visible(
    others_output: str, anchor: int, ints: Sequence[IntRow]
) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int | None], ...]]:
    """From the window's rows and the output listing the visible rows outside it: the ``_id``
    ranges above the anchor no visible row holds, and every visible row above the anchor as
    ``(_id, date)``, in ``_id`` order."""
    ids = [row[0] for row in ints if row[0] is not None]
    others = parse_int_rows(others_output, LATEST_COLUMNS)
    seen = {anchor, *ids, *(row[0] for row in others if row[0] is not None)}
    unseen = _gaps(seen, low=anchor)
    dated: dict[int, int | None] = {
        row[0]: row[4] for row in ints if row[0] is not None and row[0] > anchor
    }
    dated.update((row[0], row[1]) for row in others if row[0] is not None and row[0] > anchor)
    return unseen, tuple(sorted(dated.items()))


@attrs.frozen(kw_only=True)
class _Window:
    """What a read asks for, whatever its anchor (see :meth:`SmsReader.read_since`)."""

    #: only rows dated at or after this (phone clock, ms); None: any date
    since_ms: int | None
    #: the ``type`` values read
    types: Sequence[int]
    #: also read outgoing MMS above this ``content://mms`` ``_id``; None: no MMS
    mms_after_id: int | None
    #: the MMS read's ``since_ms`` (None: ``since_ms``)
    mms_since_ms: int | None
    #: also list the visible rows above the anchor outside the window
    find_unseen: bool


@attrs.frozen(kw_only=True)
class _Page:
    ints: list[IntRow]
    texts: dict[str, dict[int, str]]
    #: the row the page was anchored at (None: the first page of a read with no anchor)
    anchor_id: int | None
    #: how many window rows (the anchor left out) the page holds
    window_rows: int
    #: the most window rows it could hold (its ``LIMIT``; None: no limit)
    size: int | None = None
    #: outputs of extra steps that rode in this page's round trip
    extra: tuple[str, ...] = ()


class SmsReader:
    """Reads windows of ``content://sms`` on one device."""

    def __init__(
        self,
        device: Device,
        *,
        uri: str = "content://sms",
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        self._device = device
        self._uri = uri
        self._page_size = page_size

    def _query(self, projection: Iterable[str], where: str, sort: str = "_id ASC") -> str:
        return content_query(self._uri, projection, where, sort, prefix=self._device.content_prefix)

    async def read_since(
        self,
        after_id: int,
        *,
        since_ms: int | None = None,
        types: Sequence[int] = OUTGOING_TYPES,
        anchor_date_ms: int | None = None,
        mms_after_id: int | None = None,
        mms_since_ms: int | None = None,
        find_unseen: bool = False,
        reanchor_before_ms: int | None = None,
    ) -> ProviderRead:
        """Read rows with ``_id > after_id`` (and ``date >= since_ms``) of the given types.

        ``reanchor_before_ms``: when the anchor row is gone or its ``_id`` now holds another
        row (ids are reused once the latest rows are deleted: ``_id INTEGER PRIMARY KEY``
        without AUTOINCREMENT, ``MmsSmsDatabaseHelper`` android-10.0.0_r30 and
        android-15.0.0_r1), read again from a row that exists now: the highest visible one
        dated before this (phone clock, ms), or from the first row when there is none (a
        wiped phone). A row inserted after that one has a higher ``_id`` (each insert takes
        the highest ``_id`` plus one), so every row written since the time is above it. One
        round trip to find it, then the read again; ``ProviderRead.reanchored_from`` names
        the anchor that was gone.

        ``after_id`` is the anchor: normally :attr:`DispatchEvidence.watermark_id`, a row
        known to exist. ``anchor_date_ms`` is its ``date``
        (:attr:`DispatchEvidence.watermark_date_ms`): a row at ``after_id`` with another
        ``date`` reused a deleted anchor's id; it is reported as a candidate and the read is
        not complete.

        Round trips: one per page of ``page_size`` rows (one for the usual handful of new
        rows), plus one if a text value reads ``NULL``, plus one per page that changed while
        it was read. ``complete`` is true only if the anchor row, and each later page's
        anchor, came back (see module doc).

        ``mms_after_id``: also read outgoing MMS above this ``content://mms`` ``_id`` (a
        converted message lands there; see :mod:`android_bridge._mms`): their first query
        rides in the first page's round trip, and one more round trip reads their addresses
        and text when there are any (only those dated from ``mms_since_ms`` on, when given).
        They come back in ``mms_rows``.

        ``find_unseen``: also list the ``_id`` of every visible row above the anchor outside
        the window (incoming messages, say), in the first page's round trip, after its window
        query (a row with a lower ``_id`` than a window row was inserted before it, so it is
        listed), and report the ids no visible row holds in ``unseen_ids``. A row inserted
        between two pages may show up as unseen: the gaps err towards too many.

        Raises:
            DeviceUnreachable / OutcomeUnknown: transport failures (a read has no side effect).
            ProviderError: the provider printed an error.
            UnparseableOutput: the output cannot be parsed exactly.
            IncompleteRead: the output was truncated or the rows kept changing.
        """
        window = _Window(
            since_ms=since_ms,
            types=types,
            mms_after_id=mms_after_id,
            mms_since_ms=mms_since_ms,
            find_unseen=find_unseen,
        )
        read = await self._read_once(after_id, anchor_date_ms=anchor_date_ms, window=window)
        if read.complete or not after_id or read.anchor_present or reanchor_before_ms is None:
            return read
        before = self._device.round_trips
        new_id, new_date = await self._latest_row_before(reanchor_before_ms)
        _log.info(
            "sms_read_reanchored",
            device=self._device.serial,
            gone_anchor=after_id,
            new_anchor=new_id,
        )
        again = await self._read_once(new_id, anchor_date_ms=new_date, window=window)
        return attrs.evolve(
            again,
            reanchored_from=after_id,
            # the first read, then the search for a row and the read again
            round_trips=read.round_trips + self._device.round_trips - before,
        )

    async def _latest_row_before(self, before_ms: int) -> tuple[int, int | None]:
        """``_id`` and ``date`` of the highest visible row dated before ``before_ms`` (one round
        trip): ``(0, None)`` when there is none."""
        (step,) = await self._device.run(
            [
                self._query(
                    LATEST_COLUMNS,
                    f"date < {_checked_int(before_ms, 'reanchor_before_ms')}",
                    "_id DESC LIMIT 1",
                )
            ]
        )
        found = [row for row in parse_int_rows(step.output, LATEST_COLUMNS) if row[0] is not None]
        return (found[0][0] or 0, found[0][1]) if found else (0, None)

    async def _read_once(
        self, after_id: int, *, anchor_date_ms: int | None, window: _Window
    ) -> ProviderRead:
        """One read anchored at ``after_id`` (see :meth:`read_since`): its pages, their rows
        merged with their text, then what the read proves and what else it saw."""
        anchor = _checked_int(after_id, "after_id")
        since_ms, types = window.since_ms, window.types
        filters = window_filter(since_ms=since_ms, types=types)
        mode = await self._device.mode()
        before = self._device.round_trips
        extra = self._extra_steps(anchor, filters, window)
        pages, lost_anchor = await self._read_pages(filters, anchor, extra)
        first = pages[0]
        if _anchor_reused(first.ints, anchor, anchor_date_ms, types=types, since_ms=since_ms):
            # The anchor's id was reused by a row in the window: it is a candidate, so its
            # text is needed after all (a one-row page cannot be split ambiguously).
            pages.append(await self._read_page(f"_id = {anchor} AND {filters}", None, whole=True))
        ints = _merged_ints(pages, anchor)
        texts = await self._merged_texts(pages)
        rows, anchor_seen, anchor_replaced = _messages(
            ints, texts, anchor, anchor_date_ms, types=types, since_ms=since_ms
        )
        ids = [row[0] for row in ints if row[0] is not None]
        complete, reason = _completeness(
            anchor,
            any_rows=bool(ids),
            anchor_seen=anchor_seen,
            anchor_replaced=anchor_replaced,
            lost_anchor=lost_anchor,
        )
        unseen: tuple[tuple[int, int], ...] | None = None
        visible_rows: tuple[tuple[int, int | None], ...] | None = None
        if window.find_unseen:
            unseen, visible_rows = _unseen_and_visible(first.extra[-1], anchor, ints)
        mms_rows: tuple[MmsMessage, ...] = ()
        if window.mms_after_id is not None:
            pdus = parse_pdus(first.extra[0])
            if pdus:
                mms_rows = await read_details(
                    self._device, pdus, prefix=self._device.content_prefix
                )
        max_seen = max([anchor, *ids])
        if ids:
            self._device.known_max_id = max(self._device.known_max_id, max_seen)
        visible = ALL_TYPES if await self._device.full_view() else SHELL_VISIBLE_TYPES
        _log.info(
            "sms_window_read",
            device=self._device.serial,
            after_id=anchor,
            rows=len(rows),
            pages=len(pages),
            complete=complete,
            mode=mode,
        )
        return ProviderRead(
            rows=tuple(rows),
            complete=complete,
            mode=mode,
            visible_types=tuple(t for t in sorted(set(types)) if t in visible),
            after_id=anchor,
            since_ms=since_ms,
            max_seen_id=max_seen,
            round_trips=self._device.round_trips - before,
            incomplete_reason=reason,
            mms_rows=mms_rows,
            unseen_ids=unseen,
            visible_rows=visible_rows,
            anchor_present=bool(anchor) and anchor_seen,
        )

    def _extra_steps(self, anchor: int, filters: str, window: _Window) -> tuple[str, ...]:
        """The queries that ride in the first page's round trip: the outgoing MMS above
        ``window.mms_after_id``, then the visible rows above the anchor outside the window
        (``window.find_unseen``), each when asked for, in that order."""
        extra: tuple[str, ...] = ()
        if window.mms_after_id is not None:
            mms_since = window.mms_since_ms if window.mms_since_ms is not None else window.since_ms
            since_s = max(0, mms_since // 1000) if mms_since is not None else None
            extra = (
                pdu_query(window.mms_after_id, since_s=since_s, prefix=self._device.content_prefix),
            )
        if window.find_unseen:
            extra += (self._query(LATEST_COLUMNS, f"_id > {anchor} AND NOT ({filters})"),)
        return extra

    async def _read_pages(
        self, filters: str, anchor: int, extra: tuple[str, ...]
    ) -> tuple[list[_Page], int | None]:
        """The read's pages, the first one carrying ``extra``, and the page anchor row that did
        not come back (None: each did, or there was one page).

        A full page may not be the last: the next one is anchored at its last row, which
        must come back in it (unless it is the read's own anchor, which the caller checks).
        A page that times out is read again smaller (see the module docstring).
        """
        size = self._page_size
        if anchor == 0:
            first, size = await self._read_shrinking(
                f"_id > 0 AND {filters}", None, size, extra_steps=extra
            )
        else:
            first, size = await self._read_shrinking(filters, anchor, size, extra_steps=extra)
        pages = [first]
        page = first
        while page.window_rows == page.size:
            last = page.ints[-1]
            if last[0] is None:
                raise UnparseableOutput("a row has no _id")
            page, size = await self._read_shrinking(filters, last[0], size)
            pages.append(page)
            # the same row: its id and its date (an id can be reused; a status can change)
            if not page.ints or (page.ints[0][0], page.ints[0][4]) != (last[0], last[4]):
                return pages, last[0]
        return pages, None

    async def _read_shrinking(
        self,
        filters: str,
        anchor_id: int | None,
        size: int,
        *,
        extra_steps: Sequence[str] = (),
    ) -> tuple[_Page, int]:
        """One page of at most ``size`` window rows, read again in smaller pages while it times
        out (down to ``MIN_PAGE_SIZE``); the page and the size it was read at.

        Raises:
            OutcomeUnknown: a page of the smallest size timed out too, or the link failed.
        """
        while True:
            try:
                return (
                    await self._read_page(filters, anchor_id, size=size, extra_steps=extra_steps),
                    size,
                )
            except OutcomeUnknown as exc:
                smaller = max(MIN_PAGE_SIZE, size // SHRINK_FACTOR)
                if not timed_out(exc) or smaller >= size:
                    raise
                _log.warning(
                    "sms_page_timed_out_reading_smaller",
                    device=self._device.serial,
                    anchor_id=anchor_id,
                    rows=size,
                    smaller=smaller,
                )
                size = smaller

    async def _merged_texts(self, pages: Sequence[_Page]) -> dict[str, dict[int, str | None]]:
        """Every page's text columns by ``_id``, a value printed as ``NULL`` resolved (one
        more round trip) to SQL NULL (None) or the text ``NULL``."""
        texts: dict[str, dict[int, str | None]] = {column: {} for column in TEXT_COLUMNS}
        for page in pages:
            for column in TEXT_COLUMNS:
                texts[column].update(page.texts[column])
        ambiguous = {
            column: [row_id for row_id, text in values.items() if text == "NULL"]
            for column, values in texts.items()
        }
        if any(ambiguous.values()):
            nulls = await self._resolve_nulls(ambiguous)
            for column, ids in ambiguous.items():
                for row_id in ids:
                    texts[column][row_id] = None if row_id in nulls[column] else "NULL"
        return texts

    async def read_after(
        self, evidence: DispatchEvidence, *, since_ms: int | None = None
    ) -> ProviderRead:
        """The confirmation read for one dispatch: outgoing rows above its watermark.

        Same as :meth:`read_since` with the evidence's watermark and anchor date.
        """
        return await self.read_since(
            evidence.watermark_id,
            since_ms=since_ms,
            anchor_date_ms=evidence.watermark_date_ms,
        )

    async def _read_page(
        self,
        filters: str,
        anchor_id: int | None,
        *,
        size: int | None = None,
        whole: bool = False,
        extra_steps: Sequence[str] = (),
    ) -> _Page:
        """Read one page, retrying once if its rows changed while it was read.

        ``anchor_id`` given: the anchor row and up to ``size`` (default: the reader's page
        size) window rows above it (``filters``); the anchor's text is not read. None: up to
        ``size`` rows of ``filters`` itself, or every one of them when ``whole`` (a one-row
        page).
        """
        page_size = self._page_size if size is None else size
        if anchor_id is None:
            where = text_where = filters
            limit = None if whole else page_size
            int_limit = limit
        else:
            where = f"_id >= {anchor_id} AND (_id = {anchor_id} OR ({filters}))"
            text_where = f"_id > {anchor_id} AND {filters}"
            limit = page_size
            int_limit = limit + 1
        for attempt in range(2):
            try:
                return await self._read_page_once(
                    where,
                    text_where,
                    anchor_id=anchor_id,
                    int_limit=int_limit,
                    text_limit=limit,
                    extra_steps=extra_steps,
                )
            except IncompleteRead:
                if attempt == 1:
                    raise
                _log.info("sms_page_changed_retrying", device=self._device.serial)
        raise AssertionError("unreachable")

    async def _read_page_once(
        self,
        where: str,
        text_where: str,
        *,
        anchor_id: int | None,
        int_limit: int | None,
        text_limit: int | None,
        extra_steps: Sequence[str] = (),
    ) -> _Page:
        int_sort = "_id ASC" if int_limit is None else f"_id ASC LIMIT {int_limit}"
        text_sort = "_id ASC" if text_limit is None else f"_id ASC LIMIT {text_limit}"
        int_query = self._query(INT_COLUMNS, where, int_sort)
        steps = [int_query]
        steps += [
            self._query(("_id", column), text_where, text_sort) + " 2>/dev/null"
            for column in TEXT_COLUMNS
        ]
        steps.append(int_query)
        steps.extend(extra_steps)
        outputs = await self._device.run(steps, one_write=True)
        extra = tuple(step.output for step in outputs[len(outputs) - len(extra_steps) :])
        outputs = outputs[: len(outputs) - len(extra_steps)]
        first = parse_int_rows(outputs[0].output, INT_COLUMNS)
        again = parse_int_rows(outputs[1 + len(TEXT_COLUMNS)].output, INT_COLUMNS)
        if first != again:
            raise IncompleteRead("the rows changed while they were being read")
        window = [row for row in first if row[0] != anchor_id]
        if text_limit is not None and len(window) > text_limit:
            # the anchor did not come back, so LIMIT n+1 let one more window row in than the
            # text queries (LIMIT n) read: it is left to the next page
            cutoff = window[text_limit - 1][0] or 0
            first = [row for row in first if (row[0] or 0) <= cutoff]
            window = window[:text_limit]
        ids = [row[0] for row in window if row[0] is not None]
        texts = {
            column: parse_text_column(outputs[1 + index].output, column, ids)
            for index, column in enumerate(TEXT_COLUMNS)
        }
        return _Page(
            ints=first,
            texts=texts,
            anchor_id=anchor_id,
            window_rows=len(window),
            size=text_limit,
            extra=extra,
        )

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
            steps.append(self._query(("_id",), f"{base} IS NULL"))
            steps.append(self._query(("_id",), f"{base} = 'NULL'"))
        outputs = await self._device.run(steps)
        result: dict[str, set[int]] = {}
        for index, column in enumerate(columns):
            null_ids = {row[0] for row in parse_int_rows(outputs[2 * index].output, ("_id",))}
            text_ids = {row[0] for row in parse_int_rows(outputs[2 * index + 1].output, ("_id",))}
            if null_ids & text_ids or (null_ids | text_ids) != set(ambiguous[column]):
                raise IncompleteRead(f"could not tell SQL NULL from the text NULL in {column}")
            result[column] = {i for i in null_ids if i is not None}
        return result
