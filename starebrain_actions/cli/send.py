"""``starebrain send``: one SMS through a phone, at most once per action id.

The ledger alone answers a changed intent (exit 2) and a rerun of a settled action; only
then is the phone reached (``connect.agent_within``) and the agent's ``send`` run within
``--wait``. The exit status says what the phone proves (``send_exit_code``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import attrs
import click

from starebrain_actions.cli.connect import agent_within
from starebrain_actions.cli.context import (
    EXIT_EXPIRED,
    EXIT_FAILED,
    EXIT_HELD,
    EXIT_INTERRUPTED,
    EXIT_MISMATCH,
    EXIT_NOT_READY,
    EXIT_REFUSED,
    EXIT_SETTLING,
    EXIT_SUCCEEDED,
    EXIT_UNRESOLVED,
    CliUsageError,
    ledger_path,
    open_ledger,
    run,
    settings_of,
)
from starebrain_actions.cli.db import LedgerTarget
from starebrain_actions.cli.options import (
    DEVICE_ENV,
    derived_id_window_option,
    device_option,
    json_option,
    key_option,
    missing_device,
    phone_options,
    policy_file_option,
    policy_options,
    region_option,
    retry_policy,
    share_phone_option,
    show_private_option,
    typed_command_gate,
    wait_option,
)
from starebrain_actions.core.convert import age
from starebrain_actions.core.decisions import (
    failed_after_sent,
    settling_until,
    should_redispatch,
    spends_budget,
)
from starebrain_actions.core.derived_ids import (
    DERIVED_ID_WINDOW,
    choose_derived_generation,
    derive_action_id,
    derived_generation_id,
    earlier_message,
    settled,
)
from starebrain_actions.core.exceptions import FingerprintConflict, InvalidInput, NotFound
from starebrain_actions.core.model import (
    ActionSummary,
    IntentTimes,
    RetryPolicy,
    SmsIntent,
    Status,
    check_action_id,
    intent_conflict,
    intent_times,
    read_time_spec,
)
from starebrain_actions.render import json_output as _render_json
from starebrain_actions.render import output as _render
from starebrain_actions.render import records as _render_records
from starebrain_actions.render import values as _render_values

if TYPE_CHECKING:
    from starebrain_actions.cli.progress import Progress
    from starebrain_actions.ledger.queue import Queued
    from starebrain_actions.ledger.store import Ledger
    from starebrain_actions.orchestration.agent import SmsAgent
    from starebrain_actions.orchestration.outcome import SendOutcome


async def choose_derived_id(ledger: Ledger, intent: SmsIntent, *, window: timedelta) -> str:
    """The action id a send of ``intent`` that names none uses, so that a rerun resumes the
    same action and the same text sent on another day is a new one: the newest generation
    of its derived id holding this intent that may still be resumed (never while its outcome
    is unsettled; ``window`` after its latest attempt once it is), else the next generation
    (``derived_ids.choose_derived_generation``, over ``Ledger.derived_generations``)."""
    base = derive_action_id(intent)
    now = ledger.now()
    generations = await ledger.derived_generations(base, now=now)
    chosen = choose_derived_generation(generations, intent.message_fingerprint, now, window)
    return derived_generation_id(base, chosen)


def gate_exit_code(decision: Any) -> int:
    """8 when the policy gate holds the action (approval, quiet hours), 9 when it refused it
    (a recipient rule, a denial, a limit)."""
    return EXIT_HELD if decision.verdict.value in ("HOLD", "WAIT") else EXIT_REFUSED


def gate_text(decision: Any) -> str:
    """What the policy gate decided, and what follows, in a sentence."""
    verdict = decision.verdict.value
    if decision.rule == "opted_out":
        return (
            "refused: the recipient opted out; nothing was sent, and nothing is sent to it on"
            f" any path until it opts back in (rule opted_out: {decision.detail})"
        )
    what = {
        "DENY": "the policy gate denied it: nothing is ever sent for this action, by any"
        " path (a DENY is final; to send the text after all, send it as a new action)",
        "HOLD": "the policy gate holds it for a person's approval (`starebrain approve ID`);"
        " nothing was sent",
        "WAIT": "the policy gate holds it in quiet hours; nothing was sent (rerun, or"
        " `starebrain resume`, after they end)",
        "OVER_LIMIT": "the policy gate refused it over a limit; nothing was sent (try later)",
    }[verdict]
    return f"{what} (rule {decision.rule}: {decision.detail}; policy {decision.digest})"


def send_exit_code(summary: ActionSummary) -> int:
    """0 SUCCEEDED, 9 DENIED (never sent), 10 EXPIRED (its deadline passed, never sent), 6
    sent by the phone but not yet settled, 5 MISMATCH, 4 FAILED with no attempt left (or a
    send the phone showed and then marked failed), 7 the latest attempt found the phone not
    ready or unreachable (nothing sent, attempts left: the action reads PLANNED, waiting for
    the phone), 3 anything still open."""
    status = summary.status
    latest = summary.latest
    if status is Status.SUCCEEDED:
        return EXIT_SUCCEEDED
    if status is Status.DENIED:
        return EXIT_REFUSED
    if status is Status.EXPIRED:
        return EXIT_EXPIRED
    if (
        status in (Status.FAILED, Status.PLANNED)
        and latest is not None
        and not spends_budget(latest)
    ):
        decision = should_redispatch(summary.action, summary.attempts, datetime.now(UTC))
        if decision.redispatch or decision.waits:
            return EXIT_NOT_READY
    if status is Status.VERIFYING and latest is not None and settling_until(latest) is not None:
        return EXIT_SETTLING
    if status is Status.MISMATCH and not (latest is not None and failed_after_sent(latest)):
        return EXIT_MISMATCH
    if status in (Status.FAILED, Status.MISMATCH):
        decision = should_redispatch(summary.action, summary.attempts, datetime.now(UTC))
        if decision.redispatch or decision.waits:
            return EXIT_UNRESOLVED
        return EXIT_FAILED
    return EXIT_UNRESOLVED


@click.command("send")
@device_option(
    "device",
    help="The phone to send through, as HOST:PORT (ADB over TCP) or usb:SERIAL (needs the"
    f" [usb] extra). Also read from ${DEVICE_ENV}. Required unless --queue.",
)
@click.option(
    "--queue",
    "queue",
    is_flag=True,
    help="Record the message for a worker of the pool to send (`starebrain worker`) and"
    " return at once: no phone is reached. The policy gate judges it now, and the worker's"
    " gate again before it sends.",
)
@click.option(
    "--pool",
    default=None,
    metavar="NAME",
    help="With --queue: the pool of phones whose workers send it. [default: default]",
)
@click.option("--to", "to", required=True, help="Recipient phone number (E.164 preferred).")
@click.option("--body", default=None, help="The message text, exactly as it should arrive.")
@click.option(
    "--body-file",
    type=click.Path(dir_okay=False, allow_dash=True),
    default=None,
    help="Read the message text from this UTF-8 file (- for stdin) instead of --body; one"
    " final line ending is dropped.",
)
@click.option(
    "--action-id",
    default=None,
    help="Stable id of this message; a rerun with the same id never sends twice, however"
    " late. [default: derived from the intent, sms-<16 hex of its fingerprint>, then -2, -3…"
    " for the same text again past --derived-id-window]",
)
@derived_id_window_option(
    help="Without --action-id: seconds after its latest attempt during which a settled"
    " action answers a rerun of the same text to the same number (nothing is sent); past"
    " them the same text is a new action (sms-…-2, -3…). An action whose outcome is not"
    " settled is resumed however old.",
)
@wait_option(
    help="Seconds to wait for proof of the outcome before exiting 3 (unresolved), and for a"
    " phone that does not answer or is not ready before exiting 7.",
)
@click.option(
    "--wait-settled",
    "wait_settled",
    is_flag=True,
    help="Read a row the phone shows sent until it settles (or --wait ends), resending on"
    " proof of an early failure. Without it, a row that cannot settle within --wait"
    " (the messaging app's, 30 minutes) is answered at once: exit 6, VERIFYING, its"
    " settles_at.",
)
@click.option(
    "--not-after",
    "not_after",
    default=None,
    metavar="WHEN",
    help="The message's deadline: no attempt starts at or after it, on any path (this send,"
    " a rerun, resume, nightly, a worker, MCP, a retry ruling); once it passes with nothing"
    " sent the action is EXPIRED (exit 10) and never sent. An ISO 8601 time with its zone"
    " (2026-12-08T09:00:00+01:00, …Z) or a duration from the action's creation (90s, 10m,"
    " 2h, 1d: a rerun names the same deadline). Part of the intent: a rerun with another"
    " one is a changed intent (exit 2).",
)
@click.option(
    "--not-before",
    "not_before",
    default=None,
    metavar="WHEN",
    help="The message's schedule: no attempt starts before it (as --not-after: a time or a"
    " duration, part of the intent). With --queue no worker claims it before then; without,"
    " the send waits for it within --wait, else exits 3 and a rerun or `resume` sends it"
    " then. Quiet hours still apply: the later wins.",
)
@policy_options
@phone_options
@share_phone_option
@region_option
@key_option
@policy_file_option
@json_option
@show_private_option()
@click.pass_context
def send(
    ctx: click.Context,
    device: str | None,
    queue: bool,
    pool: str | None,
    to: str,
    body: str | None,
    body_file: str | None,
    action_id: str | None,
    derived_id_window: float,
    wait: float,
    wait_settled: bool,
    not_after: str | None,
    not_before: str | None,
    max_attempts: int,
    grace: float,
    unverified_after: float,
    settle_after: float,
    framework_settle_after: float,
    app_send_timeout: float,
    backoff: float,
    max_backoff: float,
    rate_limit: int,
    connect_timeout: float,
    command_timeout: float,
    send_path: str,
    share_phone: bool,
    region: str | None,
    key_path: Path | None,
    policy_path: Path | None,
    as_json: bool,
    show_private: bool,
) -> None:
    """Send one SMS through a phone, at most once per action id, and print its record.

    Without --action-id the id is derived from the recipient and text: a rerun resumes the
    same action while its outcome is unsettled, and for --derived-id-window (24 hours) after
    its latest attempt; past that the same text is a new message. A rerun that sends nothing
    says it is the earlier message, and when that was sent.

    Exit status: 0 SUCCEEDED, 6 sent by the phone but not yet settled (the app may still
    mark it failed until --settle-after: rerun the same command to follow it; answered as
    soon as the row is found when it cannot settle within --wait, unless --wait-settled),
    3 still unresolved when --wait ends (rerun the same command to resume), 4 FAILED with no
    attempt left (`starebrain retry` gives it another), 5 MISMATCH (something else went out),
    7 the phone did not answer or was not ready (locked, screen off...) within --wait: nothing
    was sent and no attempt spent, a person must act (the message says what), then rerun; 8
    the policy gate holds it (a person's approval: `starebrain approve ID`, or quiet hours
    until the time it says), 9 the policy gate refused it (a recipient rule or a denial:
    never sent; or a limit: try later); 2 bad input or a changed intent under an existing
    action id, 10 EXPIRED: its --not-after deadline passed with nothing sent (never sent,
    by any path), 1 anything else.

    With --queue (and --pool): the message is recorded for the pool's workers and the command
    returns at once with its id and status; exit 0 when it is queued (or its id is already in
    the ledger: the record says how it stands), 8 or 9 when the policy gate holds or refuses
    it, 2 bad input.
    """
    # Over 80 lines only by its signature (one parameter per option) and its help text (the
    # docstring is --help): the body is three steps, read the input, send, report.
    intent, policy = _send_input(
        to,
        body,
        body_file,
        action_id,
        region,
        send_path,
        retry=lambda: retry_policy(
            max_attempts=max_attempts,
            grace=grace,
            unverified_after=unverified_after,
            settle_after=settle_after,
            framework_settle_after=framework_settle_after,
            app_send_timeout=app_send_timeout,
            backoff=backoff,
            max_backoff=max_backoff,
        ),
    )
    intent, times = _timed(intent, not_after, not_before)
    gate = typed_command_gate(policy_path)
    window = timedelta(seconds=derived_id_window)
    if pool is not None and not queue:
        raise CliUsageError("--pool names the pool of a queued message: give --queue as well")
    if queue:
        if device is not None and ctx.get_parameter_source("device") is not (
            click.core.ParameterSource.ENVIRONMENT
        ):
            raise CliUsageError(
                "--queue records the message for a worker's phone: give no --device"
            )
        queued = _run_queue(
            ledger_path(settings_of(ctx), create=True),
            action_id,
            intent,
            policy,
            pool=pool or "default",
            gate=gate,
            derived_id_window=window,
            times=times,
        )
        ctx.exit(_report_queued(queued, as_json, action_id is None, private=show_private))
    if device is None:
        raise missing_device(ctx)
    sent = _run_send(
        ledger_path(settings_of(ctx), create=True),
        device,
        action_id,
        intent,
        policy,
        wait,
        key_path,
        region,
        read_as_system=settings_of(ctx).read_as_system,
        rate_limit=rate_limit,
        send_path=send_path,
        share_phone=share_phone,
        connect_timeout=connect_timeout,
        command_timeout=command_timeout,
        show_progress=not as_json,
        derived_id_window=window,
        gate=gate,
        wait_settled=wait_settled,
        times=times,
    )
    ctx.exit(_report_sent(sent, as_json, action_id is None, window=window, private=show_private))


def _report_sent(
    sent: SendResult, as_json: bool, derived: bool, *, window: timedelta, private: bool
) -> int:
    """Print what ``send`` found (as JSON, or as text; ``derived``: the action id was derived
    from the intent) and return its exit status: the policy gate's when it stopped the send,
    else what the phone proves."""
    code = send_exit_code(sent.summary)
    stopped = sent.outcome.gate if sent.outcome is not None else None
    if stopped is not None:
        code = gate_exit_code(stopped)
    elif sent.outcome is not None and sent.outcome.refused is not None:
        code = EXIT_REFUSED  # bound to another phone or pool: this command never sends it
    if as_json:
        _render_json.emit_json(sent_data(sent, code=code, derived=derived, show_private=private))
    else:
        _print_sent(sent, derived=derived, window=window, show_private=private)
    return code


def _run_queue(
    path: LedgerTarget,
    action_id: str | None,
    intent: SmsIntent,
    policy: RetryPolicy,
    *,
    pool: str,
    gate: Any,
    derived_id_window: timedelta,
    times: IntentTimes | None = None,
) -> Queued:
    """``send --queue``: record the action for ``pool``'s workers (``Ledger.enqueue``, the
    gate judging it) under ``action_id`` or the intent's derived id; no phone is reached."""

    async def work() -> Queued:
        async with open_ledger(path) as ledger:
            chosen = action_id or await choose_derived_id(ledger, intent, window=derived_id_window)
            return await ledger.enqueue(chosen, intent, policy, pool=pool, gate=gate, times=times)

    try:
        return run(work())
    except FingerprintConflict as exc:
        raise CliUsageError(f"changed intent, nothing queued: {exc}") from exc


def _report_queued(queued: Queued, as_json: bool, derived: bool, *, private: bool) -> int:
    """Print what ``send --queue`` recorded and return its exit status: 0, or the policy
    gate's when it stopped the action."""
    summary = queued.summary
    code = gate_exit_code(queued.gate) if queued.gate is not None else EXIT_SUCCEEDED
    pool = summary.action.pool
    if as_json:
        data = _render_values.summary_data(summary, show_private=private)
        data["exit_code"] = code
        data["action_id_derived"] = derived
        data["queued"] = queued.created and pool is not None
        data["pool"] = pool
        data["gate"] = _render_values.gate_data(queued.gate) if queued.gate else None
        _render_json.emit_json(data)
        return code
    out = _render.Output()
    action_id = summary.action.action_id
    if queued.gate is not None:
        click.echo(f"starebrain send: {gate_text(queued.gate)}", err=True)
    if not queued.created:
        where = f"queued for pool {pool}" if pool is not None else "sent by its own sender"
        out.line(f"action {action_id} is already in the ledger ({where}); nothing was queued now")
    elif queued.gate is None or queued.gate.verdict.value in ("WAIT", "OVER_LIMIT"):
        out.line(
            f"queued action {action_id} for pool {pool}: a worker of the pool sends it"
            f" (`starebrain worker --pool {pool} --device …`); follow it with `starebrain"
            f" status {action_id}`"
        )
    _render_records.render_summary(out, summary, show_private=private)
    return code


def _timed(
    intent: SmsIntent, not_after: str | None, not_before: str | None
) -> tuple[SmsIntent, IntentTimes | None]:
    """``intent`` with ``--not-after`` and ``--not-before`` given as times, and those given as
    durations (counted from the action's creation by the ledger).

    Raises:
        CliUsageError: a time that cannot be read, or a schedule not before the deadline.
    """
    try:
        after, before, times = intent_times(
            read_time_spec(not_after, "--not-after") if not_after is not None else None,
            read_time_spec(not_before, "--not-before") if not_before is not None else None,
        )
        if times is not None and after is None and before is None:
            # both as durations, or one: their order is checked as the ledger will count them
            times.applied(intent, datetime.now(UTC))
        return attrs.evolve(intent, not_after=after, not_before=before), times
    except InvalidInput as exc:
        raise CliUsageError(f"bad input: {exc}") from exc


def _send_input(
    to: str,
    body: str | None,
    body_file: str | None,
    action_id: str | None,
    region: str | None,
    send_path: str,
    *,
    retry: Callable[[], RetryPolicy],
) -> tuple[SmsIntent, RetryPolicy]:
    """``send``'s input checked before anything is opened: the region, the action id, the
    body (``--body`` or ``--body-file``, and what the phone's shell and ``send_path`` can
    take) and the retry policy ``retry()`` makes.

    Raises:
        click.BadParameter: a region that is not two letters.
        CliUsageError: any other bad input.
    """
    if region is not None and not re.fullmatch(r"[A-Za-z]{2}", region):
        raise click.BadParameter(
            f"expected a two-letter country code such as US, got {region!r}", param_hint="--region"
        )
    from starebrain_actions.cli.body import check_body, read_body

    try:
        if action_id is not None:
            check_action_id(action_id)
        intent = SmsIntent(recipient=to, body=read_body(body, body_file), region=region)
        policy = retry()
    except InvalidInput as exc:
        raise CliUsageError(f"bad input: {exc}") from exc
    check_body(intent.recipient, intent.body, send_path)
    return intent, policy


def sent_data(sent: SendResult, *, code: int, derived: bool, show_private: bool) -> dict[str, Any]:
    """``send --json``: the action's record, with the exit status, whether its id was
    derived, whether it is the earlier message, and what stopped the send."""
    summary = sent.summary
    outcome = sent.outcome
    stopped = outcome.gate if outcome is not None else None
    data = _render_values.summary_data(summary, show_private=show_private)
    data["exit_code"] = code
    data["action_id_derived"] = derived
    data["earlier_message"] = earlier_message(sent.before, summary)
    first = _render_values.first_sent_at(summary)
    data["first_sent_at"] = _render_values.when(first) if first is not None else None
    data["gate"] = _render_values.gate_data(stopped) if stopped is not None else None
    data["not_ready"] = outcome.not_ready if outcome is not None else None
    data["refused"] = outcome.refused if outcome is not None else None
    data["held_by"] = (
        _render_values.hold_data(outcome.held_by)
        if outcome is not None and outcome.held_by is not None
        else None
    )
    return data


def _print_sent(sent: SendResult, *, derived: bool, window: timedelta, show_private: bool) -> None:
    """``send`` as text: what stopped it (on stderr), the derived id, the earlier message,
    then the action's record."""
    summary = sent.summary
    out = _render.Output()
    _tell_what_stopped(sent.outcome)
    if derived:
        out.line(
            f"action id {summary.action.action_id} (derived from the intent: a rerun"
            f" resumes it until it is settled, and for {_render_values.duration_text(window)}"
            " after its latest attempt)"
        )
    if earlier_message(sent.before, summary):
        out.line(earlier_message_line(summary, now=datetime.now(UTC)))
    _render_records.render_summary(out, summary, show_private=show_private)


def earlier_message_line(summary: ActionSummary, *, now: datetime) -> str:
    """What ``send`` says when it sent nothing and answers with an action's earlier
    message: which action, when it was first sent, and how to send the same text again
    (a new id, only once the action is settled: while its outcome is open, a new id could
    be a second SMS)."""
    first = _render_values.first_sent_at(summary) or summary.attempts[0].dispatched_at
    verb = "tried" if summary.status is Status.FAILED else "sent"
    said = (
        f"this is the earlier message of action {summary.action.action_id}, first {verb} at"
        f" {_render_values.when(first)} ({age(now - first)} ago); nothing was sent now."
    )
    if settled(summary, datetime.now(UTC)):
        return f"{said} To send the same text again as a new message, pass a new --action-id."
    return (
        f"{said} Its outcome is not settled yet: rerun this command to follow it (it never"
        " sends twice), never with a new --action-id."
    )


def _tell_what_stopped(outcome: SendOutcome | None) -> None:
    """Say on stderr what the policy gate decided, which phone or pool the action is bound
    to when it is not this one, what a person must do when the phone was not ready, or
    which action's attempt held the phone when the wait ended."""
    if outcome is None:
        return
    if outcome.gate is not None:
        click.echo(f"starebrain send: {gate_text(outcome.gate)}", err=True)
    elif outcome.refused is not None:
        click.echo(f"starebrain send: {outcome.refused}", err=True)
    elif outcome.not_ready is not None:
        record = outcome.record
        error = record.evidence.get("error") if record is not None else None
        why = f": {error}" if isinstance(error, str) and error else ""
        click.echo(
            f"starebrain send: the phone is not ready{why}. To do: {outcome.not_ready}."
            " Nothing was sent and no attempt was spent; rerun this command once it is done.",
            err=True,
        )
    elif outcome.held_by is not None:
        hold = outcome.held_by
        click.echo(
            f"starebrain send: nothing was sent: attempt {hold.dispatch_id} of action"
            f" {hold.action_id} still holds the phone (since {_render_values.when(hold.since)}); a"
            f" pass can free it from {_render_values.when(hold.releasable_at())}. Rerun this"
            " command then (it reads the phone for that attempt itself), or see `starebrain"
            " review`.",
            err=True,
        )


def _tell_waiting(message: str) -> None:
    """Say on stderr, at once, what a send waits for."""
    click.echo(f"starebrain send: {message}", err=True)


@attrs.frozen(kw_only=True)
class SendResult:
    """What ``_run_send`` found and left."""

    #: the action when the send returned
    summary: ActionSummary
    #: the action as it stood before the send (None: it did not exist)
    before: ActionSummary | None
    #: what the agent's send returned (None: the ledger alone answered)
    outcome: SendOutcome | None = None


def _run_send(
    path: LedgerTarget,
    device: str,
    action_id: str | None,
    intent: SmsIntent,
    policy: RetryPolicy,
    wait: float,
    key_path: Path | None,
    region: str | None,
    *,
    read_as_system: bool = False,
    rate_limit: int = 30,
    send_path: str = "auto",
    share_phone: bool = False,
    connect_timeout: float = 5.0,
    command_timeout: float = 20.0,
    show_progress: bool = False,
    derived_id_window: timedelta = DERIVED_ID_WINDOW,
    gate: Any = None,
    wait_settled: bool = False,
    times: IntentTimes | None = None,
) -> SendResult:
    """Send within ``wait`` seconds in all: connecting, every command on the phone and every
    wait fit inside it (``hard_deadline``), with a progress line on stderr when
    ``show_progress``. ``action_id`` None: the intent's derived id (``choose_derived_id``
    with ``derived_id_window``). ``wait_settled``: ``SmsAgent.send``'s."""
    from starebrain_actions.cli.progress import Progress

    progress = Progress(enabled=show_progress)
    started = time.monotonic()

    def left() -> float:
        return max(0.1, wait - (time.monotonic() - started))

    #: the action id, once chosen (for the message of an interrupted send)
    chosen: list[str] = [action_id] if action_id is not None else []
    #: the agent, once connected (for the message of an interrupted send)
    agents: list[SmsAgent] = []

    async def work() -> SendResult:
        async with progress.shown():
            known, answer = await _ledger_answer(path, chosen, intent, derived_id_window, times)
            if answer is not None:
                return answer
            async with agent_within(
                device,
                left,
                progress,
                db=path,
                policy=policy,
                key_path=key_path,
                region=region,
                read_as_system=read_as_system,
                rate_limit=rate_limit,
                send_path=send_path,
                share_phone=share_phone,
                connect_timeout=connect_timeout,
                command_timeout=command_timeout,
                gate=gate,
            ) as agent:
                agents.append(agent)
                outcome = await agent.send(
                    chosen[0],
                    intent.recipient,
                    intent.body,
                    wait=max(0.0, wait - (time.monotonic() - started)),
                    on_wait=_tell_waiting,
                    on_step=progress.step,
                    hard_deadline=True,
                    wait_settled=wait_settled,
                    not_after=intent.not_after or (times.not_after if times else None),
                    not_before=intent.not_before or (times.not_before if times else None),
                )
                return SendResult(summary=outcome.summary, before=known, outcome=outcome)

    try:
        return run(work())
    except FingerprintConflict as exc:
        raise CliUsageError(f"changed intent, nothing sent: {exc}") from exc
    except KeyboardInterrupt:
        dispatched = bool(agents) and agents[0].dispatches > 0
        _interrupted(progress, dispatched=dispatched, action_id=chosen[0] if chosen else None)


async def _ledger_answer(
    path: LedgerTarget,
    chosen: list[str],
    intent: SmsIntent,
    window: timedelta,
    times: IntentTimes | None = None,
) -> tuple[ActionSummary | None, SendResult | None]:
    """Settle what the ledger alone can settle, so a changed intent is exit 2 and a rerun
    of a finished action exits as before even while the phone is down: the action as it
    stands (None: new), and the answer when it is settled (None: the phone must be reached).
    Appends the derived id to ``chosen`` when it is empty.

    Raises:
        FingerprintConflict: the action id holds another intent.
    """
    async with open_ledger(path) as ledger:
        if not chosen:
            chosen.append(await choose_derived_id(ledger, intent, window=window))
        try:
            known: ActionSummary | None = await ledger.summary(chosen[0])
        except NotFound:
            known = None
        if (
            known is not None
            and known.status is Status.EXPIRED
            and known.action.expired_at is None
            and await ledger.expire(chosen[0])
        ):
            known = await ledger.summary(chosen[0])  # the send that met it records it
    if known is not None:
        if times is not None:  # durations count from the stored action's creation
            intent = times.applied(intent, known.action.created_at)
        if known.action.fingerprint != intent.fingerprint:
            raise intent_conflict(known.action, intent)
        if settled(known, datetime.now(UTC)):
            return known, SendResult(summary=known, before=known)
    return known, None


def _interrupted(progress: Progress, *, dispatched: bool, action_id: str | None) -> NoReturn:
    """Ctrl-C during a send: say what was under way and what is true, then exit 130."""
    click.echo(
        f"starebrain send: interrupted while {progress.current}. "
        + interrupted_text(dispatched=dispatched, action_id=action_id),
        err=True,
    )
    raise SystemExit(EXIT_INTERRUPTED) from None


def interrupted_text(*, dispatched: bool, action_id: str | None) -> str:
    """What is true after Ctrl-C: whether this run handed a send to the phone (its outcome
    is then unknown until a read settles it), and that rerunning resumes the action."""
    if dispatched:
        said = (
            "This run handed a send to the phone: the SMS may already be out; its attempt is"
            " recorded and a read settles it."
        )
    else:
        said = "This run sent nothing to the phone."
    if action_id is None:
        return f"{said} Nothing was recorded either."
    return (
        f"{said} Rerunning the same command is safe: it resumes action {action_id} and never"
        " sends it twice."
    )
