"""What a shell can ask the phone's system services: ``dumpsys``, ``cmd role``, ``settings``.

Only the lines a sender needs to decide whether pressing keys is safe are modelled, each in
the format the service prints it (frameworks/base and packages/modules/Permission, read at
the tags below); the rest of each dump is left out, so a client must find its line, never
count on a position.

- ``dumpsys power``: ``PowerManagerService.dumpInternal`` prints ``Power Manager State:``
  then ``  mWakefulness=<Awake|Asleep|Dreaming|Dozing>`` (``wakefulnessToString``;
  android-10.0.0_r30 to android-15.0.0_r1, the global wakefulness from 12 on).
- ``dumpsys window policy``: ``PhoneWindowManager.dump`` (prefix four spaces) ends with
  ``KeyguardServiceDelegate.dump``, which nests ``KeyguardServiceWrapper`` and
  ``KeyguardStateMonitor.dump``: ``mIsShowing=<true|false>``, the keyguard state
  ``isKeyguardShowing`` answers from (``policy/keyguard``, android-10 to 15).
- ``dumpsys window displays``: ``DisplayContent.dump`` (per display since Android 10's
  per-display focus) prints ``  mCurrentFocus=Window{<hash> u0 <title>}`` (``WindowState
  .toString``: the title of an activity's window is ``package/full.Class``; the keyguard's
  is ``StatusBar`` on 10 and ``NotificationShade`` from 11, when the shade and keyguard
  became one window) and ``  mFocusedApp=<the resumed activity>``: an ``ActivityRecord{…}``
  from 11 (where ``AppWindowToken`` was merged into it), inside ``AppWindowToken{… token=
  Token{… ActivityRecord{…}}}`` on 10. ``dumpsys window`` alone prints every section.
- ``cmd role get-role-holders [--user N] ROLE`` (``RoleShellCommand.runGetRoleHolders``,
  packages/modules/Permission): the holders joined by ``;`` on one line, an **empty line**
  when the role has none. Where the release has no such command
  (``AndroidRelease.role_shell_command``) ``ShellCommand.handleDefaultCommands`` prints
  ``Unknown command: get-role-holders`` and ``cmd`` exits 255 (-1).
- ``settings get secure android_id``: the device's own ``Settings.Secure.ANDROID_ID`` of
  user 0 (SettingsProvider ``getSecureSetting`` gives an app uid its own SSAID, the shell the
  stored value; random at first boot, new after a factory reset).
- ``settings get secure sms_default_application`` (``SettingsService`` in SettingsProvider):
  the value, or the word ``null`` when unset. Android 10 keeps it in step with the SMS role;
  later releases are modelled the same way (the product reads it only where ``cmd role``
  cannot answer).

The default SMS app (the SMS role's holder) is the phone's app profile's package; with a
second SMS app installed and no default chosen (``second_sms_app``) there is none, unless a
test sets ``sms_role_holder`` itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from android_bridge.simulator._apps import split_component
from android_bridge.simulator._device import Messaging, window_component
from android_bridge.simulator._platform import AndroidRelease
from android_bridge.simulator._shell import Output

ROLE_SMS: Final = "android.app.role.SMS"
#: ``Settings.Secure.SMS_DEFAULT_APPLICATION``.
SMS_DEFAULT_APPLICATION: Final = "sms_default_application"
#: Marks "derive the SMS role holder from the phone's apps" (the default).
_DERIVED: Final = object()


def _hash(window: object, salt: int = 0) -> str:
    """A stable ``System.identityHashCode`` in hex for one window (``salt``: another object
    belonging to it)."""
    return f"{((id(window) + salt) * 2654435761) & 0x0FFFFFFF:07x}"


def _short_component(component: str) -> str:
    """``ComponentName.toShortString`` without braces: ``pkg/.Cls`` when the class is in
    the package, else ``pkg/full.Cls``."""
    package, cls = split_component(component)
    if cls.startswith(package + "."):
        return f"{package}/{cls[len(package) :]}"
    return f"{package}/{cls}"


class SystemState:
    """``dumpsys``, ``cmd`` and ``settings`` over the phone's windows, screen and apps."""

    def __init__(
        self,
        messaging: Messaging,
        release: Callable[[], AndroidRelease],
        secure_setting: Callable[[str], str | None] | None = None,
    ) -> None:
        self._messaging = messaging
        self._release = release
        #: other ``Settings.Secure`` values by name (``android_id``), None when unset
        self._secure_setting = secure_setting
        self._holder: object = _DERIVED
        self._tasks: dict[str, int] = {}

    # -- state ---------------------------------------------------------------------------

    @property
    def sms_role_holder(self) -> str | None:
        """The default SMS app's package, or None when the role has no holder."""
        if self._holder is not _DERIVED:
            return self._holder if isinstance(self._holder, str) else None
        if self._messaging.second_sms_app:
            return None
        return self._messaging.app.package

    @sms_role_holder.setter
    def sms_role_holder(self, value: str | None) -> None:
        self._holder = value

    def derive_sms_role_holder(self) -> None:
        """Go back to the derived holder (the app profile's package, none with two apps)."""
        self._holder = _DERIVED

    def _task_id(self, package: str) -> int:
        return self._tasks.setdefault(package, 100 + len(self._tasks))

    def _keyguard_title(self) -> str:
        return "StatusBar" if self._release().version <= 10 else "NotificationShade"

    def current_focus(self) -> str:
        """``mCurrentFocus``'s value: the window that takes key events now."""
        messaging = self._messaging
        if messaging.screen != "on":
            return f"Window{{{_hash(messaging)} u0 {self._keyguard_title()}}}"
        window = messaging.focused()
        if window is None:
            return "null"
        package, cls = split_component(window_component(window))
        return f"Window{{{_hash(window)} u0 {package}/{cls}}}"

    def focused_app(self) -> str:
        """``mFocusedApp``'s value: the resumed activity, behind the keyguard or not."""
        window = self._messaging.top_activity()
        component = window_component(window)
        package = component.partition("/")[0]
        record = (
            f"ActivityRecord{{{_hash(window, 1)} u0 {_short_component(component)}"
            f" t{self._task_id(package)}}}"
        )
        if self._release().version <= 10:
            return (
                f"AppWindowToken{{{_hash(window, 2)} token=Token{{{_hash(window, 3)} {record}}}}}"
            )
        return record

    # -- commands ------------------------------------------------------------------------

    async def dumpsys(self, argv: list[str], stdin: str) -> Output:
        """``dumpsys power``, ``dumpsys window [policy|displays]``."""
        if len(argv) < 2:
            return Output.out("Currently running services:\n  power\n  window\n")
        service, args = argv[1], argv[2:]
        if service == "power":
            return Output.out(self._dump_power())
        if service == "window":
            section = args[0] if args else None
            if section in ("policy", "p"):
                return Output.out(self._dump_policy())
            if section in ("displays", "d"):
                return Output.out(self._dump_displays())
            if section is None or section in ("-a", "all"):
                return Output.out(self._dump_policy() + "\n" + self._dump_displays())
            return Output.out(f"Unknown argument: {section}; use -h for help\n")
        return Output.err(f"Can't find service: {service}\n", 0)

    def _dump_power(self) -> str:
        wakefulness = "Asleep" if self._messaging.screen == "off" else "Awake"
        interactive = "false" if wakefulness == "Asleep" else "true"
        return (
            "POWER MANAGER (dumpsys power)\n"
            "\n"
            "Power Manager State:\n"
            "  mDirty=0x0\n"
            f"  mWakefulness={wakefulness}\n"
            "  mWakefulnessChanging=false\n"
            "  mIsPowered=true\n"
            "  mPlugType=2\n"
            "  mBatteryLevel=87\n"
            f"  mInteractive={interactive}\n"
        )

    def _dump_policy(self) -> str:
        showing = "true" if self._messaging.screen != "on" else "false"
        return (
            "WINDOW MANAGER POLICY STATE (dumpsys window policy)\n"
            "    mSafeMode=false mSystemReady=true mSystemBooted=true\n"
            "    KeyguardServiceDelegate\n"
            f"      showing={showing}\n"
            "      KeyguardServiceWrapper\n"
            "        KeyguardStateMonitor\n"
            f"          mIsShowing={showing}\n"
            "          mSimSecure=false\n"
            f"          mInputRestricted={showing}\n"
            "          mTrusted=false\n"
            "          mCurrentUserId=0\n"
        )

    def _dump_displays(self) -> str:
        return (
            "WINDOW MANAGER DISPLAY CONTENTS (dumpsys window displays)\n"
            "  Display: mDisplayId=0 rootTasks=3\n"
            "    init=1080x2400 420dpi cur=1080x2400 app=1080x2400 rng=1080x1017-2400x2337\n"
            f"  mCurrentFocus={self.current_focus()}\n"
            f"  mFocusedApp={self.focused_app()}\n"
        )

    async def cmd(self, argv: list[str], stdin: str) -> Output:
        """``cmd role get-role-holders [--user N] ROLE``; other services are not found."""
        if len(argv) < 2:
            return Output.err("cmd: No service specified; use -l to list all services\n", 20)
        service, args = argv[1], argv[2:]
        if service != "role":
            return Output.err(f"cmd: Can't find service: {service}\n", 20)
        if not args or args[0] in ("help", "-h"):
            return Output.out("Role (role) commands:\n  help or -h\n    Print this help text.\n")
        command, rest = args[0], args[1:]
        if command != "get-role-holders" or not self._release().role_shell_command:
            return Output.out(f"Unknown command: {command}\n", 255)
        if rest[:1] == ["--user"]:
            rest = rest[2:]
        if not rest:
            return Output.err(
                "Exception occurred while executing 'get-role-holders':\n"
                "java.lang.IllegalArgumentException:"
                ' Argument expected after "get-role-holders"\n',
                255,
            )
        holder = self.sms_role_holder if rest[0] == ROLE_SMS else None
        return Output.out((holder or "") + "\n")

    async def settings(self, argv: list[str], stdin: str) -> Output:
        """``settings get [--user N] secure sms_default_application``; other keys are unset."""
        args = argv[1:]
        if args[:1] != ["get"]:
            return Output.err("usage:  settings [--user <USER_ID> | current] get namespace key\n")
        args = args[1:]
        if args[:1] == ["--user"]:
            args = args[2:]
        if len(args) != 2 or args[0] not in ("system", "secure", "global"):
            return Output.err("Invalid namespace\n", 1)
        value = None
        if args == ["secure", SMS_DEFAULT_APPLICATION]:
            value = self.sms_role_holder
        elif args[0] == "secure" and self._secure_setting is not None:
            # SettingsService prints the provider's value for the shell (uid 2000, below
            # FIRST_APPLICATION_UID: the device's own android_id, not an app's SSAID)
            value = self._secure_setting(args[1])
        return Output.out(f"{value if value is not None else 'null'}\n")
