"""``starebrain events``: the ledger's events, after a cursor, once or following.

Every change the ledger records writes its event in the same transaction (DESIGN.md
invariant 10; ``ledger/events.py``), so reading events after a position, and then after the
last position read, sees every change once and in order, across restarts: the position is
the cursor. Text is one line per event (for people, ``grep`` and ``awk``); ``--json`` is one
JSON object per line (JSON lines), the same object webhooks carry.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import click

from starebrain_actions.cli.context import (
    ledger_path,
    open_ledger,
    run,
    settings_of,
    stop_on_signals,
)
from starebrain_actions.cli.db import is_url
from starebrain_actions.cli.options import json_option, show_private_option
from starebrain_actions.render import json_output as _render_json
from starebrain_actions.render import values as _render_values
from starebrain_actions.render.sanitize import clean_text

if TYPE_CHECKING:
    from starebrain_actions.core.events import LedgerEvent

#: Events shown without ``--after``: the newest ones, as ``tail`` shows the end of a file.
DEFAULT_LAST: Final = 50
#: Type names as wide as the longest common one, for aligned lines.
_TYPE_WIDTH: Final = 20


@click.command("events")
@click.option(
    "--after",
    type=click.IntRange(min=0),
    default=None,
    help="Show the events after this position (0: from the first). Without it, the last"
    f" --limit events ({DEFAULT_LAST} by default). The position is the cursor: pass the last one"
    " you saw to resume exactly there.",
)
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="Keep running and print new events as they are committed, until Ctrl-C or SIGTERM"
    " (it then says which --after resumes).",
)
@click.option(
    "--type",
    "types",
    multiple=True,
    metavar="TYPE",
    help="Only events of this type, or of a family such as action.*; repeatable. Types: "
    + "action.created, attempt.created, attempt.submitted, action.sent, action.succeeded,"
    " attempt.failed, action.failed, action.needs_person, action.denied, action.approved,"
    " action.waiting, action.refused, action.released, action.retry_granted, action.resolved,"
    " action.policy_pinned, action.changed, attempt.error, phone.not_ready,"
    " phone.unreachable, reply.received, recipient.opted_out, recipient.opted_in,"
    " webhook.disabled.",
)
@click.option("--action", "action_id", default=None, help="Only this action's events.")
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=None,
    help=f"At most this many events (0: no limit). Default: {DEFAULT_LAST} without --after, no"
    " limit with it.",
)
@click.option(
    "--poll",
    type=click.FloatRange(min=0.05, max=60),
    default=0.5,
    show_default=True,
    help="With --follow: seconds between reads that found nothing new.",
)
@json_option
@show_private_option()
@click.pass_context
def events_command(
    ctx: click.Context,
    after: int | None,
    follow: bool,
    types: tuple[str, ...],
    action_id: str | None,
    limit: int | None,
    poll: float,
    as_json: bool,
    show_private: bool,
) -> None:
    """Show what happened, in the order the ledger recorded it: every action created, sent,
    succeeded, failed, waiting for a person (with the command that answers it), denied;
    replies and opt-outs. Each line starts with the event's position. `--json` prints JSON
    lines (one event per line), the body webhooks carry."""
    path = ledger_path(settings_of(ctx), create=False)
    from starebrain_actions.core.events import check_types
    from starebrain_actions.core.exceptions import InvalidInput

    try:
        wanted = check_types(types)
    except InvalidInput as exc:
        raise click.BadParameter(str(exc), param_hint="--type") from None
    printer = _Printer(as_json=as_json, show_private=show_private)
    run(
        _show(
            path,
            printer,
            after=after,
            follow=follow,
            types=wanted,
            action_id=action_id,
            limit=limit,
            poll=poll,
        )
    )


async def _show(
    path: Any,
    printer: _Printer,
    *,
    after: int | None,
    follow: bool,
    types: Sequence[str],
    action_id: str | None,
    limit: int | None,
    poll: float,
) -> None:
    import asyncio

    # PostgreSQL numbers events as a reader asks (a write): open it for writing there;
    # a SQLite file is only read
    async with open_ledger(path, read_only=not is_url(str(path)), create=False) as ledger:
        if after is None:
            newest = await ledger.last_event_position()
            shown = DEFAULT_LAST if limit is None else limit
            after = 0 if shown == 0 else max(0, newest - shown)
            limit = None if follow else shown
        cursor = after

        async def stream() -> None:
            nonlocal cursor
            printed = 0
            async for event in ledger.follow_events(
                after=after, types=types, action_id=action_id, poll_s=poll, follow=follow
            ):
                printer.event(event)
                cursor = event.position
                printed += 1
                if limit and printed >= limit:
                    return

        printer.header()
        if not follow:
            await stream()
            return
        with stop_on_signals() as stop:
            streaming = asyncio.ensure_future(stream())
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({streaming, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if streaming.done():
                streaming.result()  # ended by its --limit, or raised
                return
            streaming.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await streaming
        print(f"stopped; resume with: starebrain events --after {cursor} --follow", file=sys.stderr)


class _Printer:
    """Events as text lines or JSON lines, flushed one by one (a pipe sees each at once)."""

    def __init__(self, *, as_json: bool, show_private: bool) -> None:
        self.as_json = as_json
        self.show_private = show_private

    def header(self) -> None:
        if not self.as_json:
            click.echo(f"{'position':>8}  {'at':<27}  {'type':<{_TYPE_WIDTH}}  action  detail")

    def event(self, event: LedgerEvent) -> None:
        shown = _render_values.event_data(event, show_private=self.show_private)
        if self.as_json:
            click.echo(_render_json.json_line(shown))
        else:
            click.echo(
                clean_text(
                    f"{event.position:>8}  {shown['at']:<27}  {event.type:<{_TYPE_WIDTH}}"
                    f"  {event.action_id or '-'}  {describe(shown)}"
                )
            )
        sys.stdout.flush()


def describe(shown: Mapping[str, Any]) -> str:
    """One line saying what an event (``LedgerEvent.public``) reports."""
    data = shown["data"]
    parts = []
    if data.get("attempt") is not None:
        parts.append(f"attempt {data['attempt']}")
    if shown.get("device"):
        parts.append(f"on {shown['device']}")
    evidence = data.get("evidence") if isinstance(data.get("evidence"), Mapping) else {}
    kind = shown["type"]
    if kind == "action.created":
        parts.append(f"pool {data['pool']}" if data.get("pool") else "created")
    if data.get("review_reason"):
        parts.append(str(data["review_reason"]))
    if kind in (
        "action.denied",
        "action.needs_person",
        "action.waiting",
        "action.refused",
    ) and evidence.get("rule"):
        parts.append(f"{evidence.get('verdict', '')} by {evidence['rule']}".strip())
    if kind in ("attempt.failed", "action.failed", "phone.not_ready", "phone.unreachable"):
        why = evidence.get("not_ready") or data.get("error") or evidence.get("error")
        if why:
            parts.append(str(why))
    ruled = ("action.retry_granted", "action.approved", "action.denied", "action.resolved")
    if kind in ruled and evidence.get("reason"):
        parts.append(f"by {data.get('actor')}: {evidence['reason']}")
    for key in ("from", "number", "reason"):
        if kind.startswith(("reply.", "recipient.")) and data.get(key):
            parts.append(f"{key} {data[key]}")
    if data.get("command"):
        parts.append(f"-> {data['command']}")
    return "; ".join(parts) or "-"
