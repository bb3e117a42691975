"""What a phone shows about the assumptions the guarantees rest on, checked in two round trips.

Every guarantee rests on facts about Android read in AOSP at release tags; a real phone is
an OEM build with its own apps and settings. :func:`examine` asks the phone, over the same
connection a send uses, for each fact the product relies on, and says for each one
(:class:`Check`): a verdict (``ok``, ``warn``, ``fail``), the evidence it read, the AOSP
source the fact comes from, and what the product does because of it. It sends nothing, opens
no app and leaves nothing behind on the phone but what a send would leave (the fence
directory).

The first round trip is the handle's own (``Device.facts``: ``id``, the release, the build,
``service check isms``, the phone's identity); the second (:func:`probe_commands`) reads the
clock, the SMS role, the screen, Android's outgoing-SMS limit, one row of ``content://sms``
and of ``content://mms`` exactly as the reads and sends ask for them, tries the fence's
symlinks in its own directory, and asks the SMS provider what it shows the shell (which
types, whether ``SqlQueryChecker`` guards it, the rows' subscriptions and the sent rows'
``status``: :mod:`android_bridge._doctor_provider`). Each check is a pure function of what
was printed, so each verdict is tested on its own.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Final, Literal

import attrs

from android_bridge import _doctor_provider as _provider
from android_bridge._check import Check, Verdict, checker
from android_bridge._device import Device, DeviceFacts
from android_bridge._dispatcher import AWAKE_LINE, KEYGUARD_HIDDEN, KEYGUARD_LINE, parse_clock
from android_bridge._fence import FENCE_ROOT, SCRIPT, VOID
from android_bridge._mms import latest_mms_query, parse_latest_mms
from android_bridge._parser import parse_int_rows
from android_bridge._reader import LATEST_COLUMNS, latest_ids_query
from android_bridge._role import ROLE_HOLDER_READ, ROLE_REPORT, parse_role_read
from android_bridge._shell import StepOutput, posix_quote
from android_bridge.exceptions import ReadFailed

__all__ = ["Check", "Probe", "Verdict", "checks", "examine", "probe_commands", "worst"]


#: The releases the product models (``ro.build.version.sdk`` 29 to 35: Android 10 to 15).
SUPPORTED_SDKS: Final = range(29, 36)
#: Packages of messaging apps that send RCS chat when chat is on (Google Messages, Samsung
#: Messages): a chat message never reaches ``content://sms``.
RCS_APPS: Final = frozenset({"com.google.android.apps.messaging", "com.samsung.android.messaging"})
#: AOSP's own Messaging app (``packages/apps/Messaging``): SMS and MMS only, no RCS.
AOSP_MESSAGING: Final = "com.android.messaging"
#: ``SmsUsageMonitor``'s defaults (frameworks/opt/telephony, android-10.0.0_r30 to
#: android-15.0.0_r1): 30 SMS per package per 60 000 ms before a dialog holds the next one.
ANDROID_SMS_MAX_COUNT: Final = 30
ANDROID_SMS_CHECK_PERIOD_MS: Final = 60_000
#: A skew above this makes the clock check warn: the phone's clock is not kept in time and
#: may jump when it syncs.
CLOCK_SKEW_WARN_MS: Final = 60_000

_SETTING = re.compile(r"-?\d{1,12}")


@attrs.frozen(kw_only=True)
class Probe:
    """What the second round trip printed, with the local clock around it."""

    steps: tuple[StepOutput, ...]
    #: this machine's clock (ms since the epoch) right before and right after the round trip
    sent_ms: int
    received_ms: int
    #: the name the fence probe used (removed again by the same script)
    fence_probe: str


def probe_commands(fence_probe: str, *, prefix: str = "", sdk: int | None = None) -> list[str]:
    """The second round trip's commands, in the order :func:`checks` reads them; ``prefix``
    goes before each ``content query`` (``su 1000 `` for reads as the system uid); ``sdk``:
    the release, which asks ``dumpsys isub`` from 14 only (``:`` in its place before)."""
    root = FENCE_ROOT
    probe = f"{root}/{fence_probe}"
    fence = (
        # the fence needs: its directory; ln -s creating a name in one step; a second ln -s
        # on the taken name failing (EEXIST: two parties can never both win); readlink
        # telling who won. The probe's name is removed again; the epoch markers are listed.
        f"mkdir -p {root} 2>/dev/null; m=$?;"
        f" ln -s {SCRIPT} {probe} 2>/dev/null; a=$?;"
        f" ln -s {VOID} {probe} 2>/dev/null; b=$?;"
        f" l=$(readlink {probe} 2>/dev/null); rm -f {probe};"
        f" e=$(ls -1a {root} 2>/dev/null | grep -c -e '^\\.epoch-');"
        ' printf \'%s:%s:%s:%s:%s\\n\' "$m" "$a" "$b" "$e" "$l"'
    )
    return [
        "date +%s%3N",
        f"{ROLE_HOLDER_READ}; {ROLE_REPORT}",
        "dumpsys power 2>&1 | grep -e '^ *mWakefulness='",
        f"dumpsys window policy 2>&1 | grep -E {posix_quote(KEYGUARD_LINE)}",
        "settings get global sms_outgoing_check_max_count",
        "settings get global sms_outgoing_check_interval_ms",
        latest_ids_query(prefix=prefix),
        latest_mms_query(prefix=prefix),
        fence,
        "settings get global adb_allowed_connection_time",
        *_provider.commands(prefix),
        _provider.ISUB_COMMAND if sdk is not None and sdk >= _provider.ISUB_SDK else ":",
    ]


async def examine(
    device: Device, *, clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000
) -> tuple[Check, ...]:
    """Every check on ``device`` (two round trips: the handle's facts, then the probe).

    Raises:
        BridgeError: the phone could not be asked (the transport's errors, as for a read).
    """
    facts = await device.facts()
    fence_probe = f".doctor-{secrets.token_hex(6)}"
    sent_ms = clock_ms()
    steps = await device.run(
        probe_commands(fence_probe, prefix=device.content_prefix, sdk=facts.sdk)
    )
    received_ms = clock_ms()
    return checks(
        facts,
        Probe(steps=steps, sent_ms=sent_ms, received_ms=received_ms, fence_probe=fence_probe),
    )


def checks(facts: DeviceFacts, probe: Probe) -> tuple[Check, ...]:
    """The checks, from what the two round trips printed."""
    steps = probe.steps
    role = _role(steps[1])
    return (
        shell_uid(facts),
        release(facts),
        identity(facts),
        isms(facts),
        clock(steps[0].output, probe.sent_ms, probe.received_ms),
        role,
        messaging_app(steps[1]),
        screen(steps[2], steps[3]),
        sms_limit(steps[4].output, steps[5].output),
        provider("sms", steps[6]),
        provider("mms", steps[7]),
        _provider.sms_view(facts, steps[10], steps[11]),
        _provider.query_checker(facts, steps[6], steps[14]),
        _provider.subscriptions(facts, steps[13], steps[15]),
        _provider.delivery_status(steps[11], steps[12]),
        fence(steps[8].output),
        adb_expiry(steps[9].output),
    )


def shell_uid(facts: DeviceFacts) -> Check:
    """The shell's uid: 2000 (``shell``) or 0 (``adb root``); both read the restricted view."""
    source = (
        "system/core libcutils android_filesystem_config.h (AID_SHELL 2000, AID_ROOT 0);"
        " TelephonyProvider ProviderUtil.isAccessRestricted, android-10.0.0_r30 to 15.0.0_r1"
    )
    view = "through `su 1000`, every type" if facts.full_view else "the restricted view"
    evidence = f"uid {facts.uid}; reads see {view}"
    check = checker(name="shell-uid", title="the shell's uid", source=source)
    if facts.uid in (0, 2000):
        consequence = (
            "as assumed: reads see inbox and sent rows only, so a missing row proves nothing;"
            " absence is proven by the fence"
        )
        if facts.full_view:
            consequence = "reads through `su 1000` see every type (outbox, failed, queued too)"
        return check(verdict="ok", evidence=evidence, consequence=consequence)
    return check(
        verdict="fail",
        evidence=evidence,
        consequence="not the shell (2000) nor root (0): what this uid may read is not modelled",
    )


def release(facts: DeviceFacts) -> Check:
    """Android 10 to 15 (``ro.build.version.sdk`` 29 to 35) and the build fingerprint."""
    sdk = facts.sdk
    evidence = f"sdk {sdk if sdk is not None else '?'}; build {facts.build or '(none)'}"
    ok = sdk is not None and sdk in SUPPORTED_SDKS
    return Check(
        name="release",
        title="the release and the build",
        verdict="ok" if ok else "fail",
        evidence=evidence,
        source="getprop ro.build.version.sdk / ro.build.fingerprint (build/make sysprop);"
        " every fact the product relies on was read at android-10 to android-15 tags",
        consequence=(
            "modelled release: the send path, the reads and their proofs are those read in AOSP"
            " for it; a framework send is proven per build fingerprint"
            if ok
            else "a release outside Android 10 to 15 is not modelled: do not send through it"
        ),
    )


def identity(facts: DeviceFacts) -> Check:
    """The phone's own identity: ``android_id``, else the serial number."""
    source = (
        "SettingsProvider (Settings.Secure.ANDROID_ID, random at first boot, regenerated by a"
        " factory reset); getprop ro.serialno (system/sepolicy shell.te), android-10 to 15"
    )
    check = checker(name="identity", title="the phone's identity", source=source)
    if facts.android_id:
        return check(
            verdict="ok",
            evidence=f"android_id {facts.android_id[:4]}…; serial {facts.serialno or '(none)'}",
            consequence="the ledger knows this phone by its identity, whatever address reaches it",
        )
    return check(
        verdict="warn",
        evidence=f"no android_id; serial {facts.serialno or '(none)'}",
        consequence="without android_id the ledger cannot tell a wiped or another phone at the"
        " same address apart; attempts on it go to review rather than be proven",
    )


def isms(facts: DeviceFacts) -> Check:
    """Whether ``service check isms`` found the framework's SMS service."""
    return Check(
        name="isms",
        title="the framework's SMS service",
        verdict="ok" if facts.isms else "warn",
        evidence="Service isms: found" if facts.isms else "isms not found",
        source="frameworks/native cmds/service/service.cpp; frameworks/base ISms.aidl"
        " (sendTextForSubscriber: code 6 on android-10, 5 on 11 to 15)",
        consequence=(
            "the framework path may be used once a framework send is proven on this build"
            if facts.isms
            else "only the messaging app can send here (`--send-path ui`)"
        ),
    )


def clock(output: str, sent_ms: int, received_ms: int) -> Check:
    """The phone's clock against this machine's, within half the round trip."""
    phone_ms = parse_clock(output)
    source = "toybox date (+%s%3N), android-10 to 15"
    check = checker(name="clock", title="the phone's clock", source=source)
    if phone_ms is None:
        return check(
            verdict="fail",
            evidence=f"date printed {output.strip()[:60]!r}",
            consequence="a send records the phone's clock to date its row: without it, rows"
            " cannot be told from older ones by date",
        )
    middle = (sent_ms + received_ms) // 2
    skew = phone_ms - middle
    within = (received_ms - sent_ms + 1) // 2
    evidence = f"phone {phone_ms} ms; skew {skew:+d} ms (±{within} ms)"
    if abs(skew) - within > CLOCK_SKEW_WARN_MS:
        return check(
            verdict="warn",
            evidence=evidence,
            consequence="rows are dated by the phone's own clock, read with each send, so a"
            " skew changes no proof; but a clock this far off is not kept in time and may jump"
            " when it syncs, mid-attempt: set the phone's time automatically",
        )
    return check(
        verdict="ok",
        evidence=evidence,
        consequence="rows are dated by the phone's own clock, read in the same round trip"
        " as each send",
    )


def _role(step: StepOutput) -> Check:
    read = parse_role_read(step.output.strip())
    source = (
        "frameworks/base RoleManagerShellCommand (cmd role get-role-holders) and"
        " RoleService's dump (dumpsys role), android-10 to 15; the same read as a send's"
    )
    check = checker(name="sms-role", title="the default SMS app", source=source)
    if read.package is not None:
        return check(
            verdict="ok",
            evidence=f"{read.package} (from {read.source})",
            consequence="sends go to this app (am start -p), and only while it holds the role",
        )
    return check(
        verdict="fail",
        evidence=read.problem(),
        consequence="a send through the app stops before its first key (exit 7, nothing sent):"
        " choose a default SMS app on the phone",
    )


def messaging_app(step: StepOutput) -> Check:
    """Whether the default SMS app can send a text as RCS chat (the shell cannot tell whether
    chat is on: only which app it is)."""
    package = parse_role_read(step.output.strip()).package
    source = "the apps' behaviour (Google Messages, Samsung Messages: RCS chat);"
    source += " AOSP packages/apps/Messaging: SMS and MMS only"
    if package is None:
        verdict: Verdict = "warn"
        evidence = "no default SMS app to judge"
        consequence = "see the default SMS app"
    elif package in RCS_APPS:
        verdict = "warn"
        evidence = f"{package} sends RCS chat when chat is on; the shell cannot tell if it is"
        consequence = (
            "turn chat off in the app: a chat message never reaches content://sms, so its"
            " attempt can only go to review (RCS_SUSPECTED), never be proven"
        )
    elif package == AOSP_MESSAGING:
        verdict = "ok"
        evidence = f"{package}: SMS and MMS only"
        consequence = "no RCS: every text it sends lands in content://sms (or mms)"
    else:
        verdict = "warn"
        evidence = f"{package}: an app the product does not model"
        consequence = (
            "it may alter the text or send chat; the product proves only what it finds in"
            " content://sms, and sends through it are checked by reading"
        )
    return Check(
        name="rcs",
        title="chat (RCS) in the messaging app",
        verdict=verdict,
        evidence=evidence,
        source=source,
        consequence=consequence,
    )


def screen(power: StepOutput, policy: StepOutput) -> Check:
    """Awake and unlocked, read as a send's own checks read them."""
    wakefulness = [line for line in power.output.splitlines() if line.strip()]
    keyguard = [line for line in policy.output.splitlines() if re.match(KEYGUARD_LINE, line)]
    awake = [line.rstrip() for line in wakefulness] == [AWAKE_LINE]
    unlocked = len(keyguard) == 1 and re.match(KEYGUARD_HIDDEN, keyguard[0]) is not None
    state = ", ".join(line.strip() for line in [*wakefulness[:1], *keyguard[:1]]) or "nothing"
    ok = awake and unlocked
    return Check(
        name="screen",
        title="the screen and the keyguard",
        verdict="ok" if ok else "fail",
        evidence=state,
        source="frameworks/base PowerManagerService.dumpInternal (mWakefulness) and"
        " KeyguardStateMonitor.dump (mIsShowing), android-10 to 15",
        consequence=(
            "a send through the app may press its keys"
            if ok
            else "a send through the app waits, then exits 7 with nothing sent: unlock the"
            " phone, and keep it awake (Developer options: Stay awake, on a charger)"
        ),
    )


def sms_limit(count_output: str, interval_output: str) -> Check:
    """Android's outgoing-SMS limit: the two global settings, else SmsUsageMonitor's
    defaults."""
    count = _setting(count_output, ANDROID_SMS_MAX_COUNT)
    interval = _setting(interval_output, ANDROID_SMS_CHECK_PERIOD_MS)
    evidence = f"{count} SMS per {interval} ms" + (
        " (Android's defaults: both settings unset)"
        if count_output.strip() == interval_output.strip() == "null"
        else ""
    )
    per_minute = count * 60_000 / interval if interval > 0 else float("inf")
    ok = per_minute >= ANDROID_SMS_MAX_COUNT
    return Check(
        name="sms-limit",
        title="Android's outgoing-SMS limit",
        verdict="ok" if ok else "warn",
        evidence=evidence,
        source="frameworks/opt/telephony SmsUsageMonitor (DEFAULT_SMS_MAX_COUNT 30,"
        " DEFAULT_SMS_CHECK_PERIOD 60000; Settings.Global sms_outgoing_check_max_count,"
        " sms_outgoing_check_interval_ms), android-10 to 15",
        consequence=(
            "the product starts at most 30 sends a minute per phone (--rate-limit), within it"
            if ok
            else f"past {count} SMS per {interval} ms Android asks the person holding the phone"
            " before each send, and nothing goes out meanwhile: lower --rate-limit to fit"
        ),
    )


#: ``Settings.Global.DEFAULT_ADB_ALLOWED_CONNECTION_TIME``: 7 days, in ms.
ADB_ALLOWED_CONNECTION_MS: Final = 7 * 24 * 3600 * 1000


def adb_expiry(output: str) -> Check:
    """How long the phone keeps this key's authorisation unused
    (``adb_allowed_connection_time``; unset: 7 days; 0: never expires)."""
    text = output.strip()
    source = (
        "frameworks/base AdbDebuggingManager, android-10 to 15 (Settings.Global"
        " adb_allowed_connection_time, default 7 days; 0 from Developer options' Disable adb"
        " authorization timeout)"
    )
    check = checker(name="adb-expiry", title="when the key's authorisation expires", source=source)
    if text != "null" and not _SETTING.fullmatch(text):
        return check(
            verdict="warn",
            evidence=f"settings printed {text[:60]!r}",
            consequence="unknown: assume an authorisation unused for 7 days expires",
        )
    allowed = _setting(text, ADB_ALLOWED_CONNECTION_MS)
    if allowed == 0:
        evidence = "0: the authorisation never expires"
        consequence = "the phone keeps this key until it is revoked"
    else:
        days = allowed / 86_400_000
        evidence = f"{allowed} ms ({days:g} days)" + (
            " (the default: unset)" if text == "null" else ""
        )
        consequence = (
            f"an authorisation unused for {days:g} days expires; every connection (a send, a"
            " reconcile, the nightly job) renews it; after it expires the phone asks again, and"
            " nothing reaches it until someone taps Allow"
        )
    return check(verdict="ok", evidence=evidence, consequence=consequence)


def _setting(output: str, default: int) -> int:
    text = output.strip()
    return int(text) if _SETTING.fullmatch(text) else default


def provider(kind: Literal["sms", "mms"], step: StepOutput) -> Check:
    """One row of ``content://sms`` (or ``mms``) read as the reads page: ``_id DESC LIMIT 1``."""
    uri = f"content://{kind}"
    columns = LATEST_COLUMNS if kind == "sms" else ("_id",)
    source = (
        "TelephonyProvider SmsProvider/MmsProvider.query and SqlQueryChecker (LIMIT in the"
        " sort order passes), android-10.0.0_r30 to 15.0.0_r1; Content.java (content query)"
    )
    output = step.output.strip()
    check = checker(name=f"{kind}-read", title=f"reading {uri} a page at a time", source=source)
    try:
        rows = parse_int_rows(step.output, columns)
    except ReadFailed as exc:
        return check(
            verdict="fail",
            evidence=f"{exc} ({output[:80]!r})",
            consequence="the product cannot read this phone's messages: no send can be proven",
        )
    if kind == "mms":
        latest = parse_latest_mms(step.output)
        found = f"latest pdu _id {latest}" if latest else "no row visible"
    else:
        found = f"latest _id {rows[0][0]}" if rows else "no row visible"
    verdict: Verdict = "ok" if rows else "warn"
    consequence = (
        "the reads and the watermark before each send work as modelled"
        if rows
        else "no row came back: an empty box, or a query the phone refused (the provider prints"
        " the same for both); the first send will tell"
    )
    if kind == "mms" and rows:
        consequence = "a text the app turns into MMS can be found and matched"
    return check(verdict=verdict, evidence=found, consequence=consequence)


def fence(output: str) -> Check:
    """The fence's directory, its symlinks and the epoch marker."""
    source = (
        "system/core rootdir/init.rc (/data/local/tmp 0771 shell:shell), android-10 to 15;"
        " toybox ln.c and readlink, 0.8.0 to 0.8.11 (ln -s creates the name or fails with EEXIST)"
    )
    found = re.fullmatch(r"(\d+):(\d+):(\d+):(\d+):(.*)", output.strip())
    check = checker(name="fence", title="the fence on the phone", source=source)
    if found is None:
        return check(
            verdict="fail",
            evidence=f"unreadable answer {output.strip()[:80]!r}",
            consequence="without the fence no attempt can be voided: every unknown outcome"
            " goes to review",
        )
    made, first, second, epochs, target = found.groups()
    evidence = (
        f"{FENCE_ROOT}: mkdir {made}, ln -s {first}, second ln -s {second},"
        f" readlink {target or '(none)'}, {epochs} epoch marker(s)"
    )
    works = made == "0" and first == "0" and second != "0" and target == SCRIPT
    if not works:
        return check(
            verdict="fail",
            evidence=evidence,
            consequence="the fence cannot claim a name on this phone: sends would stop before"
            " their first key, and unknown outcomes cannot be voided; free"
            f" {FENCE_ROOT} for the shell user",
        )
    return check(
        verdict="ok",
        evidence=evidence,
        consequence=(
            "a send claims its name before its first key, and an unknown outcome can be voided"
            if epochs != "0"
            else "no epoch yet: the first send makes one; then sends claim and attempts void"
        ),
    )


def worst(found: Sequence[Check]) -> Verdict:
    """The worst verdict of ``found`` (``ok`` for none)."""
    order: dict[Verdict, int] = {"ok": 0, "warn": 1, "fail": 2}
    return max((check.verdict for check in found), key=order.__getitem__, default="ok")
