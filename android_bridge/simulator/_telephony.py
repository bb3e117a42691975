"""The telephony providers behind ``content://sms`` and ``content://mms``, as a caller sees them.

Modelled per release on TelephonyProvider (``SmsProvider.java``, ``MmsProvider.java``,
``ProviderUtil.java``, ``SqlQueryChecker.java``, ``MmsSmsDatabaseHelper.java``) at the tags of
``_platform`` (android-10.0.0_r30, 11.0.0_r1, 12.0.0_r1, 13.0.0_r1, 14.0.0_r1, 15.0.0_r1) and
on frameworks/base's ``ContentProvider.Transport`` and ``cmds/content`` ``Content.java``.

Who sees what (``ProviderUtil.isAccessRestricted``, unchanged 10 to 15): every caller except
uid 1000 (system), uid 1001 (phone) and the default SMS app is *restricted*. Root (uid 0) and
the shell (uid 2000) are restricted. A restricted caller

- reads ``sms`` through the view ``sms_restricted`` (types 1 and 2 only) and ``pdu`` through
  ``pdu_restricted`` (boxes 1 and 2, no ``m_type`` 130); ``addr`` and ``part`` are read from
  the tables themselves, so their rows are visible for every message, whatever its box;
- has its projection, selection and sort order checked by ``SqlQueryChecker`` (see
  ``_sqlcheck``): ``SmsProvider`` catches the rejection and returns no cursor (``content``
  prints ``No result found.``); ``MmsProvider`` (android-13.0.0_r1 on) does not catch it, so
  the caller gets ``Error while accessing provider:mms`` and an ``IllegalArgumentException``.

From android-14.0.0_r1 both providers add ``sub_id IN (<the user's SIMs>, -1)``
(``ProviderUtil.getSelectionBySubIds``) to every query, whoever calls: the user's SIMs are
every subscription the phone knows for the main user (``SubscriptionManagerService
.getSubscriptionInfoListAssociatedWithUser``), and -1 is added for a user that is not a
managed profile (a work-profile caller, not modelled: the shell is user 0, gets only its
own subscriptions; on 15 with ``workProfileApiSplit``, only those assigned to the profile).
``SmsProvider`` ORs in ``address IN (<emergency numbers>)``
(``ProviderUtil.getSelectionByEmergencyNumbers``) when the query's table is the SMS table, on
15 only with ``FEATURE_TELEPHONY_CALLING`` (``hasCalling``), which a phone has (TelephonyProvider
android-14.0.0_r1 and 15.0.0_r1). Android 10 to 13 filter nothing by subscription: a
restricted caller sees inbox and sent rows of every ``sub_id``.

Until the user first unlocks after boot the database (``mmssms.db`` in credential-encrypted
storage, ``MmsSmsDatabaseHelper.getInstanceForCe``) cannot be opened: ``SmsProvider`` lets the
``SQLiteCantOpenDatabaseException`` through (a provider error), ``MmsProvider`` catches every
``SQLiteException`` and returns no cursor (``No result found.``). A query the restricted-caller
checker rejects never reaches the database, so it prints ``No result found.`` either way.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from typing import Final, Literal

import attrs

from android_bridge.simulator._platform import AndroidRelease
from android_bridge.simulator._sqlcheck import (
    QueryRejected,
    check_query_parameters,
    first_statement,
)
from android_bridge.simulator._store import DEFAULT_SUB_ID, SmsStore

#: ``Process.ROOT_UID``, ``SYSTEM_UID``, ``PHONE_UID``, ``SHELL_UID``.
ROOT_UID: Final = 0
SYSTEM_UID: Final = 1000
PHONE_UID: Final = 1001
SHELL_UID: Final = 2000

#: ``SubscriptionManager.INVALID_SUBSCRIPTION_ID``: rows restored from another phone.
INVALID_SUB_ID: Final = -1
#: Emergency numbers of a phone with a US SIM (``TelephonyManager.getEmergencyNumberList``
#: varies with the SIM and its country; 112 and 911 are in every list).
DEFAULT_EMERGENCY_NUMBERS: Final = ("112", "911")

#: Where ``mmssms.db`` lives: the credential-encrypted data directory of the provider package.
_CE_DATABASE: Final = "/data/user/0/com.android.providers.telephony/databases/mmssms.db"

_SMS_BOXES: Final = {"inbox": 1, "sent": 2, "draft": 3, "outbox": 4, "failed": 5, "queued": 6}
#: ``sms/<box>/#`` URIs ``SmsProvider``'s matcher knows (there is no ``queued/#``).
_SMS_BOX_IDS: Final = frozenset({"inbox", "sent", "draft", "outbox", "failed"})
_MMS_BOXES: Final = {"inbox": 1, "sent": 2, "drafts": 3, "outbox": 4}
_NUMBER: Final = re.compile(r"[0-9]+")

#: ``addr``/``part`` columns up to android-13 (database version 67): no ``sub_id``.
_ADDR_COLUMNS_V67: Final = "_id, msg_id, contact_id, address, type, charset"
_PART_COLUMNS_V67: Final = (
    "_id, mid, seq, ct, name, chset, cd, fn, cid, cl, ctt_s, ctt_t, _data, text"
)

#: How a provider exception reaches ``content``: through ``DatabaseUtils``' own codes
#: (``IllegalArgumentException``, ``SQLiteException``...) or ``Parcel.writeException``.
ExceptionRoute = Literal["database_utils", "parcel"]


class ProviderException(Exception):
    """An exception the provider (or the binder layer in front of it) throws to the caller."""

    def __init__(self, java_class: str, message: str, *, route: ExceptionRoute) -> None:
        super().__init__(f"{java_class}: {message}")
        self.java_class = java_class
        self.message = message
        self.route: ExceptionRoute = route


@attrs.frozen(kw_only=True)
class ContentAccess:
    """Who calls the providers and the phone state that decides what they show."""

    #: The caller's uid: 2000 for ``adb shell``, 0 after ``adb root``, what ``su WHO`` set.
    uid: int
    #: The Android release modelled.
    release: AndroidRelease
    #: Subscriptions the phone knows for the main user (``sim_sub_ids`` of the phone).
    sim_sub_ids: tuple[int, ...] = (DEFAULT_SUB_ID,)
    #: False until the first unlock after boot: credential-encrypted storage is locked.
    user_unlocked: bool = True
    #: ``TelephonyManager.getEmergencyNumberList`` numbers, per subscription.
    emergency_numbers: tuple[str, ...] = DEFAULT_EMERGENCY_NUMBERS

    @property
    def calling_package(self) -> str | None:
        """``Content.resolveCallingPackage``: root, com.android.shell, or none for other uids."""
        return {ROOT_UID: "root", SHELL_UID: "com.android.shell"}.get(self.uid)

    @property
    def restricted(self) -> bool:
        """``ProviderUtil.isAccessRestricted``: only system and phone read everything.

        The third exception, the default SMS app, is never the caller of ``content``: the
        tool presents itself as root, com.android.shell or no package at all.
        """
        return self.uid not in (SYSTEM_UID, PHONE_UID)


@attrs.frozen
class Cursor:
    """What a query returned: column names and rows (possibly none)."""

    columns: list[str]
    rows: list[tuple[object, ...]]


@attrs.frozen(kw_only=True)
class _Plan:
    table: str
    where: str
    default_order: str | None


def query(
    store: SmsStore,
    access: ContentAccess,
    uri: str,
    authority: str,
    segments: Sequence[str],
    projection: list[str] | None,
    selection: str | None,
    sort: str | None,
) -> Cursor | None:
    """Run one ``content query`` against the SMS or MMS provider; None is a null cursor.

    Raises:
        ProviderException: what the provider throws (printed as a provider error).
    """
    provider_class = "SmsProvider" if authority == "sms" else "MmsProvider"
    _enforce_read_permission(access, provider_class, uri)
    if authority == "sms":
        return _query_sms(store, access, segments, projection, selection, sort)
    return _query_mms(store, access, segments, projection, selection, sort)


def _enforce_read_permission(access: ContentAccess, provider_class: str, uri: str) -> None:
    """``ContentProvider.Transport.enforceReadPermission``: READ_SMS or the provider's own uid.

    Root and system hold every permission, the shell package holds READ_SMS
    (packages/Shell ``AndroidManifest.xml``), the phone uid is the provider's own. Any other
    uid is refused here: ``content`` names no package for it, and whether it holds READ_SMS
    is not modelled (the refusal is the outcome that shows the caller least).
    """
    if access.uid in (ROOT_UID, SYSTEM_UID, PHONE_UID, SHELL_UID):
        return
    raise ProviderException(
        "java.lang.SecurityException",
        f"Permission Denial: reading com.android.providers.telephony.{provider_class} uri"
        f" {uri} from pid=4242, uid={access.uid} requires android.permission.READ_SMS, or"
        " grantUriPermission()",
        route="parcel",
    )


def _query_sms(
    store: SmsStore,
    access: ContentAccess,
    segments: Sequence[str],
    projection: list[str] | None,
    selection: str | None,
    sort: str | None,
) -> Cursor | None:
    """``SmsProvider.query``."""
    release = access.release
    if access.restricted and release.sms_query_checker:
        try:
            check_query_parameters(
                projection, selection, sort, ignore_case=release.select_check_ignores_case
            )
        except QueryRejected:
            # Log.w(TAG, "Query rejected: ..."); return null;
            return None
    plan = _match_sms(segments, "sms_restricted" if access.restricted else "sms")
    if not access.user_unlocked:
        # getReadableDatabase(match) comes before the URI switch: even an unknown path fails.
        raise _cannot_open_database()
    if plan is None:
        # Log.e(TAG, "Invalid request: " + url); return null;
        return None
    if release.sub_id_filter:
        filter_sql = f"{_selection_by_sub_ids(access)} OR {_selection_by_emergency(access)}"
        selection = _concatenate_where(selection, filter_sql)
    order = sort if sort else plan.default_order
    sql = _build_query(plan.table, projection, plan.where, selection, order)
    try:
        return _execute(store, sql, release)
    except sqlite3.Error as exc:
        raise ProviderException(
            "android.database.sqlite.SQLiteException",
            f"{exc} (code 1 SQLITE_ERROR[1]): , while compiling: {sql}",
            route="database_utils",
        ) from exc


def _query_mms(
    store: SmsStore,
    access: ContentAccess,
    segments: Sequence[str],
    projection: list[str] | None,
    selection: str | None,
    sort: str | None,
) -> Cursor | None:
    """``MmsProvider.query``."""
    release = access.release
    if access.restricted and release.mms_query_checker:
        try:
            check_query_parameters(
                projection, selection, sort, ignore_case=release.select_check_ignores_case
            )
        except QueryRejected as exc:
            # Not caught in MmsProvider: the IllegalArgumentException reaches the caller.
            raise ProviderException(
                "java.lang.IllegalArgumentException", str(exc), route="database_utils"
            ) from exc
    plan = _match_mms(segments, "pdu_restricted" if access.restricted else "pdu")
    if plan is None:
        # Log.e(TAG, "query: invalid request: " + uri); return null;
        return None
    if release.sub_id_filter:
        selection = _concatenate_where(selection, _selection_by_sub_ids(access))
    order = sort if sort else plan.default_order
    if not access.user_unlocked:
        # catch (SQLiteException e) { Log.e(TAG, "returning NULL cursor, ..."); return null; }
        return None
    sql = _build_query(plan.table, projection, plan.where, selection, order)
    try:
        return _execute(store, sql, release)
    except sqlite3.Error:
        # The same catch turns every SQL error into a null cursor.
        return None


def _match_sms(segments: Sequence[str], table: str) -> _Plan | None:
    """``SmsProvider``'s URI matcher for the message URIs: the internal WHERE, or None."""
    order = "date DESC"
    if not segments:
        return _Plan(table=table, where="", default_order=order)
    if len(segments) == 1:
        name = segments[0]
        if name in _SMS_BOXES:
            return _Plan(table=table, where=f"type={_SMS_BOXES[name]}", default_order=order)
        if name == "undelivered":
            return _Plan(table=table, where="(type=4 OR type=5 OR type=6)", default_order=order)
        if _NUMBER.fullmatch(name):
            return _Plan(table=table, where=f"(_id = {name})", default_order=order)
        return None
    by_id = segments[0] in _SMS_BOX_IDS or segments[0] == "status"
    if len(segments) == 2 and by_id and _NUMBER.fullmatch(segments[1]):
        # SMS_<BOX>_ID and SMS_STATUS_ID select by _id alone, whatever the box.
        return _Plan(table=table, where=f"(_id = {segments[1]})", default_order=order)
    return None


def _match_mms(segments: Sequence[str], pdu_table: str) -> _Plan | None:
    """``MmsProvider``'s URI matcher for the message, part and address URIs."""
    order = "date DESC"
    if not segments:
        return _Plan(table=pdu_table, where="", default_order=order)
    first = segments[0]
    if len(segments) == 1:
        if first in _MMS_BOXES:
            return _Plan(table=pdu_table, where=f"msg_box={_MMS_BOXES[first]}", default_order=order)
        if _NUMBER.fullmatch(first):
            return _Plan(table=pdu_table, where=f"_id={first}", default_order=order)
        if first == "part":
            return _Plan(table="part", where="", default_order="seq")
        return None
    if len(segments) == 2:
        second = segments[1]
        if _NUMBER.fullmatch(first):
            if second == "part":
                return _Plan(table="part", where=f"mid={first}", default_order="seq")
            if second == "addr":
                return _Plan(table="addr", where=f"msg_id={first}", default_order=None)
            return None
        if first == "part" and _NUMBER.fullmatch(second):
            return _Plan(table="part", where=f"_id={second}", default_order="seq")
        if first in _MMS_BOXES and _NUMBER.fullmatch(second):
            return _Plan(
                table=pdu_table,
                where=f"_id={second} AND msg_box={_MMS_BOXES[first]}",
                default_order=order,
            )
    return None


def _selection_by_sub_ids(access: ContentAccess) -> str:
    """``ProviderUtil.getSelectionBySubIds`` for the main user: the SIMs, then -1."""
    sub_ids = [*access.sim_sub_ids, INVALID_SUB_ID]
    return "sub_id IN (" + ",".join(f"'{sub_id}'" for sub_id in sub_ids) + ")"


def _selection_by_emergency(access: ContentAccess) -> str:
    """``ProviderUtil.getSelectionByEmergencyNumbers``: each subscription's list in turn."""
    numbers = [number for _ in access.sim_sub_ids for number in access.emergency_numbers]
    return "address IN (" + ",".join(f"'{number}'" for number in numbers) + ")"


def _concatenate_where(first: str | None, second: str) -> str:
    """``DatabaseUtils.concatenateWhere``."""
    if not first:
        return second
    return f"({first}) AND ({second})"


def _build_query(
    table: str,
    projection: list[str] | None,
    internal_where: str,
    selection: str | None,
    order: str | None,
) -> str:
    """``SQLiteQueryBuilder.buildQuery``: columns as given, internal and caller WHERE in
    parentheses joined by AND, then ORDER BY (so ``--sort '_id LIMIT 5'`` limits)."""
    columns = ", ".join(projection) if projection else "*"
    sql = f"SELECT {columns} FROM {table}"
    parts = [f"({clause})" for clause in (internal_where, selection) if clause]
    if parts:
        sql += " WHERE " + " AND ".join(parts)
    if order:
        sql += f" ORDER BY {order}"
    return sql


def _execute(store: SmsStore, sql: str, release: AndroidRelease) -> Cursor:
    """Compile and run ``sql`` as Android's SQLite binding does.

    ``sqlite3_prepare16_v2`` without a tail pointer (``android_database_SQLiteConnection.cpp``):
    a first statement that compiles runs and whatever follows it is ignored; unbound ``?``
    parameters are NULL. Before android-14 ``addr`` and ``part`` have no ``sub_id``.
    """
    prefix = ""
    if not release.mms_addr_part_sub_id:
        prefix = (
            f"WITH addr AS (SELECT {_ADDR_COLUMNS_V67} FROM main.addr),"
            f" part AS (SELECT {_PART_COLUMNS_V67} FROM main.part) "
        )
    statement = sql
    parameters: tuple[None, ...] = ()
    while True:
        try:
            names, rows = store.read_only_query(prefix + statement, parameters)
        except sqlite3.ProgrammingError as exc:
            expected = re.search(r"statement uses (\d+)", str(exc))
            if expected is not None and not parameters:
                parameters = (None,) * int(expected.group(1))
                continue
            if "one statement at a time" in str(exc) and statement == sql:
                statement = first_statement(sql)
                continue
            raise
        return Cursor(columns=names, rows=rows)


def _cannot_open_database() -> ProviderException:
    """The ``SQLiteCantOpenDatabaseException`` of ``SQLiteConnection.open`` on locked CE storage.

    It crosses binder as a plain ``SQLiteException`` (``DatabaseUtils.writeExceptionToParcel``
    code 9). The diagnosis text follows ``SQLiteConnection.open`` (frameworks/base, Android
    11+): the ``databases`` directory cannot be seen while the storage is locked. Some releases
    also print the open flags (``with flags 0x...``); that detail is not modelled.
    """
    directory = _CE_DATABASE.rsplit("/", 1)[0]
    return ProviderException(
        "android.database.sqlite.SQLiteException",
        f"Cannot open database '{_CE_DATABASE}': Directory {directory} doesn't exist",
        route="database_utils",
    )
