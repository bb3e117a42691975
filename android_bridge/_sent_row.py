"""One known row of ``content://sms``, read again and again: what ``doctor --send-test`` watches.

A send the product proved names its row (``_id``). Whether the phone also gives *delivery*
evidence is in that row's ``status`` column, ``Telephony.TextBasedSmsColumns.STATUS``: "the
TP-Status value for the message, or -1 if no status has been received", with the named
values ``STATUS_NONE`` -1, ``STATUS_COMPLETE`` 0, ``STATUS_PENDING`` 32 and ``STATUS_FAILED``
64 (frameworks/base ``core/java/android/provider/Telephony.java``, read at
android-12.1.0_r4; public SDK constants since API 19, which the SDK never renumbers, so the
same on 10 to 15).

What writes it, read in frameworks/opt/telephony at the AOSP tags android-10.0.0_r46,
11.0.0_r46, 12.1.0_r11, 13.0.0_r52 and 14.0.0_r50 (as LineageOS's mirror merges them) and on
its lineage-22.0 branch for 15: ``SMSDispatcher.SmsTracker.persistSentMessageIfRequired``
(the row the framework writes for a caller that is not the default SMS app) puts
``STATUS_PENDING`` only when the caller gave a delivery intent, and
``SmsDispatchersController.handleSmsStatusReport`` writes the report's raw TP-Status for GSM
when it is below 32 or at least 64; for CDMA it writes 0 whatever the report on 10, and 0 or 64
by the report's error class from 11 (nothing for a temporary error). A messaging app writes
its own rows as it likes, so a send is proven by its row alone, never by ``status``. A value
is read by the ranges of 3GPP TS 23.040's TP-Status (9.2.3.15): 0 to 31 the transaction
completed (delivered), 32 to 63 the centre still tries, 64 and above failed.

The row is read as the reader reads it (:mod:`android_bridge._reader`): an integer query
and a text query for ``creator`` of the same row, in one round trip, through the same view
(``Device.content_prefix``).
"""

from __future__ import annotations

from typing import Final, Literal

import attrs

from android_bridge._device import Device
from android_bridge._parser import content_query, parse_int_rows, parse_text_column

__all__ = ["ROW_COLUMNS", "DeliveryReport", "RowState", "delivery_report", "read_row"]

#: Integer columns read of the row, in projection order.
ROW_COLUMNS: Final = ("_id", "type", "status", "error_code", "date")
#: ``Telephony.TextBasedSmsColumns.STATUS_NONE``: no status received.
STATUS_NONE: Final = -1
#: ``STATUS_PENDING``: the first value of TP-Status's "still trying" range.
STATUS_PENDING: Final = 32
#: ``STATUS_FAILED``: the first value of TP-Status's "permanent error" range.
STATUS_FAILED: Final = 64

DeliveryReport = Literal["none", "pending", "delivered", "failed"]


@attrs.frozen(kw_only=True)
class RowState:
    """The row as one read found it."""

    #: the provider row id (``_id``)
    id: int
    #: ``type``: 1 inbox, 2 sent, 3 draft, 4 outbox, 5 failed, 6 queued
    type: int | None
    #: ``status``: the TP-Status, -1 when none came (None: the column read SQL NULL)
    status: int | None
    #: ``error_code``: the radio's error, when one was written
    error_code: int | None
    #: ``date``: when the row was written, the phone's clock, ms since the epoch
    date_ms: int | None
    #: ``creator``: the package that wrote the row (None: not recorded)
    creator: str | None


def delivery_report(status: int | None) -> DeliveryReport:
    """What a ``status`` value says of delivery (the module doc's TP-Status ranges)."""
    if status is None or status < 0:
        return "none"
    if status < STATUS_PENDING:
        return "delivered"
    if status < STATUS_FAILED:
        return "pending"
    return "failed"


def row_queries(row_id: int, *, prefix: str = "") -> list[str]:
    """The two queries of one read of row ``row_id``: its integers, then ``_id`` and
    ``creator``."""
    if row_id < 1:
        raise ValueError(f"row id must be positive, got {row_id}")
    where = f"_id = {int(row_id)}"
    return [
        content_query("content://sms", ROW_COLUMNS, where, prefix=prefix),
        content_query("content://sms", ("_id", "creator"), where, prefix=prefix),
    ]


def parse_row(row_id: int, ints_output: str, creator_output: str) -> RowState | None:
    """The row from the two queries' output; None when the integer query found no row (not
    visible to this view, deleted, or a rejected query: it proves nothing).

    Raises:
        ProviderError / UnparseableOutput / IncompleteRead: as the reader's parsers.
    """
    rows = [row for row in parse_int_rows(ints_output, ROW_COLUMNS) if row[0] == row_id]
    if not rows:
        return None
    _id, row_type, status, error_code, date_ms = rows[0]
    creator = parse_text_column(creator_output, "creator", [row_id])[row_id]
    return RowState(
        id=row_id,
        type=row_type,
        status=status,
        error_code=error_code,
        date_ms=date_ms,
        # "NULL" is SQL NULL here: no package is named so (a package name has a dot)
        creator=None if creator == "NULL" else creator,
    )


async def read_row(device: Device, row_id: int) -> RowState | None:
    """Row ``row_id`` of ``content://sms`` as ``device`` sees it now (one round trip); None
    when it is not there to this view.

    Raises:
        BridgeError: the transport's errors, or output that cannot be parsed exactly.
    """
    ints, creator = await device.run(row_queries(row_id, prefix=device.content_prefix))
    return parse_row(row_id, ints.output, creator.output)
