"""Which Android release the simulated phone behaves as, and what differs between releases.

Every difference between Android 10 and 15 that the simulator models is one field here, with
the AOSP file and tag it comes from, so a test can pin a behaviour per version by building
the phone with ``android=N``. The default is the newest release modelled.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

import attrs

#: Releases the simulator models, oldest first.
SUPPORTED_RELEASES: Final = (10, 11, 12, 13, 14, 15)
#: The release a phone behaves as unless told otherwise.
DEFAULT_RELEASE: Final = 15


@attrs.frozen(kw_only=True)
class AndroidRelease:
    """The behaviours of one Android release that the simulator models."""

    #: Android major version, 10 to 15.
    version: int
    #: ``ro.build.version.sdk``.
    sdk: int
    #: The AOSP release tag the behaviours are read from (TelephonyProvider, frameworks/base).
    tag: str
    #: A build id of that release, for ``ro.build.fingerprint`` / ``ro.build.id``.
    build_id: str
    #: ``SmsProvider``/``MmsProvider`` filter rows by ``sub_id IN (<the user's SIMs>, -1)``
    #: (``ProviderUtil.getSelectionBySubIds``, TelephonyProvider android-14.0.0_r1; absent up
    #: to android-13.0.0_r30).
    sub_id_filter: bool
    #: Exit status of ``am start`` when the start fails (``Error: Activity not started,
    #: unable to resolve Intent``, ``Error type 3`` …). ``runStartActivity``
    #: (frameworks/base ``ActivityManagerShellCommand.java``) falls through to ``return 0`` at
    #: android-10.0.0_r30, and by a report still on an API 34 emulator; in the Android 15
    #: source each error case returns 1. The phone takes either with
    #: ``am_unresolved_exit=``; this is the default for the release.
    am_unresolved_exit: int
    #: An "Always allow" ADB key unused this long is deleted from ``adb_keys``
    #: (``Settings.Global.ADB_ALLOWED_CONNECTION_TIME``, default
    #: ``DEFAULT_ADB_ALLOWED_CONNECTION_TIME`` = 604800000 ms, applied by
    #: ``AdbDebuggingManager.AdbKeyStore.filterOutOldKeys``, frameworks/base). The key store
    #: is already in Android 10's ``com.android.server.adb.AdbDebuggingManager`` (the Q-era
    #: version, before Wireless debugging), so 10 expires keys too. None: never.
    adb_auth_expiry: timedelta | None
    #: ``cmd role get-role-holders ROLE`` exists in the platform's role service: Android 14 and
    #: 15. It was added to the Permission module's ``RoleShellCommand`` by commit 2e97608b
    #: (2022-09-20), which android-14.0.0_r11 and r67 contain and android-12.0.0_r12,
    #: 12.1.0_r11, 13.0.0_r11 and 13.0.0_r52 do not (packages/modules/Permission, read at
    #: those tags; the r1 tags could not be read). frameworks/base's
    #: ``RoleManagerShellCommand`` of 10 and 11 has add-, remove- and clear-role-holders only.
    #: Elsewhere ``cmd role`` prints ``Unknown command: get-role-holders`` (on stdout) and
    #: exits 255. A Play-updated Permission module gains it on 12 and 13 (see
    #: ``role_service_in_module``).
    role_shell_command: bool
    #: The role service (``RoleService``, ``RoleShellCommand``, ``dumpsys role``) lives in the
    #: updatable Permission module (APEX ``com.android.permission``, ``service-permission``;
    #: ``@RequiresApi(S)``, packages/modules/Permission android-12.0.0_r12 on), so a module
    #: update through Google Play replaces it: 12+. On 10 and 11 it is frameworks/base's
    #: ``RoleManagerService`` and no module update can change it.
    role_service_in_module: bool
    #: ``dumpsys role`` prints ``fallback_enabled=<true|false>`` after each role's ``name=``
    #: (``RoleUserState.dump``, Permission commit cdc0ad9ab, 2023-10-09: in
    #: android-14.0.0_r29 and later, not in 14.0.0_r11, r17 or r25; the lineage-22.0 branch
    #: for 15 has it, its AOSP tag could not be read). Android 14 is modelled at its first
    #: tags (without it); a Play-updated module brings it (see ``SystemState``).
    role_dump_fallback_enabled: bool

    @property
    def release(self) -> str:
        """``ro.build.version.release``."""
        return str(self.version)

    @property
    def role_dump_header(self) -> str:
        """The line ``dumpsys role`` prints before its state: ``ROLE MANAGER STATE (dumpsys
        role):`` from frameworks/base ``RoleManagerService`` (10, 11; undated stored versions
        with R-era APIs), ``ROLE STATE (dumpsys role):`` from the module's ``RoleService``
        (12.0.0_r12, 13.0.0_r11, 14.0.0_r11, lineage-22.0)."""
        if self.role_service_in_module:
            return "ROLE STATE (dumpsys role):"
        return "ROLE MANAGER STATE (dumpsys role):"

    @property
    def sms_query_checker(self) -> bool:
        """``SmsProvider.query`` runs ``SqlQueryChecker`` for restricted callers.

        TelephonyProvider android-10.0.0_r30 and every later tag; android-10.0.0_r1 to r29 had
        no checker. Android 10 is modelled at r30, so this holds for every release.
        """
        return self.version >= 10

    @property
    def mms_query_checker(self) -> bool:
        """``MmsProvider.query`` runs ``SqlQueryChecker`` for restricted callers (uncaught).

        From TelephonyProvider android-13.0.0_r1 (commit "check for SELECT statements in
        query"); no android-10, 11 or 12 tag of the mirror has it.
        """
        return self.version >= 13

    @property
    def select_check_ignores_case(self) -> bool:
        """``SqlQueryChecker.checkToken`` uses ``equalsIgnoreCase`` (android-14.0.0_r1 on);
        before, ``"select".equals(token.toLowerCase())``."""
        return self.version >= 14

    @property
    def mms_addr_part_sub_id(self) -> bool:
        """``addr`` and ``part`` have a ``sub_id`` column (``MmsSmsDatabaseHelper`` database
        version 68, TelephonyProvider android-14.0.0_r1; version 67 up to android-13)."""
        return self.version >= 14


_RELEASES: Final = {
    10: AndroidRelease(
        version=10,
        sdk=29,
        tag="android-10.0.0_r30",
        build_id="QQ3A.200805.001",
        sub_id_filter=False,
        am_unresolved_exit=0,
        adb_auth_expiry=timedelta(days=7),
        role_shell_command=False,
        role_service_in_module=False,
        role_dump_fallback_enabled=False,
    ),
    11: AndroidRelease(
        version=11,
        sdk=30,
        tag="android-11.0.0_r1",
        build_id="RQ3A.211001.001",
        sub_id_filter=False,
        am_unresolved_exit=0,
        adb_auth_expiry=timedelta(days=7),
        role_shell_command=False,
        role_service_in_module=False,
        role_dump_fallback_enabled=False,
    ),
    12: AndroidRelease(
        version=12,
        sdk=31,
        tag="android-12.0.0_r1",
        build_id="SQ3A.220705.003",
        sub_id_filter=False,
        am_unresolved_exit=0,
        adb_auth_expiry=timedelta(days=7),
        role_shell_command=False,
        role_service_in_module=True,
        role_dump_fallback_enabled=False,
    ),
    13: AndroidRelease(
        version=13,
        sdk=33,
        tag="android-13.0.0_r1",
        build_id="TQ3A.230901.001",
        sub_id_filter=False,
        am_unresolved_exit=0,
        adb_auth_expiry=timedelta(days=7),
        role_shell_command=False,
        role_service_in_module=True,
        role_dump_fallback_enabled=False,
    ),
    14: AndroidRelease(
        version=14,
        sdk=34,
        tag="android-14.0.0_r1",
        build_id="UQ1A.240205.004",
        sub_id_filter=True,
        am_unresolved_exit=0,
        adb_auth_expiry=timedelta(days=7),
        role_shell_command=True,
        role_service_in_module=True,
        role_dump_fallback_enabled=False,
    ),
    15: AndroidRelease(
        version=15,
        sdk=35,
        tag="android-15.0.0_r1",
        build_id="AP4A.250105.002",
        sub_id_filter=True,
        am_unresolved_exit=1,
        adb_auth_expiry=timedelta(days=7),
        role_shell_command=True,
        role_service_in_module=True,
        role_dump_fallback_enabled=True,
    ),
}


def android_release(version: int) -> AndroidRelease:
    """The modelled behaviours of Android ``version``.

    Raises:
        ValueError: a release the simulator does not model (only 10 to 15 are).
    """
    release = _RELEASES.get(version)
    if release is None:
        supported = ", ".join(str(v) for v in SUPPORTED_RELEASES)
        raise ValueError(f"Android {version} is not modelled; choose one of {supported}")
    return release
