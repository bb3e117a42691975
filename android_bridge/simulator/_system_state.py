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
  packages/modules/Permission android-14.0.0_r11): the holders joined by ``;`` on one line,
  an **empty line** when the role has none (or the user does not have it); the user is 0
  unless ``--user`` says (``getUserIdMaybe``: ``USER_SYSTEM``). It exists on 14 and 15
  (``AndroidRelease.role_shell_command``) and on a 12 or 13 phone whose Permission module
  Google Play updated (``permission_module_updated``); elsewhere
  ``BasicShellCommandHandler.handleDefaultCommands`` prints ``Unknown command:
  get-role-holders`` on stdout and ``cmd`` exits 255 (-1). On 10 and 11 the role service is
  frameworks/base's and an updated module changes nothing.
- ``dumpsys role``: ``AndroidRelease.role_dump_header``, then the role state printed by
  ``DualDumpOutputStream`` (frameworks/base ``core/java/com/android/internal/util/dump``;
  ``RoleUserState.dump``, the same fields in frameworks/base for 10 and 11 and in the module
  from 12): ``{`` and, per user, ``user_id=``, ``version=``, ``packages_hash=`` and
  ``roles=[`` with one ``{ name=… [fallback_enabled=…] [holders=…] }`` per role the user has,
  two spaces of indent per level; a field or object that occurs once is ``name=value`` or
  ``name={``, one that repeats ``name=[`` with its elements unnamed. So one user is
  ``user_states={`` and several are ``user_states=[`` with one ``{`` per user, in ascending
  user id (12+: the ``mUserStates`` ``SparseArray``; 10/11: ``getUserIds()``). Roles come in
  ``ArrayMap`` order (``String.hashCode``, ascending); a role with no holder has no
  ``holders=`` line. ``fallback_enabled=`` is printed where ``role_dump_fallback_enabled``
  (15) or with an updated module. A work profile (``work_profile``) has no SMS role
  (``SmsRoleBehavior.isAvailableAsUser``: not for profiles); a secondary user
  (``secondary_user_sms_app``) has its own holder. The roles besides SMS are an
  illustrative handful of ``roles.xml``'s.
- ``settings get secure android_id``: the device's own ``Settings.Secure.ANDROID_ID`` of
  user 0 (SettingsProvider ``getSecureSetting`` gives an app uid its own SSAID, the shell the
  stored value; random at first boot, new after a factory reset).
- ``settings get secure sms_default_application`` (``SettingsService`` in SettingsProvider):
  the value, or the word ``null`` when unset. From Android 10 nothing writes it
  (``SmsApplication.setDefaultApplicationInternal`` only adds the role holder; the role
  service reads it once, to migrate a phone upgraded from 9): ``null`` on a phone first
  booted on 10 or later, or whatever stale package ``sms_default_setting`` says (an
  upgraded phone), never the role holder.

The default SMS app (user 0's SMS role holder) is the phone's app profile's package; with a
second SMS app installed and no default chosen (``second_sms_app``) there is none, unless a
test sets ``sms_role_holder`` itself.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Final

import attrs

from android_bridge.simulator._apps import split_component
from android_bridge.simulator._device import Messaging, window_component
from android_bridge.simulator._platform import AndroidRelease
from android_bridge.simulator._shell import Output

ROLE_SMS: Final = "android.app.role.SMS"
#: ``Settings.Secure.SMS_DEFAULT_APPLICATION``.
SMS_DEFAULT_APPLICATION: Final = "sms_default_application"
#: Marks "derive the SMS role holder from the phone's apps" (the default).
_DERIVED: Final = object()
#: The user id of the first user or profile created after the system user
#: (``UserManagerService.getNextAvailableId``: ``MIN_USER_ID`` 10).
FIRST_SECONDARY_USER_ID: Final = 10
#: The roles (besides SMS) a phone's user has in the simulated ``dumpsys role``, with their
#: holders: an illustrative handful of ``roles.xml``'s, enough that the SMS role is never
#: the only one or the first.
_USER_ROLES: Final = {
    "android.app.role.ASSISTANT": (),
    "android.app.role.BROWSER": ("com.android.chrome",),
    "android.app.role.CALL_REDIRECTION": (),
    "android.app.role.CALL_SCREENING": (),
    "android.app.role.DIALER": ("com.android.dialer",),
    "android.app.role.EMERGENCY": ("com.android.emergency",),
    "android.app.role.HOME": ("com.google.android.apps.nexuslauncher",),
}
#: A work profile's roles (illustrative too): never SMS, which ``SmsRoleBehavior
#: .isAvailableAsUser`` refuses to profiles (Permission android-13.0.0_r11).
_PROFILE_ROLES: Final = {
    "android.app.role.BROWSER": ("com.android.chrome",),
    "android.app.role.CALL_REDIRECTION": (),
}


def java_string_hash(text: str) -> int:
    """``String.hashCode`` (a signed 32-bit int over the UTF-16 code units), the key by
    which ``ArrayMap`` orders its entries."""
    value = 0
    units = text.encode("utf-16-be")
    for index in range(0, len(units), 2):
        value = (31 * value + int.from_bytes(units[index : index + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


@attrs.frozen(kw_only=True)
class RoleUser:
    """One user's role state as ``dumpsys role`` prints it."""

    #: the user id
    user_id: int
    #: role name -> holders
    roles: dict[str, tuple[str, ...]]


class _DumpObject:
    """``DualDumpOutputStream.DumpObject``: fields and objects by name, in the order added."""

    def __init__(self) -> None:
        self.fields: dict[str, list[str | _DumpObject]] = {}

    def add(self, name: str, value: str | _DumpObject) -> None:
        self.fields.setdefault(name, []).append(value)

    def print(self, lines: list[str], indent: str, name: str | None) -> None:
        """``DumpObject.print``: ``name={`` (``{`` unnamed), the fields one level deeper (a
        repeated one as ``name=[``, its elements unnamed, then ``]``), then ``}``."""
        lines.append(f"{indent}{name}={{" if name is not None else f"{indent}{{")
        inner = indent + "  "
        for field, values in self.fields.items():
            if len(values) == 1:
                _print_dumpable(values[0], lines, inner, field)
                continue
            lines.append(f"{inner}{field}=[")
            for value in values:
                _print_dumpable(value, lines, inner + "  ", None)
            lines.append(f"{inner}]")
        lines.append(f"{indent}}}")


def _print_dumpable(
    value: str | _DumpObject, lines: list[str], indent: str, name: str | None
) -> None:
    if isinstance(value, _DumpObject):
        value.print(lines, indent, name)
    else:
        lines.append(f"{indent}{name}={value}" if name is not None else f"{indent}{value}")


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
        secure_setting: Callable[[str, int], str | None] | None = None,
        sim_sub_ids: Callable[[], tuple[int, ...]] = lambda: (1,),
    ) -> None:
        self._messaging = messaging
        self._release = release
        #: the subscription of each SIM slot in use, slot 0 first (``SimulatedPhone.sim_sub_ids``)
        self._sim_sub_ids = sim_sub_ids
        #: other ``Settings.Secure`` values by name (``android_id``), None when unset
        self._secure_setting = secure_setting
        #: ``Settings.Global`` values set on this phone, by name; every other key is unset
        #: (``settings get`` prints ``null`` and the platform uses its default). Developer
        #: options' "Disable adb authorization timeout" writes ``adb_allowed_connection_time``
        #: 0 (frameworks/base ``AdbDebuggingManager`` reads it, its default 7 days).
        self.global_settings: dict[str, str] = {}
        self._holder: object = _DERIVED
        self._tasks: dict[str, int] = {}
        #: The Permission module was updated through Google Play (by a module of the 15
        #: line): on 12 and 13 ``cmd role get-role-holders`` answers, and from 12 ``dumpsys
        #: role`` prints ``fallback_enabled=``. On 10 and 11 the role service is not in the
        #: module, so this changes nothing there.
        self.permission_module_updated = False
        #: ``settings get secure sms_default_application``: None prints ``null`` (a phone
        #: first booted on Android 10 or later); a package is the stale value a phone
        #: upgraded from 9 kept. Never the role holder.
        self.sms_default_setting: str | None = None
        #: The phone has a work profile (a managed profile, user 10 or the next free id).
        self.work_profile = False
        #: A secondary user exists whose SMS role is held by this package (None: no such
        #: user).
        self.secondary_user_sms_app: str | None = None

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

    @property
    def has_get_role_holders(self) -> bool:
        """``cmd role get-role-holders`` exists: 14+, or 12+ with an updated module."""
        release = self._release()
        return release.role_shell_command or (
            release.role_service_in_module and self.permission_module_updated
        )

    def role_users(self) -> list[RoleUser]:
        """Every user's roles, in ascending user id: user 0 (the phone's), then a work
        profile and a secondary user if there are."""
        sms_holder = self.sms_role_holder
        users = [
            RoleUser(
                user_id=0,
                roles={**_USER_ROLES, ROLE_SMS: (sms_holder,) if sms_holder else ()},
            )
        ]
        next_id = FIRST_SECONDARY_USER_ID
        if self.work_profile:
            users.append(RoleUser(user_id=next_id, roles=dict(_PROFILE_ROLES)))
            next_id += 1
        if self.secondary_user_sms_app is not None:
            holders = (self.secondary_user_sms_app,)
            users.append(RoleUser(user_id=next_id, roles={**_USER_ROLES, ROLE_SMS: holders}))
        return users

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
        """``dumpsys power``, ``dumpsys role``, ``dumpsys window [policy|displays]``."""
        if len(argv) < 2:
            return Output.out("Currently running services:\n  power\n  role\n  window\n")
        service, args = argv[1], argv[2:]
        if service == "power":
            return Output.out(self._dump_power())
        if service == "role":
            if "--proto" in args:
                # RoleService.dump writes protobuf then: binary, never read by the product.
                return Output.err("simulator: dumpsys role --proto is not modelled\n", 1)
            return Output.out(self._dump_role())
        if service == "window":
            section = args[0] if args else None
            if section in ("policy", "p"):
                return Output.out(self._dump_policy())
            if section in ("displays", "d"):
                return Output.out(self._dump_displays())
            if section is None or section in ("-a", "all"):
                return Output.out(self._dump_policy() + "\n" + self._dump_displays())
            return Output.out(f"Unknown argument: {section}; use -h for help\n")
        if service == "isub" and self._release().version >= 14:
            return Output.out(self._dump_isub())
        # (``isub`` before 14 is SubscriptionController, whose dump is not modelled)
        return Output.err(f"Can't find service: {service}\n", 0)

    def _dump_isub(self) -> str:
        """The head of ``SubscriptionManagerService.dump`` (frameworks/opt/telephony, read in
        the Android 14 SDK's sources, android-34): the modem count, the logical slot to
        subscription mapping, then the defaults; the rest of the dump (ICCIDs, SIM states,
        every subscription's record, the local log) is left out. 15 answers the same
        although its dump was not read: a 15 that prints otherwise gives the product no SIM
        list, and ``auto`` then keeps the framework path shut on the jar's proof alone (the
        safe side). Before 14 (``SubscriptionController``) nothing is modelled."""
        subs = self._sim_sub_ids()
        first = subs[0] if subs else -1
        mapping = "".join(
            f"  Logical SIM slot {slot}: subId={sub}\n" for slot, sub in enumerate(subs)
        )
        return (
            "SubscriptionManagerService:\n"
            f"Active modem count={max(1, len(subs))}\n"
            "Logical SIM slot sub id mapping:\n"
            f"{mapping}"
            "\n"
            f"defaultSubId={first}\n"
            f"defaultVoiceSubId={first}\n"
            f"defaultDataSubId={first}\n"
            f"activeDataSubId={first}\n"
            f"defaultSmsSubId={first}\n"
            "areAllSubscriptionsLoaded=true\n"
        )

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

    def _dump_role(self) -> str:
        """``RoleService.dump`` (12+) / ``RoleManagerService.dump`` (10, 11) as text."""
        release = self._release()
        fallback = release.role_dump_fallback_enabled or (
            release.role_service_in_module and self.permission_module_updated
        )
        root = _DumpObject()
        for user in self.role_users():
            state = _DumpObject()
            state.add("user_id", str(user.user_id))
            state.add("version", "5")
            digest = hashlib.sha256(f"packages of user {user.user_id}".encode()).hexdigest()
            state.add("packages_hash", digest.upper())
            for name in sorted(user.roles, key=java_string_hash):
                role = _DumpObject()
                role.add("name", name)
                if fallback:
                    role.add("fallback_enabled", "false")
                for holder in user.roles[name]:
                    role.add("holders", holder)
                state.add("roles", role)
            root.add("user_states", state)
        lines = [release.role_dump_header]
        root.print(lines, "", None)
        return "".join(line + "\n" for line in lines)

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
            # handleDefaultCommands: onHelp(), then -1 (cmd exits 255) for help as for an
            # unknown command (ShellCommand/BasicShellCommandHandler, read in untagged copies)
            return Output.out(self._role_help(), 255)
        command, rest = args[0], args[1:]
        if command != "get-role-holders" or not self.has_get_role_holders:
            return Output.out(f"Unknown command: {command}\n", 255)
        user_id = 0
        if rest[:1] == ["--user"]:
            if len(rest) < 2:
                return Output.err(
                    "Exception occurred while executing 'get-role-holders':\n"
                    'java.lang.IllegalArgumentException: Argument expected after "--user"\n',
                    255,
                )
            text = rest[1]
            if not re.fullmatch(r"[+-]?[0-9]{1,9}", text):
                return Output.err(
                    "Exception occurred while executing 'get-role-holders':\n"
                    f'java.lang.NumberFormatException: For input string: "{text}"\n',
                    255,
                )
            user_id, rest = int(text), rest[2:]
        if not rest:
            return Output.err(
                "Exception occurred while executing 'get-role-holders':\n"
                "java.lang.IllegalArgumentException:"
                ' Argument expected after "get-role-holders"\n',
                255,
            )
        # RoleService.getRoleHoldersAsUser: an empty list for a user or role that is not there.
        users = {user.user_id: user.roles for user in self.role_users()}
        holders = users.get(user_id, {}).get(rest[0], ())
        return Output.out(";".join(holders) + "\n")

    def _role_help(self) -> str:
        """``onHelp`` of the release's role shell command: frameworks/base
        ``RoleManagerShellCommand`` on 10 and 11 ("Role manager (role) commands:" and its
        three subcommands, read in untagged copies; the lines' wording assumed as the
        module's), the module's ``RoleShellCommand`` from 12 ("Role (role) commands:",
        ``get-role-holders`` where it exists; packages/modules/Permission
        android-13.0.0_r11, 14.0.0_r11; ``set-bypassing-role-qualification`` left out)."""
        release = self._release()
        header = (
            "Role (role) commands:"
            if release.role_service_in_module
            else ("Role manager (role) commands:")
        )
        lines = [header, "  help or -h", "    Print this help text.", ""]
        if self.has_get_role_holders:
            lines.append("  get-role-holders [--user USER_ID] ROLE")
        lines += [
            "  add-role-holder [--user USER_ID] ROLE PACKAGE [FLAGS]",
            "  remove-role-holder [--user USER_ID] ROLE PACKAGE [FLAGS]",
            "  clear-role-holders [--user USER_ID] ROLE [FLAGS]",
            "",
        ]
        return "".join(line + "\n" for line in lines)

    async def settings(self, argv: list[str], stdin: str) -> Output:
        """``settings [--user N|current] get NAMESPACE KEY`` as SettingsProvider's
        ``SettingsService.MyShellCommand.onCommand`` parses it (frameworks/base, read in a
        stored copy at commit 0b1501a7, not at a release tag): ``--user`` may come anywhere,
        once; without it the user is ``USER_SYSTEM`` (0), ``current``/``cur`` is the current
        user (0 here); a user the phone does not have is ``Invalid user: N`` on stderr and
        status 255 (``UserManager.getUserInfo`` null, ``return -1``). ``system`` and
        ``secure`` values are each user's own (every user has its own ``android_id``; the
        stale ``sms_default_application`` is user 0's), ``global`` ones the device's.
        Only ``get`` is modelled."""
        args = argv[1:]
        user: int | None = None
        verb: str | None = None
        rest: list[str] = []
        index = 0
        while index < len(args):
            arg = args[index]
            index += 1
            if arg == "--user":
                if user is not None or index >= len(args):
                    return Output.err("Bad arguments\n", 255)
                text = args[index]
                index += 1
                if text in ("current", "cur"):
                    user = 0  # ActivityManager's current user: the phone's owner here
                elif re.fullmatch(r"[+-]?[0-9]{1,9}", text):
                    user = int(text)
                else:
                    return Output.err(
                        f"Exception occurred while executing '{args[0]}':\n"
                        f'java.lang.NumberFormatException: For input string: "{text}"\n',
                        255,
                    )
            elif verb is None:
                if arg.lower() in ("put", "delete", "list", "reset"):
                    return Output.err(f"settings: {arg}: not modelled by the simulator\n")
                if arg.lower() != "get":
                    return Output.err(f"Invalid command: {arg}\n", 255)
                verb = "get"
            else:
                rest.append(arg)
        if verb is None:
            return Output.err("usage:  settings [--user <USER_ID> | current] get namespace key\n")
        if rest and rest[0].lower() not in ("system", "secure", "global"):
            return Output.err(f"Invalid namespace '{rest[0]}'\n", 255)
        if len(rest) != 2:
            return Output.err("Bad arguments\n", 255)
        user_id = 0 if user is None or user < 0 else user
        if user_id not in {role_user.user_id for role_user in self.role_users()}:
            return Output.err(f"Invalid user: {user_id}\n", 255)
        namespace, key = rest[0].lower(), rest[1]
        value = None
        if namespace == "secure" and key == SMS_DEFAULT_APPLICATION:
            value = self.sms_default_setting if user_id == 0 else None
        elif namespace == "global":
            value = self.global_settings.get(key)
        elif namespace == "secure" and self._secure_setting is not None:
            # SettingsService prints the provider's value for the shell (uid 2000, below
            # FIRST_APPLICATION_UID: the device's own android_id, not an app's SSAID)
            value = self._secure_setting(key, user_id)
        return Output.out(f"{value if value is not None else 'null'}\n")
