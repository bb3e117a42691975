"""``su``: run a command as another uid, on userdebug and eng builds only.

Follows system/extras ``su/su.cpp`` (the same program at android-10.0.0_r1 to 15):

- ``su [WHO [COMMAND...]]``: WHO (default root) is ``user[,group[,supplementary...]]``, each
  a name (``getpwnam``: root, system, radio, shell, u0_a123...) or a number (``strtoul``:
  leading blanks and a sign are accepted, trailing junk is ignored, ``-1`` wraps). COMMAND
  (default ``/system/bin/sh``) is *exec'd*, not given to a shell: ``su 1000 content query
  ...`` runs ``content`` as uid 1000.
- only uid 0 (root) and uid 2000 (shell) may call it; anyone else gets ``su: not allowed``,
  status 1. ``-h``/``--help`` prints the usage on stderr, status 0.
- errors print ``su: <message>`` on stderr and exit 1 (bionic ``error()``).

The binary is only built into userdebug and eng images (``LOCAL_MODULE_TAGS := debug``); a
user build has no ``su``, and mksh answers ``su: inaccessible or not found`` (127). SELinux
does not stand in the way: the ``su`` domain is permissive on those builds (system/sepolicy
``private/su.te``, ``permissive su``).

What ``content`` does as uid 1000 follows from ``Content.java`` and TelephonyProvider: the
tool names no package for uid 1000, AppOps resolves it to ``android``, the system uid holds
every permission, and ``ProviderUtil.isAccessRestricted`` is false for it, so it reads the
``sms`` and ``pdu`` tables themselves with no ``SqlQueryChecker``; from Android 14 the
subscription filter still applies (``SmsProvider.query`` adds it for every caller).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from typing import Final

from android_bridge.simulator._device import _ID_GROUPS
from android_bridge.simulator._shell import (
    CommandFn,
    Output,
    Shell,
    ShellFiles,
    TerminalReadError,
    read_input,
)

#: ``android_filesystem_config.h`` names ``getpwnam``/``getpwuid`` know (the common ones).
AID_NAMES: Final = {
    "root": 0,
    "system": 1000,
    "radio": 1001,
    "bluetooth": 1002,
    "graphics": 1003,
    "input": 1004,
    "audio": 1005,
    "camera": 1006,
    "log": 1007,
    "compass": 1008,
    "mount": 1009,
    "wifi": 1010,
    "adb": 1011,
    "install": 1012,
    "media": 1013,
    "dhcp": 1014,
    "sdcard_rw": 1015,
    "vpn": 1016,
    "keystore": 1017,
    "usb": 1018,
    "drm": 1019,
    "mdnsr": 1020,
    "gps": 1021,
    "media_rw": 1023,
    "mtp": 1024,
    "nfc": 1027,
    "sdcard_r": 1028,
    "ext_data_rw": 1078,
    "ext_obb_rw": 1079,
    "shell": 2000,
    "cache": 2001,
    "diag": 2002,
    "net_bt_admin": 3001,
    "net_bt": 3002,
    "inet": 3003,
    "net_raw": 3004,
    "net_admin": 3005,
    "net_bw_stats": 3006,
    "readproc": 3009,
    "uhid": 3011,
    "readtracefs": 3012,
    "everybody": 9997,
    "misc": 9998,
    "nobody": 9999,
}
_AID_BY_ID: Final = {number: name for name, number in AID_NAMES.items()}
_APP_NAME: Final = re.compile(r"u(\d+)_a(\d+)")
_PER_USER_RANGE: Final = 100000
_FIRST_APP_UID: Final = 10000
_USAGE: Final = (
    "usage: su [WHO [COMMAND...]]\n"
    "\n"
    "Switch to WHO (default 'root') and run the given COMMAND (default sh).\n"
    "\n"
    "WHO is a comma-separated list of user, group, and supplementary groups\n"
    "in that order.\n"
    "\n"
)
#: Commands ``su`` finds on the phone as toybox binaries while the simulated shell has them
#: as builtins; they run through a shell line (mksh's ``echo`` interprets escapes where
#: toybox's does not: a known small difference).
_TOYBOX_AS_BUILTIN: Final = frozenset({"echo", "printf", "true", "false", "sleep"})
#: The supplementary groups ``adbd`` gives the shell, inherited through ``su`` when WHO names
#: none (``su`` calls ``setgroups`` only for an explicit list).
_SHELL_GROUPS: Final = tuple(int(entry.split("(")[0]) for entry in _ID_GROUPS.split(","))
_MAX_GROUPS: Final = 10


class _SuError(Exception):
    """``error(1, errno, ...)``: ``su: <message>`` on stderr, status 1."""


def user_name(uid: int) -> str:
    """``getpwuid(uid)->pw_name`` as bionic answers it (AID names, ``u<user>_a<app>``)."""
    if uid in _AID_BY_ID:
        return _AID_BY_ID[uid]
    user, app = divmod(uid, _PER_USER_RANGE)
    if _FIRST_APP_UID <= app < 20000:
        return f"u{user}_a{app - _FIRST_APP_UID}"
    if app in _AID_BY_ID:
        return f"u{user}_{_AID_BY_ID[app]}"
    return str(uid)


def _lookup(token: str) -> int:
    """``pwtoid``: ``getpwnam`` first, then ``strtoul`` (errors as ``su`` prints them)."""
    if token in AID_NAMES:
        return AID_NAMES[token]
    app = _APP_NAME.fullmatch(token)
    if app:
        return int(app.group(1)) * _PER_USER_RANGE + _FIRST_APP_UID + int(app.group(2))
    number = re.match(r"\s*([+-]?)(\d+)", token)
    if number is None:
        raise _SuError(f"invalid uid/gid '{token}'")
    value = int(number.group(2))
    if value >= 2**64:
        raise _SuError(f"invalid uid/gid '{token}': Numerical result out of range")
    if number.group(1) == "-":
        value = (2**64 - value) % 2**64
    return value & 0xFFFFFFFF


def _parse_who(who: str) -> tuple[int, int, tuple[int, ...] | None]:
    """``extract_uidgids``: uid, gid, and the supplementary groups if WHO lists any."""
    if not who:
        return 0, 0, None
    tokens = who.split(",")
    uid = gid = _lookup(tokens[0])
    if len(tokens) == 1:
        return uid, gid, None
    gid = _lookup(tokens[1])
    groups = tuple(_lookup(token) for token in tokens[2 : 2 + _MAX_GROUPS])
    return uid, gid, groups


class Identity:
    """``id`` and ``whoami`` (toybox) for a process ``su`` started."""

    def __init__(self, uid: int, gid: int, groups: tuple[int, ...]) -> None:
        self.uid = uid
        self.gid = gid
        self.groups = groups

    async def id(self, argv: list[str], stdin: str) -> Output:
        """``id``: ``uid= gid= groups=`` (egid first, then the others) and the su context."""
        shown = [self.gid, *(group for group in self.groups if group != self.gid)]
        groups = ",".join(f"{group}({user_name(group)})" for group in shown)
        return Output.out(
            f"uid={self.uid}({user_name(self.uid)}) gid={self.gid}({user_name(self.gid)})"
            f" groups={groups} context=u:r:su:s0\n"
        )

    async def whoami(self, argv: list[str], stdin: str) -> Output:
        """``whoami``: the user name of the effective uid."""
        return Output.out(user_name(self.uid) + "\n")


class SuCommand:
    """``su`` for a caller with uid ``caller_uid``; ``commands_for(uid, identity)`` gives the
    phone's commands as a process of that uid sees them."""

    def __init__(
        self,
        caller_uid: int,
        commands_for: Callable[[int, Identity], Mapping[str, CommandFn]],
        files_for: Callable[[int, Identity], ShellFiles] | None = None,
    ) -> None:
        self._caller_uid = caller_uid
        self._commands_for = commands_for
        self._files_for = files_for

    async def __call__(self, argv: list[str], stdin: str) -> Output:
        """Run ``su [WHO [COMMAND...]]``."""
        if self._caller_uid not in (0, 2000):
            return Output.err("su: not allowed\n", 1)
        args = argv[1:]
        if args and args[0] in ("--help", "-h"):
            return Output.err(_USAGE, 0)
        try:
            uid, gid, groups = _parse_who(args[0]) if args else (0, 0, None)
            if gid == 0xFFFFFFFF:
                raise _SuError("setgid failed: Invalid argument")
            if uid == 0xFFFFFFFF:
                raise _SuError("setuid failed: Invalid argument")
        except _SuError as exc:
            return Output.err(f"su: {exc}\n", 1)
        command = args[1:] or ["/system/bin/sh"]
        identity = Identity(uid, gid, _SHELL_GROUPS if groups is None else groups)
        return await self._exec(command, stdin, identity)

    async def _exec(self, argv: list[str], stdin: str, identity: Identity) -> Output:
        """``execvp``: a shell, a phone command, or ``failed to exec``."""
        commands = self._commands_for(identity.uid, identity)
        files = None if self._files_for is None else self._files_for(identity.uid, identity)
        name = argv[0]
        for directory in ("/system/bin/", "/system/xbin/"):
            name = name.removeprefix(directory)
        if name == "sh":
            return await self._shell(argv, stdin, commands, files)
        if name in commands:
            return await commands[name]([name, *argv[1:]], stdin)
        if name in _TOYBOX_AS_BUILTIN:
            shell = Shell(commands, files=files, stdin=stdin)
            chunks, status = await shell.run_chunks(shlex.join([name, *argv[1:]]))
            return Output(tuple(chunks), status)
        return Output.err(f"su: failed to exec {argv[0]}: No such file or directory\n", 1)

    async def _shell(
        self,
        argv: list[str],
        stdin: str,
        commands: Mapping[str, CommandFn],
        files: ShellFiles | None,
    ) -> Output:
        """``sh -c SCRIPT`` or ``sh`` reading its script from stdin."""
        if len(argv) >= 2 and argv[1] == "-c":
            if len(argv) < 3:
                return Output.err("/system/bin/sh: -c: option requires an argument\n", 1)
            script = argv[2]
        elif len(argv) == 1:
            # the script is what stdin holds: from the terminal, nothing until the hang-up
            try:
                script = await read_input(stdin)
            except TerminalReadError:
                script = ""
            stdin = ""
        else:
            return Output.err(f"/system/bin/sh: {argv[1]}: No such file or directory\n", 127)
        chunks, status = await Shell(commands, files=files, stdin=stdin).run_chunks(script)
        return Output(tuple(chunks), status)
