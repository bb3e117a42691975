"""The phone's SMS database: one SQLite file with Android's ``sms`` table.

The file is the ground truth a test inspects with plain :mod:`sqlite3`. The schema copies
the telephony provider's (``MmsSmsDatabaseHelper``): same columns, order and defaults.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

import attrs

MESSAGE_TYPE_INBOX: Final = 1
MESSAGE_TYPE_SENT: Final = 2
MESSAGE_TYPE_DRAFT: Final = 3
MESSAGE_TYPE_OUTBOX: Final = 4
MESSAGE_TYPE_FAILED: Final = 5
MESSAGE_TYPE_QUEUED: Final = 6

STATUS_NONE: Final = -1
STATUS_COMPLETE: Final = 0
STATUS_PENDING: Final = 32
STATUS_FAILED: Final = 64

#: ``SmsManager.RESULT_ERROR_GENERIC_FAILURE``, what a failed send records.
ERROR_GENERIC_FAILURE: Final = 1
#: The provider's ``NO_ERROR_CODE`` default.
NO_ERROR_CODE: Final = -1

#: The subscription of the phone's only SIM.
DEFAULT_SUB_ID: Final = 1
#: The package of the messaging app that writes outgoing rows.
MESSAGING_PACKAGE: Final = "com.google.android.apps.messaging"

SMS_COLUMNS: Final = (
    "_id",
    "thread_id",
    "address",
    "person",
    "date",
    "date_sent",
    "protocol",
    "read",
    "status",
    "type",
    "reply_path_present",
    "subject",
    "body",
    "service_center",
    "locked",
    "sub_id",
    "error_code",
    "creator",
    "seen",
)

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS sms (
    _id INTEGER PRIMARY KEY,
    thread_id INTEGER,
    address TEXT,
    person INTEGER,
    date INTEGER,
    date_sent INTEGER DEFAULT 0,
    protocol INTEGER,
    read INTEGER DEFAULT 0,
    status INTEGER DEFAULT -1,
    type INTEGER,
    reply_path_present INTEGER,
    subject TEXT,
    body TEXT,
    service_center TEXT,
    locked INTEGER DEFAULT 0,
    sub_id INTEGER DEFAULT -1,
    error_code INTEGER DEFAULT -1,
    creator TEXT,
    seen INTEGER DEFAULT 0
);
CREATE TABLE IF NOT EXISTS canonical_addresses (
    _id INTEGER PRIMARY KEY AUTOINCREMENT,
    address TEXT UNIQUE
);
"""


@attrs.frozen(kw_only=True)
class SmsRow:
    """One row of the ``sms`` table, exactly as stored."""

    _id: int = attrs.field(alias="_id")
    #: Conversation id, shared by every message with the same address.
    thread_id: int | None
    #: The other party, as the messaging app recorded it.
    address: str | None
    #: Contact id, unused here.
    person: int | None
    #: Device clock (ms) when the row was written.
    date: int | None
    #: Device clock (ms) when it was sent (0 until then).
    date_sent: int | None
    #: Protocol identifier (incoming only).
    protocol: int | None
    #: 1 once read.
    read: int | None
    #: TP-Status: -1 none, 0 complete, 32 pending, 64 failed.
    status: int | None
    #: 1 inbox, 2 sent, 3 draft, 4 outbox, 5 failed, 6 queued.
    type: int | None
    #: Incoming reply-path flag.
    reply_path_present: int | None
    #: Subject (rare for SMS).
    subject: str | None
    #: The full message text.
    body: str | None
    #: SMSC address (incoming only).
    service_center: str | None
    #: 1 when locked by the user.
    locked: int | None
    #: Subscription (SIM) id.
    sub_id: int | None
    #: Radio error code of a failed send, -1 when none.
    error_code: int | None
    #: Package that wrote the row.
    creator: str | None
    #: 1 once the user has seen the notification.
    seen: int | None

    @property
    def id(self) -> int:
        """The provider ``_id``."""
        return self._id


class SmsStore:
    """Read and write the simulated phone's ``sms`` table.

    Every write commits immediately, so another process reading the file sees it at once.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout = 5000")
        self._db.executescript(_SCHEMA)
        self._reader = sqlite3.connect(
            f"{self.path.resolve().as_uri()}?mode=ro",
            uri=True,
            isolation_level=None,
            check_same_thread=False,
        )
        self._reader.execute("PRAGMA query_only = ON")
        self._reader.execute("PRAGMA busy_timeout = 5000")

    def close(self) -> None:
        """Close both connections."""
        self._reader.close()
        self._db.close()

    # -- reading -------------------------------------------------------------------------

    def rows(self, *, types: Sequence[int] | None = None) -> list[SmsRow]:
        """Return every row (optionally only the given types), ordered by ``_id``."""
        sql = f"SELECT {', '.join(SMS_COLUMNS)} FROM sms"
        params: tuple[int, ...] = ()
        if types is not None:
            sql += f" WHERE type IN ({', '.join('?' for _ in types)})"
            params = tuple(types)
        cursor = self._db.execute(sql + " ORDER BY _id", params)
        return [_to_row(values) for values in cursor.fetchall()]

    def row(self, row_id: int) -> SmsRow | None:
        """Return the row with this ``_id``, or None."""
        cursor = self._db.execute(
            f"SELECT {', '.join(SMS_COLUMNS)} FROM sms WHERE _id = ?", (row_id,)
        )
        values = cursor.fetchone()
        return None if values is None else _to_row(values)

    def max_id(self) -> int:
        """Return the highest ``_id`` (0 when empty)."""
        value = self._db.execute("SELECT COALESCE(MAX(_id), 0) FROM sms").fetchone()[0]
        return int(value)

    def read_only_query(
        self, sql: str, params: Sequence[object] = ()
    ) -> tuple[list[str], list[tuple[object, ...]]]:
        """Run one SELECT on a read-only connection; return column names and rows.

        Raises:
            sqlite3.Error: the SQL is invalid (the caller turns it into a provider error).
        """
        cursor = self._reader.execute(sql, tuple(params))
        names = [description[0] for description in cursor.description or ()]
        return names, cursor.fetchall()

    # -- writing -------------------------------------------------------------------------

    def thread_id_for(self, address: str) -> int:
        """Return the conversation id for ``address``, creating it as Android does."""
        self._db.execute(
            "INSERT OR IGNORE INTO canonical_addresses (address) VALUES (?)", (address,)
        )
        value = self._db.execute(
            "SELECT _id FROM canonical_addresses WHERE address = ?", (address,)
        ).fetchone()[0]
        return int(value)

    def insert(self, **columns: object) -> int:
        """Insert a row with any ``sms`` columns (others take Android's defaults); return ``_id``.

        Raises:
            ValueError: a column name that the ``sms`` table does not have.
        """
        unknown = set(columns) - set(SMS_COLUMNS)
        if unknown:
            raise ValueError(f"unknown sms columns: {sorted(unknown)}")
        address = columns.get("address")
        if columns.get("thread_id") is None and isinstance(address, str) and address:
            columns["thread_id"] = self.thread_id_for(address)
        names = list(columns)
        sql = f"INSERT INTO sms ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})"
        cursor = self._db.execute(sql, tuple(columns[name] for name in names))
        row_id = cursor.lastrowid
        assert row_id is not None
        return row_id

    def insert_incoming(
        self,
        address: str,
        body: str,
        *,
        date_ms: int,
        date_sent_ms: int | None = None,
        sub_id: int = DEFAULT_SUB_ID,
        read: int = 0,
    ) -> int:
        """Write a received message (type 1) the way the telephony stack does; return ``_id``."""
        return self.insert(
            address=address,
            body=body,
            date=date_ms,
            date_sent=date_ms - 2000 if date_sent_ms is None else date_sent_ms,
            protocol=0,
            read=read,
            seen=read,
            status=STATUS_NONE,
            type=MESSAGE_TYPE_INBOX,
            reply_path_present=0,
            service_center="+15555550000",
            sub_id=sub_id,
            error_code=0,
            creator="com.android.phone",
        )

    def insert_outgoing(
        self,
        address: str,
        body: str,
        *,
        date_ms: int,
        message_type: int = MESSAGE_TYPE_OUTBOX,
        sub_id: int = DEFAULT_SUB_ID,
        creator: str = MESSAGING_PACKAGE,
    ) -> int:
        """Write an outgoing message as the messaging app does before the radio sends it."""
        return self.insert(
            address=address,
            body=body,
            date=date_ms,
            date_sent=0,
            read=1,
            seen=1,
            status=STATUS_NONE,
            type=message_type,
            sub_id=sub_id,
            error_code=NO_ERROR_CODE,
            creator=creator,
        )

    def update(self, row_id: int, values: Mapping[str, object]) -> None:
        """Set some columns of one row.

        Raises:
            ValueError: a column name that the ``sms`` table does not have.
        """
        unknown = set(values) - set(SMS_COLUMNS)
        if unknown:
            raise ValueError(f"unknown sms columns: {sorted(unknown)}")
        assignments = ", ".join(f"{name} = ?" for name in values)
        self._db.execute(f"UPDATE sms SET {assignments} WHERE _id = ?", (*values.values(), row_id))

    def mark_sent(self, row_id: int, *, date_sent_ms: int) -> None:
        """Move an outgoing row to SENT, as the app does when the radio confirms."""
        self.update(row_id, {"type": MESSAGE_TYPE_SENT, "date_sent": date_sent_ms, "error_code": 0})

    def mark_failed(self, row_id: int) -> None:
        """Move an outgoing row to FAILED with a generic radio error."""
        self.update(row_id, {"type": MESSAGE_TYPE_FAILED, "error_code": ERROR_GENERIC_FAILURE})


def _to_row(values: Sequence[object]) -> SmsRow:
    fields = dict(zip(SMS_COLUMNS, values, strict=True))
    return SmsRow(**fields)  # type: ignore[arg-type]
