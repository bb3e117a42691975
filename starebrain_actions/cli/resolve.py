"""``starebrain resolve``: an operator's ruling on an attempt, kept in its history."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from starebrain_actions.cli.context import (
    CliError,
    ledger_path,
    open_ledger,
    operator_name,
    run,
    settings_of,
)
from starebrain_actions.cli.options import json_option, operator_option, reason_option
from starebrain_actions.core.decisions import GRANTABLE, should_redispatch
from starebrain_actions.core.exceptions import StaleTransition
from starebrain_actions.core.model import ActionRecord, ActionSummary, ProviderKind
from starebrain_actions.render import json_output as _render_json
from starebrain_actions.render import output as _render
from starebrain_actions.render import records as _render_records
from starebrain_actions.render import values as _render_values

if TYPE_CHECKING:
    from starebrain_actions.ledger.store import Ledger


@click.command("resolve")
@click.argument("action_id")
@click.option(
    "--as",
    "ruling",
    type=click.Choice(["sent", "not-sent"]),
    required=True,
    help="sent: the message went out and is this action's effect (on an attempt through the"
    " framework, this proves the framework path again for --send-path auto); not-sent:"
    " nothing went out.",
)
@reason_option()
@operator_option()
@click.option(
    "--dispatch-id",
    default=None,
    help="The attempt to rule on. [default: the latest attempt]",
)
@click.option(
    "--expect",
    "expect_version",
    type=click.IntRange(min=0, max=2**63 - 1),
    default=None,
    metavar="VERSION",
    help="The attempt's version you looked at (the v column of status and review): the "
    "ruling is refused if anything changed since.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Allow ruling not-sent an attempt a read of the phone CONFIRMED.",
)
@click.option(
    "--row",
    default=None,
    metavar="[sms:|mms:]ID",
    help="With --as sent: the provider row you found on the phone (content://sms _id, or "
    "mms:ID for content://mms); it is then claimed by this attempt.",
)
@json_option
@click.pass_context
def resolve(
    ctx: click.Context,
    action_id: str,
    ruling: str,
    reason: str,
    operator: str | None,
    dispatch_id: str | None,
    expect_version: int | None,
    force: bool,
    row: str | None,
    as_json: bool,
) -> None:
    """Record an operator's ruling on an attempt; it clears review and lands in history.

    Give --expect with the version you saw: a ruling on a state that changed meanwhile (a
    read confirmed the message a moment later, say) is refused.
    """
    path = ledger_path(settings_of(ctx), create=False)
    name = operator_name(operator)

    provider_row = _parse_row(row) if row is not None else None

    async def work() -> tuple[ActionSummary, Any, bool, str]:
        async with open_ledger(path, create=False) as ledger:
            seen = {item.dispatch_id: item.version for item in await ledger.attempts(action_id)}
            try:
                record = await ledger.resolve(
                    action_id,
                    as_sent=ruling == "sent",
                    reason=reason,
                    operator=name,
                    dispatch_id=dispatch_id,
                    expect_version=expect_version,
                    force=force,
                    row=provider_row,
                )
            except StaleTransition as exc:
                raise CliError(f"{exc}; look again with `starebrain status {action_id}`") from exc
            # a ruling already in force writes nothing: the version stays what it was
            changed = seen.get(record.dispatch_id) != record.version
            standing = await framework_line(ledger, record) if changed else ""
            return await ledger.summary(action_id), record, changed, standing

    summary, record, changed, standing = run(work())
    decision = should_redispatch(summary.action, summary.attempts, datetime.now(UTC))
    resend = ruling == "not-sent" and (decision.redispatch or decision.waits)
    if as_json:
        data = _render_values.summary_data(summary, show_private=False)
        data["changed"] = changed
        data["resend_will_follow"] = resend
        _render_json.emit_json(data)
        return
    out = _render.Output()
    if changed:
        out.line(f"resolved {action_id} as {ruling} by {name}: now {summary.status.value}")
    else:
        out.line(
            f"attempt {record.dispatch_id} of {action_id} is already ruled {ruling} by"
            f" {record.resolved_by}: nothing written (now {summary.status.value})"
        )
    if standing:
        out.line(standing)
    if resend and changed:
        out.line(
            f"a resend will follow: the next `starebrain send` of {action_id} (or the agent's"
            " retry) sends the SMS again"
        )
    elif ruling == "not-sent" and changed:
        out.line(
            f"no resend will follow ({decision.reason.value}): `starebrain retry {action_id}"
            " --reason TEXT` gives it another attempt, or send the text as a new message with"
            " a new --action-id"
            if decision.reason in GRANTABLE
            else f"no resend will follow ({decision.reason.value}): see `starebrain review`"
        )
    _render_records.render_summary(out, summary, show_private=False)


def _parse_row(text: str) -> tuple[ProviderKind, int]:
    """``12``, ``sms:12`` or ``mms:12`` as a provider row."""
    match = re.fullmatch(r"(?:(sms|mms):)?(\d{1,18})", text.strip())
    if match is None:
        raise click.BadParameter(f"expected ID, sms:ID or mms:ID, got {text!r}", param_hint="--row")
    return ProviderKind(match.group(1) or "sms"), int(match.group(2))


async def framework_line(ledger: Ledger, record: ActionRecord) -> str:
    """For a ruling on a framework attempt, what it leaves of ``--send-path auto``'s choice on
    the phone's build (a ruling that it went out proves the path; one that it did not doubts
    it: ``phone.send_path``); "" for an attempt through the app."""
    from starebrain_actions.core.decisions import on_framework_path
    from starebrain_actions.phone.send_path import PROOF_WINDOW, standing_in

    if not on_framework_path(record):
        return ""
    build = record.evidence.get("build")
    attempts = await ledger.framework_attempts(record.device, PROOF_WINDOW)
    standing = standing_in(attempts, build if isinstance(build, str) else "")
    if standing.state not in ("proven", "restored", "doubted"):
        return ""
    path = "framework" if standing.proven else "the messaging app"
    return (
        f"the framework path on {record.device} is {standing.state}: `--send-path auto` sends"
        f" through {path} ({standing.why})"
    )
