"""``content``: Android's content-provider shell tool, answering for the SMS provider.

Follows AOSP ``cmds/content/.../Content.java`` (argument parsing, the usage text and
``[ERROR]`` line, ``Row: n col=value, ...`` output with raw strings, ``No result found.``,
and ``Error while accessing provider:<authority>`` plus a stack trace on stderr, always
exiting 0) and the telephony ``SmsProvider`` (URI boxes, the ``date DESC`` default order, the
restricted view a non-SMS-app caller such as the shell user gets, and the strict SQL grammar
that refuses subqueries).
"""

from __future__ import annotations

import re
import sqlite3
import struct
from collections.abc import Callable, Sequence
from typing import Final
from urllib.parse import unquote

import attrs

from android_bridge.simulator._shell import Output
from android_bridge.simulator._store import SmsStore

USAGE: Final = (
    "usage: adb shell content [subcommand] [options]\n"
    "\n"
    "usage: adb shell content insert --uri <URI> [--user <USER_ID>]"
    " --bind <BINDING> [--bind <BINDING>...] [--extra <BINDING>...]\n"
    "  <URI> a content provider URI.\n"
    "  <BINDING> binds a typed value to a column and is formatted:\n"
    "  <COLUMN_NAME>:<TYPE>:<COLUMN_VALUE> where:\n"
    "  <TYPE> specifies data type such as:\n"
    "  b - boolean, s - string, i - integer, l - long, f - float, d - double, n - null\n"
    "  Note: Omit the value for passing an empty string, e.g column:s:\n"
    "  Example:\n"
    '  # Add "new_setting" secure setting with value "new_value".\n'
    "  adb shell content insert --uri content://settings/secure --bind name:s:new_setting"
    " --bind value:s:new_value\n"
    "\n"
    "usage: adb shell content update --uri <URI> [--user <USER_ID>]"
    " [--where <WHERE>] [--extra <BINDING>...]\n"
    "  <WHERE> is a SQL style where clause in quotes (You have to escape single quotes"
    " - see example below).\n"
    "  Example:\n"
    '  # Change "new_setting" secure setting to "newer_value".\n'
    "  adb shell content update --uri content://settings/secure --bind"
    " value:s:newer_value --where \"name='new_setting'\"\n"
    "\n"
    "usage: adb shell content delete --uri <URI> [--user <USER_ID>] --bind <BINDING>"
    " [--bind <BINDING>...] [--where <WHERE>] [--extra <BINDING>...]\n"
    "  Example:\n"
    '  # Remove "new_setting" secure setting.\n'
    "  adb shell content delete --uri content://settings/secure "
    "--where \"name='new_setting'\"\n"
    "\n"
    "usage: adb shell content query --uri <URI> [--user <USER_ID>]"
    " [--projection <PROJECTION>] [--where <WHERE>] [--sort <SORT_ORDER>]"
    " [--extra <BINDING>...]\n"
    "  <PROJECTION> is a list of colon separated column names and is formatted:\n"
    "  <COLUMN_NAME>[:<COLUMN_NAME>...]\n"
    "  <SORT_ORDER> is the order in which rows in the result should be sorted.\n"
    "  Example:\n"
    '  # Select "name" and "value" columns from secure settings where "name" is '
    'equal to "new_setting" and sort the result by name in ascending order.\n'
    "  adb shell content query --uri content://settings/secure --projection name:value"
    ' --where "name=\'new_setting\'" --sort "name ASC"\n'
    "\n"
    "usage: adb shell content call --uri <URI> --method <METHOD> [--arg <ARG>]\n"
    "       [--extra <BINDING> ...]\n"
    "  <METHOD> is the name of a provider-defined method\n"
    "  <ARG> is an optional string argument\n"
    "  <BINDING> is like --bind above, typed data of the form <KEY>:{b,s,i,l,f,d}:<VAL>\n"
    "\n"
    "usage: adb shell content read --uri <URI> [--user <USER_ID>]\n"
    "  Example:\n"
    "  adb shell 'content read --uri content://settings/system/ringtone_cache' > host.ogg\n"
    "\n"
    "usage: adb shell content write --uri <URI> [--user <USER_ID>]\n"
    "  Example:\n"
    "  adb shell 'content write --uri content://settings/system/ringtone_cache' < host.ogg\n"
    "\n"
    "usage: adb shell content gettype --uri <URI> [--user <USER_ID>]\n"
    "  Example:\n"
    "  adb shell content gettype --uri content://media/internal/audio/media/\n"
    "\n"
)

#: Frames below ``Content$Command.execute`` for an exception thrown by the provider.
_PROVIDER_FRAMES: Final = (
    "android.os.Parcel.createExceptionOrNull(Parcel.java:3069)",
    "android.os.Parcel.createException(Parcel.java:3053)",
    "android.os.Parcel.readException(Parcel.java:3036)",
    "android.database.DatabaseUtils.readExceptionFromParcel(DatabaseUtils.java:190)",
    "android.database.DatabaseUtils.readExceptionFromParcel(DatabaseUtils.java:142)",
    "android.content.ContentProviderProxy.query(ContentProviderNative.java:481)",
    "com.android.commands.content.Content$QueryCommand.onExecute(Content.java:676)",
)
_COMMAND_FRAMES: Final = (
    "com.android.commands.content.Content$Command.execute(Content.java:533)",
    "com.android.commands.content.Content.main(Content.java:763)",
    "com.android.internal.os.RuntimeInit.nativeFinishInit(Native Method)",
    "com.android.internal.os.RuntimeInit.main(RuntimeInit.java:371)",
)

_BOX_TYPES: Final = {
    "inbox": 1,
    "sent": 2,
    "draft": 3,
    "outbox": 4,
    "failed": 5,
    "queued": 6,
}
#: Keywords ``SQLiteQueryBuilder``'s strict grammar refuses (they start subqueries or clauses).
_REFUSED_TOKENS: Final = frozenset(
    {"SELECT", "FROM", "WHERE", "GROUP", "HAVING", "WINDOW", "VALUES", "ORDER", "LIMIT"}
)
_TOKEN = re.compile(
    r"'(?:[^']|'')*'|\"((?:[^\"]|\"\")*)\"|`([^`]*)`|\[([^\]]*)\]|([A-Za-z_][A-Za-z0-9_]*)"
)


class _UsageError(Exception):
    """An ``IllegalArgumentException`` from the argument parser."""


class _JavaException(Exception):
    """A Java exception to print as ``printStackTrace`` would."""

    def __init__(self, java_class: str, message: str, *, from_provider: bool = True) -> None:
        super().__init__(f"{java_class}: {message}")
        self.java_class = java_class
        self.message = message
        self.from_provider = from_provider

    def trace(self) -> str:
        frames = (_PROVIDER_FRAMES if self.from_provider else ()) + _COMMAND_FRAMES
        lines = [f"{self.java_class}: {self.message}"]
        lines.extend(f"\tat {frame}" for frame in frames)
        return "\n".join(lines) + "\n"


@attrs.frozen(kw_only=True)
class _Query:
    uri: str
    user: int
    projection: list[str] | None
    where: str | None
    sort: str | None


@attrs.frozen(kw_only=True)
class ContentAccess:
    """Who is asking, which decides what the SMS provider shows."""

    #: True for root (full view, no strict grammar); False for the shell user.
    root: bool
    #: Subscriptions whose rows the restricted view shows.
    visible_sub_ids: tuple[int, ...]


class ContentCommand:
    """The ``content`` command bound to one phone's store."""

    def __init__(
        self,
        store: SmsStore,
        access: Callable[[], ContentAccess],
        take_provider_error: Callable[[], bool],
        caller_pid: Callable[[], int],
    ) -> None:
        self._store = store
        self._access = access
        self._take_provider_error = take_provider_error
        self._caller_pid = caller_pid

    async def __call__(self, argv: list[str], stdin: str) -> Output:
        """Run ``content ARGS``; always exit 0, as the real tool does."""
        args = argv[1:]
        try:
            operation = args[0] if args else None
            if operation == "query":
                query = _parse_query(args[1:])
            elif operation in ("insert", "update", "delete", "call", "read", "write", "gettype"):
                return self._other(operation, args[1:])
            else:
                raise _UsageError(f"Unsupported operation: {_java_str(operation)}")
        except _UsageError as exc:
            return Output.out(f"{USAGE}\n[ERROR] {exc}\n")
        return self._run_query(query)

    def _other(self, operation: str, args: list[str]) -> Output:
        """Non-query operations: parsed for errors, then refused or ignored as the SMS app does."""
        uri = None
        index = 0
        while index < len(args):
            argument = args[index]
            if argument == "--uri" and index + 1 < len(args) and args[index + 1]:
                uri = args[index + 1]
            index += 2 if argument.startswith("--") else 1
        if uri is None:
            return Output.out(
                f"{USAGE}\n[ERROR] Content provider URI not specified."
                " Did you specify --uri argument?\n"
            )
        authority, _ = _parse_uri(uri)
        if authority != "sms":
            return _provider_error(authority, _not_found(authority))
        if operation == "gettype":
            return Output.out("Result: vnd.android-dir/sms\n")
        if self._access().root:
            # The provider ignores writes from anything but the default SMS app.
            return Output()
        error = _JavaException(
            "java.lang.SecurityException",
            f"Permission Denial: writing com.android.providers.telephony.SmsProvider uri {uri}"
            f" from pid={self._caller_pid()}, uid=2000 requires android.permission.WRITE_SMS,"
            " or grantUriPermission()",
        )
        return _provider_error(authority, error)

    def _run_query(self, query: _Query) -> Output:
        authority, segments = _parse_uri(query.uri)
        if authority != "sms":
            return _provider_error(authority, _not_found(authority))
        if query.user != 0:
            return _provider_error(authority, _not_found(authority))
        access = self._access()
        if self._take_provider_error():
            error = _JavaException(
                "java.lang.SecurityException",
                "Permission Denial: reading com.android.providers.telephony.SmsProvider uri "
                f"{query.uri} from pid={self._caller_pid()}, uid={0 if access.root else 2000}"
                " requires android.permission.READ_SMS, or grantUriPermission()",
            )
            return _provider_error(authority, error)
        box_filter = _box_filter(segments)
        if box_filter is None:
            # SmsProvider logs "Invalid request" and returns a null cursor.
            return Output.out("No result found.\n")
        try:
            if not access.root:
                _enforce_strict_grammar(query.where)
                _enforce_strict_grammar(query.sort)
            sql = _build_sql(query, box_filter, access)
            names, rows = self._store.read_only_query(sql)
        except _JavaException as error:
            return _provider_error(authority, error)
        except sqlite3.Error as exc:
            shown = _display_sql(query, box_filter, "sms" if access.root else "sms_restricted")
            sql_error = _JavaException(
                "android.database.sqlite.SQLiteException",
                f"{exc} (code 1 SQLITE_ERROR[1]): , while compiling: {shown}",
            )
            return _provider_error(authority, sql_error)
        if not rows:
            return Output.out("No result found.\n")
        lines = []
        for index, row in enumerate(rows):
            cells = ", ".join(
                f"{name}={_format_value(value)}" for name, value in zip(names, row, strict=True)
            )
            lines.append(f"Row: {index} {cells}\n")
        return Output.out("".join(lines))


def _parse_query(args: list[str]) -> _Query:
    uri: str | None = None
    user = 0
    projection: list[str] | None = None
    where: str | None = None
    sort: str | None = None
    tokens = iter(args)

    def required(argument: str) -> str:
        value = next(tokens, None)
        if not value or value.startswith("--"):
            raise _UsageError(f"No value for argument: {argument}")
        return value

    for argument in tokens:
        if argument == "--uri":
            uri = required(argument)
        elif argument == "--user":
            value = required(argument)
            if not re.fullmatch(r"[+-]?\d+", value) or not -(2**31) <= int(value) < 2**31:
                raise _UsageError(f'For input string: "{value}"')
            user = int(value)
        elif argument == "--where":
            where = required(argument)
        elif argument == "--sort":
            sort = required(argument)
        elif argument == "--projection":
            projection = _java_split(required(argument))
        elif argument == "--extra":
            _parse_binding(next(tokens, None))
        else:
            raise _UsageError(f"Unsupported argument: {argument}")
    if uri is None:
        raise _UsageError("Content provider URI not specified. Did you specify --uri argument?")
    return _Query(uri=uri, user=user, projection=projection, where=where, sort=sort)


def _parse_binding(argument: str | None) -> None:
    if not argument:
        raise _UsageError(f"Binding not well formed: {_java_str(argument)}")
    parts = re.split(r"(?<!\\):", argument)
    if len(parts) != 3:
        raise _UsageError(f"Binding not well formed: {argument}")
    if parts[1].lower() not in ("s", "b", "i", "l", "f", "d", "n") or parts[1] == "S":
        raise _UsageError(f"Unsupported type: {parts[1]}")


def _java_split(value: str) -> list[str]:
    """``String.split("[\\s]*:[\\s]*")``: trailing empty strings are dropped."""
    parts = re.split(r"\s*:\s*", value)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _java_str(value: str | None) -> str:
    return "null" if value is None else value


def _parse_uri(uri: str) -> tuple[str | None, list[str]]:
    """Return the authority and path segments of ``uri`` as ``android.net.Uri`` would."""
    match = re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)([^?#]*)", uri)
    if not match:
        return None, []
    authority = unquote(match.group(1))
    segments = [unquote(segment) for segment in match.group(2).split("/") if segment]
    return authority, segments


def _box_filter(segments: Sequence[str]) -> str | None:
    """The provider's own WHERE for a URI path, "" for all rows, None for an unknown path."""
    if not segments:
        return ""
    if len(segments) == 1:
        if segments[0] in _BOX_TYPES:
            return f"type={_BOX_TYPES[segments[0]]}"
        if segments[0] == "undelivered":
            return "(type=4 OR type=5 OR type=6)"
        if segments[0].isdigit():
            return f"(_id = {segments[0]})"
        return None
    if len(segments) == 2 and segments[0] in _BOX_TYPES and segments[1].isdigit():
        return f"(_id = {segments[1]})"
    return None


def _enforce_strict_grammar(clause: str | None) -> None:
    if not clause:
        return
    for match in _TOKEN.finditer(clause):
        if match.group(0).startswith("'"):
            continue
        token = next(group for group in match.groups() if group is not None)
        if token.upper() in _REFUSED_TOKENS:
            raise _JavaException("java.lang.IllegalArgumentException", f"Invalid token {token}")


def _build_sql(query: _Query, box_filter: str, access: ContentAccess) -> str:
    if access.root:
        prefix, table = "", "sms"
    else:
        subs = ", ".join(str(sub_id) for sub_id in access.visible_sub_ids) or "NULL"
        prefix = (
            "WITH sms_restricted AS (SELECT * FROM sms WHERE type IN (1, 2)"
            f" AND sub_id IN ({subs})) "
        )
        table = "sms_restricted"
    return prefix + _display_sql(query, box_filter, table)


def _display_sql(query: _Query, box_filter: str, table: str) -> str:
    columns = ", ".join(query.projection) if query.projection else "*"
    sql = f"SELECT {columns} FROM {table}"
    conditions = [
        f"({box_filter})" if box_filter else "",
        f"({query.where})" if query.where else "",
    ]
    present = [condition for condition in conditions if condition]
    if present:
        sql += " WHERE " + " AND ".join(present)
    sql += f" ORDER BY {query.sort or 'date DESC'}"
    return sql


def _format_value(value: object) -> str:
    """Print a cell as ``Content.java`` does: raw strings, ``NULL``, ``BLOB``, Java numbers."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return "BLOB"
    if isinstance(value, float):
        return _java_float(value)
    return str(value)


def _java_float(value: float) -> str:
    """``String.valueOf(float)`` for the common cases."""
    single = struct.unpack("<f", struct.pack("<f", value))[0]
    if single != single:
        return "NaN"
    if single in (float("inf"), float("-inf")):
        return "Infinity" if single > 0 else "-Infinity"
    if single == 0 or 1e-3 <= abs(single) < 1e7:
        text = f"{single:.8g}"
        for digits in range(1, 10):
            candidate = f"{single:.{digits}g}"
            if struct.unpack("<f", struct.pack("<f", float(candidate)))[0] == single:
                text = candidate
                break
        if "e" in text:
            text = repr(float(text))
        return text if "." in text else text + ".0"
    mantissa, exponent = f"{single:.7e}".split("e")
    mantissa = mantissa.rstrip("0")
    if mantissa.endswith("."):
        mantissa += "0"
    return f"{mantissa}E{int(exponent)}"


def _not_found(authority: str | None) -> _JavaException:
    return _JavaException(
        "java.lang.IllegalStateException",
        f"Could not find provider: {_java_str(authority)}",
        from_provider=False,
    )


def _provider_error(authority: str | None, error: _JavaException) -> Output:
    return Output(
        ((2, f"Error while accessing provider:{_java_str(authority)}\n"), (2, error.trace()))
    )
