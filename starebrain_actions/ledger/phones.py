"""Phones and the addresses that reach them: one phone is one device in the ledger, whatever
address reaches it (``127.0.0.1:5555`` and ``localhost:5555``; ``usb:SERIAL`` and the phone's
IP), and another phone at a known address is another device.

A phone is named in the ledger by its **key** (what ``attempts.device`` holds: the lease, the
watermarks, the claimed rows, the send rate and the send-path proof all go by it), bound to the
**identity** it answers with (``android_id:<hex>``: ``Settings.Secure.ANDROID_ID`` of user 0,
which the shell reads as the device's own value; random at first boot, new after a factory
reset; see ``android_bridge.DeviceFacts.identity``). A new phone's key is the first address it
was reached at (``…#2`` when that name is taken). A ledger from before schema version 7 named
each device by the address it used: such a **legacy key** has no identity until the first
connection through that address binds it. A phone whose identity cannot be read is named by
its address, as before.

The functions here run in the ledger's worker thread, inside its transactions.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime

import attrs

from starebrain_actions.core.convert import format_time
from starebrain_actions.core.model import ActionRecord
from starebrain_actions.ledger import pg as _pg


@attrs.frozen(kw_only=True)
class PhoneBinding:
    """Which phone of the ledger answered at an address (``Ledger.bind_phone``)."""

    #: the phone's key in the ledger (``ActionRecord.device`` of its attempts)
    key: str
    #: the address it answered at
    address: str
    #: the identity it answered with (None: none could be read; keyed by the address)
    identity: str | None
    #: the ledger meets this phone for the first time
    new: bool = False
    #: a legacy key (a ledger from before phones had identities, named by this address) was
    #: bound to this phone now
    adopted: bool = False
    #: the key this address named before, when another phone answers there now (a phone
    #: replaced or factory-reset): the two never share evidence
    replaced: str | None = None


@attrs.frozen(kw_only=True)
class PhoneInfo:
    """One phone the ledger knows, with the addresses it was reached at."""

    key: str
    #: None: a legacy key not yet bound, or a phone whose identity could not be read
    identity: str | None
    serialno: str | None
    first_seen_at: datetime
    last_seen_at: datetime
    #: the addresses, latest first
    addresses: tuple[str, ...] = ()


def _free_key(db: sqlite3.Connection, address: str) -> str:
    """``address``, or ``address#2``, ``#3``…: the first name no phone has yet."""
    candidate, number = address, 1
    while db.execute("SELECT 1 FROM phones WHERE phone_key = ?", (candidate,)).fetchone():
        number += 1
        candidate = f"{address}#{number}"
    return candidate


def _remember_address(db: sqlite3.Connection, address: str, key: str, when: str) -> None:
    db.execute(
        "INSERT INTO phone_addresses (address, phone_key, first_seen_at, last_seen_at)"
        " VALUES (?, ?, ?, ?) ON CONFLICT (address) DO UPDATE SET"
        " phone_key = excluded.phone_key, last_seen_at = excluded.last_seen_at",
        (address, key, when, when),
    )


def bind_phone(
    db: sqlite3.Connection,
    address: str,
    identity: str | None,
    serialno: str | None,
    now: datetime,
) -> PhoneBinding:
    """The phone answering at ``address`` with ``identity``, registered if new (see the module
    docstring); the address is remembered as one of its aliases."""
    _pg.lock(db, "phones")
    when = format_time(now)
    prev_row = db.execute(
        "SELECT phone_key FROM phone_addresses WHERE address = ?", (address,)
    ).fetchone()
    previous = str(prev_row[0]) if prev_row is not None else None
    if identity is None:
        key = previous or address
        new = not db.execute("SELECT 1 FROM phones WHERE phone_key = ?", (key,)).fetchone()
        if new:
            db.execute(
                "INSERT INTO phones (phone_key, identity, serialno, first_seen_at, last_seen_at)"
                " VALUES (?, NULL, ?, ?, ?)",
                (key, serialno, when, when),
            )
        _remember_address(db, address, key, when)
        db.execute("UPDATE phones SET last_seen_at = ? WHERE phone_key = ?", (when, key))
        return PhoneBinding(key=key, address=address, identity=None, new=new)
    known = db.execute("SELECT phone_key FROM phones WHERE identity = ?", (identity,)).fetchone()
    new = adopted = False
    replaced: str | None = None
    if known is not None:
        key = str(known[0])
        if previous is not None and previous != key and _identity(db, previous) is not None:
            replaced = previous
    elif previous is not None and _identity(db, previous) is None:
        # a legacy key named by this address, never bound: this phone is the one behind it
        key, adopted = previous, True
        db.execute("UPDATE phones SET identity = ? WHERE phone_key = ?", (identity, key))
    else:
        key, new = _free_key(db, address), True
        replaced = previous
        db.execute(
            "INSERT INTO phones (phone_key, identity, serialno, first_seen_at, last_seen_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (key, identity, serialno, when, when),
        )
    _remember_address(db, address, key, when)
    db.execute(
        "UPDATE phones SET last_seen_at = ?, serialno = coalesce(?, serialno) WHERE phone_key = ?",
        (when, serialno, key),
    )
    return PhoneBinding(
        key=key, address=address, identity=identity, new=new, adopted=adopted, replaced=replaced
    )


def _identity(db: sqlite3.Connection, key: str) -> str | None:
    row = db.execute("SELECT identity FROM phones WHERE phone_key = ?", (key,)).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def phone_identity(db: sqlite3.Connection, key: str) -> tuple[bool, str | None]:
    """(whether the ledger knows ``key`` as a phone, its identity)."""
    row = db.execute("SELECT identity FROM phones WHERE phone_key = ?", (key,)).fetchone()
    if row is None:
        return False, None
    return True, None if row[0] is None else str(row[0])


def phone_address(db: sqlite3.Connection, key: str) -> str:
    """The address ``key`` was reached at last (the key itself when none is known: a device
    named by its address before phones were kept)."""
    row = db.execute(
        "SELECT address FROM phone_addresses WHERE phone_key = ?"
        " ORDER BY last_seen_at DESC, address LIMIT 1",
        (key,),
    ).fetchone()
    return str(row[0]) if row is not None else key


def phone_key_for(db: sqlite3.Connection, name: str) -> str:
    """The key of the phone ``name`` names: a key itself, else the phone an address reached
    last, else ``name`` unchanged (a device the ledger never met as a phone)."""
    if db.execute("SELECT 1 FROM phones WHERE phone_key = ?", (name,)).fetchone():
        return name
    row = db.execute("SELECT phone_key FROM phone_addresses WHERE address = ?", (name,)).fetchone()
    return str(row[0]) if row is not None else name


def ledger_id(db: sqlite3.Connection) -> str:
    """The ledger's own id (``ledger_identity``, created by migration 18).

    Raises:
        CorruptRecord: the row is missing.
    """
    from starebrain_actions.core.exceptions import CorruptRecord

    row = db.execute("SELECT ledger_id FROM ledger_identity WHERE singleton = 1").fetchone()
    if row is None:
        raise CorruptRecord("the ledger has no id (its ledger_identity row is missing)")
    return str(row[0])


def phones(db: sqlite3.Connection) -> list[PhoneInfo]:
    """Every phone, by key, with its addresses (latest first): those connections bound, and
    the devices attempts name that none has bound yet (legacy keys)."""
    from starebrain_actions.core.convert import parse_time

    aliases: dict[str, list[str]] = {}
    for address, key in db.execute(
        "SELECT address, phone_key FROM phone_addresses ORDER BY last_seen_at DESC, address"
    ):
        aliases.setdefault(str(key), []).append(str(address))
    known = [
        PhoneInfo(
            key=str(key),
            identity=None if identity is None else str(identity),
            serialno=None if serialno is None else str(serialno),
            first_seen_at=parse_time(first),
            last_seen_at=parse_time(last),
            addresses=tuple(aliases.get(str(key), ())),
        )
        for key, identity, serialno, first, last in db.execute(
            "SELECT phone_key, identity, serialno, first_seen_at, last_seen_at FROM phones"
        )
    ]
    # a device the ledger's attempts name that no connection has bound yet (attempts begun
    # through the library without a bridge): a legacy key, reached at its own name
    legacy = [
        PhoneInfo(
            key=str(key),
            identity=None,
            serialno=None,
            first_seen_at=parse_time(first),
            last_seen_at=parse_time(last),
            addresses=(str(key),),
        )
        for key, first, last in db.execute(
            "SELECT device, min(dispatched_at), max(dispatched_at) FROM attempts"
            " WHERE device NOT IN (SELECT phone_key FROM phones) GROUP BY device"
        )
    ]
    return sorted([*known, *legacy], key=lambda phone: phone.key)


def phone_for(address: str, identity: str | None, phones: Sequence[PhoneInfo]) -> PhoneInfo | None:
    """The ledger's phone answering at ``address`` with ``identity``, as ``Ledger.bind_phone``
    would name it (read-only): the one bound to that identity, else a legacy one named by
    the address and not bound yet, else (no identity read) the one the address reached."""
    if identity is not None:
        for phone in phones:
            if phone.identity == identity:
                return phone
    for phone in phones:
        if address in phone.addresses and (identity is None or phone.identity is None):
            return phone
    return None


@attrs.frozen(kw_only=True)
class FrameworkCodes:
    """The ``ISms`` transaction codes one build proves in its own framework jar, or why they
    could not be proven (``Ledger.framework_codes``; the reader is
    ``android_bridge._isms_codes``)."""

    #: ``ro.build.fingerprint``
    build: str
    #: ``ro.build.version.sdk`` when the jar was read (None: not known)
    sdk: int | None
    #: ``TRANSACTION_sendTextForSubscriber`` (None: not proven, ``reason`` says why)
    send_text: int | None
    #: ``TRANSACTION_sendMultipartTextForSubscriber`` (None: absent, or not proven)
    send_multipart: int | None = None
    #: why the codes are not proven (None when they are)
    reason: str | None = None
    read_at: datetime
    #: set when a transport failure cut the reading short: it is read again after this time
    retry_after: datetime | None = None

    def __attrs_post_init__(self) -> None:
        if not self.build:
            raise ValueError("a build fingerprint must not be empty")
        if (self.send_text is None) == (self.reason is None):
            raise ValueError("either the codes or the reason they are not proven, not both")
        if self.retry_after is not None and self.reason is None:
            raise ValueError("only an unproven reading is read again")


_CODES_COLUMNS = "build, sdk, send_text, send_multipart, reason, read_at, retry_after"


@attrs.frozen(kw_only=True)
class FrameworkAttempts:
    """A phone's framework attempts that came to an end, as ``Ledger.framework_attempts``
    reads them for ``phone.send_path``."""

    #: newest first
    records: tuple[ActionRecord, ...] = ()
    #: when each came to prove or doubt the path (its latest confirmation, review or
    #: ruling in the history), by dispatch id
    decided_at: Mapping[str, datetime] = attrs.field(factory=dict)
    #: when each last went to review, by dispatch id (absent: never)
    flagged_at: Mapping[str, datetime] = attrs.field(factory=dict)


def framework_codes(db: sqlite3.Connection, build: str | None) -> list[FrameworkCodes]:
    """The codes kept for ``build`` (a list of at most one), or for every build (None)."""
    from starebrain_actions.core.convert import parse_time

    sql = f"SELECT {_CODES_COLUMNS} FROM framework_codes"
    rows = (
        db.execute(f"{sql} WHERE build = ?", (build,))
        if build is not None
        else db.execute(f"{sql} ORDER BY build")
    )
    return [
        FrameworkCodes(
            build=str(found),
            sdk=None if sdk is None else int(sdk),
            send_text=None if send_text is None else int(send_text),
            send_multipart=None if multipart is None else int(multipart),
            reason=None if reason is None else str(reason),
            read_at=parse_time(str(read_at)),
            retry_after=None if retry_after is None else parse_time(str(retry_after)),
        )
        for found, sdk, send_text, multipart, reason, read_at, retry_after in rows
    ]


def keep_framework_codes(db: sqlite3.Connection, codes: FrameworkCodes) -> None:
    """Keep ``codes`` for its build, in place of any earlier reading of it."""
    db.execute(
        f"INSERT INTO framework_codes ({_CODES_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (build) DO UPDATE SET sdk = excluded.sdk,"
        " send_text = excluded.send_text, send_multipart = excluded.send_multipart,"
        " reason = excluded.reason, read_at = excluded.read_at,"
        " retry_after = excluded.retry_after",
        (
            codes.build,
            codes.sdk,
            codes.send_text,
            codes.send_multipart,
            codes.reason,
            format_time(codes.read_at),
            None if codes.retry_after is None else format_time(codes.retry_after),
        ),
    )
