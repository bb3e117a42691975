"""The phone's own commands (``am``, ``input``, ``getprop``, ``date``, ``id``) and its windows.

``am start -a android.intent.action.SENDTO -d smsto:N --es sms_body TEXT`` resolves to the
messaging app (an :class:`~android_bridge.simulator._apps.MessagingAppProfile`) and starts
its compose window, as ``ActivityManagerShellCommand.runStartActivity`` and
``ActivityStarter`` do (frameworks/base android-10.0.0_r1 to android-15.0.0_r1):

- Without ``-W`` ``am`` returns as soon as the start is queued: the new window takes input
  focus only ``focus_delay_ms`` later, and a key event sent before that goes to the window
  that had focus (the launcher ignores it; an older compose window may *send* with it).
- With ``-W`` ``am`` waits until the window is displayed and prints ``Status``,
  ``LaunchState``, ``Activity``, ``TotalTime``, ``WaitTime`` and ``Complete``.
- A ``SENDTO`` equal (``Intent.filterEquals``) to the one that opened the app's task lands
  in that task: the task comes to the front (``Warning: Activity not started, its current
  task has been brought to the front``) or, when already in front, nothing happens
  (``Warning: Activity not started, intent has been delivered to currently running top-most
  instance.``); either way the new intent and its extras are dropped ("client don't use that
  intent!", ``ActivityStarter.recycleTask``), so the window keeps its old draft. With
  ``FLAG_ACTIVITY_CLEAR_TASK`` (``--activity-clear-task``; ``am`` adds
  ``FLAG_ACTIVITY_NEW_TASK`` itself) the task is cleared and the new intent delivered.
- A locked or sleeping screen takes the key events; the activity starts behind the keyguard.
- Two SMS apps and no default for ``SENDTO`` bring up ``ResolverActivity``; an explicit
  ``-p``/``-n`` bypasses it.

In the compose window ``input keyevent 22`` moves focus to the send button and ``66`` presses
it (in the text field, ENTER types a newline). The send itself is the phone's job
(:class:`SendRequest` goes to a callback).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, tzinfo
from typing import Final, Literal
from urllib.parse import unquote
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs

from android_bridge.simulator._apps import (
    GOOGLE_MESSAGES,
    MessagingAppProfile,
    second_app_for,
    split_component,
)
from android_bridge.simulator._faults import Fault
from android_bridge.simulator._platform import DEFAULT_RELEASE, AndroidRelease, android_release
from android_bridge.simulator._shell import Output

ACTION_SENDTO: Final = "android.intent.action.SENDTO"
ACTION_VIEW: Final = "android.intent.action.VIEW"
#: Schemes of the messaging app's SENDTO/VIEW filter (AOSP Messaging ``AndroidManifest.xml``).
_SMS_SCHEMES: Final = ("smsto", "sms", "mmsto", "mms")
_REDACTED_SCHEMES: Final = ("tel", "sip", "sms", "smsto", "mailto", "nfc")
#: The framework's app chooser (frameworks/base ``core/java/com/android/internal/app``).
RESOLVER_ACTIVITY: Final = "android/com.android.internal.app.ResolverActivity"
#: Default time from ``am start`` to the new window taking input focus. On a phone this is
#: hundreds of milliseconds; here it only has to outlast a chained ``input keyevent``.
DEFAULT_FOCUS_DELAY_MS: Final = 150
#: The text of the draft left behind by the ``stale-draft`` fault.
STALE_DRAFT_TEXT: Final = "(an earlier draft nobody sent)"

KEYCODE_HOME: Final = 3
KEYCODE_BACK: Final = 4
KEYCODE_DPAD_RIGHT: Final = 22
KEYCODE_DPAD_CENTER: Final = 23
KEYCODE_POWER: Final = 26
KEYCODE_TAB: Final = 61
KEYCODE_ENTER: Final = 66
KEYCODE_WAKEUP: Final = 224
KEYCODE_SLEEP: Final = 223
_KEYCODE_NAMES: Final = {
    "KEYCODE_HOME": KEYCODE_HOME,
    "KEYCODE_BACK": KEYCODE_BACK,
    "KEYCODE_DPAD_RIGHT": KEYCODE_DPAD_RIGHT,
    "KEYCODE_TAB": KEYCODE_TAB,
    "KEYCODE_ENTER": KEYCODE_ENTER,
    "KEYCODE_DPAD_LEFT": 21,
    "KEYCODE_DPAD_UP": 19,
    "KEYCODE_DPAD_DOWN": 20,
    "KEYCODE_DPAD_CENTER": KEYCODE_DPAD_CENTER,
    "KEYCODE_WAKEUP": KEYCODE_WAKEUP,
    "KEYCODE_SLEEP": KEYCODE_SLEEP,
    "KEYCODE_MENU": 82,
    "KEYCODE_POWER": KEYCODE_POWER,
}

#: ``Intent`` flags (frameworks/base ``Intent.java``).
FLAG_ACTIVITY_NEW_TASK: Final = 0x10000000
FLAG_ACTIVITY_CLEAR_TASK: Final = 0x00008000
FLAG_ACTIVITY_CLEAR_TOP: Final = 0x04000000
FLAG_ACTIVITY_MULTIPLE_TASK: Final = 0x08000000
FLAG_ACTIVITY_SINGLE_TOP: Final = 0x20000000

#: ``ActivityManager`` start results that ``runStartActivity`` reports.
START_SUCCESS: Final = 0
START_TASK_TO_FRONT: Final = 2
START_DELIVERED_TO_TOP: Final = 3
START_INTENT_NOT_RESOLVED: Final = -91
START_CLASS_NOT_FOUND: Final = -92

Screen = Literal["on", "off", "locked"]
SCREEN_STATES: Final = ("on", "off", "locked")

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


@attrs.define(kw_only=True, eq=False)
class Compose:
    """A messaging app's compose window."""

    #: The app the window belongs to.
    app: MessagingAppProfile
    #: Recipients from the ``smsto:`` URI (comma or semicolon separated).
    addresses: tuple[str, ...]
    #: Text in the message field.
    body: str
    #: Subject line (empty: none); only apps that read a ``subject`` extra fill it.
    subject: str = ""
    #: "text" (the message field) or "send" (the send button).
    focus: str = "text"
    #: Close the window once sent (``--ez exit_on_sent true``, where the app supports it).
    exit_on_sent: bool = False
    #: ``time.monotonic()`` from which the window has input focus (when on top).
    focus_at: float = 0.0

    @property
    def address(self) -> str:
        """The recipients as one comma-separated string."""
        return ",".join(self.addresses)


@attrs.define(kw_only=True, eq=False)
class _Chooser:
    """``ResolverActivity``: "Open with" for an intent two apps handle."""

    focus_at: float = 0.0


@attrs.define(kw_only=True, eq=False)
class _Launcher:
    """The home screen: key events sent to it do nothing that matters here."""

    focus_at: float = 0.0


_Window = Compose | _Chooser | _Launcher

#: The home screen's activity (the Pixel launcher), as ``am``/``dumpsys`` name components.
LAUNCHER_ACTIVITY: Final = "com.google.android.apps.nexuslauncher/.NexusLauncherActivity"


def window_component(window: _Window) -> str:
    """The activity a window belongs to, as ``package/.Class`` or ``package/full.Class``."""
    if isinstance(window, Compose):
        return window.app.compose_activity
    if isinstance(window, _Chooser):
        return RESOLVER_ACTIVITY
    return LAUNCHER_ACTIVITY


@attrs.frozen(kw_only=True)
class SendRequest:
    """What the user asked the messaging app to send."""

    #: The app that sends.
    app: MessagingAppProfile
    #: Recipients as typed in the intent.
    addresses: tuple[str, ...]
    #: Message text, as it stood in the compose window.
    body: str
    #: Subject line (empty: none).
    subject: str = ""

    @property
    def address(self) -> str:
        """The recipients as one comma-separated string."""
        return ",".join(self.addresses)


class _IntentError(Exception):
    """An ``IllegalArgumentException`` while parsing intent arguments."""


#: What ``Intent.filterEquals`` compares: action, data, type, identifier, package, component
#: and categories (not extras, not flags).
_FilterKey = tuple[
    str | None, str | None, str | None, str | None, str | None, str | None, frozenset[str]
]


@attrs.frozen(kw_only=True)
class _Intent:
    action: str | None = None
    data: str | None = None
    mime_type: str | None = None
    identifier: str | None = None
    categories: tuple[str, ...] = ()
    component: str | None = None
    package: str | None = None
    flags: int = 0
    extras: Mapping[str, object] = attrs.field(factory=dict)

    def filter_key(self) -> _FilterKey:
        component = None
        if self.component is not None:
            component = "/".join(split_component(self.component))
        return (
            self.action,
            self.data,
            self.mime_type,
            self.identifier,
            self.package,
            component,
            frozenset(self.categories),
        )

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
        if self.identifier:
            parts.append(f"id={self.identifier}")
        if self.flags:
            parts.append(f"flg=0x{self.flags & 0xFFFFFFFF:x}")
        if self.package:
            parts.append(f"pkg={self.package}")
        if self.component:
            package, cls = split_component(self.component)
            short = cls[len(package) :] if cls.startswith(package + ".") else cls
            parts.append(f"cmp={package}/{short}")
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
        "-i",
        "--identifier",
        "-n",
        "-p",
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
        "--receiver-permission",
    }
)
#: Options of ``am start`` itself (``ActivityManagerShellCommand.makeIntent``'s handler).
_AM_FLAG_OPTIONS: Final = frozenset(
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
        "--splashscreen-show-icon",
        "--suspend",
        "--async",
    }
)
#: Flag options of ``Intent.parseCommandArgs`` and the bits they add. There is no
#: ``--activity-new-task``: it is an unknown option (``am start`` adds NEW_TASK itself).
_INTENT_FLAG_OPTIONS: Final = {
    "--grant-read-uri-permission": 0x00000001,
    "--grant-write-uri-permission": 0x00000002,
    "--grant-persistable-uri-permission": 0x00000040,
    "--grant-prefix-uri-permission": 0x00000080,
    "--exclude-stopped-packages": 0x00000010,
    "--include-stopped-packages": 0x00000020,
    "--debug-log-resolution": 0x00000008,
    "--activity-brought-to-front": 0x00400000,
    "--activity-clear-top": FLAG_ACTIVITY_CLEAR_TOP,
    "--activity-clear-when-task-reset": 0x00080000,
    "--activity-exclude-from-recents": 0x00800000,
    "--activity-launched-from-history": 0x00100000,
    "--activity-multiple-task": FLAG_ACTIVITY_MULTIPLE_TASK,
    "--activity-no-animation": 0x00010000,
    "--activity-no-history": 0x40000000,
    "--activity-no-user-action": 0x00040000,
    "--activity-previous-is-top": 0x01000000,
    "--activity-reorder-to-front": 0x00020000,
    "--activity-reset-task-if-needed": 0x00200000,
    "--activity-single-top": FLAG_ACTIVITY_SINGLE_TOP,
    "--activity-clear-task": FLAG_ACTIVITY_CLEAR_TASK,
    "--activity-task-on-home": 0x00004000,
    "--activity-match-external": 0x00000800,
    "--receiver-registered-only": 0x40000000,
    "--receiver-replace-pending": 0x20000000,
    "--receiver-foreground": 0x10000000,
    "--receiver-no-abort": 0x08000000,
}
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


@attrs.frozen(kw_only=True)
class _StartOptions:
    wait: bool = False
    stop_first: bool = False


def _java_decode(text: str) -> int:
    """``Integer.decode``: decimal, ``0x``/``0X``/``#`` hex, leading ``0`` octal, a sign.

    Raises:
        _IntentError: not a number (Java's ``NumberFormatException`` message).
    """
    match = re.fullmatch(r"([+-]?)(0[xX][0-9a-fA-F]+|#[0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", text)
    if not match:
        raise _IntentError(f'For input string: "{text}"')
    sign, digits = match.groups()
    if digits[:2] in ("0x", "0X"):
        value = int(digits[2:], 16)
    elif digits.startswith("#"):
        value = int(digits[1:], 16)
    elif digits.startswith("0") and len(digits) > 1:
        value = int(digits[1:], 8)
    else:
        value = int(digits)
    value = -value if sign == "-" else value
    if not -(2**31) <= value < 2**31:
        raise _IntentError(f'For input string: "{text}"')
    return value


def _parse_intent(args: list[str]) -> tuple[_Intent, _StartOptions]:
    fields: dict[str, str] = {}
    categories: list[str] = []
    extras: dict[str, object] = {}
    flags = 0
    wait = stop_first = False
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
            # Intent.parseCommandArgs: setFlags(Integer.decode(...)) replaces earlier flags.
            flags = _java_decode(required(arg))
        elif arg in _INTENT_FLAG_OPTIONS:
            flags |= _INTENT_FLAG_OPTIONS[arg]
        elif arg in _VALUE_OPTIONS:
            fields["-i" if arg == "--identifier" else arg] = required(arg)
        elif arg in _AM_FLAG_OPTIONS:
            wait = wait or arg == "-W"
            stop_first = stop_first or arg == "-S"
        elif arg.startswith("-"):
            raise _IntentError(f"Unknown option: {arg}")
        elif ":" in arg:
            fields["-d"] = arg
        elif "/" in arg:
            fields["-n"] = arg
        else:
            fields["-p"] = arg
    if "-n" in fields and "/" not in fields["-n"]:
        raise _IntentError(f"Bad component name: {fields['-n']}")
    intent = _Intent(
        action=fields.get("-a"),
        data=fields.get("-d"),
        mime_type=fields.get("-t"),
        identifier=fields.get("-i"),
        categories=tuple(categories),
        component=fields.get("-n"),
        package=fields.get("-p"),
        flags=flags,
        extras=extras,
    )
    if not any(
        (
            intent.action,
            intent.data,
            intent.mime_type,
            intent.component,
            intent.package,
            intent.categories,
            intent.extras,
            intent.identifier,
        )
    ):
        raise _IntentError("No intent supplied")
    return intent, _StartOptions(wait=wait, stop_first=stop_first)


def _extra_value(option: str, raw: str) -> object:
    if option == "--ez":
        lowered = raw.lower()
        if lowered in ("true", "t"):
            return True
        if lowered in ("false", "f"):
            return False
        try:
            return _java_decode(lowered) != 0
        except _IntentError:
            raise _IntentError(f"Invalid boolean value: {lowered}") from None
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


@attrs.frozen(kw_only=True)
class _Launch:
    """What ``ActivityStarter`` did with one start request."""

    result: int
    #: The window the user will see (None: nothing was started).
    window: _Window | None = None
    #: ``WaitResult.launchState`` as ``launchStateToString`` prints it.
    launch_state: str = "UNKNOWN (0)"
    #: ``Activity:`` printed by ``-W`` (short component form).
    activity: str | None = None


class Messaging:
    """The activity manager, the window stack, the keyguard and the messaging apps' windows.

    Attributes other code may set at any time: ``app`` (the default SMS app),
    ``second_sms_app`` (another SMS app installed, no default chosen for ``SENDTO``),
    ``screen`` (``on``, ``off`` or ``locked``), ``focus_delay_ms`` and
    ``am_error_exit`` (None: the release's default).
    """

    def __init__(
        self,
        send: Callable[[SendRequest], Awaitable[None]],
        *,
        app: MessagingAppProfile = GOOGLE_MESSAGES,
        release: AndroidRelease | None = None,
        focus_delay_ms: int = DEFAULT_FOCUS_DELAY_MS,
        am_error_exit: int | None = None,
        take_faults: Callable[[], frozenset[Fault]] = frozenset,
        user_unlocked: Callable[[], bool] = lambda: True,
    ) -> None:
        if focus_delay_ms < 0:
            raise ValueError("focus_delay_ms must not be negative")
        self._send = send
        self.app = app
        self.release = release if release is not None else android_release(DEFAULT_RELEASE)
        self.focus_delay_ms = focus_delay_ms
        self.am_error_exit = am_error_exit
        self.second_sms_app = False
        self.screen: Screen = "on"
        self._take_faults = take_faults
        self._user_unlocked = user_unlocked
        self._launcher = _Launcher()
        #: Windows bottom to top; the launcher is always there.
        self.windows: list[_Window] = [self._launcher]
        #: ``Intent.filterEquals`` key of the intent that opened each app's task, by package.
        self._task_roots: dict[str, _FilterKey] = {}
        #: Packages whose process runs (a start is then WARM, not COLD).
        self._running: set[str] = set()

    # -- state seen by tests -------------------------------------------------------------

    @property
    def compose(self) -> Compose | None:
        """The topmost compose window (focused or not), or None."""
        for window in reversed(self.windows):
            if isinstance(window, Compose):
                return window
        return None

    def focused(self) -> _Window | None:
        """The window that takes key events now; None while the keyguard has them."""
        if self.screen != "on":
            return None
        now = time.monotonic()
        for window in reversed(self.windows):
            if window.focus_at <= now:
                return window
        return self._launcher

    def top_activity(self) -> _Window:
        """The topmost activity window (the resumed one, ``mFocusedApp``), focused yet or not,
        behind the keyguard or not."""
        return self.windows[-1]

    @property
    def am_exit_for_errors(self) -> int:
        """Exit status of ``am start`` for a start that failed (``Error: …``)."""
        if self.am_error_exit is not None:
            return self.am_error_exit
        return self.release.am_unresolved_exit

    def open_compose(
        self,
        addresses: tuple[str, ...],
        body: str,
        *,
        subject: str = "",
        foreground: bool = True,
        package: str | None = None,
    ) -> Compose:
        """Put a compose window of the default app on screen, as a ``SENDTO`` to ``addresses``
        (with ``-p package`` when given) opened it earlier and nobody sent it."""
        data = "smsto:" + ",".join(addresses)
        intent = _Intent(action=ACTION_SENDTO, data=data, package=package)
        self._remove_app_windows(self.app.package)
        window = Compose(app=self.app, addresses=addresses, body=body, subject=subject)
        if foreground:
            self.windows.append(window)
        else:
            self.windows.insert(self.windows.index(self._launcher), window)
        self._task_roots[self.app.package] = intent.filter_key()
        self._running.add(self.app.package)
        return window

    def reset(self) -> None:
        """A reboot: every window and process is gone."""
        self.windows = [self._launcher]
        self._launcher.focus_at = 0.0
        self._task_roots.clear()
        self._running.clear()

    # -- am ------------------------------------------------------------------------------

    async def am(self, argv: list[str], stdin: str) -> Output:
        """``am``: ``start`` (``start-activity``) and ``force-stop`` are modelled."""
        if len(argv) < 2:
            return Output.err("Activity manager (activity) commands:\n  help\n", 255)
        command = argv[1]
        if command == "force-stop":
            packages = [arg for arg in argv[2:] if not arg.startswith("-")]
            if packages:
                self._force_stop(packages[-1])
            return Output()
        if command not in ("start", "start-activity"):
            return Output.err(f"Unknown command: {command}\n", 255)
        try:
            intent, options = _parse_intent(argv[2:])
        except _IntentError as exc:
            return _exception_output(
                command, "java.lang.IllegalArgumentException", str(exc), _AM_FRAMES
            )
        return await self._start_activity(intent, options)

    async def _start_activity(self, intent: _Intent, options: _StartOptions) -> Output:
        """``runStartActivity``: "Starting:", the start, its warning or error, ``-W``'s wait."""
        chunks: list[tuple[int, str]] = []
        faults = self._take_faults()
        if Fault.SCREEN_OFF in faults:
            self.screen = "off"
        target = self._resolve(intent, chooser=Fault.CHOOSER in faults)
        if options.stop_first:
            # -S looks the package up first: no match or several is an error before "Starting:".
            if target == "chooser":
                return Output(
                    ((2, f"Error: Intent matches multiple activities; can't stop: {intent}\n"),),
                    1,
                )
            if target is None:
                return Output(((2, f"Error: Intent does not match any activities: {intent}\n"),), 1)
            if isinstance(target, MessagingAppProfile):
                chunks.append((1, f"Stopping: {target.package}\n"))
                self._force_stop(target.package)
                await asyncio.sleep(0.25)
        chunks.append((1, f"Starting: {intent}\n"))
        out_fd = 1 if options.wait else 2
        started = time.monotonic()
        delay_ms = self.focus_delay_ms * (10 if Fault.SLOW_LAUNCH in faults else 1)
        if target is None or target == "class":
            if target == "class":
                assert intent.component is not None
                package, cls = split_component(intent.component)
                chunks.append((out_fd, "Error type 3\n"))
                chunks.append(
                    (out_fd, f"Error: Activity class {{{package}/{cls}}} does not exist.\n")
                )
            else:
                chunks.append(
                    (out_fd, f"Error: Activity not started, unable to resolve {intent}\n")
                )
            return Output(tuple(chunks), self.am_exit_for_errors)
        if target == "chooser":
            launch = self._launch_chooser(delay_ms)
        else:
            assert isinstance(target, MessagingAppProfile)
            if Fault.STALE_DRAFT in faults:
                self._leave_stale_draft(target, intent)
            launch = self._launch_app(target, intent, delay_ms)
        if launch.result == START_TASK_TO_FRONT:
            chunks.append(
                (
                    out_fd,
                    "Warning: Activity not started, its current task has been brought to the"
                    " front\n",
                )
            )
        elif launch.result == START_DELIVERED_TO_TOP:
            chunks.append(
                (
                    out_fd,
                    "Warning: Activity not started, intent has been delivered to currently running"
                    " top-most instance.\n",
                )
            )
        if options.wait:
            chunks.extend((1, line) for line in await self._wait_lines(launch, started))
        return Output(tuple(chunks), 0)

    async def _wait_lines(self, launch: _Launch, started: float) -> list[str]:
        """``-W``: wait until the window is displayed, then the ``WaitResult`` lines.

        A window behind the keyguard is never displayed: the launch is reported without a
        time and with ``LaunchState: UNKNOWN (0)`` (``stopWaitingForActivityVisible``).
        """
        total: int | None = None
        state = launch.launch_state
        if launch.result == START_DELIVERED_TO_TOP:
            total = 0
        elif self.screen != "on":
            state = "UNKNOWN (0)"
        elif launch.window is not None:
            remaining = launch.window.focus_at - time.monotonic()
            if remaining > 0:
                await asyncio.sleep(remaining)
            total = max(0, round((launch.window.focus_at - started) * 1000))
        wait_ms = round((time.monotonic() - started) * 1000)
        lines = ["Status: ok\n", f"LaunchState: {state}\n"]
        if launch.activity is not None:
            lines.append(f"Activity: {launch.activity}\n")
        if total is not None:
            lines.append(f"TotalTime: {total}\n")
        lines += [f"WaitTime: {wait_ms}\n", "Complete\n"]
        return lines

    def _resolve(
        self, intent: _Intent, *, chooser: bool
    ) -> MessagingAppProfile | Literal["chooser", "class"] | None:
        """Which activity the intent starts: an app, the chooser, a missing class, or none.

        Until the user first unlocks, only direct-boot-aware components resolve; the
        messaging apps' SENDTO activities are not (AOSP Messaging declares no
        ``directBootAware``), so the intent resolves to nothing.
        """
        apps = [self.app]
        if self.second_sms_app:
            apps.append(second_app_for(self.app))
        if intent.component is not None:
            wanted = split_component(intent.component)
            for app in apps:
                # An explicit component starts whatever its filter says (no action check).
                if app.sendto_component == wanted and self._user_unlocked():
                    return app
            return "class"
        scheme = (intent.data or "").partition(":")[0].lower()
        if intent.action not in (ACTION_SENDTO, ACTION_VIEW) or scheme not in _SMS_SCHEMES:
            return None
        if not self._user_unlocked():
            return None
        candidates = [app for app in apps if intent.package in (None, app.package)]
        if not candidates:
            return None
        if intent.package is None and (len(candidates) > 1 or chooser):
            return "chooser"
        return candidates[0]

    def _launch_chooser(self, delay_ms: int) -> _Launch:
        window = _Chooser(focus_at=time.monotonic() + delay_ms / 1000)
        self.windows.append(window)
        return _Launch(
            result=START_SUCCESS, window=window, launch_state="WARM", activity=RESOLVER_ACTIVITY
        )

    def _launch_app(self, app: MessagingAppProfile, intent: _Intent, delay_ms: int) -> _Launch:
        """``ActivityStarter`` for a SENDTO to ``app``: reuse its task or start the window."""
        flags = intent.flags | FLAG_ACTIVITY_NEW_TASK
        key = intent.filter_key()
        focus_at = time.monotonic() + delay_ms / 1000
        existing = [w for w in self.windows if isinstance(w, Compose) and w.app is app]
        reuse = (
            app.sendto_reuses_task
            and existing
            and not flags & FLAG_ACTIVITY_MULTIPLE_TASK
            and not flags & FLAG_ACTIVITY_CLEAR_TASK
            and not flags & FLAG_ACTIVITY_CLEAR_TOP
        )
        if reuse and self._task_roots.get(app.package) == key:
            top = existing[-1]
            if self.windows[-1] is top:
                # Already in front: nothing moves and nothing is delivered.
                return _Launch(
                    result=START_DELIVERED_TO_TOP, window=top, activity=app.compose_activity
                )
            for window in existing:
                self.windows.remove(window)
            self.windows.extend(existing)
            top.focus_at = focus_at
            return _Launch(
                result=START_TASK_TO_FRONT,
                window=top,
                launch_state="HOT",
                activity=app.compose_activity,
            )
        state = "WARM" if app.package in self._running else "COLD"
        self._running.add(app.package)
        window = self._compose_from(app, intent, focus_at)
        if reuse:
            # Another conversation: a new activity on top of the app's task.
            for old in existing:
                self.windows.remove(old)
            self.windows.extend(existing)
        else:
            # A new or cleared task (AOSP Messaging clears it on every SENDTO).
            self._remove_app_windows(app.package)
            self._task_roots[app.package] = key
        self.windows.append(window)
        return _Launch(
            result=START_SUCCESS, window=window, launch_state=state, activity=app.compose_activity
        )

    def _compose_from(self, app: MessagingAppProfile, intent: _Intent, focus_at: float) -> Compose:
        """The compose window the app builds from the intent (``LaunchConversationActivity``)."""
        specific = unquote((intent.data or "").partition(":")[2])
        recipients, _, query = specific.partition("?")
        addresses = tuple(
            part.strip() for part in recipients.replace(";", ",").split(",") if part.strip()
        )
        body = intent.extras.get("sms_body")
        if not body:
            for parameter in query.split("&"):
                if parameter.startswith("body="):
                    body = parameter[len("body=") :]
        if not body:
            body = intent.extras.get("android.intent.extra.TEXT", "")
        subject = intent.extras.get("subject", "") if app.subject_extra else ""
        return Compose(
            app=app,
            addresses=addresses,
            body=body if isinstance(body, str) else str(body),
            subject=subject if isinstance(subject, str) else str(subject),
            exit_on_sent=app.exit_on_sent and intent.extras.get("exit_on_sent") is True,
            focus_at=focus_at,
        )

    def _leave_stale_draft(self, app: MessagingAppProfile, intent: _Intent) -> None:
        """The ``stale-draft`` fault: this very intent opened a compose window earlier, which
        sits in the background with a draft nobody sent."""
        if not app.sendto_reuses_task:
            return
        window = self._compose_from(app, intent, 0.0)
        window.body = STALE_DRAFT_TEXT
        self._remove_app_windows(app.package)
        self.windows.insert(self.windows.index(self._launcher), window)
        self._task_roots[app.package] = intent.filter_key()
        self._running.add(app.package)

    def _remove_app_windows(self, package: str) -> None:
        self.windows = [
            w for w in self.windows if not (isinstance(w, Compose) and w.app.package == package)
        ]
        self._task_roots.pop(package, None)

    def _force_stop(self, package: str) -> None:
        """``am force-stop``: the app's activities are finished and its process killed."""
        self._remove_app_windows(package)
        self._running.discard(package)

    # -- input ---------------------------------------------------------------------------

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
            window = self.focused()
            if isinstance(window, Compose) and window.focus == "text":
                window.body += " ".join(rest).replace("%s", " ")
            return Output()
        if command in ("tap", "swipe", "draganddrop", "roll", "motionevent", "press"):
            return Output()
        return Output.err(f"Error: Unknown command: {command}\n{_INPUT_USAGE}", 1)

    async def _key(self, code: int) -> None:
        """One key event, delivered to the window that has focus at this moment."""
        if code in (KEYCODE_WAKEUP, KEYCODE_POWER, KEYCODE_SLEEP):
            self._power_key(code)
            return
        window = self.focused()
        if window is None:
            # The keyguard takes it.
            return
        if code == KEYCODE_HOME:
            self.windows.remove(self._launcher)
            self.windows.append(self._launcher)
            self._launcher.focus_at = time.monotonic()
            return
        if isinstance(window, _Launcher):
            return
        if isinstance(window, _Chooser):
            if code == KEYCODE_BACK:
                self.windows.remove(window)
            return
        if code in (KEYCODE_DPAD_RIGHT, KEYCODE_TAB):
            window.focus = "send"
        elif code == KEYCODE_BACK:
            self.windows.remove(window)
            if not any(isinstance(w, Compose) and w.app is window.app for w in self.windows):
                self._task_roots.pop(window.app.package, None)
        elif code in (KEYCODE_ENTER, KEYCODE_DPAD_CENTER):
            if window.focus == "text" and not window.app.enter_sends:
                if code == KEYCODE_ENTER:
                    window.body += "\n"
            elif window.body.strip() and window.addresses:
                request = SendRequest(
                    app=window.app,
                    addresses=window.addresses,
                    body=window.body,
                    subject=window.subject,
                )
                # The draft is gone the moment the app takes it; the window stays open.
                window.body = ""
                window.subject = ""
                window.focus = "text"
                if window.exit_on_sent:
                    self.windows.remove(window)
                await self._send(request)

    def _power_key(self, code: int) -> None:
        """WAKEUP shows the keyguard of a sleeping phone; POWER toggles sleep; SLEEP sleeps.
        The keyguard is secure (a PIN): no key event dismisses it."""
        if code == KEYCODE_SLEEP or (code == KEYCODE_POWER and self.screen != "off"):
            self.screen = "off"
        elif self.screen == "off":
            self.screen = "locked"


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
