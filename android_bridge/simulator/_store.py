"""The phone's message database: one SQLite file with Android's ``sms`` and MMS tables.

The file is the ground truth a test inspects with plain :mod:`sqlite3`. The schema copies
the telephony provider's (``MmsSmsDatabaseHelper``, TelephonyProvider android-15.0.0_r1):
the ``sms`` table, the MMS tables ``pdu``, ``addr`` and ``part``, and the two views restricted
callers read through, ``sms_restricted`` (types 1 and 2) and ``pdu_restricted`` (boxes 1 and
2, no ``m_type`` 130 notifications); same columns, order and defaults. ``addr.sub_id`` and
``part.sub_id`` exist from android-14.0.0_r1 on (database version 68); the provider hides them
from queries on older releases (see ``_telephony``). MMS dates are in seconds, SMS dates in
milliseconds, as on a phone.
"""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

import attrs

from android_bridge._private_files import ensure_private_file, make_private_dirs

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
#: The SMSC address an incoming PDU names (``service_center``): a made-up +1 555 number.
SERVICE_CENTER: Final = "+15555550000"

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

PDU_COLUMNS: Final = (
    "_id",
    "thread_id",
    "date",
    "date_sent",
    "msg_box",
    "read",
    "m_id",
    "sub",
    "sub_cs",
    "ct_t",
    "ct_l",
    "exp",
    "m_cls",
    "m_type",
    "v",
    "m_size",
    "pri",
    "rr",
    "rpt_a",
    "resp_st",
    "st",
    "tr_id",
    "retr_st",
    "retr_txt",
    "retr_txt_cs",
    "read_status",
    "ct_cls",
    "resp_txt",
    "d_tm",
    "d_rpt",
    "locked",
    "sub_id",
    "seen",
    "creator",
    "text_only",
)
#: ``addr`` columns; ``sub_id`` only from android-14.0.0_r1 (database version 68).
ADDR_COLUMNS: Final = ("_id", "msg_id", "contact_id", "address", "type", "charset", "sub_id")
#: ``part`` columns; ``sub_id`` only from android-14.0.0_r1 (database version 68).
PART_COLUMNS: Final = (
    "_id",
    "mid",
    "seq",
    "ct",
    "name",
    "chset",
    "cd",
    "fn",
    "cid",
    "cl",
    "ctt_s",
    "ctt_t",
    "_data",
    "text",
    "sub_id",
)

#: ``Telephony.BaseMmsColumns.MESSAGE_BOX_*``.
MMS_BOX_INBOX: Final = 1
MMS_BOX_SENT: Final = 2
MMS_BOX_DRAFTS: Final = 3
MMS_BOX_OUTBOX: Final = 4
MMS_BOX_FAILED: Final = 5
#: ``PduHeaders.MESSAGE_TYPE_*`` (``m_type``).
MMS_TYPE_SEND_REQ: Final = 128
MMS_TYPE_NOTIFICATION_IND: Final = 130
MMS_TYPE_RETRIEVE_CONF: Final = 132
#: ``PduHeaders`` address field types (``addr.type``).
ADDR_TYPE_BCC: Final = 129
ADDR_TYPE_CC: Final = 130
ADDR_TYPE_FROM: Final = 137
ADDR_TYPE_TO: Final = 151
#: The FROM address ``PduPersister`` writes for an outgoing message; the MMSC fills in the
#: real sender.
OUTGOING_FROM_ADDRESS: Final = "insert-address-token"
#: ``CharacterSets.UTF_8`` (MIBenum 106).
CHARSET_UTF8: Final = 106
#: ``PduHeaders.RESPONSE_STATUS_OK``.
MMS_RESPONSE_STATUS_OK: Final = 128

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS secure_settings (
    name TEXT PRIMARY KEY,
    value TEXT
);
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
CREATE TABLE IF NOT EXISTS pdu (
    _id INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id INTEGER,
    date INTEGER,
    date_sent INTEGER DEFAULT 0,
    msg_box INTEGER,
    read INTEGER DEFAULT 0,
    m_id TEXT,
    sub TEXT,
    sub_cs INTEGER,
    ct_t TEXT,
    ct_l TEXT,
    exp INTEGER,
    m_cls TEXT,
    m_type INTEGER,
    v INTEGER,
    m_size INTEGER,
    pri INTEGER,
    rr INTEGER,
    rpt_a INTEGER,
    resp_st INTEGER,
    st INTEGER,
    tr_id TEXT,
    retr_st INTEGER,
    retr_txt TEXT,
    retr_txt_cs INTEGER,
    read_status INTEGER,
    ct_cls INTEGER,
    resp_txt TEXT,
    d_tm INTEGER,
    d_rpt INTEGER,
    locked INTEGER DEFAULT 0,
    sub_id INTEGER DEFAULT -1,
    seen INTEGER DEFAULT 0,
    creator TEXT,
    text_only INTEGER DEFAULT 0
);
CREATE TABLE IF NOT EXISTS addr (
    _id INTEGER PRIMARY KEY,
    msg_id INTEGER,
    contact_id INTEGER,
    address TEXT,
    type INTEGER,
    charset INTEGER,
    sub_id INTEGER DEFAULT -1
);
CREATE TABLE IF NOT EXISTS part (
    _id INTEGER PRIMARY KEY AUTOINCREMENT,
    mid INTEGER,
    seq INTEGER DEFAULT 0,
    ct TEXT,
    name TEXT,
    chset INTEGER,
    cd TEXT,
    fn TEXT,
    cid TEXT,
    cl TEXT,
    ctt_s INTEGER,
    ctt_t TEXT,
    _data TEXT,
    text TEXT,
    sub_id INTEGER DEFAULT -1
);
CREATE VIEW IF NOT EXISTS sms_restricted AS SELECT * FROM sms WHERE type=1 OR type=2;
CREATE VIEW IF NOT EXISTS pdu_restricted AS SELECT * FROM pdu WHERE (msg_box=1 OR msg_box=2)
    AND (m_type!=130);
"""

#: ``threads`` columns the provider has beyond the ones every simulated store was made with
#: (``MmsSmsDatabaseHelper.createCommonTables``, TelephonyProvider android-10.0.0_r30 and
#: 15.0.0_r1): a new conversation is ``read`` 1 until an unread message lands in it.
_THREAD_COLUMNS_ADDED: Final = (
    ("snippet_cs", "INTEGER DEFAULT 0"),
    ("read", "INTEGER DEFAULT 1"),
    ("archived", "INTEGER DEFAULT 0"),
    ("type", "INTEGER DEFAULT 0"),
    ("error", "INTEGER DEFAULT 0"),
    ("has_attachment", "INTEGER DEFAULT 0"),
    ("sub_id", "INTEGER DEFAULT -1"),
)

# What the provider's triggers on ``sms`` do to the conversation (``MmsSmsDatabaseHelper``:
# ``sms_update_thread_on_insert``, ``sms_update_thread_date_subject_on_update`` on an
# update of date, body or type, ``sms_update_thread_read_on_update`` on an update of read;
# TelephonyProvider android-10.0.0_r30 and 15.0.0_r1, unchanged between them). The thread's
# ``date`` is the database's clock in whole seconds times 1000 (``strftime('%s','now')``),
# not the message's date; ``message_count`` counts the SMS that are not drafts and the MMS
# that are not drafts; ``read`` is 0 while any SMS of the thread is unread. Written here
# from what those triggers do (the same statements in this simulator's words). The
# database clock is the host's: ``clock_skew_ms`` and ``advance_time`` do not reach it.
_THREAD_UPDATE: Final = """
    UPDATE threads SET date = strftime('%s', 'now') * 1000, snippet = new.body, snippet_cs = 0
        WHERE _id = new.thread_id;
    UPDATE threads SET message_count =
        (SELECT COUNT(*) FROM sms WHERE sms.thread_id = new.thread_id AND sms.type != 3)
        + (SELECT COUNT(*) FROM pdu WHERE pdu.thread_id = new.thread_id
            AND pdu.m_type IN (128, 130, 132) AND pdu.msg_box != 3)
        WHERE _id = new.thread_id;
"""
_THREAD_READ_UPDATE: Final = """
    UPDATE threads SET read =
        CASE (SELECT COUNT(*) FROM sms WHERE sms.read = 0 AND sms.thread_id = threads._id)
            WHEN 0 THEN 1 ELSE 0 END
        WHERE _id = new.thread_id;
"""
_THREAD_TRIGGERS: Final = f"""
CREATE INDEX IF NOT EXISTS typeThreadIdIndex ON sms (type, thread_id);
CREATE INDEX IF NOT EXISTS threadIdDateIndex ON sms (thread_id, date);
CREATE TRIGGER IF NOT EXISTS sms_update_thread_on_insert AFTER INSERT ON sms
BEGIN {_THREAD_UPDATE} {_THREAD_READ_UPDATE} END;
CREATE TRIGGER IF NOT EXISTS sms_update_thread_date_subject_on_update
    AFTER UPDATE OF date, body, type ON sms
BEGIN {_THREAD_UPDATE} {_THREAD_READ_UPDATE} END;
CREATE TRIGGER IF NOT EXISTS sms_update_thread_read_on_update AFTER UPDATE OF read ON sms
BEGIN {_THREAD_READ_UPDATE} END;
"""


@attrs.frozen(kw_only=True)
class ThreadRow:
    """One conversation as the ``threads`` table holds it (the columns the simulator keeps)."""

    #: The thread ``_id`` (``thread_id`` of its messages).
    id: int
    #: The database clock (ms, whole seconds) at the last insert or change of one of its SMS.
    date: int
    #: Its messages that are not drafts, SMS and MMS.
    message_count: int
    #: The ``canonical_addresses`` ids of its recipients, sorted, joined by spaces.
    recipient_ids: str
    #: The body of the SMS last inserted or changed.
    snippet: str | None
    #: 1 when none of its SMS is unread.
    read: int


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


@attrs.frozen(kw_only=True)
class MmsMessage:
    """One MMS as the store holds it: its ``pdu`` row with its addresses and text."""

    #: The ``pdu`` ``_id`` (what ``content://mms/<id>`` names).
    id: int
    #: Conversation id.
    thread_id: int | None
    #: 1 inbox, 2 sent, 3 drafts, 4 outbox, 5 failed.
    msg_box: int
    #: ``PduHeaders`` message type: 128 send-req (outgoing), 132 retrieve-conf (received).
    m_type: int | None
    #: The TO addresses (``addr`` type 151), in insertion order.
    addresses: tuple[str, ...]
    #: The FROM address (``addr`` type 137); ``insert-address-token`` for an outgoing message.
    sender: str | None
    #: The text parts (``part`` ``ct`` text/plain), joined in ``seq`` order.
    body: str
    #: Subject (``sub``), if any.
    subject: str | None
    #: Device clock when written, in **seconds** (MMS dates are seconds).
    date: int | None
    #: When sent, in seconds (0 until then).
    date_sent: int | None
    #: Subscription (SIM) id.
    sub_id: int | None
    #: Package that wrote the message.
    creator: str | None


class SmsStore:
    """Read and write the simulated phone's ``sms`` table.

    Every write commits immediately, so another process reading the file sees it at once.
    """

    def __init__(self, path: Path, *, threads_autoincrement: bool = True) -> None:
        """Open (or create) the store at ``path``.

        ``threads_autoincrement``: the ``threads`` table of a new store is created as
        ``MmsSmsDatabaseHelper`` creates it at android-10.0.0_r30 to 15.0.0_r1
        (``_id INTEGER PRIMARY KEY AUTOINCREMENT``: a deleted conversation's id is never
        given again). False makes it as a database from before that keyword whose
        upgrade (``upgradeThreadsTableToAutoIncrement``, run at the first
        ``getWritableDatabase`` after boot and "optional": it fails, and is tried again at
        the next boot, when storage is short) has not succeeded: ``INTEGER PRIMARY KEY``,
        so the latest conversation's id, once it is deleted, goes to the next new one. A
        store that exists keeps the table it has.
        """
        self.path = Path(path)
        # it holds message bodies: a new store is 0600 in directories created 0700
        make_private_dirs(self.path.parent)
        ensure_private_file(self.path)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout = 5000")
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._db.executescript(_SCHEMA)
        # the conversations (MmsSmsDatabaseHelper.createCommonTables, TelephonyProvider
        # android-10.0.0_r30 to 15.0.0_r1; the columns the simulator keeps)
        autoincrement = " AUTOINCREMENT" if threads_autoincrement else ""
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS threads ("
            f"_id INTEGER PRIMARY KEY{autoincrement}, date INTEGER DEFAULT 0,"
            " message_count INTEGER DEFAULT 0, recipient_ids TEXT, snippet TEXT)"
        )
        self._upgrade_threads()
        self._reader = sqlite3.connect(
            f"{self.path.resolve().as_uri()}?mode=ro",
            uri=True,
            isolation_level=None,
            check_same_thread=False,
        )
        self._reader.execute("PRAGMA query_only = ON")
        self._reader.execute("PRAGMA busy_timeout = 5000")

    def _upgrade_threads(self) -> None:
        """Give ``threads`` the columns and ``sms`` the triggers and indexes the provider has
        (``MmsSmsDatabaseHelper.createCommonTables``, ``createCommonTriggers`` and
        ``upgradeDatabaseToVersion...``, TelephonyProvider android-10.0.0_r30 and
        15.0.0_r1, the same at both): a store made before they were modelled gets them
        here, once."""
        present = {str(row[1]) for row in self._db.execute("PRAGMA table_info(threads)")}
        for name, declaration in _THREAD_COLUMNS_ADDED:
            if name not in present:
                self._db.execute(f"ALTER TABLE threads ADD COLUMN {name} {declaration}")
        self._db.executescript(_THREAD_TRIGGERS)

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

    def thread_id_for(self, addresses: str | Sequence[str]) -> int:
        """The conversation of ``addresses`` (one address, or several: a group), created if
        there is none, as ``MmsSmsProvider.getThreadId`` does (TelephonyProvider
        android-10.0.0_r30 to 15.0.0_r1): each address gets its ``canonical_addresses`` id,
        and the thread is the ``threads`` row whose ``recipient_ids`` are those ids, sorted
        and joined by spaces. A conversation whose messages are all deleted is deleted with
        them (:meth:`drop_empty_threads`): the next message to those recipients starts a new
        thread, with a new id (or, without AUTOINCREMENT, the deleted one's if it was the
        highest: see ``threads_autoincrement``)."""
        if isinstance(addresses, str):
            addresses = [addresses]
        ids: list[int] = []
        for address in addresses:
            self._db.execute(
                "INSERT OR IGNORE INTO canonical_addresses (address) VALUES (?)", (address,)
            )
            ids.append(
                int(
                    self._db.execute(
                        "SELECT _id FROM canonical_addresses WHERE address = ?", (address,)
                    ).fetchone()[0]
                )
            )
        recipient_ids = " ".join(str(value) for value in sorted(set(ids)))
        row = self._db.execute(
            "SELECT _id FROM threads WHERE recipient_ids = ? ORDER BY _id LIMIT 1",
            (recipient_ids,),
        ).fetchone()
        if row is not None:
            return int(row[0])
        cursor = self._db.execute(
            "INSERT INTO threads (recipient_ids) VALUES (?)", (recipient_ids,)
        )
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    def drop_empty_threads(self) -> None:
        """Delete every conversation no SMS or MMS refers to any more, as
        ``MmsSmsDatabaseHelper.updateThreads`` does after each delete of messages
        (TelephonyProvider android-10.0.0_r30 to 15.0.0_r1)."""
        self._db.execute(
            "DELETE FROM threads WHERE _id NOT IN ("
            " SELECT DISTINCT thread_id FROM sms WHERE thread_id IS NOT NULL"
            " UNION SELECT DISTINCT thread_id FROM pdu WHERE thread_id IS NOT NULL)"
        )

    def threads(self) -> dict[int, str]:
        """Test harness: every conversation, ``{thread _id: recipient_ids}``."""
        return {
            int(thread_id): str(recipient_ids)
            for thread_id, recipient_ids in self._db.execute(
                "SELECT _id, recipient_ids FROM threads ORDER BY _id"
            )
        }

    def thread(self, thread_id: int) -> ThreadRow | None:
        """Test harness: one conversation's row, or None."""
        values = self._db.execute(
            "SELECT _id, date, message_count, recipient_ids, snippet, read FROM threads"
            " WHERE _id = ?",
            (thread_id,),
        ).fetchone()
        if values is None:
            return None
        thread_id, date, count, recipient_ids, snippet, read = values
        return ThreadRow(
            id=int(thread_id),
            date=int(date),
            message_count=int(count),
            recipient_ids=str(recipient_ids),
            snippet=snippet,
            read=int(read),
        )

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
        seen: int | None = None,
        creator: str = MESSAGING_PACKAGE,
        error_code: int = NO_ERROR_CODE,
        service_center: str = SERVICE_CENTER,
    ) -> int:
        """Write a received SMS (type 1) as the default SMS app does on ``SMS_DELIVER``;
        return its ``_id``. ``SimulatedPhone.receive_sms`` models the reception and calls
        this; tests may call it directly to plant a row.

        The app writes the row, not the framework: ``InboundSmsHandler`` only hands the
        assembled PDUs to the default SMS app (its ``writeInboxMessage`` ran only under
        ``getAutoPersisting()``, "always false", at android-10.0.0_r46, and is never called
        from 11: frameworks/opt/telephony, LineageOS's merges of android-10.0.0_r46 to
        14.0.0_r50 and lineage-22.0). ``SmsProvider.insert`` then sets ``creator`` to the
        calling package, the app's (``ProviderUtil.shouldSetCreator``: only the system and
        phone uids may name another), and the thread: the sender's conversation, found or
        created (``Threads.getOrCreateThreadId``); the provider's triggers update the
        conversation's snippet, date, count and read flag (see ``_THREAD_TRIGGERS``;
        TelephonyProvider android-10.0.0_r30 and 15.0.0_r1). ``date`` is the phone's clock
        when the app writes the row; ``date_sent`` the service centre's time stamp from the
        PDU (TP-SCTS: whole seconds), by default two seconds before ``date``, rounded down
        to a second. ``seen`` defaults to ``read``.

        Raises:
            ValueError: ``date_sent_ms`` is not a whole number of seconds (a PDU's SC time
                stamp cannot say more).
        """
        if date_sent_ms is None:
            date_sent_ms = max(0, (date_ms - 2000) // 1000 * 1000)
        if date_sent_ms % 1000:
            raise ValueError(
                f"date_sent_ms {date_sent_ms} is not whole seconds: the service centre's time"
                " stamp (TP-SCTS) has one-second resolution"
            )
        with self._transaction():
            return self.insert(
                address=address,
                body=body,
                date=date_ms,
                date_sent=date_sent_ms,
                protocol=0,
                read=read,
                seen=read if seen is None else seen,
                type=MESSAGE_TYPE_INBOX,
                reply_path_present=0,
                service_center=service_center,
                sub_id=sub_id,
                error_code=error_code,
                creator=creator,
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
        error_code: int = NO_ERROR_CODE,
    ) -> int:
        """Write an outgoing message as the messaging app does before the radio sends it.

        The app writes no ``error_code``: the row keeps the provider's default, which
        ``error_code`` gives (``NO_ERROR_CODE`` -1 in a database made on Android 11 or later, 0
        on 10: ``MmsSmsDatabaseHelper``, TelephonyProvider android-10.0.0_r30 and 11.0.0_r1).
        """
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
            error_code=error_code,
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

    def delete(self, row_id: int) -> None:
        """Delete one row, as the owner deleting a message does: its ``_id`` is left as a gap
        (or taken again by the next insert, if it was the highest: ``_id INTEGER PRIMARY KEY``
        without AUTOINCREMENT, ``MmsSmsDatabaseHelper`` at android-10.0.0_r30 and
        android-15.0.0_r17). A conversation left empty is deleted too."""
        with self._transaction():
            self._db.execute("DELETE FROM sms WHERE _id = ?", (row_id,))
            self.drop_empty_threads()

    # -- MMS -------------------------------------------------------------------------------

    def insert_pdu(self, **columns: object) -> int:
        """Insert a ``pdu`` row with any of its columns (others take the defaults); return ``_id``.

        Raises:
            ValueError: a column name that the ``pdu`` table does not have.
        """
        return self._insert_into("pdu", PDU_COLUMNS, columns)

    def insert_addr(self, msg_id: int, address: str, addr_type: int, **columns: object) -> int:
        """Insert an ``addr`` row of message ``msg_id``; return its ``_id``.

        Raises:
            ValueError: a column name that the ``addr`` table does not have.
        """
        values = {"msg_id": msg_id, "address": address, "type": addr_type}
        values.update(columns)
        return self._insert_into("addr", ADDR_COLUMNS, values)

    def insert_part(self, msg_id: int, **columns: object) -> int:
        """Insert a ``part`` row of message ``msg_id``; return its ``_id``.

        Raises:
            ValueError: a column name that the ``part`` table does not have.
        """
        values: dict[str, object] = {"mid": msg_id}
        values.update(columns)
        return self._insert_into("part", PART_COLUMNS, values)

    def insert_outgoing_mms(
        self,
        addresses: Sequence[str],
        body: str,
        *,
        date_ms: int,
        subject: str | None = None,
        msg_box: int = MMS_BOX_OUTBOX,
        sub_id: int = DEFAULT_SUB_ID,
        creator: str = MESSAGING_PACKAGE,
    ) -> int:
        """Write an outgoing MMS as a messaging app persists a send-req; return the ``pdu`` _id.

        The rows ``PduPersister.persist`` and ``MmsProvider.insert`` produce (TelephonyProvider
        android-15.0.0_r1): a ``pdu`` row (``m_type`` 128, ``date`` in seconds, ``read`` 1 as
        for every non-inbox message, ``text_only`` 1), one ``addr`` row per recipient (type 151
        TO), the FROM row (type 137, ``insert-address-token``), and one ``text/plain`` part
        holding the body inline. ``addr``/``part`` rows carry the message's ``sub_id`` (the
        provider stamps the default SMS subscription on them from android-14.0.0_r1; the
        column is hidden on older releases).

        Raises:
            ValueError: no recipient.
        """
        if not addresses:
            raise ValueError("an MMS needs at least one recipient")
        with self._transaction():
            pdu_id = self.insert_pdu(
                thread_id=self.thread_id_for(addresses),
                date=date_ms // 1000,
                date_sent=0,
                msg_box=msg_box,
                read=1,
                sub=subject,
                sub_cs=CHARSET_UTF8 if subject is not None else None,
                ct_t="application/vnd.wap.multipart.related",
                exp=604800,
                m_cls="personal",
                m_type=MMS_TYPE_SEND_REQ,
                v=18,
                m_size=len(body.encode("utf-8")),
                pri=129,
                rr=129,
                tr_id=f"T{date_ms:x}",
                d_rpt=129,
                locked=0,
                sub_id=sub_id,
                seen=1,
                creator=creator,
                text_only=1,
            )
            for address in addresses:
                self.insert_addr(pdu_id, address, ADDR_TYPE_TO, charset=CHARSET_UTF8, sub_id=sub_id)
            self.insert_addr(
                pdu_id, OUTGOING_FROM_ADDRESS, ADDR_TYPE_FROM, charset=CHARSET_UTF8, sub_id=sub_id
            )
            self.insert_part(
                pdu_id,
                seq=0,
                ct="text/plain",
                chset=CHARSET_UTF8,
                cid="<text_0>",
                cl="text_0.txt",
                text=body,
                sub_id=sub_id,
            )
        return pdu_id

    def insert_incoming_mms(
        self,
        sender: str,
        body: str,
        *,
        date_ms: int,
        recipients: Sequence[str] = (),
        subject: str | None = None,
        sub_id: int = DEFAULT_SUB_ID,
    ) -> int:
        """Write a received MMS (inbox, ``m_type`` 132 retrieve-conf); return the ``pdu`` _id."""
        with self._transaction():
            pdu_id = self.insert_pdu(
                thread_id=self.thread_id_for(sender),
                date=date_ms // 1000,
                date_sent=date_ms // 1000 - 2,
                msg_box=MMS_BOX_INBOX,
                read=0,
                m_id=f"M{date_ms:x}",
                sub=subject,
                sub_cs=CHARSET_UTF8 if subject is not None else None,
                ct_t="application/vnd.wap.multipart.related",
                m_cls="personal",
                m_type=MMS_TYPE_RETRIEVE_CONF,
                v=18,
                m_size=len(body.encode("utf-8")),
                pri=129,
                rr=129,
                tr_id=f"T{date_ms:x}",
                d_rpt=129,
                locked=0,
                sub_id=sub_id,
                seen=0,
                creator="com.android.phone",
                text_only=1,
            )
            self.insert_addr(pdu_id, sender, ADDR_TYPE_FROM, charset=CHARSET_UTF8, sub_id=sub_id)
            for address in recipients:
                self.insert_addr(pdu_id, address, ADDR_TYPE_TO, charset=CHARSET_UTF8, sub_id=sub_id)
            self.insert_part(
                pdu_id,
                seq=0,
                ct="text/plain",
                chset=CHARSET_UTF8,
                cid="<text_0>",
                cl="text_0.txt",
                text=body,
                sub_id=sub_id,
            )
        return pdu_id

    def mark_mms_sent(self, pdu_id: int, *, date_sent_ms: int) -> None:
        """Move an outgoing MMS to the sent box, as the MMS service does on an OK send-conf."""
        self._db.execute(
            "UPDATE pdu SET msg_box = ?, date_sent = ?, resp_st = ?, m_id = ? WHERE _id = ?",
            (
                MMS_BOX_SENT,
                date_sent_ms // 1000,
                MMS_RESPONSE_STATUS_OK,
                f"M{date_sent_ms:x}",
                pdu_id,
            ),
        )

    def mark_mms_failed(self, pdu_id: int) -> None:
        """Move an outgoing MMS to the failed box (5), as the MMS service does when a send fails."""
        self._db.execute("UPDATE pdu SET msg_box = ? WHERE _id = ?", (MMS_BOX_FAILED, pdu_id))

    def wipe(self) -> None:
        """A factory reset: every SMS, MMS and conversation is gone, and the secure settings
        with them (``android_id`` is generated anew at the next boot)."""
        with self._transaction():
            for table in (
                "sms",
                "pdu",
                "addr",
                "part",
                "canonical_addresses",
                "threads",
                "secure_settings",
                # a new database: every AUTOINCREMENT counter starts again
                "sqlite_sequence",
            ):
                self._db.execute(f"DELETE FROM {table}")

    def android_id(self, user_id: int = 0) -> str:
        """``Settings.Secure.ANDROID_ID`` of ``user_id`` (0: the phone's own), generated once
        and kept until a wipe: SettingsProvider's ``ensureSecureSettingAndroidIdSetLocked``
        stores ``Long.toHexString(new SecureRandom().nextLong())`` in each user's secure
        settings when the value is unset (so up to 16 hex digits, leading zeros dropped;
        every user has its own). Kept in this file beside the SMS tables (a real phone keeps
        it in the settings provider's own store under ``/data``)."""
        name = "android_id" if user_id == 0 else f"android_id@{user_id}"
        row = self._db.execute(
            "SELECT value FROM secure_settings WHERE name = ?", (name,)
        ).fetchone()
        if row is not None and row[0]:
            return str(row[0])
        value = format(secrets.randbits(64), "x")
        self._db.execute(
            "INSERT OR REPLACE INTO secure_settings (name, value) VALUES (?, ?)", (name, value)
        )
        return value

    def delete_thread(self, thread_id: int) -> list[int]:
        """Every SMS row of ``thread_id`` is gone, and only those (a delete of
        ``content://sms/conversations/<thread_id>``: ``SmsProvider.delete``
        ``SMS_CONVERSATIONS_ID``, TelephonyProvider android-10.0.0_r30 to 15.0.0_r1); returns
        their ``_id`` values. Deleting the latest rows lets the next insert take an ``_id``
        already seen (``_id INTEGER PRIMARY KEY`` without AUTOINCREMENT,
        ``MmsSmsDatabaseHelper`` at the same tags). The owner deleting a conversation in
        AOSP Messaging takes its MMS too: see :meth:`delete_conversation`."""
        ids = [
            int(row[0])
            for row in self._db.execute("SELECT _id FROM sms WHERE thread_id = ?", (thread_id,))
        ]
        with self._transaction():
            self._db.execute("DELETE FROM sms WHERE thread_id = ?", (thread_id,))
            self.drop_empty_threads()
        return ids

    def delete_conversation(self, thread_id: int) -> tuple[list[int], list[int]]:
        """The owner deletes a conversation in the messaging app: every SMS *and* every MMS
        of ``thread_id`` is gone (AOSP Messaging ``MmsUtils.deleteThread`` deletes
        ``Threads.CONTENT_URI/<thread_id>``, which ``MmsSmsProvider.deleteConversation``
        turns into ``MmsProvider.deleteMessages`` plus a delete from ``sms``, both with
        ``thread_id = <thread_id>``: packages/apps/Messaging and TelephonyProvider
        android-10.0.0_r30 and 15.0.0_r1). Returns the ``_id`` values of the SMS rows and of
        the MMS ``pdu`` rows deleted. An SMS ``_id`` may be taken again (see
        :meth:`delete_thread`); a ``pdu`` ``_id`` never is (AUTOINCREMENT)."""
        with self._transaction():
            sms_ids = self.delete_thread(thread_id)
            pdu_ids = [
                int(row[0])
                for row in self._db.execute("SELECT _id FROM pdu WHERE thread_id = ?", (thread_id,))
            ]
            for pdu_id in pdu_ids:
                self._db.execute("DELETE FROM addr WHERE msg_id = ?", (pdu_id,))
                self._db.execute("DELETE FROM part WHERE mid = ?", (pdu_id,))
                self._db.execute("DELETE FROM pdu WHERE _id = ?", (pdu_id,))
            self.drop_empty_threads()
        return sms_ids, pdu_ids

    def delete_from(self, first_id: int) -> list[int]:
        """Delete every SMS row with ``_id >= first_id`` (``delete from sms where _id >= N``:
        the latest messages gone); returns their ``_id`` values."""
        ids = [
            int(row[0])
            for row in self._db.execute("SELECT _id FROM sms WHERE _id >= ?", (first_id,))
        ]
        with self._transaction():
            self._db.execute("DELETE FROM sms WHERE _id >= ?", (first_id,))
            self.drop_empty_threads()
        return ids

    def mms_messages(self) -> list[MmsMessage]:
        """Every MMS with its addresses and text, ordered by ``_id`` (ground truth for tests)."""
        pdus = self._db.execute(
            "SELECT _id, thread_id, msg_box, m_type, sub, date, date_sent, sub_id, creator"
            " FROM pdu ORDER BY _id"
        ).fetchall()
        messages = []
        for pdu_id, thread_id, msg_box, m_type, subject, date, date_sent, sub_id, creator in pdus:
            addrs = self._db.execute(
                "SELECT address, type FROM addr WHERE msg_id = ? ORDER BY _id", (pdu_id,)
            ).fetchall()
            texts = self._db.execute(
                "SELECT text FROM part WHERE mid = ? AND ct = 'text/plain' ORDER BY seq, _id",
                (pdu_id,),
            ).fetchall()
            senders = [address for address, kind in addrs if kind == ADDR_TYPE_FROM]
            messages.append(
                MmsMessage(
                    id=pdu_id,
                    thread_id=thread_id,
                    msg_box=msg_box,
                    m_type=m_type,
                    addresses=tuple(address for address, kind in addrs if kind == ADDR_TYPE_TO),
                    sender=senders[0] if senders else None,
                    body="".join(text or "" for (text,) in texts),
                    subject=subject,
                    date=date,
                    date_sent=date_sent,
                    sub_id=sub_id,
                    creator=creator,
                )
            )
        return messages

    def _insert_into(self, table: str, known: Sequence[str], columns: Mapping[str, object]) -> int:
        unknown = set(columns) - set(known)
        if unknown:
            raise ValueError(f"unknown {table} columns: {sorted(unknown)}")
        names = list(columns)
        sql = f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})"
        cursor = self._db.execute(sql, tuple(columns[name] for name in names))
        row_id = cursor.lastrowid
        assert row_id is not None
        return row_id

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One write transaction: a reader never sees half a message (inside one already
        under way, part of it)."""
        if self._db.in_transaction:
            yield
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")


def _to_row(values: Sequence[object]) -> SmsRow:
    fields = dict(zip(SMS_COLUMNS, values, strict=True))
    return SmsRow(**fields)  # type: ignore[arg-type]
