"""The read commands: ``status``, ``list``, ``history`` and ``review``.

They never create a ledger, never reach a phone and start light: ``status`` and ``history``
read one action through ``db.read_one`` (no asyncio), ``list`` and ``review`` stream the
summaries from one snapshot, memory flat. ``status`` shows a queued action's place in its
pool's queue (the worker and phone driving it, or when a worker looks at it next), and
``list`` where each action went, with the queue's tally per pool after its table.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import click

from starebrain_actions.cli.context import (
    ledger_errors,
    ledger_path,
    open_ledger,
    run,
    settings_of,
)
from starebrain_actions.cli.db import LedgerTarget, describe, is_url, read_one
from starebrain_actions.cli.options import json_option, show_private_option
from starebrain_actions.core.model import ActionSummary, PhoneHold, Status
from starebrain_actions.core.transitions import phone_hold
from starebrain_actions.render import json_output as _render_json
from starebrain_actions.render import output as _render
from starebrain_actions.render import records as _render_records
from starebrain_actions.render import sanitize as _render_sanitize
from starebrain_actions.render import values as _render_values

if TYPE_CHECKING:
    from starebrain_actions.ledger.store import Ledger


@click.command("status")
@click.argument("action_id", required=False)
@json_option
@show_private_option()
@click.pass_context
def status(ctx: click.Context, action_id: str | None, as_json: bool, show_private: bool) -> None:
    """Show one action: its status, review reasons, its place in the queue when it was
    queued (the worker and phone driving it, or when a worker looks at it next), and every
    attempt on both axes. Without ACTION_ID: which ledger the commands read, what named it,
    and how many actions it holds (exit 0 also when it does not exist yet)."""
    if action_id is None:
        _ledger_status(ctx, as_json=as_json)
        return
    path = ledger_path(settings_of(ctx), create=False)
    now = datetime.now(UTC)
    with ledger_errors():
        summary, duplicates = read_one(
            path,
            lambda ledger: (ledger.summary(action_id, now=now), ledger.duplicates(action_id)),
        )
    if as_json:
        data = _render_values.summary_data(summary, show_private=show_private)
        data["duplicate_rows"] = _render_sanitize.redact_data(duplicates, show_private=show_private)
        _render_json.emit_json(data)
        return
    out = _render.Output()
    _render_records.render_summary(out, summary, show_private=show_private, now=now)
    if duplicates:
        out.table(
            ["device", "provider row", "repeats dispatch", "seen"],
            (
                [
                    str(row["device"]),
                    _render_values.provider_row_text(
                        row["provider_object_id"], row["provider_kind"]
                    ),
                    str(row["dispatch_id"]),
                    str(row["seen_at"]),
                ]
                for row in duplicates
            ),
            title="duplicates seen on the phone",
        )


#: What named the ledger, by where ``--db`` got its value (``status`` without an id).
_NAMED_BY: Final[Mapping[click.core.ParameterSource | None, tuple[str, str]]] = {
    click.core.ParameterSource.COMMANDLINE: ("--db", "starebrain --db"),
    click.core.ParameterSource.ENVIRONMENT: ("$STAREBRAIN_DB", "$STAREBRAIN_DB"),
}


def _ledger_status(ctx: click.Context, *, as_json: bool) -> None:
    """``status`` without an id: the ledger every command (and ``SmsAgent.open()`` without
    ``db``) reads here, what named it, and its number of actions (None: no ledger yet)."""
    settings = settings_of(ctx)
    source = ctx.parent.get_parameter_source("db") if ctx.parent is not None else None
    key, said = _NAMED_BY.get(source, ("default", "the default: neither --db nor $STAREBRAIN_DB"))
    actions: int | None = None
    if is_url(settings.db) or Path(settings.db).exists():
        path = ledger_path(settings, create=False)

        async def count() -> int | None:
            from starebrain_actions.ledger.postgres import NoLedger

            try:
                async with open_ledger(path, read_only=True, create=False) as ledger:
                    return (await ledger.ledger_tally()).actions
            except NoLedger:  # a PostgreSQL schema the first send has not filled yet
                return None

        actions = run(count())
    exists = actions is not None
    if as_json:
        _render_json.emit_json(
            {"ledger": describe(settings.db), "named_by": key, "exists": exists, "actions": actions}
        )
        return
    _render.Output().fields(
        [
            ("ledger", describe(settings.db)),
            ("named by", said),
            (
                "actions",
                str(actions)
                if actions is not None
                else "none: no ledger there yet (`starebrain send` creates it)",
            ),
        ]
    )


@click.command("list")
@click.option(
    "--status",
    "status_name",
    type=click.Choice([status.value for status in Status], case_sensitive=False),
    default=None,
    help="Only actions whose derived status is this one.",
)
@click.option(
    "--device",
    default=None,
    help="Only actions with an attempt on this phone: its name in the ledger, or any address"
    " it was reached at (HOST:PORT, usb:SERIAL).",
)
@click.option(
    "--pool",
    default=None,
    help="Only actions queued for this pool (`send --queue`).",
)
@click.option(
    "--limit",
    type=click.IntRange(min=0, max=1_000_000_000),
    default=50,
    show_default=True,
    help="At most this many actions, newest first (0: all).",
)
@json_option
@show_private_option()
@click.pass_context
def list_command(
    ctx: click.Context,
    status_name: str | None,
    device: str | None,
    pool: str | None,
    limit: int,
    as_json: bool,
    show_private: bool,
) -> None:
    """List actions, newest first, with their derived status and where each went (the phone
    of its latest attempt, or its place in the queue); then, when actions were queued, the
    queue's tally per pool."""
    path = ledger_path(settings_of(ctx), create=False)
    wanted = Status(status_name.upper()) if status_name else None

    def listed(ledger: Ledger, now: datetime) -> AsyncIterator[Any]:
        if not as_json and wanted is None and device is None and pool is None:
            # every action, as its row shows it: a clean success from its counts in SQL
            return ledger.iter_listed(limit=limit or None, now=now)
        return filtered(ledger, now)

    def listed_pages(ledger: Ledger, now: datetime) -> AsyncIterator[Sequence[Any]]:
        # the same items, a page at a time (laid out a page at a time)
        return ledger.iter_listed_pages(limit=limit or None, now=now)

    async def filtered(ledger: Ledger, now: datetime) -> AsyncIterator[ActionSummary]:
        # one phone whatever address reached it: the ledger's key of the phone named
        key = await ledger.phone_key_for(device) if device is not None else None
        # the pool is kept here, over the summaries as they come: the limit counts those kept
        left = limit or None
        async for summary in ledger.iter_summaries(
            status=wanted, device=key, limit=None if pool is not None else left, now=now
        ):
            if pool is not None and summary.action.pool != pool:
                continue
            yield summary
            if pool is not None and left is not None:
                left -= 1
                if left == 0:
                    return

    async def footer(ledger: Ledger, out: _render.Output, now: datetime) -> None:
        tally = await ledger.queue_tally(now=now)
        if pool is not None:
            tally = {name: counts for name, counts in tally.items() if name == pool}
        text = _render_values.queue_tally_text(tally)
        if text is not None:
            out.line(text)

    run(
        _stream_summaries(
            path,
            listed,
            _render_records.stream_list,
            as_json=as_json,
            show_private=show_private,
            footer=footer,
            pages=listed_pages if wanted is None and device is None and pool is None else None,
        )
    )


async def _stream_summaries(
    path: LedgerTarget,
    read: Callable[[Ledger, datetime], AsyncIterator[Any]],
    render: Callable[..., Awaitable[None]],
    *,
    as_json: bool,
    show_private: bool,
    footer: Callable[[Ledger, _render.Output, datetime], Awaitable[None]] | None = None,
    pages: Callable[[Ledger, datetime], AsyncIterator[Sequence[Any]]] | None = None,
) -> None:
    """``list``: the summaries ``read`` yields, as a JSON array written item by item, or laid
    out by ``render`` (``stream_list``), memory flat, then ``footer`` (text only; the JSON
    array keeps its shape), in the same snapshot. ``pages`` (text only): the same items a
    page at a time, which ``render`` lays out instead."""
    async with open_ledger(path, read_only=True) as ledger:
        now = ledger.now()

        def summaries() -> AsyncIterator[Any]:
            return read(ledger, now)

        # one snapshot: the text table reads the actions twice (widths, then rows)
        async with ledger.read_snapshot():
            if as_json:
                await _render_json.emit_json_stream(
                    _render_values.summary_data(summary, show_private=show_private)
                    async for summary in summaries()
                )
                return
            out = _render.Output()
            if pages is not None:
                read_pages = pages

                def paged() -> AsyncIterator[Sequence[Any]]:
                    return read_pages(ledger, now)

                await render(out, summaries, now=now, show_private=show_private, pages=paged)
            else:
                await render(out, summaries, now=now, show_private=show_private)
            if footer is not None:
                await footer(ledger, out, now)


@click.command("history")
@click.argument("action_id")
@json_option
@show_private_option()
@click.pass_context
def history(ctx: click.Context, action_id: str, as_json: bool, show_private: bool) -> None:
    """Show every recorded transition of an action: time, event, both axes, actor, evidence."""
    path = ledger_path(settings_of(ctx), create=False)
    with ledger_errors():
        entries = read_one(path, lambda ledger: ledger.history(action_id))
    if as_json:
        _render_json.emit_json(_render_values.history_data(entries, show_private=show_private))
        return
    _render_records.render_history(_render.Output(), entries, show_private=show_private)


@click.command("review")
@json_option
@show_private_option()
@click.pass_context
def review(ctx: click.Context, as_json: bool, show_private: bool) -> None:
    """List the actions waiting for a person (ambiguous, duplicated, mismatched, out of
    budget, stuck), with their reasons; then the unresolved attempts that hold a phone (no
    other action can start there until a read proves their outcome or a pass frees it),
    with how long and until when."""
    path = ledger_path(settings_of(ctx), create=False)

    async def work() -> None:
        async with open_ledger(path, read_only=True) as ledger:
            now = ledger.now()
            async with ledger.read_snapshot():
                holds = await _holds(ledger)
                approvals = await ledger.awaiting_approval(now=now)
                held = {
                    hold.action_id: await ledger.summary(hold.action_id, now=now) for hold in holds
                }

                def summaries() -> AsyncIterator[ActionSummary]:
                    return ledger.iter_summaries(needs_review=True, now=now)

                if as_json:
                    await _render_json.emit_json_stream(
                        _review_items(
                            summaries(), holds, held, approvals, show_private=show_private
                        )
                    )
                    return
                out = _render.Output()
                await _render_records.stream_review(
                    out, summaries, now=now, show_private=show_private
                )
                _render_records.render_holds(out, holds, now=now)
                _render_records.render_approvals(out, approvals, now=now, show_private=show_private)

    run(work())


async def _holds(ledger: Ledger) -> list[PhoneHold]:
    """Every phone's hold: its unresolved attempt, and when a pass can free it (voids at the
    shortest age a sender uses, ``VOID_AFTER``)."""
    from starebrain_actions.orchestration.reconciler import VOID_AFTER

    holds = []
    for record in await ledger.holders():
        action = await ledger.get_action(record.action_id)
        holds.append(phone_hold(record, action, VOID_AFTER))
    return holds


async def _review_items(
    summaries: AsyncIterator[ActionSummary],
    holds: Sequence[PhoneHold],
    held: Mapping[str, ActionSummary],
    approvals: Sequence[ActionSummary] = (),
    *,
    show_private: bool,
) -> AsyncIterator[dict[str, Any]]:
    """``review --json``: the actions needing a person, then those whose attempt holds a
    phone, each with ``holds_phone`` (null, or the hold), then those the policy gate holds
    for a person's approval (``awaits_approval`` true)."""
    by_action = {hold.action_id: hold for hold in holds}
    listed = set()
    async for summary in summaries:
        data = _render_values.summary_data(summary, show_private=show_private)
        hold = by_action.get(summary.action.action_id)
        data["holds_phone"] = _render_values.hold_data(hold) if hold is not None else None
        data["awaits_approval"] = False
        listed.add(summary.action.action_id)
        yield data
    for hold in holds:
        if hold.action_id in listed:
            continue
        listed.add(hold.action_id)
        data = _render_values.summary_data(held[hold.action_id], show_private=show_private)
        data["holds_phone"] = _render_values.hold_data(hold)
        data["awaits_approval"] = False
        yield data
    for summary in approvals:
        if summary.action.action_id in listed:
            continue
        data = _render_values.summary_data(summary, show_private=show_private)
        data["holds_phone"] = None
        data["awaits_approval"] = True
        yield data
