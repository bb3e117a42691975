"""The ``ISms`` transaction codes, proven from the phone's own framework jar.

The framework path (:mod:`android_bridge._framework`) calls ``service call isms <code>``,
and the code of ``sendTextForSubscriber`` is ``FIRST_CALL_TRANSACTION + n``, n its place in
frameworks/base ``telephony/java/com/android/internal/telephony/ISms.aidl``: a table by
release that could not be read at every tag here, and that an OEM's ``ISms`` may change. A
wrong code reaches another method. The phone itself holds the answer: the AIDL compiler
writes ``static final int TRANSACTION_<method>`` into ``ISms$Stub``, which d8 stores as the
class's ``static_values`` in the DEX of the boot jar ``/system/framework/framework.jar`` on
Android 10 to 15 (build/make ``base_system.mk`` ``PRODUCT_BOOT_JARS`` at android-10.0.0_r1
and 11.0.0_r1, ``default_art_config.mk`` at 12.0.0_r1 to 15.0.0_r1), kept there and stored
uncompressed (build/soong ``java/java.go`` ``shouldUncompressDex``: "Store uncompressed (and
do not strip) dex files from boot class path jars", read at the soong commits of
android-10.0.0_r31 to 14.0.0_r11), mode 0644 (system/core ``libcutils/fs_config.cpp``
``system/framework/*``).

:func:`read_isms_codes` reads it in one round trip: toybox ``stat -L -c %s`` of the jar
(the size of the file, a symlink followed), then,
only when it is at most :data:`MAX_JAR_BYTES`, ``base64`` of it (``Device.run`` needs UTF-8
text; toybox's ``base64`` is in Android's toybox on 10 to 15, LineageOS
``android_external_toybox`` ``lineage-17.1`` and ``lineage-18.1`` ``Android.bp``), then
:func:`android_bridge._dex.jar_static_ints`. The copy is checked before it is believed: the
decoded length must equal the size ``stat`` printed, the zip's CRC-32 and the DEX's own
checks must hold, so a truncated or garbled transfer is refused, never read as codes. What
cannot be proven is said, with why (:class:`CodesUnproven`): a jar stripped of its DEX (an
odex/vdex build), a DEX of another version or layout, a file the shell may not read, a jar
too big to pull. :func:`framework_codes_check` turns either into doctor's check.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Final

import attrs

from android_bridge._check import Check, checker
from android_bridge._device import Device
from android_bridge._dex import DexUnreadable, jar_static_ints
from android_bridge._framework import SEND_TEXT_CODES
from android_bridge._shell import posix_quote
from android_bridge.exceptions import BridgeError

__all__ = [
    "FRAMEWORK_JAR",
    "ISMS_STUB",
    "MAX_JAR_BYTES",
    "CodesUnproven",
    "IsmsCodes",
    "check_framework_codes",
    "framework_codes_check",
    "isms_codes_commands",
    "parse_isms_codes",
    "read_isms_codes",
]

#: The boot jar whose DEX defines ``ISms$Stub`` on Android 10 to 15.
FRAMEWORK_JAR: Final = "/system/framework/framework.jar"
#: ``com.android.internal.telephony.ISms$Stub`` as a DEX type descriptor.
ISMS_STUB: Final = "Lcom/android/internal/telephony/ISms$Stub;"
#: A bigger jar is not pulled (a phone's framework.jar is tens of MB; its base64 is a third
#: more). The bound keeps one doctor run from moving hundreds of MB over ADB.
MAX_JAR_BYTES: Final = 96 * 1024 * 1024
_SEND_TEXT: Final = "TRANSACTION_sendTextForSubscriber"
_SEND_MULTIPART: Final = "TRANSACTION_sendMultipartTextForSubscriber"
_SIZE = re.compile(r"\A(\d{1,12})\n\Z")
_SOURCE: Final = (
    "frameworks/base ISms.aidl (FIRST_CALL_TRANSACTION + n; read at android-12.1.0_r4),"
    " read from the phone's own /system/framework/framework.jar (build/make"
    " PRODUCT_BOOT_JARS, android-10.0.0_r1 to 15.0.0_r1; soong shouldUncompressDex)"
)


@attrs.frozen(kw_only=True)
class IsmsCodes:
    """The transaction codes the phone's ``ISms$Stub`` defines."""

    #: ``TRANSACTION_sendTextForSubscriber``
    send_text: int
    #: ``TRANSACTION_sendMultipartTextForSubscriber``, None when the stub has no such field
    send_multipart: int | None
    #: the jar's size in bytes, as ``stat`` printed it
    jar_bytes: int


@attrs.frozen(kw_only=True)
class CodesUnproven:
    """The codes could not be read exactly; ``reason`` says why."""

    #: why, in a sentence (what the phone printed, or what the reader refused)
    reason: str


def isms_codes_commands(max_bytes: int = MAX_JAR_BYTES) -> list[str]:
    """The round trip's steps: the jar's size, then the jar in base64 when it is small
    enough (checked on the phone, so a big jar never crosses the link)."""
    jar = posix_quote(FRAMEWORK_JAR)
    return [
        f"stat -L -c %s {jar}",
        f'[ "$(stat -L -c %s {jar})" -le {max_bytes} ] && base64 {jar}',
    ]


async def read_isms_codes(
    device: Device, *, max_bytes: int = MAX_JAR_BYTES
) -> IsmsCodes | CodesUnproven:
    """The phone's ``ISms`` codes, read from its framework jar in one round trip.

    Raises:
        BridgeError: transport failures (the read changes nothing on the phone).
    """
    steps = await device.run(isms_codes_commands(max_bytes))
    return parse_isms_codes(
        steps[0].output, steps[0].exit_status, steps[1].output, steps[1].exit_status, max_bytes
    )


def parse_isms_codes(
    size_output: str,
    size_status: int,
    jar_output: str,
    jar_status: int,
    max_bytes: int = MAX_JAR_BYTES,
) -> IsmsCodes | CodesUnproven:
    """:func:`read_isms_codes`'s verdict on what the two steps printed."""
    size_match = _SIZE.match(size_output)
    if size_status != 0 or size_match is None:
        return CodesUnproven(reason=f"stat of {FRAMEWORK_JAR}: {_shown(size_output)}")
    size = int(size_match.group(1))
    if size > max_bytes:
        return CodesUnproven(
            reason=f"{FRAMEWORK_JAR} is {size} bytes, over the {max_bytes} bytes pulled"
        )
    if jar_status != 0:
        return CodesUnproven(reason=f"base64 of {FRAMEWORK_JAR}: {_shown(jar_output)}")
    try:
        jar = base64.b64decode("".join(jar_output.split()), validate=True)
    except (binascii.Error, ValueError):
        return CodesUnproven(reason=f"base64 of {FRAMEWORK_JAR} printed something else")
    if len(jar) != size:
        return CodesUnproven(
            reason=f"the copy of {FRAMEWORK_JAR} has {len(jar)} bytes, stat said {size}"
        )
    try:
        constants = jar_static_ints(jar, ISMS_STUB)
    except DexUnreadable as exc:
        return CodesUnproven(reason=f"{FRAMEWORK_JAR}: {exc}")
    if constants is None:
        return CodesUnproven(
            reason=f"no DEX in {FRAMEWORK_JAR} defines ISms$Stub (a jar stripped to an"
            " odex/vdex, or the class lives in another jar)"
        )
    if _SEND_TEXT not in constants:
        return CodesUnproven(reason=f"ISms$Stub has no {_SEND_TEXT}")
    if constants[_SEND_TEXT] < 1:
        # a transaction code is FIRST_CALL_TRANSACTION (1) + n: 0 means the DEX holds no
        # constant for the field (its static_values stop before it, as when a build sets it
        # in <clinit> instead), which proves nothing, not a code of 0
        return CodesUnproven(reason=f"ISms$Stub's {_SEND_TEXT} has no constant value in the DEX")
    multipart = constants.get(_SEND_MULTIPART)
    return IsmsCodes(
        send_text=constants[_SEND_TEXT],
        send_multipart=multipart if multipart is not None and multipart >= 1 else None,
        jar_bytes=size,
    )


async def check_framework_codes(device: Device) -> Check:
    """doctor's ``framework-codes`` check on ``device`` (one round trip after the handle's
    facts). A transport failure while the jar comes (a slow link and a big jar: the
    command's timeout) is a warning that says so, not a failure of the whole doctor."""
    sdk = (await device.facts()).sdk
    try:
        found = await read_isms_codes(device)
    except BridgeError as exc:
        found = CodesUnproven(
            reason=f"{FRAMEWORK_JAR} could not be pulled ({exc}); a slow link needs a longer"
            " --timeout"
        )
    return framework_codes_check(found, sdk)


def _shown(output: str) -> str:
    text = output.strip()
    return repr(text[:120]) if text else "(nothing printed)"


def framework_codes_check(found: IsmsCodes | CodesUnproven, sdk: int | None) -> Check:
    """doctor's ``framework-codes``: ok when the phone's DEX proves the
    ``sendTextForSubscriber`` code the bridge sends with on its release, fail when it proves
    another, warn when it cannot be read (the product then keeps today's rule)."""
    title = "the framework path's transaction codes"
    expected = SEND_TEXT_CODES.get(sdk) if sdk is not None else None
    check = checker(name="framework-codes", title=title, source=_SOURCE)
    if isinstance(found, CodesUnproven):
        return check(
            verdict="warn",
            evidence=found.reason,
            consequence="the codes are not proven on this phone: auto keeps today's rule (the"
            " framework path only after a confirmed framework send on this build; a send"
            " reads the jar again an hour after a read cut short)",
        )
    multipart = "absent" if found.send_multipart is None else str(found.send_multipart)
    evidence = (
        f"ISms$Stub: sendTextForSubscriber {found.send_text}, sendMultipartTextForSubscriber"
        f" {multipart} ({found.jar_bytes}-byte jar); the bridge's code for API level {sdk}:"
        f" {'none' if expected is None else expected}"
    )
    if expected is None:
        return check(
            verdict="warn",
            evidence=evidence,
            consequence="the bridge knows no call layout for this release: the framework path"
            " is not used here",
        )
    if found.send_text != expected:
        return check(
            verdict="fail",
            evidence=evidence,
            consequence=f"code {expected} reaches another method on this phone: auto never"
            " takes the framework path on this build; never send with --send-path framework"
            " here; use the messaging app (--send-path ui)",
        )
    return check(
        verdict="ok",
        evidence=evidence,
        consequence=f"the phone's own code proves the code the framework path sends with"
        f" ({expected}): auto may take the framework path on this build where the phone also"
        " shows subscription 1 is its own (check send-path says which path the next send"
        " takes)",
    )
