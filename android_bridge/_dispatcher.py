"""Sending one SMS through the phone's messaging app, in one shell round trip.

The round trip runs, in order: the highest visible row's ``_id`` and ``date`` (the watermark,
``--sort '_id DESC LIMIT 1'``), ``date +%s%3N`` (the device clock), the highest visible
``content://mms`` ``_id`` (where a message the app converts to MMS will land), then the send
step::

    <r: user 0's SMS role holder, from cmd role get-role-holders android.app.role.SMS
       where it exits 0, else from dumpsys role (android_bridge._role)>
    printf '%s\n' "SBROLE<nonce>:$t:$d:$r"
    <the role was read ($d is 0)> && <r is one package [and is MessagingApp.package]>
      && echo SBOK<nonce>:role
      && <dumpsys power: '  mWakefulness=Awake'> && echo SBOK<nonce>:awake
      && <dumpsys window policy: one 'mIsShowing=' line, false> && echo SBOK<nonce>:unlocked
      && o=$(am start -W --activity-clear-task -a android.intent.action.SENDTO -p "$r"
               -d smsto:<n> --es sms_body <text> 2>&1)
    s=$?; printf '%s\n' "$o"; echo "SBAMX<nonce>:$s"
    echo "$s" | grep -qx 0 && printf '%s\n' "$o" | grep -qx 'Status: ok'
      && printf '%s\n' "$o" | grep -cvE '<allowed lines>' | grep -qx 0
      && printf '%s\n' "$o" | grep -cE '^Activity: android/' | grep -qx 0
      && <dumpsys window displays: every mCurrentFocus names " u0 $r/"> && echo SBOK<nonce>:focus
      && echo SBGO<nonce> && input keyevent …

The step runs to its end on the phone whatever happens to the connection: it ignores SIGHUP
(``trap '' HUP``) and writes its output to a file in the fence's folder, printed back and
removed at its end (:func:`android_bridge._fence.run_to_the_end`), so a link dropped right
after the send key still leaves the ``keys`` stage marker on the phone.

The checks (``MessagingApp.checks``) run on the phone in the send's one round trip, before any
key: the default SMS app is read (:mod:`android_bridge._role`: ``cmd role get-role-holders``
where the Permission module has it, Android 14+ or a Play-updated module on 12 and 13;
otherwise user 0's holder parsed from ``dumpsys role``; never the stale
``sms_default_application`` setting) and the intent goes to it explicitly (``-p``), so no
chooser can appear and no other app can take it; the screen is
awake (``PowerManagerService.dumpInternal``) and the keyguard hidden (``KeyguardStateMonitor``
under ``dumpsys window policy``); right before the keys, the focused window belongs to that
app (``DisplayContent.dump``'s ``mCurrentFocus``). Each passed check prints its mark; a failed
one stops the chain before any key, and the dispatcher names it in the rejection.

Everything that reaches the shell is POSIX-quoted. ``-W`` makes ``am`` return only once the
compose window is displayed (without it, ``am`` returns before the window has focus and the
key events land in whatever window had it; ``ActivityManagerShellCommand.runStartActivity``).
The keys are pressed only when ``am`` exited 0, said ``Status: ok``, printed nothing but the
lines of a clean launch (:data:`AM_CLEAN_LINES`), and the activity started is not the
system's chooser (``Activity: android/…ResolverActivity``): an ``Error:``, an exception, or a
``Warning: Activity not started, its current task has been brought to the front`` (the new
extras were *not* delivered; the open compose window may hold an older draft) stops the
script before any key is pressed. The product never relies on ``am``'s exit status alone: it
is 0 for an unresolved intent on Android 10 to 14 and 1 on some 15 builds.

How the outcome is judged, from the output of a round trip that came back whole:

* the link failed before the command was written: :class:`DeviceUnreachable` (nothing sent);
* ``SBGO<nonce>`` is absent: the chain stopped before the first key event, so nothing can have
  been sent: :class:`CommandRejected` naming the first check without its mark, or with what
  ``am`` printed;
* ``SBGO`` is present without the mark of every enabled check: garbled, :class:`OutcomeUnknown`;
* ``SBGO`` is present but a key event failed: the compose screen holds the body and may or
  may not have sent it: :class:`OutcomeUnknown`;
* the link failed, or the output is garbled, after the command was written:
  :class:`OutcomeUnknown` (the script ran on to its end on the phone, keys included if it got
  that far, unless adbd restarted or the phone rebooted meanwhile: the fence's stage markers
  say how far it got).
"""

from __future__ import annotations

import re
import secrets
from typing import Final

import attrs

from android_bridge._device import Device
from android_bridge._fence import (
    claim_prefix,
    go_command,
    refused_claim,
    run_to_the_end,
    stage_command,
)
from android_bridge._log import get_logger
from android_bridge._mms import latest_mms_query, parse_latest_mms
from android_bridge._parser import parse_int_rows
from android_bridge._reader import LATEST_COLUMNS, latest_ids_query
from android_bridge._records import DispatchEvidence, Mode
from android_bridge._role import PACKAGE_PATTERN, ROLE_HOLDER_READ, RoleRead, parse_role_read
from android_bridge._shell import posix_quote
from android_bridge.exceptions import CommandRejected, OutcomeUnknown, PhoneNotReady, ReadFailed
from android_bridge.recipients import normalize_recipient

_log = get_logger("android_bridge.dispatcher")

#: Printed after ``am``'s output with its exit status: ``SBAMX<nonce>:<status>``.
AM_EXIT_MARKER = "SBAMX"
#: Printed right before the first key event: its absence proves no key was pressed.
GO_MARKER = "SBGO"
#: Printed after the keys with the phone's clock right before the first key and right after
#: the last: the window in which the app wrote the attempt's row.
KEYS_MARKER = "SBKEYS"
#: Printed once the send script claimed its fence name: ``SBCLAIM<nonce>``.
CLAIM_MARKER = "SBCLAIM"
#: The only lines ``am start -W`` prints for a clean launch (ActivityManagerShellCommand,
#: android-10.0.0_r30 to android-15.0.0_r1; ``LaunchState`` from 12 on). Anything else (an
#: ``Error:``, an exception, a ``Warning: Activity not started…``) stops the send before a key.
AM_CLEAN_LINES = (
    r"^(Starting: Intent \{.*\}|Status: ok|LaunchState: [A-Z_]+|Activity: [^ ]+"
    r"|ThisTime: -?[0-9]+|TotalTime: -?[0-9]+|WaitTime: -?[0-9]+|Complete|)$"
)
#: The started activity belongs to the system (``android/…ResolverActivity``: two SMS apps and
#: no default, a chooser took the intent): the keys would land in it, not in a compose window.
AM_SYSTEM_ACTIVITY = r"^Activity: android/"
#: Printed once the role holder was read: ``SBROLE<nonce>:<t>:<d>:<holders>``
#: (:data:`android_bridge._role.ROLE_REPORT`).
ROLE_MARKER = "SBROLE"
#: Printed when one check passed: ``SBOK<nonce>:<check>``.
CHECK_MARKER = "SBOK"
#: The checks a send can run on the phone, in the order they run (see :class:`MessagingApp`).
SEND_CHECKS = ("role", "awake", "unlocked", "focus")
#: ``PowerManagerService.dumpInternal``: ``  mWakefulness=Awake`` (not Asleep, Dozing, Dreaming).
AWAKE_LINE = "  mWakefulness=Awake"
#: ``KeyguardStateMonitor.dump`` (under ``dumpsys window policy``): ``mIsShowing=false``.
KEYGUARD_HIDDEN = r"^ *mIsShowing=false$"
KEYGUARD_LINE = r"^ *mIsShowing="
#: ``DisplayContent.dump`` (``dumpsys window displays``): ``  mCurrentFocus=Window{… u0 …}``.
FOCUS_LINE = r"^ *mCurrentFocus="
_PACKAGE = re.compile(PACKAGE_PATTERN)
#: Prints ``am``'s output (kept in ``$o``) again, for the checks and the dispatcher to read.
_AM_OUTPUT = "printf '%s\\n' \"$o\""
#: ``am`` lines saying the intent reached no activity or was not delivered.
_AM_ERROR_LINE = re.compile(
    r"^(Error|Exception|java\.|Security exception|Warning: Activity not started)",
    re.MULTILINE,
)


@attrs.frozen(kw_only=True)
class MessagingApp:
    """How to drive one messaging app from the shell."""

    #: Key codes pressed after the compose screen opens (22 DPAD_RIGHT, 66 ENTER).
    key_events: tuple[int, ...] = attrs.field(default=(22, 66))
    #: Milliseconds to wait between ``am start`` and the first key event (0: no wait).
    settle_ms: int = attrs.field(default=0)
    #: Package the SMS must go through: it must be the default SMS app (the ``role`` check)
    #: and the intent is sent to it (``am start -p``). None: whatever app holds the role.
    package: str | None = attrs.field(default=None)
    #: Checks the script runs on the phone before any key, in :data:`SEND_CHECKS` order:
    #: ``role`` (the default SMS app is read, and the intent sent to it with ``-p``),
    #: ``awake`` (``dumpsys power``), ``unlocked`` (``dumpsys window policy``), ``focus``
    #: (``dumpsys window displays``: the app's window has focus right before the keys).
    checks: tuple[str, ...] = attrs.field(default=SEND_CHECKS)

    @key_events.validator
    def _check_keys(self, _attribute: object, value: tuple[int, ...]) -> None:
        if not all(isinstance(code, int) and 0 <= code <= 400 for code in value):
            raise ValueError("key events must be Android key codes (0..400)")

    @package.validator
    def _check_package(self, _attribute: object, value: str | None) -> None:
        if value is not None and not _PACKAGE.fullmatch(value):
            raise ValueError(f"not an Android package name: {value!r}")

    @checks.validator
    def _check_checks(self, _attribute: object, value: tuple[str, ...]) -> None:
        unknown = [check for check in value if check not in SEND_CHECKS]
        if unknown:
            raise ValueError(f"unknown send checks {unknown}; choose from {SEND_CHECKS}")
        if "focus" in value and "role" not in value and self.package is None:
            raise ValueError("the focus check needs the role check or a package")

    @settle_ms.validator
    def _check_settle(self, _attribute: object, value: int) -> None:
        if not 0 <= value <= 60_000:
            raise ValueError("settle_ms must be within 0..60000")


def shell_recipient(recipient: str, region: str | None = None) -> str:
    """The recipient as it goes into ``smsto:``: E.164 (``+12025550143``) for a valid number,
    the ASCII digits of a short code.

    The one rule intents and the matcher use too (:func:`normalize_recipient`), so the phone
    is never sent a recipient the matcher would refuse. ``region`` reads national numbers;
    without it only international numbers and short codes are accepted.

    Raises:
        CommandRejected: anything else (letters, ``#``, ``?``, an invalid number…), with why.
    """
    normalized = normalize_recipient(recipient, region)
    if normalized.kind == "invalid":
        raise CommandRejected(
            f"recipient must be a phone number or short code: {normalized.reason}"
        )
    return normalized.value


def send_command(
    recipient: str,
    body: str,
    app: MessagingApp,
    nonce: str,
    *,
    fence: tuple[str, str] | None = None,
    ledger_id: str | None = None,
) -> str:
    """The send step: the checks, ``am start -W``, its output and status echoed, the focus
    check, then the key events only if every check passed and ``am`` reported a clean launch
    (see the module docstring). It runs to its end on the phone even if the connection drops
    meanwhile, its output printed back at its end (:func:`android_bridge._fence.run_to_the_end`:
    ``trap '' HUP``, the output in a file).

    ``fence`` (``(dispatch_id, epoch)``): claim the attempt's fence name on the phone first
    and run nothing unless the claim succeeded; leave the ``am`` and ``keys`` stage markers
    (see :mod:`android_bridge._fence`); with ``ledger_id``, mark the claim with the ledger's id.
    """
    gate = ["k=0"]
    if fence is not None:
        claim = claim_prefix(fence[0], fence[1], CLAIM_MARKER + nonce, ledger_id)
        gate = ["k=1", f"{claim} && k=0"]
    head, role_checks, package = _role_steps(app, nonce)
    pre = ['echo "$k" | grep -qx 0', *role_checks, *_screen_checks(app, nonce)]
    am = _am_start(recipient, body, package)
    chain = _after_am(app, nonce, fence)
    start = " && ".join([*pre, f"o=$({am} 2>&1)"])
    lists = [*gate, *head, start]
    step = (
        "; ".join(lists)
        + f'; s=$?; {_AM_OUTPUT}; echo "{AM_EXIT_MARKER}{nonce}:$s"; '
        + " && ".join(chain)
    )
    return run_to_the_end(step, fence[0] if fence is not None else nonce)


def _passed(nonce: str, check: str) -> str:
    """The command printing that ``check`` passed (``SBOK<nonce>:<check>``)."""
    return f"echo {CHECK_MARKER}{nonce}:{check}"


def _role_steps(app: MessagingApp, nonce: str) -> tuple[list[str], list[str], str | None]:
    """The ``role`` check's parts: what runs before the chain (the default SMS app read into
    ``$r`` and its report printed, or ``$r`` set to ``app.package``), its links of the chain
    (one package read, and ``app.package`` when given), and the ``am start -p`` package (None:
    no ``-p``)."""
    if "role" in app.checks:
        holder = "printf '%s\\n' \"$r\""
        pattern = posix_quote(PACKAGE_PATTERN)
        checks = [
            'echo "$d" | grep -qx 0',
            f"{holder} | grep -cxE {pattern} | grep -qx 1",
            f"{holder} | grep -cvxE {pattern} | grep -qx 0",
        ]
        if app.package is not None:
            checks.append(f"{holder} | grep -qxF {posix_quote(app.package)}")
        checks.append(_passed(nonce, "role"))
        head = [ROLE_HOLDER_READ, f"printf '%s\\n' \"{ROLE_MARKER}{nonce}:$t:$d:$r\""]
        return head, checks, '"$r"'
    if app.package is not None:
        return [f"r={posix_quote(app.package)}"], [], '"$r"'
    return [], [], None


def _screen_checks(app: MessagingApp, nonce: str) -> list[str]:
    """The ``awake`` and ``unlocked`` checks' links of the chain, those ``app`` enables."""
    checks: list[str] = []
    if "awake" in app.checks:
        checks.append("p=$(dumpsys power 2>&1)")
        checks.append(f"printf '%s\\n' \"$p\" | grep -qxF {posix_quote(AWAKE_LINE)}")
        checks.append(_passed(nonce, "awake"))
    if "unlocked" in app.checks:
        policy = "printf '%s\\n' \"$w\""
        checks.append("w=$(dumpsys window policy 2>&1)")
        checks.append(f"{policy} | grep -qE {posix_quote(KEYGUARD_HIDDEN)}")
        checks.append(f"{policy} | grep -cE {posix_quote(KEYGUARD_LINE)} | grep -qx 1")
        checks.append(_passed(nonce, "unlocked"))
    return checks


def _am_start(recipient: str, body: str, package: str | None) -> str:
    """The ``am start -W`` opening a compose window for ``recipient`` holding ``body``.

    Raises:
        CommandRejected: the recipient is no phone number or short code.
    """
    # --activity-clear-task (with the NEW_TASK flag am adds itself): the app's task is cleared
    # and the intent delivered to a fresh compose window, never recycled into an open one
    # that still holds an older draft (ActivityStarter.recycleTask drops the new extras).
    parts = ["am start -W --activity-clear-task -a android.intent.action.SENDTO"]
    if package is not None:
        parts.append(f"-p {package}")
    parts.append(f"-d {posix_quote('smsto:' + shell_recipient(recipient))}")
    parts.append(f"--es sms_body {posix_quote(body)}")
    return " ".join(parts)


def _after_am(app: MessagingApp, nonce: str, fence: tuple[str, str] | None) -> list[str]:
    """The chain after ``am``: its exit status and output judged a clean launch (the ``am``
    stage marker left), the settle wait, the ``focus`` check, then the go marker (and the go
    stage), the key events between two clock readings, and the ``keys`` stage and marker."""
    chain = [
        'echo "$s" | grep -qx 0',
        f"{_AM_OUTPUT} | grep -qx 'Status: ok'",
        f"{_AM_OUTPUT} | grep -cvE {posix_quote(AM_CLEAN_LINES)} | grep -qx 0",
        f"{_AM_OUTPUT} | grep -cE {posix_quote(AM_SYSTEM_ACTIVITY)} | grep -qx 0",
    ]
    if fence is not None:
        chain.append(stage_command(fence[0], "am"))
    if app.settle_ms:
        chain.append(f"sleep {app.settle_ms / 1000:.3f}")
    if "focus" in app.checks:
        focus = "printf '%s\\n' \"$f\" | grep -E " + posix_quote(FOCUS_LINE)
        chain.append("f=$(dumpsys window displays 2>&1)")
        chain.append(f'{focus} | grep -cvF " u0 $r/" | grep -qx 0')
        chain.append(f'{focus} | grep -qF " u0 $r/"')
        chain.append(_passed(nonce, "focus"))
    if fence is not None:
        chain.append(go_command(fence[0]))
    chain.append(f"echo {GO_MARKER}{nonce}")
    chain.append("p=$(date +%s%3N)")
    chain.extend(f"input keyevent {code}" for code in app.key_events)
    chain.append("k=$(date +%s%3N)")
    if fence is not None:
        chain.append(stage_command(fence[0], "keys", clock="$k"))
    chain.append(f'echo "{KEYS_MARKER}{nonce}:$p:$k"')
    return chain


@attrs.frozen(kw_only=True)
class _SendOutput:
    """The send step's output, split at its markers."""

    #: What the role read found (None: not read).
    role: RoleRead | None
    #: Checks that printed their pass marker, in order.
    passed: tuple[str, ...]
    #: ``am``'s own output.
    am_output: str
    #: ``am``'s exit status (or the failed check's, when ``am`` never ran).
    am_status: int
    #: The go marker was printed: the keys were reached.
    pressed: bool
    #: What the key events printed.
    input_output: str
    #: The phone's clock (ms) right before the first key and right after the last, when the
    #: script got that far and printed them.
    keys_window: tuple[int, int] | None = None


def _take_lines(text: str, prefix: str) -> tuple[list[str], str]:
    """Leading lines of ``text`` starting with ``prefix``: their rest, and the remaining text."""
    taken: list[str] = []
    while text.startswith(prefix):
        line, newline, remaining = text.partition("\n")
        if not newline:
            break
        taken.append(line[len(prefix) :])
        text = remaining
    return taken, text


#: ``am``'s exit status line and the keys' clock line, whatever their nonce (compiled once,
#: not per send): a line counts only when its nonce is the send's own.
_AM_EXIT_LINE: Final = re.compile(rf"^{AM_EXIT_MARKER}([^:\n]*):(\d{{1,3}})\n", re.MULTILINE)
_KEYS_LINE: Final = re.compile(
    rf"^{KEYS_MARKER}([^:\n]*):(\d{{1,19}}):(\d{{1,19}})\n", re.MULTILINE
)


def _split_send_output(output: str, nonce: str) -> _SendOutput:
    """The role holder read, the checks passed, ``am``'s output and exit status, whether the
    keys were reached, and what they printed.

    Raises:
        OutcomeUnknown: the markers are missing, repeated or malformed (garbled output).
    """
    exits = [line for line in _AM_EXIT_LINE.finditer(output) if line.group(1) == nonce]
    go_line = f"{GO_MARKER}{nonce}\n"
    if len(exits) != 1 or output.count(go_line) > 1:
        raise OutcomeUnknown("the send output is garbled")
    found = exits[0]
    before = output[: found.start()]
    rest = output[found.end() :]
    roles, before = _take_lines(before, f"{ROLE_MARKER}{nonce}:")
    passed, am_output = _take_lines(before, f"{CHECK_MARKER}{nonce}:")
    focus, rest = _take_lines(rest, f"{CHECK_MARKER}{nonce}:")
    markers = f"{CHECK_MARKER}{nonce}:", f"{ROLE_MARKER}{nonce}:"
    if len(roles) > 1 or any(marker in am_output or marker in rest for marker in markers):
        raise OutcomeUnknown("the send output is garbled")
    role = parse_role_read(roles[0]) if roles else None
    checks = (*passed, *focus)
    if not rest.startswith(go_line):
        if go_line in rest:
            raise OutcomeUnknown("the send output is garbled")
        return _SendOutput(
            role=role,
            passed=checks,
            am_output=am_output,
            am_status=int(found.group(2)),
            pressed=False,
            input_output=rest,
        )
    after_go = rest[len(go_line) :]
    keys = [line for line in _KEYS_LINE.finditer(after_go) if line.group(1) == nonce]
    window = None
    if len(keys) == 1:
        window = (int(keys[0].group(2)), int(keys[0].group(3)))
        after_go = after_go[: keys[0].start()] + after_go[keys[0].end() :]
    return _SendOutput(
        role=role,
        passed=checks,
        am_output=am_output,
        am_status=int(found.group(2)),
        pressed=True,
        input_output=after_go,
        keys_window=window,
    )


#: The checks before the first key whose failure means the phone is not ready (a person must
#: act on it; nothing was sent), with what to do.
NOT_READY_REMEDIES: Final = {
    "keyguard_showing": "unlock the phone and keep its screen unlocked while it sends",
    "screen_off": "wake the phone (and keep its screen on while it sends)",
    "no_default_sms_app": "set a default SMS app on the phone (Settings > Apps > Default apps)",
    "not_default_sms_app": "make the configured messaging app the phone's default SMS app",
    "focus_lost": "close what covers the messaging app on the phone (a dialog, a call,"
    " another app in front)",
}


def _rejection(app: MessagingApp, split: _SendOutput) -> tuple[str, str]:
    """Why a send that never reached the keys stopped: (log reason, message)."""
    failed = next((check for check in app.checks if check not in split.passed), None)
    if failed == "role":
        role = split.role if split.role is not None else parse_role_read("")
        if role.no_holder:
            return "no_default_sms_app", (
                f"no default SMS app is set (the SMS role has no holder; read with {role.source})"
            )
        holder = role.package
        if app.package is not None and holder is not None:
            return "not_default_sms_app", (
                f"the default SMS app is {holder}, not the configured {app.package}"
                f" (read with {role.source})"
            )
        return "role_unreadable", f"the default SMS app could not be read: {role.problem()}"
    if failed == "awake":
        return "screen_off", "the screen is not awake (dumpsys power: no mWakefulness=Awake)"
    if failed == "unlocked":
        return "keyguard_showing", "the keyguard is showing (the screen is locked)"
    am_output = split.am_output.strip()[:200]
    if failed == "focus" and split.am_status == 0 and not _AM_ERROR_LINE.search(am_output):
        clean = all(
            re.match(AM_CLEAN_LINES, line) for line in split.am_output.rstrip("\n").split("\n")
        )
        if clean and "Status: ok" in split.am_output:
            return "focus_lost", (
                "the messaging app's window did not have focus right before the keys"
                f" (dumpsys window displays): {am_output}"
            )
    reason = "am_error" if _AM_ERROR_LINE.search(split.am_output) else "am_not_clean"
    return reason, (f"am start did not report a clean launch (exit {split.am_status}): {am_output}")


def parse_clock(output: str) -> int | None:
    """Device clock in ms from ``date +%s%3N``; a ``date`` without ``%3N`` support still gives
    whole seconds (``1764420000%3N`` or ``17644200003N``), kept at second precision."""
    text = output.strip()
    if re.fullmatch(r"\d{13}", text):
        return int(text)
    seconds = re.match(r"(\d{10})(?!\d{3}$)", text)
    if seconds:
        return int(seconds.group(1)) * 1000
    return None


class SmsDispatcher:
    """Sends SMS through one device, one at a time, returning the evidence to find them."""

    def __init__(self, device: Device, *, app: MessagingApp | None = None) -> None:
        self._device = device
        self._app = app if app is not None else MessagingApp()

    async def send(
        self,
        recipient: str,
        body: str,
        *,
        fence: tuple[str, str] | None = None,
        ledger_id: str | None = None,
    ) -> DispatchEvidence:
        """Send ``body`` to ``recipient``; return watermark, clock and ``am`` output.

        One round trip. The watermark and the clock are read before ``am`` in that same
        round trip. With ``fence=(dispatch_id, epoch)`` the script claims the attempt's fence
        name on the phone before anything else (:mod:`android_bridge._fence`); a failed
        claim (the attempt was voided, or the fence folder was cleared) sends nothing, and
        one more round trip asks the phone why (:func:`~android_bridge._fence.refused_claim`).
        ``ledger_id``: the claim records which ledger made it (``_fence.read_ledgers``).

        Raises:
            CommandRejected: bad recipient, blank body, ``am`` failed, or the attempt's fence
                was voided (nothing was sent); ``FenceLost``: its epoch is gone from the phone.
            DeviceUnreachable: the link was down and could not be re-established (nothing
                sent); ``DeviceUnusable``: another phone answers at the address now.
            NotSent: the command does not fit in one ADB packet (nothing sent).
            OutcomeUnknown: the command was written and then the outcome was not observed.
        """
        if not body.strip():
            raise CommandRejected("an empty or blank body would not be sent by the app")
        nonce = secrets.token_hex(8)
        command = send_command(recipient, body, self._app, nonce, fence=fence, ledger_id=ledger_id)
        trip = await run_send_round_trip(self._device, command)
        claim_line = f"{CLAIM_MARKER}{nonce}\n"
        send_output = trip.output
        claimed = send_output.startswith(claim_line)
        if fence is not None and not claimed:
            if claim_line in send_output:
                raise OutcomeUnknown("the send output is garbled")
            if _split_send_output(send_output, nonce).pressed:
                # cannot happen: the keys are chained on the claim
                raise OutcomeUnknown("keys were reached without a fence claim")
            _log.warning("sms_dispatch_rejected", device=self._device.serial, reason="fence")
            await refused_claim(self._device, fence, "no key was pressed")
        if claimed:
            send_output = send_output[len(claim_line) :]
        split = _split_send_output(send_output, nonce)
        if not split.pressed:
            reason, message = _rejection(self._app, split)
            remedy = NOT_READY_REMEDIES.get(reason)
            # a phone not ready is the caller's to report (it says what a person must do)
            log = _log.info if remedy is not None else _log.warning
            log("sms_dispatch_rejected", device=self._device.serial, reason=reason)
            if remedy is not None:
                raise PhoneNotReady(f"{message}; no key was pressed", reason=reason, remedy=remedy)
            raise CommandRejected(f"{message}; no key was pressed")
        missing = [check for check in self._app.checks if check not in split.passed]
        if missing:
            raise OutcomeUnknown(f"the keys were reached but checks {missing} left no mark")
        if trip.exit_status != 0:
            raise OutcomeUnknown(
                "the compose screen opened but a key event failed:"
                f" {split.input_output.strip()[:200]}"
            )
        _log.info(
            "sms_dispatched",
            device=self._device.serial,
            sms_app=split.role.package if split.role is not None else None,
            sms_app_source=split.role.source if split.role is not None else None,
            watermark_id=trip.watermark_id,
            watermark_proven=trip.watermark_proven,
        )
        return attrs.evolve(
            trip.evidence(
                am_output=split.am_output,
                input_output=split.input_output,
                fence_claimed=fence is not None,
            ),
            keys_window_ms=split.keys_window,
        )


@attrs.frozen(kw_only=True)
class SendRoundTrip:
    """The one round trip of a send (see the module docstring): the send step's output and
    exit status, and what the reads before it in the same round trip found."""

    device: str
    #: what the send step printed, and ``$?`` after it
    output: str
    exit_status: int
    watermark_id: int
    watermark_proven: bool
    watermark_date_ms: int | None
    device_clock_ms: int | None
    mms_watermark_id: int
    mode: Mode
    round_trips: int

    def evidence(
        self, *, am_output: str, input_output: str, fence_claimed: bool
    ) -> DispatchEvidence:
        """The dispatch evidence of this round trip."""
        return DispatchEvidence(
            device=self.device,
            watermark_id=self.watermark_id,
            watermark_proven=self.watermark_proven,
            watermark_date_ms=self.watermark_date_ms,
            device_clock_ms=self.device_clock_ms,
            am_output=am_output,
            input_output=input_output,
            mode=self.mode,
            round_trips=self.round_trips,
            mms_watermark_id=self.mms_watermark_id,
            fence_claimed=fence_claimed,
        )


def send_round_trip_steps(command: str, content_prefix: str) -> list[str]:
    """The steps of a send's one round trip, framed by :meth:`Device.run`: the watermark
    reads, the phone's clock, then the send step ``command``."""
    return [
        latest_ids_query(prefix=content_prefix),
        "date +%s%3N",
        latest_mms_query(prefix=content_prefix),
        command,
    ]


async def run_send_round_trip(device: Device, command: str) -> SendRoundTrip:
    """Run a send step in one round trip after the reads that let its artifact be found later:
    the ``_id``/``date`` of the highest visible row (the watermark: ``_id DESC LIMIT 1``,
    whatever the handle knew before: ids are reused once the latest rows are deleted, so
    the highest id ever seen may no longer exist, and a watermark above every row would hide
    the next one), ``date +%s%3N`` and the highest visible ``content://mms`` id. Shared by
    every send path.

    Raises:
        DeviceUnreachable / NotSent: the command was not written.
        OutcomeUnknown: it was written, and then the output was lost or garbled.
    """
    mode = await device.mode()
    before = device.round_trips
    try:
        steps = await device.run(send_round_trip_steps(command, device.content_prefix))
    except ReadFailed as exc:
        raise OutcomeUnknown("the send command was written but its output is garbled") from exc
    watermark_id, watermark_date_ms, proven = _watermark(device, steps[0].output)
    return SendRoundTrip(
        device=device.serial,
        output=steps[3].output,
        exit_status=steps[3].exit_status,
        watermark_id=watermark_id,
        watermark_proven=proven,
        watermark_date_ms=watermark_date_ms,
        device_clock_ms=parse_clock(steps[1].output),
        mms_watermark_id=parse_latest_mms(steps[2].output),
        mode=mode,
        round_trips=device.round_trips - before,
    )


def _watermark(device: Device, output: str) -> tuple[int, int | None, bool]:
    """Highest visible ``_id`` before the send, its ``date``, and whether it is proven (a row
    came back: the provider answered; ``No result found.`` is also what a refused query
    prints, so an empty answer proves nothing)."""
    try:
        rows = parse_int_rows(output, LATEST_COLUMNS)
    except ReadFailed:
        return 0, None, False
    dates = {row[0]: row[1] for row in rows if row[0] is not None}
    if not dates:
        return 0, None, False
    highest = max(dates)
    device.known_max_id = max(device.known_max_id, highest)
    return highest, dates[highest], True
