"""Reading outgoing MMS from ``content://mms``: where a messaging app puts a text it converted.

A messaging app may turn a text into MMS (a long text, several recipients, a subject), which
the telephony provider stores in ``content://mms`` (``MmsProvider``: tables ``pdu``, ``addr``,
``part``; TelephonyProvider android-10.0.0_r1 to android-15.0.0_r1), never in
``content://sms``. Its ``_id``\\ s are their own id space. What a reader sees:

* ``pdu`` through ``pdu_restricted`` for every caller but the system and phone uids and the
  default SMS app: ``msg_box`` 1 (inbox) and 2 (sent) only, the same rule as ``sms_restricted``
  (``MmsSmsDatabaseHelper``, ``ProviderUtil.isAccessRestricted``). ``date`` is in *seconds*.
* ``addr`` (``content://mms/<id>/addr``: ``address``, ``type`` 151 TO, 130 CC, 129 BCC, 137
  FROM) and ``part`` (``content://mms/part``: ``mid``, ``seq``, ``ct``, ``text``) are not
  restricted (``MmsProvider.query``: ``TABLE_ADDR``, ``TABLE_PART``).

A read is two round trips when an MMS is found above the watermark, and costs nothing extra
otherwise: its first query (:func:`pdu_query`) rides in the SMS read's round trip. Free text
(addresses, the body's parts, ``creator``) is read with the same exact two-query scheme as SMS
(:mod:`android_bridge._parser`).
"""

from __future__ import annotations

from collections.abc import Sequence

from android_bridge._device import Device
from android_bridge._parser import content_query, parse_int_rows, parse_text_column
from android_bridge._records import MmsMessage
from android_bridge.exceptions import ReadFailed

#: ``Telephony.BaseMmsColumns.MESSAGE_BOX_*`` of outgoing messages: sent, outbox, failed.
OUTGOING_MMS_BOXES: tuple[int, ...] = (2, 4, 5)
#: ``PduHeaders``: recipients' address types (TO, CC, BCC).
RECIPIENT_ADDRESS_TYPES: tuple[int, ...] = (151, 130, 129)
#: Integer columns of the ``pdu`` query, in projection order.
PDU_COLUMNS: tuple[str, ...] = ("_id", "thread_id", "msg_box", "date", "date_sent", "sub_id")
_ADDR_COLUMNS: tuple[str, ...] = ("_id", "msg_id", "type")
_PART_COLUMNS: tuple[str, ...] = ("_id", "mid", "seq")
_MAX_INT = 2**63 - 1


def _uint(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_INT:
        raise ValueError(f"{name} must be a non-negative int")
    return value


def pdu_query(after_id: int, *, since_s: int | None = None, prefix: str = "") -> str:
    """The integer query of outgoing ``pdu`` rows above ``after_id`` (dated ``>= since_s``)."""
    where = f"_id > {_uint(after_id, 'after_id')}"
    boxes = ",".join(str(box) for box in OUTGOING_MMS_BOXES)
    where += f" AND msg_box IN ({boxes})"
    if since_s is not None:
        where += f" AND date >= {_uint(since_s, 'since_s')}"
    return content_query("content://mms", PDU_COLUMNS, where, prefix=prefix)


def latest_mms_query(*, prefix: str = "") -> str:
    """The query printing the highest visible ``pdu`` ``_id`` (one row, or none at all)."""
    return content_query(
        "content://mms", ("_id",), "_id > 0", prefix=prefix, sort="_id DESC LIMIT 1"
    )


def parse_latest_mms(output: str) -> int:
    """The highest ``pdu`` ``_id`` from :func:`latest_mms_query`'s output (0: none seen).

    A rejected query also prints ``No result found.``: 0 then only widens the next read's
    window, whose rows are still filtered by date.
    """
    try:
        rows = parse_int_rows(output, ("_id",))
    except ReadFailed:
        return 0
    return max((row[0] for row in rows if row[0] is not None), default=0)


def parse_pdus(output: str) -> list[tuple[int | None, ...]]:
    """The rows of :func:`pdu_query`'s output.

    Raises:
        ProviderError / UnparseableOutput: as :func:`parse_int_rows`.
    """
    return parse_int_rows(output, PDU_COLUMNS)


async def read_details(
    device: Device, pdus: Sequence[tuple[int | None, ...]], *, prefix: str = ""
) -> tuple[MmsMessage, ...]:
    """Addresses, text and creator of the given ``pdu`` rows, in one round trip.

    Raises:
        BridgeError: transport or parse failures (a read proves nothing).
    """
    ids = [row[0] for row in pdus if row[0] is not None]
    if not ids:
        return ()
    id_list = ",".join(str(_uint(i, "_id")) for i in ids)
    steps: list[str] = []
    for pdu_id in ids:
        uri = f"content://mms/{pdu_id}/addr"
        types = ",".join(str(t) for t in RECIPIENT_ADDRESS_TYPES)
        where = f"msg_id = {pdu_id} AND type IN ({types})"
        steps.append(content_query(uri, _ADDR_COLUMNS, where, prefix=prefix))
        steps.append(content_query(uri, ("_id", "address"), where, prefix=prefix) + " 2>/dev/null")
    part_where = f"mid IN ({id_list}) AND ct = 'text/plain'"
    steps.append(content_query("content://mms/part", _PART_COLUMNS, part_where, prefix=prefix))
    steps.append(
        content_query("content://mms/part", ("_id", "text"), part_where, prefix=prefix)
        + " 2>/dev/null"
    )
    pdu_where = f"_id IN ({id_list})"
    steps.append(content_query("content://mms", ("_id",), pdu_where, prefix=prefix))
    steps.append(
        content_query("content://mms", ("_id", "creator"), pdu_where, prefix=prefix)
        + " 2>/dev/null"
    )
    outputs = await device.run(steps)
    addresses: dict[int, list[str]] = {}
    for index, pdu_id in enumerate(ids):
        addr_rows = parse_int_rows(outputs[2 * index].output, _ADDR_COLUMNS)
        addr_ids = [row[0] for row in addr_rows if row[0] is not None]
        texts = parse_text_column(outputs[2 * index + 1].output, "address", addr_ids)
        addresses[pdu_id] = [texts[addr_id] for addr_id in addr_ids]
    base = 2 * len(ids)
    part_rows = parse_int_rows(outputs[base].output, _PART_COLUMNS)
    part_ids = [row[0] for row in part_rows if row[0] is not None]
    part_texts = parse_text_column(outputs[base + 1].output, "text", part_ids)
    bodies: dict[int, list[tuple[int, str]]] = {}
    for part_id, mid, seq in part_rows:
        if part_id is None or mid is None:
            continue
        bodies.setdefault(mid, []).append((seq or 0, part_texts[part_id]))
    creator_rows = parse_int_rows(outputs[base + 2].output, ("_id",))
    creator_ids = [row[0] for row in creator_rows if row[0] is not None]
    creators = parse_text_column(outputs[base + 3].output, "creator", creator_ids)
    messages = []
    for row in pdus:
        row_id, thread_id, msg_box, date_s, date_sent_s, sub_id = row
        if row_id is None or msg_box is None:
            continue
        parts = sorted(bodies.get(row_id, []))
        messages.append(
            MmsMessage(
                id=row_id,
                thread_id=thread_id,
                msg_box=msg_box,
                addresses=tuple(addresses.get(row_id, [])),
                body="".join(text for _seq, text in parts) if parts else None,
                date_ms=date_s * 1000 if date_s is not None else None,
                date_sent_ms=date_sent_s * 1000 if date_sent_s else None,
                sub_id=sub_id,
                creator=creators.get(row_id),
            )
        )
    return tuple(messages)
