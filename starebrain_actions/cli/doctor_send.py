"""``starebrain doctor --send-test NUMBER``: one real SMS through the normal ledger, and what
the phone proved of it.

The send is ``starebrain send``'s: the same ledger (``--db``), the policy gate of a typed
command, ``connect.agent_within`` and ``SmsAgent.send`` with a hard deadline, so the attempt
is committed before the phone is reached. It goes under an action id of its own, made anew
on each run (:func:`send_test_action_id`), with one attempt allowed: a send test never sends
a second SMS for its action, and a rerun of doctor is a new action and a new SMS.

Then the row the send proved is read again every few seconds for ``--report-wait``
(``android_bridge._sent_row``): its ``type``, its ``creator`` and its ``status`` column,
where a delivery report lands. :func:`send_test_check` turns what was seen into the check
``send-test``: its verdict follows the action's status (and a delivery report, when one
came), never better than what was proven.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final, NoReturn

import attrs
import click
from click.core import ParameterSource

from starebrain_actions.cli.connect import PhoneNotReadyError, agent_within
from starebrain_actions.cli.db import LedgerTarget
from starebrain_actions.cli.options import retry_policy
from starebrain_actions.core.model import ActionRecord, ProviderKind, SmsIntent, Status

if TYPE_CHECKING:
    from android_bridge._doctor import Check, Verdict
    from android_bridge._sent_row import RowState
    from starebrain_actions.core.policy import Policy
    from starebrain_actions.orchestration.agent import SmsAgent
    from starebrain_actions.orchestration.outcome import SendOutcome
    from starebrain_actions.phone.send_path import FrameworkStanding

#: The check's name, in the table and in ``--json``.
NAME: Final = "send-test"
TITLE: Final = "one real send, proven on the phone"
#: Seconds between two reads of the row while waiting for a delivery report.
POLL_S: Final = 3.0
#: The package the framework names as the row's ``creator`` on the framework path.
SHELL_PACKAGE: Final = "com.android.shell"
SOURCE: Final = (
    "Telephony.TextBasedSmsColumns status (-1 none, 0 complete, 32 pending, 64 failed: the"
    " TP-Status), type and creator, frameworks/base Telephony.java android-12.1.0_r4 (SDK"
    " constants, the same on 10 to 15); who writes status (SMSDispatcher,"
    " SmsDispatchersController) read in frameworks/opt/telephony at android-10.0.0_r46 to"
    " 14.0.0_r50 and lineage-22.0 (15); type 2 confirms a send (the ledger's rule)"
)
#: A send test's retry policy: one attempt (a send test never sends a second SMS for its
#: action), ``send``'s defaults otherwise.
_ONE_ATTEMPT: Final = retry_policy(
    max_attempts=1, grace=60.0, unverified_after=600.0, backoff=1.0, max_backoff=60.0
)
#: Seconds one command of the send may take at least (``send``'s ``--command-timeout``).
_COMMAND_TIMEOUT_S: Final = 20.0
_TYPES: Final = {1: "inbox", 2: "sent", 3: "draft", 4: "outbox", 5: "failed", 6: "queued"}
_REPORTS: Final = {
    "none": "none",
    "pending": "pending",
    "delivered": "complete: delivered",
    "failed": "failed",
}


def send_test_action_id(device: str, now: datetime) -> str:
    """A new action id for one send test: ``doctor-<device>-<UTC time>-<8 hex>``, never the
    same twice (the random part tells apart two runs in one second)."""
    # an action id is at most 200 characters: a long host name is cut
    return f"doctor-{device[:120]}-{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(4)}"


def send_test_body(now: datetime) -> str:
    """The test's text: fixed, recognisable on the recipient's phone, with the time (one
    GSM-7 segment, so every send path can send it)."""
    return f"starebrain doctor send test {now:%Y-%m-%d %H:%M:%S} UTC"


@attrs.frozen(kw_only=True)
class SendTest:
    """What ``--send-test`` asks for, checked before anything is opened."""

    #: the recipient and the text
    intent: SmsIntent
    #: the new action's id
    action_id: str
    #: the ledger (``--db``)
    db: LedgerTarget
    #: ``--send-path``
    send_path: str
    #: seconds for the send's proof (``--wait``)
    wait: float
    #: seconds to watch the row's ``status`` for a delivery report (``--report-wait``)
    report_wait: float
    #: the policy gate (None: no gate)
    gate: Policy | None = None


@attrs.frozen(kw_only=True)
class SendTestResult:
    """What the send left and what the reads of its row saw."""

    action_id: str
    #: the agent's answer (None: the phone never answered, ``error`` says why)
    outcome: SendOutcome | None = None
    error: str | None = None
    #: each read of the row: seconds since the first read, and the row (None: not seen)
    seen: tuple[tuple[float, RowState | None], ...] = ()
    #: why the reads of the row stopped early, if a read failed
    read_error: str | None = None
    #: after a send through the framework, where the framework path stands on the phone's
    #: build for ``--send-path auto`` (None: the send took the app's path, or none was made)
    framework: FrameworkStanding | None = None


#: ``doctor``'s options that mean something only with ``--send-test``.
_SEND_TEST_OPTIONS: Final = ("wait", "report_wait", "region", "send_path", "policy_path")


def send_test_input(
    ctx: click.Context,
    device: str,
    number: str | None,
    *,
    region: str | None,
    send_path: str,
    wait: float,
    report_wait: float,
    policy_path: Path | None,
) -> SendTest | None:
    """``--send-test``'s input, checked before anything is opened (None: no send test).

    Raises:
        CliUsageError: an option of the send test without ``--send-test``, a number that is
            not one, a policy file that cannot be read.
    """
    from starebrain_actions.cli.body import check_body
    from starebrain_actions.cli.context import CliUsageError, ledger_path, settings_of
    from starebrain_actions.cli.options import typed_command_gate
    from starebrain_actions.core.exceptions import InvalidInput

    if number is None:
        given = [
            name
            for name in _SEND_TEST_OPTIONS
            if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)
        ]
        if given:
            named = ", ".join("--" + name.replace("_path", "").replace("_", "-") for name in given)
            raise CliUsageError(f"{named}: only with --send-test NUMBER")
        return None
    now = datetime.now(UTC)
    try:
        intent = SmsIntent(recipient=number, body=send_test_body(now), region=region)
    except InvalidInput as exc:
        raise CliUsageError(f"bad input: {exc}") from exc
    check_body(intent.recipient, intent.body, send_path)
    return SendTest(
        intent=intent,
        action_id=send_test_action_id(device, now),
        db=ledger_path(settings_of(ctx), create=True),
        send_path=send_path,
        wait=wait,
        report_wait=report_wait,
        gate=typed_command_gate(policy_path),
    )


#: A launch slower than this (``am start -W``'s ``TotalTime``) is a warning: the send waits
#: for the compose window's focus before its keys, and a phone this slow may run out of it.
SLOW_LAUNCH_MS: Final = 5000
LAUNCH_SOURCE: Final = (
    "frameworks/base ActivityManagerShellCommand (am start -W: Status, LaunchState from 12,"
    " Activity, TotalTime, WaitTime), android-10.0.0_r30 to 15.0.0_r1"
)


def launch_check(result: SendTestResult) -> Check | None:
    """The ``launch`` check: how ``am start -W`` launched the messaging app for the send
    test (the app's launch path, which only a send through the app shows); None when the
    send never reached the phone."""
    from android_bridge._check import checker

    outcome = result.outcome
    record = outcome.record if outcome is not None else None
    if record is None:
        return None
    check = checker(name="launch", title="the messaging app's launch", source=LAUNCH_SOURCE)
    evidence = record.evidence
    if evidence.get("send_path") == "framework":
        return check(
            verdict="ok",
            evidence="no app was launched: the send took the framework path",
            consequence="the app's launch is checked by a send through it: doctor --send-test"
            " NUMBER --send-path ui",
        )
    launch = evidence.get("launch")
    if not isinstance(launch, dict) or not launch:
        return check(
            verdict="warn",
            evidence="am start -W printed no launch of an app (see send-test for why)",
            consequence="a send through the app stops before its keys when am start does not"
            " report a clean launch of the default SMS app",
        )
    shown = ", ".join(f"{name} {value}" for name, value in launch.items())
    total = launch.get("TotalTime")
    slow = isinstance(total, str) and total.isdigit() and int(total) > SLOW_LAUNCH_MS
    return check(
        verdict="warn" if slow else "ok",
        evidence=f"am start -W: {shown}",
        consequence=f"the app took over {SLOW_LAUNCH_MS} ms to show its compose window: a"
        " send may time out waiting for its focus; keep the app in memory (open it once)"
        if slow
        else "SENDTO smsto: opens the default SMS app's compose window, as a send expects",
    )


def send_test_after(
    checks: Sequence[Check],
    test: SendTest,
    *,
    device: str,
    key_path: Path,
    timeout_s: float,
    read_as_system: bool,
    show_progress: bool,
) -> list[Check]:
    """The ``send-test`` check: the send and what it proved, or, when a check before it
    failed, nothing sent and why; then, when the send reached the phone, the ``launch``
    check (:func:`launch_check`)."""
    from android_bridge._check import Check
    from starebrain_actions.cli.context import run

    failed = [check.name for check in checks if check.verdict == "fail"]
    if failed:
        return [
            Check(
                name=NAME,
                title=TITLE,
                verdict="fail",
                evidence=f"nothing sent, no action recorded: {', '.join(failed)} failed",
                source=SOURCE,
                consequence="a send would not work, or its proof would not hold: mend what the"
                " failed checks say, then run doctor --send-test again",
            )
        ]
    agents: list[SmsAgent] = []
    try:
        result = run(
            run_send_test(
                test,
                device,
                key_path=key_path,
                timeout_s=timeout_s,
                read_as_system=read_as_system,
                show_progress=show_progress,
                agents=agents,
            )
        )
    except KeyboardInterrupt:
        tell_interrupted(test.action_id, dispatched=bool(agents) and agents[0].dispatches > 0)
    launch = launch_check(result)
    return [send_test_check(result), *([launch] if launch is not None else [])]


def tell_interrupted(action_id: str, *, dispatched: bool) -> NoReturn:
    """Ctrl-C during the send test: say what is true (a rerun of doctor is a new SMS, not a
    resume), then exit 130."""
    from starebrain_actions.cli.context import EXIT_INTERRUPTED

    if dispatched:
        said = (
            f"This run handed the SMS to the phone: it may be out. Action {action_id} records"
            f" it; `starebrain status {action_id}` follows it (a read settles it)."
        )
    else:
        said = f"This run sent nothing to the phone (action {action_id}, if recorded, says so)."
    click.echo(
        f"starebrain doctor: interrupted during the send test. {said} Running doctor"
        " --send-test again sends a new SMS under a new id.",
        err=True,
    )
    raise SystemExit(EXIT_INTERRUPTED) from None


async def run_send_test(
    test: SendTest,
    device: str,
    *,
    key_path: Path,
    timeout_s: float,
    read_as_system: bool,
    show_progress: bool = False,
    agents: list[SmsAgent] | None = None,
) -> SendTestResult:
    """Send as ``starebrain send`` does, within ``test.wait`` in all (a progress line on
    stderr when ``show_progress``), then watch the row the send proved, when it proved one
    in ``content://sms``. The agent, once connected, is appended to ``agents`` (for what
    Ctrl-C says)."""
    from starebrain_actions.cli.progress import Progress

    progress = Progress(enabled=show_progress)
    started = time.monotonic()

    def left() -> float:
        return max(0.1, test.wait - (time.monotonic() - started))

    try:
        async with (
            progress.shown(),
            agent_within(
                device,
                left,
                progress,
                db=test.db,
                policy=_ONE_ATTEMPT,
                key_path=key_path,
                region=test.intent.region,
                read_as_system=read_as_system,
                send_path=test.send_path,
                connect_timeout=timeout_s,
                command_timeout=max(timeout_s, _COMMAND_TIMEOUT_S),
                gate=test.gate,
            ) as agent,
        ):
            if agents is not None:
                agents.append(agent)
            outcome = await agent.send(
                test.action_id,
                test.intent.recipient,
                test.intent.body,
                wait=left(),
                on_step=progress.step,
                hard_deadline=True,
            )
            standing = await framework_after(agent, outcome.record)
    except PhoneNotReadyError as exc:
        return SendTestResult(action_id=test.action_id, error=exc.message)
    record = outcome.record
    if record is None or record.provider_object_id is None:
        return SendTestResult(action_id=test.action_id, outcome=outcome, framework=standing)
    if record.provider_kind is not ProviderKind.SMS:
        return SendTestResult(action_id=test.action_id, outcome=outcome, framework=standing)
    seen, read_error = await watch_row(
        device,
        record,
        key_path=key_path,
        timeout_s=timeout_s,
        read_as_system=read_as_system,
        report_wait=test.report_wait,
    )
    return SendTestResult(
        action_id=test.action_id,
        outcome=outcome,
        seen=seen,
        read_error=read_error,
        framework=standing,
    )


async def framework_after(agent: SmsAgent, record: ActionRecord | None) -> FrameworkStanding | None:
    """Where the framework path stands on the phone's build once ``record``, the send test's
    attempt, went through the framework (its row came back, or not): what ``--send-path
    auto`` reads (``phone.send_path``), from the ledger's record alone; None for a send
    through the app."""
    from starebrain_actions.core.decisions import on_framework_path
    from starebrain_actions.phone.send_path import PROOF_WINDOW, standing_in

    if record is None or not on_framework_path(record):
        return None
    build = record.evidence.get("build")
    attempts = await agent.ledger.framework_attempts(record.device, PROOF_WINDOW)
    return standing_in(attempts, build if isinstance(build, str) else "")


def framework_words(result: SendTestResult) -> str:
    """What the send test's framework send did to ``--send-path auto``'s choice on the
    phone: proven (again, after a doubt), or still doubted; "" for a send through the app."""
    from starebrain_actions.render.values import when

    standing = result.framework
    outcome = result.outcome
    record = outcome.record if outcome is not None else None
    if standing is None or record is None:
        return ""
    mine = standing.decided_by is not None and standing.decided_by.dispatch_id == (
        record.dispatch_id
    )
    if standing.state == "restored" and mine and standing.doubt is not None:
        return (
            " This send proves the framework path again on this phone's build, doubted since"
            f" {when(standing.doubt_at)} by action {standing.doubt.action_id}: `--send-path"
            " auto` takes it again (`starebrain devices` shows it)."
        )
    if standing.state == "proven" and mine:
        return (
            " This send proves the framework path on this phone's build: `--send-path auto`"
            " takes it (`starebrain devices` shows it)."
        )
    if standing.state == "doubted":
        return (
            " The framework path stays doubted on this phone's build (`--send-path auto` sends"
            f" through the app): {standing.why}."
        )
    return ""


async def watch_row(
    device: str,
    record: ActionRecord,
    *,
    key_path: Path,
    timeout_s: float,
    read_as_system: bool,
    report_wait: float,
    poll_s: float = POLL_S,
) -> tuple[tuple[tuple[float, RowState | None], ...], str | None]:
    """Read the attempt's row every ``poll_s`` seconds for ``report_wait`` seconds, over a
    connection of its own: each read (seconds since the first, the row), and the error that
    ended the reads early (None: none). Stops once the row shows a final delivery report,
    once it is out of sight, and after one read on the framework path, which asks for no
    report (``_framework``: the delivery intent is null, so ``status`` stays -1)."""
    from android_bridge import BridgeError, Device
    from android_bridge._sent_row import delivery_report, read_row
    from starebrain_actions.core.decisions import on_framework_path

    row_id = record.provider_object_id
    assert row_id is not None
    seen: list[tuple[float, RowState | None]] = []
    started = time.monotonic()
    try:
        handle = await Device.connect(
            device,
            key_path=key_path,
            connect_timeout_s=timeout_s,
            command_timeout_s=timeout_s,
            read_as_system=read_as_system,
        )
        async with handle:
            while True:
                row = await read_row(handle, row_id)
                elapsed = time.monotonic() - started
                seen.append((elapsed, row))
                final = row is None or delivery_report(row.status) in ("delivered", "failed")
                if final or on_framework_path(record) or elapsed + poll_s > report_wait:
                    return tuple(seen), None
                await asyncio.sleep(poll_s)
    except (BridgeError, OSError, TimeoutError) as exc:
        return tuple(seen), str(exc) or type(exc).__name__


def send_test_check(result: SendTestResult) -> Check:
    """The ``send-test`` check from what the send and the reads of its row found."""
    from android_bridge._check import checker

    outcome = result.outcome
    stopped = _stopped(result)
    check = checker(name=NAME, title=TITLE, source=SOURCE)
    if stopped is not None or outcome is None:
        return check(
            verdict="fail",
            evidence=f"action {result.action_id}: {stopped or 'nothing sent'}",
            consequence="nothing was proven: mend what it says, then run doctor --send-test"
            " again (a new action and a new SMS)",
        )
    status = outcome.status
    verdict, said = _status_verdict(outcome)
    row, report = _row_words(result)
    reports = {_report_of(seen) for _, seen in result.seen if seen is not None}
    if "failed" in reports:
        # sent, but the network says it never reached the recipient
        verdict = _at_least("warn", verdict)
        said = f"The network reported it undelivered: check the number. {said}"
    elif "delivered" in reports and status is Status.VERIFYING:
        # the recipient's network confirmed it: stronger than a row waiting to settle
        verdict = "ok"
    evidence = f"action {result.action_id}: {status.value}; {row}"
    if result.seen:
        evidence += f"; status {report}"
    if result.read_error is not None:
        evidence += f"; reads of the row stopped: {result.read_error}"
    return check(
        verdict=verdict,
        evidence=evidence,
        consequence=f"{said} {delivery_conclusion(result)}{framework_words(result)} A rerun"
        " of doctor --send-test sends a new SMS under a new id; this action is never sent"
        " again.",
    )


def _stopped(result: SendTestResult) -> str | None:
    """Why nothing was sent, when nothing was: the phone, the gate, another action's hold."""
    if result.error is not None:
        return result.error
    outcome = result.outcome
    if outcome is None:
        return None
    if outcome.gate is not None:
        from starebrain_actions.cli.send import gate_text

        return gate_text(outcome.gate)
    if outcome.not_ready is not None:
        return f"the phone is not ready, nothing was sent: {outcome.not_ready}"
    if outcome.held_by is not None and outcome.record is None:
        hold = outcome.held_by
        return (
            f"nothing was sent: attempt {hold.dispatch_id} of action {hold.action_id} holds"
            " the phone (see `starebrain review`)"
        )
    return None


def _status_verdict(outcome: SendOutcome) -> tuple[Verdict, str]:
    """The verdict the action's status allows, and what it means."""
    from starebrain_actions.core.decisions import settling_until
    from starebrain_actions.render.values import when

    status = outcome.status
    record = outcome.record
    if status is Status.SUCCEEDED:
        return "ok", "The send is proven: the phone's row matches the intent and has settled."
    if status is Status.VERIFYING:
        until = settling_until(record) if record is not None else None
        return "warn", (
            "The row is there and matches, but it has not settled: the app may still mark it"
            f" failed until {when(until)}; `starebrain status {outcome.summary.action.action_id}`"
            " follows it."
        )
    if status is Status.FAILED:
        return "fail", "The send failed: the phone shows it failed, or it never left."
    if status is Status.MISMATCH:
        return "fail", (
            "Something else went out: the row does not match the intent (the app altered the"
            " text or the number); see `starebrain review`."
        )
    return "fail", (
        f"Not proven within --wait ({status.value}): no row of it was found, and until one is,"
        " sends through this phone are not proven (sent as chat, which never reaches the SMS"
        " provider; a slow or stuck app; a --wait too short); the action stays open and is"
        f" never sent again; `starebrain status {outcome.summary.action.action_id}` follows"
        " it."
    )


def _at_least(floor: Verdict, verdict: Verdict) -> Verdict:
    """``verdict``, or ``floor`` when that is worse."""
    order: dict[Verdict, int] = {"ok": 0, "warn": 1, "fail": 2}
    return floor if order[verdict] < order[floor] else verdict


def _report_of(row: RowState) -> str:
    from android_bridge._sent_row import delivery_report

    return delivery_report(row.status)


def delivery_wording(status: int | None) -> str:
    """A ``status`` value and what it says, e.g. ``32 (pending)``."""
    from android_bridge._sent_row import delivery_report

    shown = "NULL" if status is None else str(status)
    return f"{shown} ({_REPORTS[delivery_report(status)]})"


def _row_words(result: SendTestResult) -> tuple[str, str]:
    """The row (``_id``, ``type``, ``creator``) as the reads saw it (else as the send's read
    recorded it), and the ``status`` values over the wait, each change with its time."""
    outcome = result.outcome
    record = outcome.record if outcome is not None else None
    evidence = record.evidence if record is not None else {}
    rows = [row for _, row in result.seen if row is not None]
    row_id = record.provider_object_id if record is not None else None
    row_type = rows[0].type if rows else evidence.get("provider_type")
    creator = rows[0].creator if rows else evidence.get("row_creator")
    type_name = _TYPES.get(row_type, "?") if isinstance(row_type, int) else "?"
    kind = record.provider_kind.value if record is not None and record.provider_kind else "sms"
    row = (
        f"row {kind} _id {row_id}, type {row_type} ({type_name}), creator {creator or 'NULL'}"
        if row_id is not None
        else "no row"
    )
    changes: list[str] = []
    last: object = object()
    for elapsed, seen in result.seen:
        value = seen.status if seen is not None else "gone"
        if value != last:
            shown = delivery_wording(seen.status) if seen is not None else "out of sight"
            changes.append(f"{shown} at {elapsed:.0f} s")
            last = value
    span = result.seen[-1][0] if result.seen else 0.0
    return row, " → ".join(changes) + f" ({len(result.seen)} reads over {span:.0f} s)"


def delivery_conclusion(result: SendTestResult) -> str:
    """What the product concludes of this phone's delivery evidence."""
    rows = [row for _, row in result.seen if row is not None]
    record = result.outcome.record if result.outcome is not None else None
    if record is not None and record.provider_kind is ProviderKind.MMS:
        return (
            "The app sent the text as MMS (content://mms): the SMS status column does not"
            " apply, and the product proves such sends by the MMS row only."
        )
    if not result.seen:
        return "No row was read, so no delivery evidence either."
    if not rows:
        return (
            "The row went out of sight (the shell's view shows types 1 and 2 only: it may now"
            " be failed or queued)."
        )
    reports = {_report_of(row) for row in rows}
    framework = rows[0].creator == SHELL_PACKAGE
    if "delivered" in reports:
        return "This phone writes delivery reports to the row's status: the recipient got it."
    if "failed" in reports:
        return "This phone writes delivery reports to the row's status."
    if "pending" in reports:
        return (
            "A delivery report was asked for (status 32) and none came within --report-wait:"
            " the product proves sends by the row only."
        )
    if framework:
        return (
            "No delivery evidence: the framework path asks for no delivery report (status"
            " stays -1); the product proves sends by the row only."
        )
    return (
        "No delivery evidence: the app wrote no status (its delivery reports are off, or it"
        " keeps them to itself); the product proves sends by the row only."
    )
