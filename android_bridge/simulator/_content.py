"""``content``: Android's content-provider shell tool, answering for the SMS and MMS providers.

Follows AOSP ``cmds/content/.../Content.java`` (argument parsing, the usage text and
``[ERROR]`` line, ``Row: n col=value, ...`` output with raw strings and ``getLong`` integers,
``No result found.`` for a null cursor *and* for an empty one, and ``Error while accessing
provider:<authority>`` plus the exception's stack trace on stderr, always exiting 0). The
caller is the uid the tool runs as (``resolveCallingPackage``: root, com.android.shell, or
no package for any other uid); what the providers show that caller is ``_telephony``.
"""

from __future__ import annotations

import asyncio
import re
import struct
from collections.abc import Callable
from typing import Final
from urllib.parse import unquote

import attrs

from android_bridge.simulator._shell import Output
from android_bridge.simulator._store import SmsStore
from android_bridge.simulator._telephony import (
    SHELL_UID,
    ContentAccess,
    ExceptionRoute,
    ProviderException,
)
from android_bridge.simulator._telephony import query as provider_query

__all__ = ["USAGE", "ContentAccess", "ContentCommand"]

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

#: Frames of an exception the provider wrote with ``Parcel.writeException`` (a
#: ``SecurityException``): ``DatabaseUtils.readExceptionFromParcel`` hands it to ``Parcel``.
_PARCEL_FRAMES: Final = (
    "android.os.Parcel.createExceptionOrNull(Parcel.java:3069)",
    "android.os.Parcel.createException(Parcel.java:3053)",
    "android.os.Parcel.readException(Parcel.java:3036)",
    "android.database.DatabaseUtils.readExceptionFromParcel(DatabaseUtils.java:190)",
)
#: ``DatabaseUtils.readExceptionFromParcel`` rethrows the exceptions it has codes for itself
#: (``writeExceptionToParcel`` code 2 IllegalArgumentException, 9 SQLiteException). Line
#: numbers are representative: they move between releases.
_DATABASE_UTILS_LINES: Final = {
    "java.lang.IllegalArgumentException": 172,
    "android.database.sqlite.SQLiteException": 186,
}
#: The frames every provider exception has below the one that rethrows it.
_QUERY_FRAMES: Final = (
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

#: Authorities served, with the provider class named in permission errors.
_PROVIDERS: Final = {"sms": "SmsProvider", "mms": "MmsProvider"}


class _UsageError(Exception):
    """An ``IllegalArgumentException`` from the argument parser."""


class _JavaException(Exception):
    """A Java exception to print as ``printStackTrace`` would.

    ``route`` says where it was thrown in ``content``'s process: rethrown from the
    provider's reply (by ``DatabaseUtils`` or by ``Parcel``), or None when ``content`` itself
    threw it (no provider frames).
    """

    def __init__(self, java_class: str, message: str, *, route: ExceptionRoute | None) -> None:
        super().__init__(f"{java_class}: {message}")
        self.java_class = java_class
        self.message = message
        self.route = route

    @classmethod
    def from_provider(cls, error: ProviderException) -> _JavaException:
        """The exception as ``content`` sees it after binder."""
        return cls(error.java_class, error.message, route=error.route)

    def trace(self) -> str:
        frames: tuple[str, ...] = ()
        if self.route == "parcel":
            frames = _PARCEL_FRAMES + _QUERY_FRAMES
        elif self.route == "database_utils":
            line = _DATABASE_UTILS_LINES.get(self.java_class, 186)
            own = (
                f"android.database.DatabaseUtils.readExceptionFromParcel(DatabaseUtils.java:{line})"
            )
            frames = (own, *_QUERY_FRAMES)
        lines = [f"{self.java_class}: {self.message}"]
        lines.extend(f"\tat {frame}" for frame in frames + _COMMAND_FRAMES)
        return "\n".join(lines) + "\n"


@attrs.frozen(kw_only=True)
class _Query:
    uri: str
    user: int
    projection: list[str] | None
    where: str | None
    sort: str | None


class ContentCommand:
    """The ``content`` command bound to one phone's store."""

    def __init__(
        self,
        store: SmsStore,
        access: Callable[[], ContentAccess],
        take_provider_error: Callable[[], bool],
        caller_pid: Callable[[], int],
        row_cost_ms: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self._store = store
        self._access = access
        self._take_provider_error = take_provider_error
        self._caller_pid = caller_pid
        self._row_cost_ms = row_cost_ms

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
        output, rows = self._run_query(query)
        cost = self._row_cost_ms() * rows
        if cost > 0:
            # a slow phone: the cursor's rows are walked and printed one by one
            await asyncio.sleep(cost / 1000)
        return output

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
        if authority not in _PROVIDERS:
            return _provider_error(authority, _not_found(authority))
        if operation == "gettype":
            return Output.out(f"Result: vnd.android-dir/{authority}\n")
        access = self._access()
        if access.uid != SHELL_UID:
            # Writes are not modelled beyond this: the providers ignore them here.
            return Output()
        error = _JavaException(
            "java.lang.SecurityException",
            f"Permission Denial: writing com.android.providers.telephony."
            f"{_PROVIDERS[authority]} uri {uri} from pid={self._caller_pid()}, uid=2000"
            " requires android.permission.WRITE_SMS, or grantUriPermission()",
            route="parcel",
        )
        return _provider_error(authority, error)

    def _run_query(self, query: _Query) -> tuple[Output, int]:
        """The query's output, and how many rows it printed."""
        authority, segments = _parse_uri(query.uri)
        if authority not in _PROVIDERS or query.user != 0:
            return _provider_error(authority, _not_found(authority)), 0
        access = self._access()
        if self._take_provider_error():
            error = _JavaException(
                "java.lang.SecurityException",
                f"Permission Denial: reading com.android.providers.telephony."
                f"{_PROVIDERS[authority]} uri {query.uri} from pid={self._caller_pid()},"
                f" uid={access.uid} requires android.permission.READ_SMS, or grantUriPermission()",
                route="parcel",
            )
            return _provider_error(authority, error), 0
        try:
            cursor = provider_query(
                self._store,
                access,
                query.uri,
                authority,
                segments,
                query.projection,
                query.where,
                query.sort,
            )
        except ProviderException as error:
            return _provider_error(authority, _JavaException.from_provider(error)), 0
        if cursor is None or not cursor.rows:
            # A null cursor and an empty one print the same line.
            return Output.out("No result found.\n"), 0
        lines = []
        for index, row in enumerate(cursor.rows):
            cells = ", ".join(
                f"{name}={_format_value(value)}"
                for name, value in zip(cursor.columns, row, strict=True)
            )
            lines.append(f"Row: {index} {cells}\n")
        return Output.out("".join(lines)), len(lines)


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
        route=None,
    )


def _provider_error(authority: str | None, error: _JavaException) -> Output:
    return Output(
        ((2, f"Error while accessing provider:{_java_str(authority)}\n"), (2, error.trace()))
    )
