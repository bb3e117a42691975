"""Who the default SMS app is: the holder of user 0's ``android.app.role.SMS``, read from the
shell on Android 10 to 15. The one rule a send's ``role`` check and ``starebrain devices``
both use.

The role service is the only source of truth, and it answers the shell two ways:

* ``cmd role get-role-holders android.app.role.SMS`` (``RoleShellCommand`` in
  packages/modules/Permission) prints the holders joined by ``;`` and exits 0 where it
  exists: Android 14 and 15, and a 12 or 13 phone whose Permission module Google Play
  updated. Elsewhere (10 to 13 as shipped) it prints ``Unknown command: get-role-holders``
  and exits 255, so only its exit status says whether it answered.
* ``dumpsys role`` prints the role state of every user on every release, as text
  (``DualDumpOutputStream``): per user ``user_id=N`` then, per role, ``name=ROLE``, on 15
  ``fallback_enabled=…``, and ``holders=PACKAGE`` when the role has one. :data:`ROLE_DUMP_AWK`
  takes user 0's SMS holders from it, tracking ``user_id=`` and ``name=`` rather than
  indentation or order, so a work profile or a secondary user (whose SMS app may differ) is
  never read as the phone's. It prints them joined by ``;`` and exits 0 when user 0's SMS
  role was in the dump, and exits 1 when it was not (no dump, another format).

``settings get secure sms_default_application`` is not read: nothing writes it from Android
10 on (a phone first booted on 10+ says ``null``, one upgraded from 9 a stale package), so
it can only mislead.

The script (:data:`ROLE_HOLDER_READ`) leaves ``$t`` (``cmd``'s exit status), ``$d`` (0 when
``cmd`` answered or the dump was parsed, else the parser's status) and ``$r`` (the holders);
:data:`ROLE_REPORT` prints them on one line, ``t:d:r``, which :func:`parse_role_read` reads.
"""

from __future__ import annotations

import re
from typing import Final, Literal

import attrs

from android_bridge._shell import posix_quote

ROLE_SMS: Final = "android.app.role.SMS"
#: A package name as ``PackageParser`` accepts it (two or more dot-separated segments).
PACKAGE_PATTERN: Final = r"[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+"
#: user 0's SMS role holders from ``dumpsys role``, for ``awk -F=`` (one-true-awk,
#: ``/system/bin/awk`` on Android 10 to 15): ``u`` is the user of the current block, ``n``
#: the current role's name (reset at each user), ``f`` marks user 0's SMS role as seen, ``h``
#: collects its holders. Prints ``h`` (an empty line for none); exits 0 only when ``f``.
ROLE_DUMP_AWK: Final = (
    '$1~/^ *user_id$/{u=$2;n=""}'
    " $1~/^ *name$/{n=$2}"
    f' u=="0"&&n=="{ROLE_SMS}"&&$1~/^ *name$/{{f=1}}'
    f' u=="0"&&n=="{ROLE_SMS}"&&$1~/^ *holders$/{{h=h s $2;s=";"}}'
    " END{print h;exit !f}"
)
#: Sets ``$r`` to the holders, ``$t`` to ``cmd role``'s exit status and ``$d`` to 0 when the
#: holders were read (by ``cmd role``, or from the dump), else to the dump parser's status.
ROLE_HOLDER_READ: Final = (
    f"r=$(cmd role get-role-holders {ROLE_SMS} 2>/dev/null); t=$?;"
    ' echo "$t" | grep -qx 0 ||'
    f" r=$(dumpsys role 2>/dev/null | awk -F= {posix_quote(ROLE_DUMP_AWK)}); d=$?"
)
#: Prints what :data:`ROLE_HOLDER_READ` found as one line, ``t:d:r``.
ROLE_REPORT: Final = "printf '%s\\n' \"$t:$d:$r\""

RoleSource = Literal["cmd role", "dumpsys role"]
_REPORT: Final = re.compile(r"(\d{1,3}):(\d{1,3}):(.*)", re.DOTALL)
_PACKAGE: Final = re.compile(PACKAGE_PATTERN)


@attrs.frozen(kw_only=True)
class RoleRead:
    """What the role read found on the phone."""

    #: how the holders were read: ``cmd role`` (it exited 0) or ``dumpsys role`` (user 0's
    #: SMS role was in the dump); None when neither answered
    source: RoleSource | None
    #: the holders as printed (``;``-joined; empty for none), or what was printed otherwise
    holders: str
    #: ``cmd role get-role-holders``'s exit status (None: the report line was unreadable)
    cmd_status: int | None = None
    #: the dump parser's exit status (0 when ``cmd role`` answered)
    dump_status: int | None = None

    @property
    def package(self) -> str | None:
        """The default SMS app: the one holder, when the role was read and has exactly one."""
        if self.source is not None and _PACKAGE.fullmatch(self.holders):
            return self.holders
        return None

    @property
    def no_holder(self) -> bool:
        """The role was read and nobody holds it: there is no default SMS app."""
        return self.source is not None and self.holders == ""

    def problem(self) -> str:
        """Why no single package came out of the read, in words (empty when one did)."""
        if self.package is not None:
            return ""
        if self.no_holder:
            return f"the SMS role has no holder ({self.source})"
        if self.source is not None:
            return f"{self.source} gave {self.holders[:100]!r}, not one package"
        if self.cmd_status is None:
            return f"unreadable answer {self.holders[:100]!r}"
        return (
            f"cmd role get-role-holders exited {self.cmd_status} and dumpsys role showed no"
            f" SMS role for user 0 (awk exited {self.dump_status})"
        )


def parse_role_read(line: str) -> RoleRead:
    """Read the ``t:d:r`` line :data:`ROLE_REPORT` prints (without its newline)."""
    found = _REPORT.fullmatch(line.rstrip("\n"))
    if found is None:
        return RoleRead(source=None, holders=line.strip())
    cmd_status, dump_status = int(found.group(1)), int(found.group(2))
    source: RoleSource | None = None
    if cmd_status == 0:
        source = "cmd role"
    elif dump_status == 0:
        source = "dumpsys role"
    return RoleRead(
        source=source,
        holders=found.group(3).strip(),
        cmd_status=cmd_status,
        dump_status=dump_status,
    )
