"""``starebrain resume`` and ``starebrain retry``: a person's recovery path.

``resume`` finishes what was started on the phones it is given: one reconcile pass per phone,
then every action that can move (PLANNED, FAILED with attempts left once their backoff has
passed) goes through ``send``'s own path (``SmsAgent.resume``). ``retry`` gives an action
whose budget is spent, or whose retries were refused, new attempts (``Ledger.retry``), with
who and why kept in its history; ``send`` or ``resume`` then sends it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import click

from starebrain_actions.cli.context import (
    EXIT_FAILED,
    EXIT_NOT_READY,
    EXIT_SUCCEEDED,
    EXIT_UNRESOLVED,
    CliError,
    ledger_path,
    open_ledger,
    operator_name,
    run,
    settings_of,
)
from starebrain_actions.cli.options import (
    DEVICE_ENV,
    device_option,
    json_option,
    key_option,
    operator_option,
    phone_options,
    policy_file_option,
    reason_option,
    share_phone_option,
    typed_command_gate,
    wait_option,
)
from starebrain_actions.core.model import Status

if TYPE_CHECKING:
    from starebrain_actions.cli.progress import Progress
    from starebrain_actions.orchestration.outcome import ResumeItem, ResumeReport
    from starebrain_actions.render.output import Output


# --------------------------------------------------------------------------- retry


@click.command("retry")
@click.argument("action_id")
@click.option(
    "--attempts",
    type=click.IntRange(min=1, max=100),
    default=1,
    show_default=True,
    help="New attempts granted; the attempts so far stay as evidence and no longer count.",
)
@reason_option()
@operator_option("Who grants it")
@json_option
@click.pass_context
def retry_command(
    ctx: click.Context,
    action_id: str,
    attempts: int,
    reason: str,
    operator: str | None,
    as_json: bool,
) -> None:
    """Give an action whose attempts are used up, or whose retries were refused (the same
    wrong text twice, a passed deadline), another chance. Nothing is sent now: the next
    `starebrain send` of it, `starebrain resume` or the agent sends it.

    Refused while any attempt of the action is unresolved (in flight, verifying or in
    review: a new attempt could send the SMS twice; rule on it with `starebrain resolve`
    first), and for an action that succeeded or may be retried already.
    """
    from starebrain_actions.core.exceptions import RetryRefused
    from starebrain_actions.render import json_output as _render_json
    from starebrain_actions.render import output as _render
    from starebrain_actions.render import records as _render_records
    from starebrain_actions.render import values as _render_values

    path = ledger_path(settings_of(ctx), create=False)
    name = operator_name(operator)

    async def work() -> Any:
        async with open_ledger(path, create=False) as ledger:
            try:
                return await ledger.retry(
                    action_id, reason=reason, operator=name, attempts=attempts
                )
            except RetryRefused as exc:
                raise CliError(f"retry refused, nothing written: {exc}") from exc

    summary = run(work())
    if as_json:
        data = _render_values.summary_data(summary, show_private=False)
        data["attempts_granted"] = attempts
        _render_json.emit_json(data)
        return
    out = _render.Output()
    out.line(
        f"granted {attempts} new attempt(s) to {action_id} by {name}: the next `starebrain"
        f" send` of it, `starebrain resume` or the agent sends it (now {summary.status.value})"
    )
    _render_records.render_summary(out, summary, show_private=False)


# --------------------------------------------------------------------------- approve, deny


_APPROVE_HELP: Final = (
    "A person's approval of an action the policy gate holds for one (approve = new or"
    " always): the next send, resume or send_sms of it sends it (the policy's other rules"
    " still apply). Only a person gives it, here or through the Python API (Ledger.approve);"
    " no MCP tool can."
)
_DENY_HELP: Final = (
    "A person's denial of an action: nothing is ever sent for it afterwards (an attempt"
    " already under way is not called back). Final: it cannot be approved later."
)


def _ruling_command(name: str, *, approving: bool) -> click.Command:
    @click.command(name, help=_APPROVE_HELP if approving else _DENY_HELP)
    @click.argument("action_id")
    @reason_option(required=not approving, default="", more_help="" if approving else " Required.")
    @operator_option()
    @json_option
    @click.pass_context
    def command(
        ctx: click.Context, action_id: str, reason: str, operator: str | None, as_json: bool
    ) -> None:
        from starebrain_actions.core.exceptions import InvariantViolation
        from starebrain_actions.render import json_output as _render_json
        from starebrain_actions.render import output as _render
        from starebrain_actions.render import records as _render_records
        from starebrain_actions.render import values as _render_values

        path = ledger_path(settings_of(ctx), create=False)
        who = operator_name(operator)

        async def work() -> Any:
            async with open_ledger(path, create=False) as ledger:
                try:
                    if approving:
                        return await ledger.approve(action_id, operator=who, reason=reason)
                    return await ledger.deny(action_id, operator=who, reason=reason)
                except InvariantViolation as exc:
                    raise CliError(f"{exc}; nothing written") from exc

        summary = run(work())
        if as_json:
            _render_json.emit_json(_render_values.summary_data(summary, show_private=False))
            return
        out = _render.Output()
        if approving:
            out.line(
                f"approved {action_id} by {who}: the next `starebrain send` of it, `starebrain"
                " resume` or the agent sends it (the policy's other rules still apply)"
            )
        else:
            out.line(f"denied {action_id} by {who}: nothing is ever sent for it")
        _render_records.render_summary(out, summary, show_private=False)

    return command


approve_command = _ruling_command("approve", approving=True)
deny_command = _ruling_command("deny", approving=False)


# --------------------------------------------------------------------------- resume


@click.command("resume")
@device_option(
    "devices",
    multiple=True,
    required=True,
    help="A phone to resume on, as HOST:PORT or usb:SERIAL; repeatable. Also read from"
    f" ${DEVICE_ENV} (several separated by spaces).",
)
@wait_option(
    help="Seconds each action may wait for proof of its outcome (as send's --wait), and for a"
    " phone that does not answer.",
)
@phone_options
@share_phone_option
@key_option
@policy_file_option
@json_option
@click.pass_context
def resume_command(
    ctx: click.Context,
    devices: tuple[str, ...],
    wait: float,
    rate_limit: int,
    connect_timeout: float,
    command_timeout: float,
    send_path: str,
    share_phone: bool,
    key_path: Path | None,
    policy_path: Path | None,
    as_json: bool,
) -> None:
    """Finish what was started: on each phone, read it once (settling what a read can), then
    send every action that can move, oldest first, through send's own path: PLANNED ones
    (dealt among the phones given), and those whose latest attempt on the phone FAILED with
    attempts left, once their backoff has passed. Never sends an action twice, beside any
    number of senders and other resumes.

    Actions a person must rule on, attempts still unresolved after the read, and actions
    with nothing left to try are left as they are (`starebrain review`).

    Exit status: 0 every action it drove ended SUCCEEDED or sent and settling (or there was
    nothing to do), 3 some are still open (rerun later), 4 some ended FAILED with no attempt
    left, 7 a phone was not ready or did not answer, or another ledger's attempts are open
    on it (--share-phone) (a person must act; see the message), 1 anything else.
    """
    from starebrain_actions.cli.progress import Progress
    from starebrain_actions.render import json_output as _render_json
    from starebrain_actions.render import output as _render

    settings = settings_of(ctx)
    path = ledger_path(settings, create=False)
    gate = typed_command_gate(policy_path)
    progress = Progress(enabled=not as_json)
    out = _render.Output()

    def told(device: str, item: ResumeItem) -> None:
        if not as_json:
            out.line(item_line(device, item))

    results = run(
        _resume_all(
            devices,
            path=path,
            wait=wait,
            progress=progress,
            on_item=told,
            key_path=key_path,
            read_as_system=settings.read_as_system,
            rate_limit=rate_limit,
            send_path=send_path,
            share_phone=share_phone,
            connect_timeout=connect_timeout,
            command_timeout=command_timeout,
            gate=gate,
        )
    )
    code = exit_code(results)
    if as_json:
        _render_json.emit_json(
            {
                "devices": [
                    result_data(device, result)
                    for device, result in zip(devices, results, strict=True)
                ],
                "exit_code": code,
            }
        )
    else:
        _print_resumed(out, devices, results)
    ctx.exit(code)


def _print_resumed(
    out: Output, devices: Sequence[str], results: Sequence[ResumeReport | str]
) -> None:
    """One line per phone: not resumed (why), nothing to resume, or how many actions it
    drove, with what its read settled."""
    for device, result in zip(devices, results, strict=True):
        if isinstance(result, str):
            out.line(f"{device}: not resumed: {result}")
        elif not result.items:
            out.line(f"{device}: nothing to resume ({_pass_text(result)})")
        else:
            out.line(f"{device}: {len(result.items)} action(s) driven ({_pass_text(result)})")


async def _resume_all(
    devices: Sequence[str], *, progress: Progress, **options: Any
) -> list[ResumeReport | str]:
    """Resume on every phone at once (``_resume_one``), each given its share of the PLANNED
    actions that name no phone; one result per phone, in order."""
    import asyncio

    async with progress.shown():
        return list(
            await asyncio.gather(
                *(
                    _resume_one(device, (index, len(devices)), progress=progress, **options)
                    for index, device in enumerate(devices)
                )
            )
        )


async def _resume_one(
    device: str,
    share: tuple[int, int],
    *,
    path: Any,
    wait: float,
    progress: Progress,
    on_item: Any,
    **options: Any,
) -> ResumeReport | str:
    """Resume on one phone; the error text when it could not be reached in time."""
    from starebrain_actions.cli.connect import agent_within
    from starebrain_actions.phone.android import PhoneUnavailable

    started = time.monotonic()

    def left() -> float:
        return max(0.1, wait - (time.monotonic() - started))

    def step(text: str) -> None:
        progress.step(f"{device}: {text}")

    try:
        async with agent_within(device, left, progress, db=path, **options) as agent:
            return await agent.resume(
                wait=wait, share=share, on_item=lambda item: on_item(device, item), on_step=step
            )
    except (CliError, PhoneUnavailable) as exc:
        return str(getattr(exc, "message", None) or exc)


def _pass_text(report: ResumeReport) -> str:
    reconciled = report.reconciled
    changed = len(reconciled.changes)
    text = f"the read settled {changed} attempt(s)" if changed else "the read changed nothing"
    if reconciled.in_flight:
        text += f"; {reconciled.in_flight} still unresolved"
    return text


def item_line(device: str, item: ResumeItem) -> str:
    """One line per action: its id, the phone, its status before and after, and what
    happened."""
    moved = (
        item.before.value
        if item.before is item.after
        else f"{item.before.value} -> {item.after.value}"
    )
    return f"  {item.action_id} on {device}: {moved}; {item.note}"


def exit_code(results: list[ResumeReport | str]) -> int:
    """7 when a phone did not answer or was not ready, else 4 when an action ended with
    nothing left to try, else 3 when one is still open, else 0."""
    from starebrain_actions.cli.send import send_exit_code

    if any(isinstance(result, str) for result in results):
        return EXIT_NOT_READY
    codes = {
        send_exit_code(item.outcome.summary)
        for result in results
        if not isinstance(result, str)
        for item in result.items
        if item.outcome is not None
    }
    for code in (EXIT_NOT_READY, EXIT_FAILED, EXIT_UNRESOLVED):
        if code in codes:
            return code
    if any(
        item.outcome is None or item.after is Status.PLANNED
        for result in results
        if not isinstance(result, str)
        for item in result.items
    ):
        return EXIT_UNRESOLVED
    return EXIT_SUCCEEDED


def result_data(device: str, result: ResumeReport | str) -> dict[str, Any]:
    """One phone's resume as JSON."""
    from starebrain_actions.render import values as _render_values

    if isinstance(result, str):
        return {
            "device": device,
            "resumed": False,
            "error": result,
            "settled_by_read": None,
            "still_unresolved": None,
            "actions": [],
        }
    return {
        "device": device,
        "resumed": True,
        "error": None,
        "settled_by_read": len(result.reconciled.changes),
        "still_unresolved": result.reconciled.in_flight,
        "actions": [
            {
                "action_id": item.action_id,
                "before": item.before.value,
                "after": item.after.value,
                "attempts_started": item.sent,
                "note": item.note,
                "not_ready": item.outcome.not_ready if item.outcome is not None else None,
                "held_by": (
                    _render_values.hold_data(item.outcome.held_by)
                    if item.outcome is not None and item.outcome.held_by is not None
                    else None
                ),
            }
            for item in result.items
        ],
    }
