"""``starebrain policy show ID`` and ``starebrain policy set ID FILE``: the rules an action is
judged by on every path (its pinned policy, kept in the ledger), and a person's change of
them (``Ledger.set_policy``), kept in its history with who and why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from starebrain_actions.cli.context import (
    CliError,
    CliUsageError,
    ledger_path,
    open_ledger,
    operator_name,
    run,
    settings_of,
)
from starebrain_actions.cli.options import json_option, operator_option, reason_option


@click.group("policy")
def policy_command() -> None:
    """The policy an action is judged by on every path that can send it: the rules of the
    gate that first judged it, kept in the ledger with the action (docs/policy.md)."""


@policy_command.command("show")
@click.argument("action_id")
@json_option
@click.pass_context
def show_command(ctx: click.Context, action_id: str, as_json: bool) -> None:
    """Print the rules pinned to ACTION_ID (as the policy file's tables, with the approval
    and short-code modes they run with), their digest and the file they were first read
    from; "none" when no gate has judged the action yet."""
    from starebrain_actions.core.policy import policy_document, policy_pin
    from starebrain_actions.render import json_output as _render_json

    path = ledger_path(settings_of(ctx), create=False)

    async def work() -> Any:
        async with open_ledger(path, create=False, read_only=True) as ledger:
            return await ledger.policy_of(action_id)

    policy = run(work())
    if as_json:
        _render_json.emit_json(
            {
                "action_id": action_id,
                "pin": policy_pin(policy) if policy is not None else None,
                "file_digest": policy.digest if policy is not None else None,
                "source": policy.source if policy is not None else None,
                "rules": policy_document(policy) if policy is not None else None,
            }
        )
        return
    if policy is None:
        click.echo(f"{action_id}: none (no policy gate has judged it yet)")
        return
    click.echo(f"{action_id}: judged on every path by the rules {policy_pin(policy)}")
    click.echo(f"first read from {policy.source or '(built in)'} ({policy.digest})")
    click.echo(json.dumps(policy_document(policy), indent=2, sort_keys=True))


@policy_command.command("set")
@click.argument("action_id")
@click.argument("policy_file", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@reason_option(more_help=" Required.")
@operator_option()
@json_option
@click.pass_context
def set_command(
    ctx: click.Context,
    action_id: str,
    policy_file: Path,
    reason: str,
    operator: str | None,
    as_json: bool,
) -> None:
    """A person pins the rules of POLICY_FILE to ACTION_ID in place of those that judged it:
    every later path judges it by them (the command line's defaults where the file is
    silent: approve = never, short_codes = allow). Kept in its history with who and why. A
    DENY stays final, and a hold still needs `starebrain approve`."""
    from starebrain_actions.cli.options import policy_for
    from starebrain_actions.core.exceptions import InvalidInput, InvariantViolation
    from starebrain_actions.render import json_output as _render_json
    from starebrain_actions.render import output as _render
    from starebrain_actions.render import records as _render_records
    from starebrain_actions.render import values as _render_values

    if not reason.strip():
        raise CliUsageError("--reason must say why (it is kept in the history)")
    try:
        policy = policy_for(policy_file, approve="never", short_codes="allow")
    except InvalidInput as exc:
        raise CliUsageError(str(exc)) from exc
    assert policy is not None
    path = ledger_path(settings_of(ctx), create=False)
    who = operator_name(operator)

    async def work() -> Any:
        async with open_ledger(path, create=False) as ledger:
            try:
                return await ledger.set_policy(action_id, policy, operator=who, reason=reason)
            except InvariantViolation as exc:
                raise CliError(f"{exc}; nothing written") from exc

    summary = run(work())
    if as_json:
        _render_json.emit_json(_render_values.summary_data(summary, show_private=False))
        return
    out = _render.Output()
    out.line(
        f"{action_id} is judged by the rules of {policy_file} from now on"
        f" ({summary.action.gate_policy}), set by {who}"
    )
    _render_records.render_summary(out, summary, show_private=False)
