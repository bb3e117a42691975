"""The phone's own commands (``am``, ``input``, ``getprop``, ``date``, ``id``) and SMS app.

``am start -a android.intent.action.SENDTO -d smsto:N --es sms_body TEXT`` opens a compose
screen with the text field focused; ``input keyevent 22`` moves focus to the send button and
``input keyevent 66`` presses it (pressed in the text field, ENTER types a newline, as on a
real phone). The send itself is the phone's job (:class:`SendRequest` goes to a callback).
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, tzinfo
from typing import Final
from urllib.parse import unquote
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs

from android_bridge.simulator._platform import DEFAULT_RELEASE, AndroidRelease, android_release
from android_bridge.simulator._shell import Output

ACTION_SENDTO: Final = "android.intent.action.SENDTO"
ACTION_VIEW: Final = "android.intent.action.VIEW"
_SMS_SCHEMES: Final = ("smsto", "sms")
MESSAGING_COMPONENT_PREFIX: Final = "com.google.android.apps.messaging/"
_REDACTED_SCHEMES: Final = ("tel", "sip", "sms", "smsto", "mailto", "nfc")

KEYCODE_HOME: Final = 3
KEYCODE_BACK: Final = 4
KEYCODE_DPAD_RIGHT: Final = 22
KEYCODE_TAB: Final = 61
KEYCODE_ENTER: Final = 66
_KEYCODE_NAMES: Final = {
    "KEYCODE_HOME": KEYCODE_HOME,
    "KEYCODE_BACK": KEYCODE_BACK,
    "KEYCODE_DPAD_RIGHT": KEYCODE_DPAD_RIGHT,
    "KEYCODE_TAB": KEYCODE_TAB,
    "KEYCODE_ENTER": KEYCODE_ENTER,
    "KEYCODE_DPAD_LEFT": 21,
    "KEYCODE_DPAD_UP": 19,
    "KEYCODE_DPAD_DOWN": 20,
    "KEYCODE_DPAD_CENTER": 23,
    "KEYCODE_WAKEUP": 224,
    "KEYCODE_MENU": 82,
    "KEYCODE_POWER": 26,
}

_REGION_TIMEZONES: Final = {
    "US": "America/New_York",
    "CA": "America/Toronto",
    "GB": "Europe/London",
    "DE": "Europe/Berlin",
    "FR": "Europe/Paris",
    "IN": "Asia/Kolkata",
    "BR": "America/Sao_Paulo",
    "AU": "Australia/Sydney",
    "JP": "Asia/Tokyo",
}

#: Values the simulated phone reports for ``getprop`` and in its CNXN banner.
PRODUCT_NAME: Final = "sb_sim"
PRODUCT_MODEL: Final = "Starebrain Simulated Phone"
PRODUCT_DEVICE: Final = "sbsim"

_ID_GROUPS: Final = (
    "1004(input),1007(log),1011(adb),1015(sdcard_rw),1028(sdcard_r),1078(ext_data_rw),"
    "1079(ext_obb_rw),3001(net_bt_admin),3002(net_bt),3003(inet),3006(net_bw_stats),"
    "3009(readproc),3011(uhid),3012(readtracefs)"
)


def timezone_for_region(region: str) -> str:
    """The ``persist.sys.timezone`` a phone sold in ``region`` would likely have."""
    return _REGION_TIMEZONES.get(region.upper(), "UTC")


def build_properties(
    *,
    region: str,
    root: bool,
    serial: str,
    release: AndroidRelease | None = None,
    build_type: str = "user",
) -> dict[str, str]:
    """The system properties ``getprop`` lists."""
    release = release if release is not None else android_release(DEFAULT_RELEASE)
    country = region.lower()
    keys = "test-keys" if build_type != "user" else "release-keys"
    return {
        "gsm.operator.iso-country": country,
        "gsm.sim.operator.iso-country": country,
        "gsm.sim.state": "LOADED",
        "persist.sys.locale": f"en-{region.upper()}",
        "persist.sys.timezone": timezone_for_region(region),
        "ro.build.characteristics": "default",
        "ro.build.fingerprint": (
            f"starebrain/{PRODUCT_NAME}/{PRODUCT_DEVICE}:{release.release}/{release.build_id}"
            f"/11269751:{build_type}/{keys}"
        ),
        "ro.build.id": release.build_id,
        "ro.build.type": build_type,
        "ro.build.version.release": release.release,
        "ro.build.version.sdk": str(release.sdk),
        "ro.debuggable": "0" if build_type == "user" else "1",
        "ro.product.brand": "starebrain",
        "ro.product.device": PRODUCT_DEVICE,
        "ro.product.manufacturer": "Starebrain",
        "ro.product.model": PRODUCT_MODEL,
        "ro.product.name": PRODUCT_NAME,
        "ro.secure": "1",
        "ro.serialno": serial,
        "service.adb.root": "1" if root else "0",
        "sys.boot_completed": "1",
    }


@attrs.define(kw_only=True)
class Compose:
    """The messaging app's compose screen."""

    #: Recipient from the ``smsto:`` URI.
    address: str
    #: Text in the message field.
    body: str
    #: "text" (the message field) or "send" (the send button).
    focus: str = "text"
    #: Close the screen once sent (``--ez exit_on_sent true``).
    exit_on_sent: bool = False


@attrs.frozen(kw_only=True)
class SendRequest:
    """What the user asked the messaging app to send."""

    #: Recipient as typed in the intent.
    address: str
    #: Message text.
    body: str


class _IntentError(Exception):
    """An ``IllegalArgumentException`` while parsing intent arguments."""


@attrs.frozen(kw_only=True)
class _Intent:
    action: str | None = None
    data: str | None = None
    mime_type: str | None = None
    categories: tuple[str, ...] = ()
    component: str | None = None
    package: str | None = None
    flags: int = 0
    extras: Mapping[str, object] = attrs.field(factory=dict)

    def __str__(self) -> str:
        parts = []
        if self.action:
            parts.append(f"act={self.action}")
        if self.categories:
            parts.append(f"cat=[{','.join(self.categories)}]")
        if self.data:
            parts.append(f"dat={_safe_uri(self.data)}")
        if self.mime_type:
            parts.append(f"typ={self.mime_type}")
        if self.flags:
            parts.append(f"flg=0x{self.flags:x}")
        if self.package:
            parts.append(f"pkg={self.package}")
        if self.component:
            parts.append(f"cmp={self.component}")
        if self.extras:
            parts.append("(has extras)")
        return "Intent { " + " ".join(parts) + " }"


def _safe_uri(uri: str) -> str:
    """``Uri.toSafeString()``: phone numbers and addresses become ``x``s."""
    scheme, separator, rest = uri.partition(":")
    if separator and scheme.lower() in _REDACTED_SCHEMES:
        return scheme + ":" + "".join(c if c in "-@." else "x" for c in rest)
    return uri


_VALUE_OPTIONS: Final = frozenset(
    {
        "-a",
        "-d",
        "-t",
        "-c",
        "-n",
        "-p",
        "-f",
        "--user",
        "-R",
        "-P",
        "--start-profiler",
        "--sampling",
        "--windowingMode",
        "--activityType",
        "--display",
        "--task",
        "--attach-agent",
        "--attach-agent-bind",
        "-i",
        "--identifier",
    }
)
_FLAG_OPTIONS: Final = frozenset(
    {
        "-W",
        "-S",
        "-D",
        "-N",
        "--streaming",
        "--track-allocation",
        "--task-overlay",
        "--lock-task",
        "--allow-background-activity-starts",
        "--dismiss-keyguard",
        "--grant-read-uri-permission",
        "--grant-write-uri-permission",
        "--grant-persistable-uri-permission",
        "--grant-prefix-uri-permission",
        "--exclude-stopped-packages",
        "--include-stopped-packages",
        "--debug-log-resolution",
        "--activity-clear-top",
        "--activity-clear-task",
        "--activity-new-task",
        "--activity-single-top",
        "--activity-no-history",
        "--activity-reorder-to-front",
        "--receiver-foreground",
        "--selector",
        "--splashscreen-show-icon",
    }
)
_EXTRA_OPTIONS: Final = frozenset(
    {
        "-e",
        "--es",
        "--ez",
        "--ei",
        "--el",
        "--ef",
        "--ed",
        "--eu",
        "--ecn",
        "--eia",
        "--ela",
        "--efa",
        "--esa",
        "--eial",
        "--elal",
        "--efal",
        "--esal",
    }
)


def _parse_intent(args: list[str]) -> _Intent:
    fields: dict[str, str] = {}
    categories: list[str] = []
    extras: dict[str, object] = {}
    flags = 0
    tokens = iter(args)

    def required(option: str) -> str:
        value = next(tokens, None)
        if value is None:
            raise _IntentError(f'Argument expected after "{option}"')
        return value

    for arg in tokens:
        if arg in _EXTRA_OPTIONS:
            key = required(arg)
            extras[key] = _extra_value(arg, required(arg))
        elif arg == "--esn":
            extras[required(arg)] = None
        elif arg == "-c":
            categories.append(required(arg))
        elif arg == "-f":
            value = required(arg)
            try:
                flags = int(value, 0)
            except ValueError:
                raise _IntentError(f'For input string: "{value}"') from None
        elif arg in _VALUE_OPTIONS:
            fields[arg] = required(arg)
        elif arg in _FLAG_OPTIONS:
            continue
        elif arg.startswith("-"):
            raise _IntentError(f"Unknown option: {arg}")
        elif "/" in arg and ":" not in arg:
            fields["-n"] = arg
        else:
            fields["-d"] = arg
    return _Intent(
        action=fields.get("-a"),
        data=fields.get("-d"),
        mime_type=fields.get("-t"),
        categories=tuple(categories),
        component=fields.get("-n"),
        package=fields.get("-p"),
        flags=flags,
        extras=extras,
    )


def _extra_value(option: str, raw: str) -> object:
    if option == "--ez":
        lowered = raw.lower()
        if lowered in ("true", "t", "1"):
            return True
        if lowered in ("false", "f", "0"):
            return False
        raise _IntentError(f"Invalid boolean value: {raw}")
    if option in ("--ei", "--el"):
        try:
            return int(raw)
        except ValueError:
            raise _IntentError(f'For input string: "{raw}"') from None
    if option in ("--ef", "--ed"):
        try:
            return float(raw)
        except ValueError:
            raise _IntentError(f'For input string: "{raw}"') from None
    return raw


def _exception_output(
    command: str, java_class: str, message: str, frames: tuple[str, ...]
) -> Output:
    trace = "".join(f"\tat {frame}\n" for frame in frames)
    return Output.err(
        f"Exception occurred while executing '{command}':\n{java_class}: {message}\n{trace}", 255
    )


_AM_FRAMES: Final = (
    "android.content.Intent.parseCommandArgs(Intent.java:12140)",
    "com.android.server.am.ActivityManagerShellCommand$1.handleOption"
    "(ActivityManagerShellCommand.java:500)",
    "android.content.Intent.parseCommandArgs(Intent.java:12118)",
    "com.android.server.am.ActivityManagerShellCommand.makeIntent"
    "(ActivityManagerShellCommand.java:435)",
    "com.android.server.am.ActivityManagerShellCommand.runStartActivity"
    "(ActivityManagerShellCommand.java:589)",
    "com.android.server.am.ActivityManagerShellCommand.onCommand"
    "(ActivityManagerShellCommand.java:249)",
    "com.android.modules.utils.BasicShellCommandHandler.exec(BasicShellCommandHandler.java:97)",
    "android.os.ShellCommand.exec(ShellCommand.java:38)",
    "com.android.server.am.ActivityManagerService.onShellCommand"
    "(ActivityManagerService.java:10150)",
    "android.os.Binder.shellCommand(Binder.java:1092)",
    "android.os.Binder.onTransact(Binder.java:912)",
    "android.app.IActivityManager$Stub.onTransact(IActivityManager.java:5620)",
    "com.android.server.am.ActivityManagerService.onTransact(ActivityManagerService.java:2870)",
    "android.os.Binder.execTransactInternal(Binder.java:1392)",
    "android.os.Binder.execTransact(Binder.java:1299)",
)


class Messaging:
    """The messaging app and the keyboard: compose state and the send key."""

    def __init__(self, send: Callable[[SendRequest], Awaitable[None]]) -> None:
        self._send = send
        #: The open compose screen, or None.
        self.compose: Compose | None = None

    async def am(self, argv: list[str], stdin: str) -> Output:
        """``am``: only ``start`` (and ``force-stop``) are meaningful here."""
        if len(argv) < 2:
            return Output.err("Activity manager (activity) commands:\n  help\n", 255)
        command = argv[1]
        if command == "force-stop":
            if len(argv) > 2 and argv[-1] == "com.google.android.apps.messaging":
                self.compose = None
            return Output()
        if command not in ("start", "start-activity"):
            return Output.err(f"Unknown command: {command}\n", 255)
        try:
            intent = _parse_intent(argv[2:])
        except _IntentError as exc:
            return _exception_output(
                command, "java.lang.IllegalArgumentException", str(exc), _AM_FRAMES
            )
        starting = f"Starting: {intent}\n"
        scheme = (intent.data or "").partition(":")[0].lower()
        resolves = (
            intent.action in (ACTION_SENDTO, ACTION_VIEW)
            and scheme in _SMS_SCHEMES
            and (intent.component or MESSAGING_COMPONENT_PREFIX).startswith(
                MESSAGING_COMPONENT_PREFIX
            )
            and intent.package in (None, "com.google.android.apps.messaging")
        )
        if not resolves:
            return Output(
                (
                    (1, starting),
                    (2, f"Error: Activity not started, unable to resolve {intent}\n"),
                ),
                0,
            )
        assert intent.data is not None
        address = unquote(intent.data.partition(":")[2]).split("?", 1)[0]
        body = intent.extras.get("sms_body", intent.extras.get("android.intent.extra.TEXT", ""))
        self.compose = Compose(
            address=address,
            body=body if isinstance(body, str) else str(body),
            exit_on_sent=intent.extras.get("exit_on_sent") is True,
        )
        return Output.out(starting)

    async def input(self, argv: list[str], stdin: str) -> Output:
        """``input [source] keyevent|text|tap|swipe ...``."""
        args = argv[1:]
        if args and args[0] in ("keyboard", "touchscreen", "dpad", "touchpad", "gamepad"):
            args = args[1:]
        if not args:
            return Output.err(_INPUT_USAGE, 1)
        command, rest = args[0], args[1:]
        if command == "keyevent":
            codes = [arg for arg in rest if arg not in ("--longpress", "--doubletap")]
            if not codes:
                return Output.err(_INPUT_USAGE, 1)
            for code_text in codes:
                code = _KEYCODE_NAMES.get(code_text.upper())
                if code is None:
                    if not code_text.lstrip("-").isdigit():
                        return Output.err(f"Error: Unknown keycode: {code_text}\n", 1)
                    code = int(code_text)
                await self._key(code)
            return Output()
        if command == "text":
            if not rest:
                return Output.err(_INPUT_USAGE, 1)
            if self.compose is not None and self.compose.focus == "text":
                self.compose.body += " ".join(rest).replace("%s", " ")
            return Output()
        if command in ("tap", "swipe", "draganddrop", "roll", "motionevent", "press"):
            return Output()
        return Output.err(f"Error: Unknown command: {command}\n{_INPUT_USAGE}", 1)

    async def _key(self, code: int) -> None:
        compose = self.compose
        if compose is None:
            return
        if code in (KEYCODE_DPAD_RIGHT, KEYCODE_TAB):
            compose.focus = "send"
        elif code in (KEYCODE_BACK, KEYCODE_HOME):
            self.compose = None
        elif code == KEYCODE_ENTER:
            if compose.focus == "text":
                compose.body += "\n"
            elif compose.body.strip():
                request = SendRequest(address=compose.address, body=compose.body)
                # The draft is gone the moment the app takes it.
                if compose.exit_on_sent:
                    self.compose = None
                else:
                    self.compose = Compose(address=compose.address, body="", focus="text")
                await self._send(request)


_INPUT_USAGE: Final = (
    "Usage: input [<source>] [-d DISPLAY_ID] <command> [<arg>...]\n"
    "\n"
    "The commands and default sources are:\n"
    "      text <string> (Default: keyboard)\n"
    "      keyevent [--longpress|--doubletap] <key code number or name> ... (Default: keyboard)\n"
    "      tap <x> <y> (Default: touchscreen)\n"
    "      swipe <x1> <y1> <x2> <y2> [duration(ms)] (Default: touchscreen)\n"
)


class SystemCommands:
    """``getprop``, ``date``, ``id``, ``whoami``: answers that depend on the phone's settings."""

    def __init__(
        self,
        properties: Callable[[], Mapping[str, str]],
        now_ms: Callable[[], int],
        root: Callable[[], bool],
    ) -> None:
        self._properties = properties
        self._now_ms = now_ms
        self._root = root

    async def getprop(self, argv: list[str], stdin: str) -> Output:
        """``getprop [NAME [DEFAULT]]``."""
        properties = self._properties()
        if len(argv) == 1:
            listing = [f"[{name}]: [{value}]\n" for name, value in sorted(properties.items())]
            return Output.out("".join(listing))
        default = argv[2] if len(argv) > 2 else ""
        return Output.out(properties.get(argv[1], default) + "\n")

    async def id(self, argv: list[str], stdin: str) -> Output:
        """``id``: uid 2000 (shell) or 0 (root)."""
        if self._root():
            return Output.out(
                f"uid=0(root) gid=0(root) groups=0(root),{_ID_GROUPS} context=u:r:su:s0\n"
            )
        return Output.out(
            f"uid=2000(shell) gid=2000(shell) groups=2000(shell),{_ID_GROUPS}"
            " context=u:r:shell:s0\n"
        )

    async def whoami(self, argv: list[str], stdin: str) -> Output:
        """``whoami``."""
        return Output.out("root\n" if self._root() else "shell\n")

    async def date(self, argv: list[str], stdin: str) -> Output:
        """toybox ``date [-u] [+FORMAT]`` (setting the clock is refused)."""
        utc = False
        fmt = "%a %b %e %H:%M:%S %Z %Y"
        for arg in argv[1:]:
            if arg == "-u":
                utc = True
            elif arg.startswith("+"):
                fmt = arg[1:]
            else:
                return Output.err("date: cannot set date: Operation not permitted\n", 1)
        now_ms = self._now_ms()
        zone: tzinfo = UTC
        if not utc:
            try:
                zone = ZoneInfo(self._properties().get("persist.sys.timezone", "UTC"))
            except (ZoneInfoNotFoundError, ValueError):
                zone = UTC
        moment = datetime.fromtimestamp(now_ms / 1000, tz=zone)
        nanoseconds = (now_ms % 1000) * 1_000_000 + time.time_ns() % 1_000_000

        def expand(match: re.Match[str]) -> str:
            width, spec = match.group(1), match.group(2)
            if spec == "s":
                return str(now_ms // 1000)
            if spec == "N":
                digits = f"{nanoseconds:09d}"
                return digits[: int(width)] if width else digits
            if spec == "%":
                return "%"
            if spec == "e":
                return f"{moment.day:2d}"
            return moment.strftime("%" + spec)

        return Output.out(re.sub(r"%(\d*)([A-Za-z%])", expand, fmt) + "\n")
