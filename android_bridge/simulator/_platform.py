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
    #: Exit status of ``am start`` for an intent nothing resolves. ``am`` prints
    #: ``Error: Activity not started, unable to resolve Intent`` and exits 0 on Android 10 and,
    #: by a report, still on an API 34 emulator; some Android 15 builds exit 1. The phone
    #: takes either with ``am_unresolved_exit=``; this is the default for the release.
    am_unresolved_exit: int
    #: adbd forgets an authorised key unused this long (Android 11+:
    #: ``persist.adb.authorized_keys.expiration``-style 7-day timeout in adbd's
    #: ``adbd_auth``/``AdbDebuggingManager``); None: keys never expire (Android 10).
    adb_auth_expiry: timedelta | None
    #: ``cmd role get-role-holders android.app.role.SMS`` answers (RoleManager shell command,
    #: Android 11+); on 10 the default SMS app is ``settings get secure
    #: sms_default_application``.
    role_shell_command: bool

    @property
    def release(self) -> str:
        """``ro.build.version.release``."""
        return str(self.version)


_RELEASES: Final = {
    10: AndroidRelease(
        version=10,
        sdk=29,
        tag="android-10.0.0_r30",
        build_id="QQ3A.200805.001",
        sub_id_filter=False,
        am_unresolved_exit=0,
        adb_auth_expiry=None,
        role_shell_command=False,
    ),
    11: AndroidRelease(
        version=11,
        sdk=30,
        tag="android-11.0.0_r1",
        build_id="RQ3A.211001.001",
        sub_id_filter=False,
        am_unresolved_exit=0,
        adb_auth_expiry=timedelta(days=7),
        role_shell_command=True,
    ),
    12: AndroidRelease(
        version=12,
        sdk=31,
        tag="android-12.0.0_r1",
        build_id="SQ3A.220705.003",
        sub_id_filter=False,
        am_unresolved_exit=0,
        adb_auth_expiry=timedelta(days=7),
        role_shell_command=True,
    ),
    13: AndroidRelease(
        version=13,
        sdk=33,
        tag="android-13.0.0_r1",
        build_id="TQ3A.230901.001",
        sub_id_filter=False,
        am_unresolved_exit=0,
        adb_auth_expiry=timedelta(days=7),
        role_shell_command=True,
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
