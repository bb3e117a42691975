"""``starebrain doctor``: check on one phone every assumption the guarantees rest on.

The key first, on this machine (the file, its mode, the fingerprint the phone's prompt
shows); then, over one connection, the phone's own answers (``android_bridge._doctor``: the
shell's uid, the release and build, the phone's identity, the framework's SMS service, the
clock, the default SMS app and whether it can send chat, the screen, Android's outgoing-SMS
limit, reading ``content://sms`` and ``content://mms`` a page at a time, the fence, the key's
expiry; ``android_bridge._doctor_provider``: the SMS types the view shows, SqlQueryChecker,
the subscriptions, the delivery status per writing path; ``android_bridge._isms_codes``:
the framework's transaction codes read from the phone's own DEX), and the path the next send
takes (``predicted_path``: the send's own choice, from the ledger read only). Each check prints its
verdict, the evidence it read, what the product does because of it, and the AOSP source it
is compared with. Sends nothing, writes no ledger, but with ``--send-test NUMBER``: one
real SMS through the ledger, and what the phone proved of it (``cli.doctor_send``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import click

from starebrain_actions.cli.options import (
    DEVICE_ENV,
    SEND_PATH_OPTION,
    Seconds,
    device_option,
    json_option,
    key_option,
    policy_file_option,
    region_option,
    wait_option,
)

if TYPE_CHECKING:
    from android_bridge import Device
    from android_bridge._check import Check
    from android_bridge._fence import FenceLedgers
    from android_bridge._isms_codes import CodesUnproven, IsmsCodes
    from starebrain_actions.cli.db import LedgerTarget

#: ``--json``'s object keys, in order.
_FIELDS: Final = ("name", "title", "verdict", "evidence", "consequence", "source")


def key_check(key_path: Path | None) -> tuple[Check, Path]:
    """The ADB key on this machine: readable by its owner only, an RSA key, and the
    fingerprint a phone's "Allow USB debugging?" prompt shows for it (not created here: a
    missing key is created by ``starebrain key show``, which prints it)."""
    from android_bridge import BridgeError
    from android_bridge._check import checker
    from starebrain_actions.cli.keys import key_path_in_use, public_key_of

    path, _chosen = key_path_in_use(key_path)
    source = (
        "frameworks/base AdbDebuggingManager (the prompt's fingerprint: MD5 of the public"
        " key); system/core adb auth (RSA keys), android-10 to 15"
    )
    check = checker(name="adb-key", title="the ADB key", source=source)
    if not path.exists():
        return (
            check(
                verdict="fail",
                evidence=f"no key at {path}",
                consequence="run `starebrain key show` to create it, then allow it on the phone",
            ),
            path,
        )
    try:
        key = public_key_of(path)
    except BridgeError as exc:
        return (
            check(
                verdict="fail",
                evidence=str(exc),
                consequence="no phone can be reached with it until it is mended",
            ),
            path,
        )
    return (
        check(
            verdict="ok",
            evidence=f"{path} (0600), fingerprint {key.fingerprint}",
            consequence="the phone's prompt shows this fingerprint: compare it before Allow",
        ),
        path,
    )


def connect_check(device: str, error: str | None) -> Check:
    """Whether the phone answered and has authorised the key."""
    from android_bridge._check import checker

    source = "system/core adb (the CNXN/AUTH handshake), android-10 to 15"
    check = checker(
        name="connect", title="the connection and the key's authorisation", source=source
    )
    if error is None:
        return check(
            verdict="ok",
            evidence=f"{device} answered and accepted the key",
            consequence="commands reach the phone",
        )
    unauthorised = "not authorised" in error
    return check(
        verdict="fail",
        evidence=error,
        consequence="tap Allow on the phone (compare the fingerprint above), then run doctor again"
        if unauthorised
        else "nothing can be checked on the phone: see that it is on, reachable and in"
        " ADB over TCP (`adb tcpip 5555` over USB after a reboot)",
    )


#: The ledger doctor compares the phone's fence with: its own id (None: no ledger there yet)
#: and where it is.
OwnLedger = tuple[str | None, str]


async def own_ledger(db: Any, *, exists: bool) -> OwnLedger:
    """The id of the ledger ``--db`` names (read-only; None when there is none yet, or it
    cannot be read), and where it is (a file, or a URL without its password). ``exists``:
    False for a SQLite file that is not there (nothing is created)."""
    from starebrain_actions.cli.context import open_ledger
    from starebrain_actions.core.exceptions import StarebrainError

    if not exists:
        return None, f"{db}, no ledger there yet"
    try:
        async with open_ledger(db, read_only=True, create=False) as ledger:
            return await ledger.ledger_id(), str(ledger.path)
    except StarebrainError as exc:
        return None, f"{db}, unreadable: {exc}"


def ledger_check(found: FenceLedgers, own: OwnLedger) -> Check:
    """Which ledgers the fence on the phone names, against the ledger ``--db`` names: another
    ledger's attempts still open there fail (a send is refused), another ledger that sent
    last warns (a send warns once)."""
    from android_bridge._check import checker

    source = (
        "starebrain's fence on the phone (android_bridge/_fence.py: each send script marks"
        " its claim with its ledger's id) in /data/local/tmp (0771 shell:shell, init.rc,"
        " android-10 to 15)"
    )
    check = checker(name="ledger", title="the ledgers this phone's fence names", source=source)
    ours, where = own
    mine = f"this ledger: {ours or 'none yet'} ({where})"
    foreign: dict[str, list[str]] = {}
    for dispatch_id, ledger_id in sorted(found.attempts.items()):
        if ledger_id != ours:
            foreign.setdefault(ledger_id, []).append(dispatch_id)
    if foreign:
        named = "; ".join(
            f"ledger {ledger_id} has {len(held)} attempt(s) open ({', '.join(held[:3])}"
            + (", …)" if len(held) > 3 else ")")
            for ledger_id, held in foreign.items()
        )
        return check(
            verdict="fail",
            evidence=f"{named}; {mine}",
            consequence="send, resume, worker and nightly --resume refuse this phone (exit 7,"
            " nothing recorded) until that ledger settles them (its resume or reconcile),"
            " unless --share-phone: two ledgers on one phone each see only their own sends",
        )
    if found.last is not None and found.last != ours:
        return check(
            verdict="warn",
            evidence=f"ledger {found.last} sent from this phone last; {mine}",
            consequence="the next send warns once: two ledgers on one phone each see only"
            " their own sends, and may send the same message twice; use one ledger per phone"
            " (--db, $STAREBRAIN_DB)",
        )
    if found.last is None:
        return check(
            verdict="ok",
            evidence=f"no ledger has marked the fence yet; {mine}",
            consequence="the first send marks it with this ledger's id",
        )
    return check(
        verdict="ok",
        evidence=f"this ledger sent last, no other ledger's attempt is open; {mine}",
        consequence="another ledger sending from this phone would be noticed",
    )


#: The AOSP sources behind the send-path prediction (those of the checks it follows).
_PATH_SOURCE: Final = (
    "frameworks/base ISms.aidl (the codes), SubscriptionManagerService dump (dumpsys isub,"
    " from 14), frameworks/opt/telephony SMSDispatcher (the framework's row), android-10 to 15"
)


async def predicted_path(
    handle: Device,
    device: str,
    ledger_target: LedgerTarget | None,
    found: IsmsCodes | CodesUnproven,
    send_path: str,
    screen: Check | None,
) -> Check:
    """The ``send-path`` check: the path the next send to ``device`` takes with
    ``--send-path`` ``send_path``, chosen by the code a send chooses with
    (``phone.android.choose_send_path`` on the same proof, ``phone.send_path.kept_proof``)
    from the ledger's record of the phone (read only: ``ledger_target``, None when there is
    no ledger yet) and the build's codes (the ledger's, else ``found``, this run's reading of
    the jar, which is what the send would read); ``screen``: the screen check, which the
    app's path needs."""
    from android_bridge._check import checker
    from starebrain_actions.ledger.phones import FrameworkAttempts, FrameworkCodes, phone_for
    from starebrain_actions.ledger.postgres import NoLedger
    from starebrain_actions.ledger.store import Ledger
    from starebrain_actions.phone.android import choose_send_path
    from starebrain_actions.phone.send_path import (
        PROOF_WINDOW,
        codes_current,
        codes_of,
        kept_proof,
    )

    facts = await handle.facts()
    key = device
    attempts: dict[str, FrameworkAttempts] = {}
    codes: dict[str, FrameworkCodes] = {}
    now = datetime.now(UTC)
    if ledger_target is not None:
        try:
            async with Ledger.open(ledger_target, read_only=True) as ledger:
                known = phone_for(device, facts.identity, await ledger.phones())
                key = known.key if known is not None else device
                attempts[key] = await ledger.framework_attempts(key, PROOF_WINDOW)
                kept = await ledger.framework_codes(facts.build) if facts.build else None
                now = ledger.now()
                if kept is not None and codes_current(kept, now):
                    codes[facts.build] = kept
        except NoLedger:
            pass  # an empty PostgreSQL schema: no ledger yet, as a missing file on SQLite
    if facts.build and facts.build not in codes:
        codes[facts.build] = codes_of(found, facts.build, facts.sdk, now)
    check = checker(
        name="send-path",
        title="the path the next send takes",
        source=_PATH_SOURCE,
    )
    if send_path == "auto":
        path, why = await choose_send_path(handle, kept_proof(attempts, codes, []), key)
        said = f"--send-path auto takes {path}: {why}"
    else:
        path, said = send_path, f"--send-path {send_path} names it"
    tail = (
        " (a body longer than one SMS goes through the messaging app)"
        if send_path == "auto" and path == "framework"
        else ""
    )
    if path == "framework":
        return check(
            verdict="ok",
            evidence=said,
            consequence="the next send goes through the framework (service call isms): no"
            f" screen, no app, no chat{tail}",
        )
    if screen is not None and screen.verdict != "ok":
        return check(
            verdict="warn",
            evidence=said,
            consequence="the next send goes through the messaging app, which needs the screen"
            " awake and unlocked (check screen fails): as it is, the send waits, then exits 7"
            " with nothing sent",
        )
    return check(
        verdict="ok",
        evidence=said,
        consequence="the next send goes through the messaging app: keep the screen awake and"
        " unlocked, or the send exits 7 with nothing sent",
    )


async def examine(
    device: str,
    *,
    key_path: Path,
    timeout_s: float,
    read_as_system: bool,
    own: OwnLedger | None = None,
    ledger_target: LedgerTarget | None = None,
    send_path: str = "auto",
) -> list[Check]:
    """The connection's check, then the phone's own, (``own``: the ledger doctor was given)
    which ledgers the phone's fence names, then the path the next send takes
    (``predicted_path``)."""
    from android_bridge import BridgeError, Device
    from android_bridge._doctor import examine as examine_phone
    from android_bridge._fence import read_ledgers
    from android_bridge._isms_codes import (
        FRAMEWORK_JAR,
        CodesUnproven,
        framework_codes_check,
        read_isms_codes,
    )

    try:
        async with asyncio.timeout(timeout_s * 4):
            handle = await Device.connect(
                device,
                key_path=key_path,
                connect_timeout_s=timeout_s,
                command_timeout_s=timeout_s,
                read_as_system=read_as_system,
            )
            async with handle:
                found = [connect_check(device, None), *await examine_phone(handle)]
                try:
                    codes: IsmsCodes | CodesUnproven = await read_isms_codes(handle)
                except BridgeError as exc:
                    codes = CodesUnproven(
                        reason=f"{FRAMEWORK_JAR} could not be pulled ({exc}); a slow link"
                        " needs a longer --timeout"
                    )
                found.append(framework_codes_check(codes, (await handle.facts()).sdk))
                if own is not None:
                    found.append(ledger_check(await read_ledgers(handle), own))
                screen = next((check for check in found if check.name == "screen"), None)
                found.append(
                    await predicted_path(handle, device, ledger_target, codes, send_path, screen)
                )
                return found
    except TimeoutError:
        return [connect_check(device, f"no answer within {timeout_s * 4:g} s")]
    except (BridgeError, OSError) as exc:
        return [connect_check(device, str(exc) or type(exc).__name__)]


async def _examine_with_ledger(
    device: str,
    db: Any,
    *,
    key_path: Path,
    timeout_s: float,
    read_as_system: bool,
    ledger_target: LedgerTarget | None = None,
    send_path: str = "auto",
) -> list[Check]:
    """``examine``, with the ledger ``--db`` names to compare the phone's fence with and
    (``ledger_target``, None: no ledger yet) to predict the next send's path from."""
    from starebrain_actions.cli.db import is_url

    exists = is_url(db) or await asyncio.to_thread(Path(db).exists)
    return await examine(
        device,
        key_path=key_path,
        timeout_s=timeout_s,
        read_as_system=read_as_system,
        own=await own_ledger(db, exists=exists),
        ledger_target=ledger_target,
        send_path=send_path,
    )


def report_data(device: str, checks: Sequence[Check]) -> dict[str, Any]:
    """``--json``'s report: the phone, the worst verdict and each check."""
    from android_bridge._doctor import worst

    return {
        "device": device,
        "verdict": worst(checks),
        "checks": [{field: getattr(check, field) for field in _FIELDS} for check in checks],
    }


def render(checks: Sequence[Check]) -> None:
    """The table: one row per check."""
    from starebrain_actions.render import output as _render

    _render.Output().table(
        ["check", "verdict", "evidence", "what follows", "source"],
        [
            [check.name, check.verdict.upper(), check.evidence, check.consequence, check.source]
            for check in checks
        ],
    )


@click.command("doctor")
@device_option(
    "device",
    help=f"The phone to check, as HOST:PORT or usb:SERIAL. [default: ${DEVICE_ENV}]",
)
@key_option
@click.option(
    "--timeout",
    "timeout_s",
    type=Seconds(0.1, 120),
    default=10.0,
    show_default=True,
    help="Seconds for each step (the handshake, each round trip), four times that in all.",
)
@click.option(
    "--send-test",
    "send_test",
    metavar="NUMBER",
    default=None,
    help="After the checks, and only when none fails: send one real SMS to NUMBER (the text"
    " 'starebrain doctor send test <UTC time>') through the ledger, as `starebrain send`"
    " does, under a new action id doctor-<device>-<time>-<hex> with one attempt, and report"
    " what the phone proved (check send-test): the row, its creator, its status column.",
)
@wait_option(
    help="With --send-test: seconds for the phone to prove the send (its row); on the"
    " messaging app's path the send waits them out for the row to settle, as `send` does."
    " A send not proven by then fails the check (the action stays open; it is never sent"
    " again).",
)
@click.option(
    "--report-wait",
    type=Seconds(maximum=3600),
    default=180.0,
    show_default=True,
    help="With --send-test: seconds to keep reading the sent row's status column for a"
    " delivery report (every 3 s; it stops at a report, and at once on the framework path,"
    " which asks for none).",
)
@region_option
@SEND_PATH_OPTION
@policy_file_option
@json_option
@click.pass_context
def doctor_command(
    ctx: click.Context,
    device: str | None,
    key_path: Path | None,
    timeout_s: float,
    send_test: str | None,
    wait: float,
    report_wait: float,
    region: str | None,
    send_path: str,
    policy_path: Path | None,
    as_json: bool,
) -> None:
    """Check on one phone every assumption the guarantees rest on: the key and its expiry,
    the shell's uid, the release, the phone's identity, the clock, the default SMS app and
    chat, the screen, Android's SMS limit, the SMS and MMS providers as the shell sees them
    (types, SqlQueryChecker, subscriptions, delivery status), the fence, the framework's
    transaction codes read from the phone's own code, which ledgers the fence names (another
    ledger's open attempts fail: a send is refused; another that sent last warns); then which
    path the next send takes (check send-path: chosen as `send` chooses it, from the ledger's
    record, read only).

    Each check says its verdict (ok, warn, fail), the evidence it read, what starebrain does
    because of it and the AOSP source it is compared with. Sends nothing and writes no
    ledger (the fence's directory is made if missing, as a send would), unless
    --send-test NUMBER is given: then, when no check failed, it sends one real SMS through
    the ledger and reports what the phone proved of it (check send-test). Exit status: 0
    when no check fails (warnings allowed), 1 when one fails, 2 on a usage error.
    """
    from starebrain_actions.cli.context import CliUsageError, run, settings_of
    from starebrain_actions.cli.db import is_url
    from starebrain_actions.cli.doctor_send import send_test_after, send_test_input
    from starebrain_actions.render import json_output as _render_json

    if device is None:
        raise CliUsageError(f"name the phone: --device HOST:PORT (or usb:SERIAL), or ${DEVICE_ENV}")
    test = send_test_input(
        ctx,
        device,
        send_test,
        region=region,
        send_path=send_path,
        wait=wait,
        report_wait=report_wait,
        policy_path=policy_path,
    )
    key, path = key_check(key_path)
    checks = [key]
    if key.verdict != "fail":
        settings = settings_of(ctx)
        # a URL is always opened (its schema may hold no ledger yet: the ledger says so)
        known = is_url(settings.db) or Path(settings.db).exists()
        checks += run(
            _examine_with_ledger(
                device,
                settings_of(ctx).db,
                key_path=path,
                timeout_s=timeout_s,
                read_as_system=settings.read_as_system,
                ledger_target=settings.db if known else None,
                send_path=send_path,
            )
        )
    if test is not None:
        checks.extend(
            send_test_after(
                checks,
                test,
                device=device,
                key_path=path,
                timeout_s=timeout_s,
                read_as_system=settings_of(ctx).read_as_system,
                show_progress=not as_json,
            )
        )
    if as_json:
        _render_json.emit_json(report_data(device, checks))
    else:
        render(checks)
    ctx.exit(1 if any(check.verdict == "fail" for check in checks) else 0)
