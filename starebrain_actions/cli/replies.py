"""``starebrain replies [ACTION_ID]`` and ``starebrain optouts [add|remove NUMBER]``: what the
numbers texted answered (recorded by the reads the product makes anyway), and their opt-outs,
which the policy gate reads on every path (rule ``opted_out``; docs/replies.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from starebrain_actions.cli.context import (
    CliUsageError,
    ledger_path,
    open_ledger,
    operator_name,
    run,
    settings_of,
)
from starebrain_actions.cli.options import (
    json_option,
    operator_option,
    reason_option,
    show_private_option,
)


def _redacted(data: dict[str, Any], show_private: bool) -> dict[str, Any]:
    from starebrain_actions.render.sanitize import redact_data

    redacted: dict[str, Any] = redact_data(data, show_private=show_private)
    return redacted


@click.command("replies")
@click.argument("action_id", required=False)
@json_option
@show_private_option()
@click.pass_context
def replies_command(
    ctx: click.Context, action_id: str | None, as_json: bool, show_private: bool
) -> None:
    """List the replies recorded (to ACTION_ID, or all), oldest first: incoming texts from
    numbers this ledger has texted, seen by the reads of sends and reconcile passes, each
    linked to the latest action sent to that number through that phone before it."""
    from starebrain_actions.render import json_output as _render_json

    path = ledger_path(settings_of(ctx), create=False)

    async def work() -> Any:
        async with open_ledger(path, create=False, read_only=True) as ledger:
            return await ledger.replies(action_id, limit=1000)

    replies = run(work())
    rows = [_redacted(reply.data(), show_private) for reply in replies]
    if as_json:
        _render_json.emit_json({"action_id": action_id, "replies": rows})
        return
    if not rows:
        click.echo("no replies recorded" + (f" for {action_id}" if action_id else ""))
        return
    for row in rows:
        keyword = f"  [{row['keyword']}]" if row["keyword"] else ""
        click.echo(
            f"{row['reply_id']:>5}  {row['received_at']}  {row['number']}  ->"
            f" {row['action_id'] or '(no action before it)'}  {row['body']!r}{keyword}"
        )


@click.group("optouts", invoke_without_command=True)
@json_option
@show_private_option()
@click.pass_context
def optouts_command(ctx: click.Context, as_json: bool, show_private: bool) -> None:
    """List the numbers opted out now (a STOP reply, or a person's `optouts add`): the gate
    refuses every new attempt to them, on every path, until they opt back in (START) or a
    person removes the opt-out."""
    if ctx.invoked_subcommand is not None:
        return
    from starebrain_actions.render import json_output as _render_json

    path = ledger_path(settings_of(ctx), create=False)

    async def work() -> Any:
        async with open_ledger(path, create=False, read_only=True) as ledger:
            return await ledger.opt_outs()

    opted = run(work())
    rows = [_redacted(change.data(), show_private) for change in opted]
    if as_json:
        _render_json.emit_json({"opted_out": rows})
        return
    if not rows:
        click.echo("no number is opted out")
        return
    for row in rows:
        source = f"reply {row['reply_id']}" if row["reply_id"] is not None else row["actor"]
        click.echo(f"{row['number']}  since {row['at']}  by {source}: {row['reason']}")


def _change(
    ctx: click.Context,
    number: str,
    change: str,
    reason: str,
    operator: str | None,
    region: str | None,
    as_json: bool,
    show_private: bool,
) -> None:
    from starebrain_actions.core.exceptions import InvalidInput
    from starebrain_actions.render import json_output as _render_json

    if not reason.strip():
        raise CliUsageError("--reason must say why (it is kept with the change)")
    path = ledger_path(settings_of(ctx), create=False)
    who = operator_name(operator)

    async def work() -> Any:
        async with open_ledger(path, create=False) as ledger:
            try:
                return await ledger.change_opt_out(
                    number, change, actor=who, reason=reason, region=region
                )
            except InvalidInput as exc:
                raise CliUsageError(str(exc)) from exc

    made, changed = run(work())
    data = _redacted(made.data(), show_private)
    if as_json:
        _render_json.emit_json({"changed": changed, "in_force": data})
        return
    state = "opted out" if made.opted_out else "opted in"
    if changed:
        click.echo(f"{data['number']} {state} by {who}: {reason}")
    else:
        click.echo(f"{data['number']} was already {state} (since {data['at']}); nothing written")


def _change_options(function: Callable[..., None]) -> Callable[..., None]:
    """The arguments and options ``optouts add`` and ``optouts remove`` share."""
    for decorate in reversed(
        (
            click.argument("number"),
            reason_option(more_help=" Required."),
            operator_option(),
            click.option(
                "--region", default=None, help="Read a national NUMBER in this region (e.g. US)."
            ),
            json_option,
            show_private_option(),
            click.pass_context,
        )
    ):
        function = decorate(function)
    return function


@optouts_command.command("add")
@_change_options
def add_command(
    ctx: click.Context,
    number: str,
    reason: str,
    operator: str | None,
    region: str | None,
    as_json: bool,
    show_private: bool,
) -> None:
    """Opt NUMBER out: every later send to it is refused (rule opted_out, exit 9), on every
    path. Kept with who, when and why; writes recipient.opted_out."""
    _change(ctx, number, "opt_out", reason, operator, region, as_json, show_private)


@optouts_command.command("remove")
@_change_options
def remove_command(
    ctx: click.Context,
    number: str,
    reason: str,
    operator: str | None,
    region: str | None,
    as_json: bool,
    show_private: bool,
) -> None:
    """Opt NUMBER back in (as a START reply would): sends to it go again. Kept with who,
    when and why; writes recipient.opted_in."""
    _change(ctx, number, "opt_in", reason, operator, region, as_json, show_private)
