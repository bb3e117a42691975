"""Records printed for people on an :class:`Output`: one action with its attempts (and its
place in the queue), lists of actions (read whole or streamed), history, the review queue,
held phones and the actions waiting for approval."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime
from typing import Any, Final

from starebrain_actions.core.convert import age, parse_time
from starebrain_actions.core.model import (
    Action,
    ActionRecord,
    ActionSummary,
    HistoryEntry,
    PhoneHold,
    QuietSuccess,
    Status,
)
from starebrain_actions.render.output import Output, stream_table
from starebrain_actions.render.sanitize import redact_number
from starebrain_actions.render.values import APPROVE_COMMAND as APPROVE_COMMAND
from starebrain_actions.render.values import DENY_COMMAND as DENY_COMMAND
from starebrain_actions.render.values import approval_commands as approval_commands
from starebrain_actions.render.values import (
    attempts_made,
    attempts_text,
    body_text,
    evidence_text,
    gate_text,
    provider_row_text,
    queue_text,
    reasons_text,
    recipient_text,
    spent_attempts,
    status_cell,
    status_meaning,
    unsent_reason,
    unsent_remedy,
    unsent_tries,
    when,
    where_text,
)


def render_summary(
    out: Output, summary: ActionSummary, *, show_private: bool, now: datetime | None = None
) -> None:
    """Print one action: its intent (redacted by default), status, its deadline and
    schedule (when it has them), its place in the queue
    when it was queued (its pool; the worker and phone driving it, or when a worker looks at
    it next, or that it left the queue: ``queue_text``, due now from ``now`` on), every
    attempt, and apart from them the tries that sent nothing (the phone not ready)."""
    action = summary.action
    queue = queue_text(summary, now)
    out.fields(
        [
            ("action", action.action_id),
            ("status", summary.status.value),
            *([("meaning", meaning)] if (meaning := status_meaning(summary)) else []),
            (
                "needs review",
                ", ".join(reason.value for reason in summary.review_reasons) or "no",
            ),
            *(
                [("superseded", ", ".join(r.value for r in summary.superseded_reasons))]
                if summary.superseded_reasons
                else []
            ),
            ("to", recipient_text(summary, show_private=show_private)),
            ("body", body_text(summary, show_private=show_private)),
            ("fingerprint", action.fingerprint),
            ("created", when(action.created_at)),
            *([("not after", deadline_text(summary))] if action.intent.not_after else []),
            *([("not before", when(action.intent.not_before))] if action.intent.not_before else []),
            *([("owner", action.owner)] if action.owner else []),
            *(
                [("phone", f"{action.planned_device} (only this phone sends it)")]
                if action.planned_device and action.pool is None and not summary.attempts
                else []
            ),
            *([("pool", action.pool), ("queue", queue)] if action.pool and queue else []),
            *([("gate", gate)] if (gate := gate_text(summary)) else []),
            ("attempts", attempts_text(summary)),
            ("duplicates", str(summary.duplicates)),
        ],
        wrap=("meaning", "needs review", "superseded", "body", "queue", "gate"),
    )
    unsent = unsent_tries(summary)
    spent = [record for record in summary.attempts if record not in unsent]
    if spent:
        render_attempts(out, spent)
    if unsent:
        render_unsent_tries(out, unsent)


def render_attempts(out: Output, attempts: Sequence[ActionRecord]) -> None:
    """Print attempts as a table: both axes, the provider row (``mms _id 12`` for an MMS row),
    the version (what ``resolve --expect`` takes) and the last error."""
    out.table(
        [
            "#",
            "v",
            "dispatch id",
            "device",
            "delivery",
            "acceptance",
            "sms _id",
            "dispatched",
            "review",
            "last error",
        ],
        (
            [
                str(record.attempt),
                str(record.version),
                record.dispatch_id,
                record.device,
                record.delivery.value,
                record.acceptance.value,
                provider_row_text(record.provider_object_id, record.provider_kind),
                when(record.dispatched_at),
                record.review_reason.value if record.review_reason else "-",
                record.last_error or "-",
            ]
            for record in attempts
        ),
        title="attempts",
    )


def render_unsent_tries(out: Output, tries: Sequence[ActionRecord]) -> None:
    """Print the tries that sent nothing and spent no attempt (the phone not ready or not
    answering), apart from the attempts: why, and what a person does about it."""
    out.table(
        ["#", "dispatch id", "device", "tried", "why", "to do"],
        (
            [
                str(record.attempt),
                record.dispatch_id,
                record.device,
                when(record.dispatched_at),
                unsent_reason(record),
                unsent_remedy(record) or "-",
            ]
            for record in tries
        ),
        title="tries that sent nothing (the phone was not ready or did not answer; no attempt"
        " spent)",
        wrap=("why", "to do"),
    )


def render_list(
    out: Output, summaries: Sequence[ActionSummary], *, now: datetime, show_private: bool
) -> None:
    """Print actions one per line, newest first."""
    if not summaries:
        out.line("no actions match")
        return
    out.table(LIST_COLUMNS, (list_cells(summary, now, show_private) for summary in summaries))


#: The columns of ``starebrain list`` (``device``: where the action went, ``where_text``).
LIST_COLUMNS: Final = ("action", "status", "to", "attempts", "device", "age", "review")


def list_cells(summary: ActionSummary, now: datetime, show_private: bool) -> list[str]:
    """One row of ``starebrain list``."""
    return [
        summary.action.action_id,
        status_cell(summary),
        recipient_text(summary, show_private=show_private),
        str(attempts_made(summary)),
        where_text(summary),
        age(now - summary.action.created_at),
        reasons_text(summary),
    ]


def listed_cells(
    item: ActionSummary | QuietSuccess,
    now: datetime,
    show_private: bool,
    shown: dict[str, str] | None = None,
) -> list[str]:
    """``list_cells`` of what ``Ledger.iter_listed`` yields: a ``QuietSuccess`` shows as
    its summary would (SUCCEEDED, every attempt spent, its latest attempt's phone, no
    reason). ``shown``: each recipient as the listing shows it, kept by the caller (a
    listing has few recipients for many actions)."""
    if type(item) is not QuietSuccess:
        return list_cells(item, now, show_private)  # type: ignore[arg-type]
    action_id, created_at, recipient, attempts, device = item
    to: str | None = recipient
    if not show_private:
        to = shown.get(recipient) if shown is not None else None
        if to is None:
            to = redact_number(recipient)
            if shown is not None:
                if len(shown) >= _SHOWN_RECIPIENTS:
                    shown.clear()
                shown[recipient] = to
    return [action_id, _SUCCEEDED, str(to), str(attempts), device, age(now - created_at), "-"]


#: How many recipients ``stream_list`` keeps as shown.
_SHOWN_RECIPIENTS: Final = 65_536
_SUCCEEDED: Final = Status.SUCCEEDED.value


def listed_page_cells(
    page: Sequence[ActionSummary | QuietSuccess],
    now: datetime,
    show_private: bool,
    shown: dict[str, str],
) -> list[list[str]]:
    """``listed_cells`` of each item of a page, in order (the loop written out: a listing
    makes one row per action)."""
    rows: list[list[str]] = []
    append = rows.append
    for item in page:
        if type(item) is not QuietSuccess:
            append(list_cells(item, now, show_private))  # type: ignore[arg-type]
            continue
        action_id, created_at, recipient, attempts, device = item
        to: str | None = recipient
        if not show_private:
            to = shown.get(recipient)
            if to is None:
                to = redact_number(recipient)
                if len(shown) >= _SHOWN_RECIPIENTS:
                    shown.clear()
                shown[recipient] = to
        seconds = int((now - created_at).total_seconds())
        if seconds >= _TWO_DAYS:  # ``age``'s last case, one string per day
            days = seconds // 86400
            shown_age = _DAYS.get(days)
            if shown_age is None:
                shown_age = _DAYS.setdefault(days, age(now - created_at))
        else:
            shown_age = age(now - created_at)
        append([action_id, _SUCCEEDED, str(to), str(attempts), device, shown_age, "-"])
    return rows


#: ``age`` from two days on, by the number of days (``listed_page_cells``).
_TWO_DAYS: Final = 2 * 86400
_DAYS: dict[int, str] = {}


async def stream_list(
    out: Output,
    summaries: Callable[[], AsyncIterator[ActionSummary | QuietSuccess]],
    *,
    now: datetime,
    show_private: bool,
    pages: Callable[[], AsyncIterator[Sequence[ActionSummary | QuietSuccess]]] | None = None,
) -> None:
    """``render_list`` over summaries (or ``Ledger.iter_listed``'s items) read as they come
    (``summaries()`` may be called twice, and must yield the same actions each time: read
    them in one snapshot). ``pages``: the same items a page at a time
    (``Ledger.iter_listed_pages``), used instead of ``summaries`` when given."""

    if pages is not None:
        paged = pages

        async def page_rows() -> AsyncIterator[list[list[str]]]:
            shown: dict[str, str] = {}
            async for page in paged():
                yield listed_page_cells(page, now, show_private, shown)

        if not await stream_table(out, LIST_COLUMNS, page_rows, pages=True):
            out.line("no actions match")
        return

    async def rows() -> AsyncIterator[list[str]]:
        shown: dict[str, str] = {}
        async for item in summaries():
            yield listed_cells(item, now, show_private, shown)

    if not await stream_table(out, LIST_COLUMNS, rows):
        out.line("no actions match")


async def _cells_of(
    summaries: AsyncIterator[Any], cells: Callable[[Any], list[str]]
) -> AsyncIterator[list[str]]:
    async for summary in summaries:
        yield cells(summary)


def render_history(out: Output, entries: Sequence[HistoryEntry], *, show_private: bool) -> None:
    """Print every transition: time, attempt, event, both axes before and after, actor, evidence."""
    if not entries:
        out.line("no history (the action has no attempt yet)")
        return
    out.table(
        ["#", "at", "dispatch id", "event", "delivery", "acceptance", "actor", "evidence"],
        (
            [
                str(entry.sequence),
                when(entry.at),
                entry.dispatch_id,
                entry.event.value,
                _arrow(entry.from_delivery, entry.to_delivery),
                _arrow(entry.from_acceptance, entry.to_acceptance),
                entry.actor,
                evidence_text(entry.evidence, show_private=show_private),
            ]
            for entry in entries
        ),
    )


def _arrow(before: Any, after: Any) -> str:
    if before is None:
        return str(after.value)
    if before == after:
        return str(after.value)
    return f"{before.value}->{after.value}"


def render_review(
    out: Output, summaries: Sequence[ActionSummary], *, now: datetime, show_private: bool
) -> None:
    """Print the actions waiting for a person, with why and what to run next."""
    if not summaries:
        out.line("nothing needs review")
        return
    out.table(
        REVIEW_COLUMNS,
        (review_cells(summary, now, show_private) for summary in summaries),
        wrap=("reasons",),
    )
    out.line(_review_footer(len(summaries)))


#: The columns of ``starebrain review``.
REVIEW_COLUMNS: Final = ("action", "status", "reasons", "to", "attempts", "duplicates", "age")


def review_cells(summary: ActionSummary, now: datetime, show_private: bool) -> list[str]:
    """One row of ``starebrain review``."""
    return [
        summary.action.action_id,
        summary.status.value,
        reasons_text(summary),
        recipient_text(summary, show_private=show_private),
        f"{spent_attempts(summary)}/{summary.action.budget}",
        str(summary.duplicates),
        age(now - summary.action.created_at),
    ]


def _review_footer(count: int) -> str:
    return (
        f"{count} action(s) need a person: inspect with `starebrain history ID`, then"
        " `starebrain resolve ID --as sent|not-sent --reason TEXT`; one out of attempts"
        " (BUDGET_EXHAUSTED) gets another chance with `starebrain retry ID --reason TEXT`"
    )


async def stream_review(
    out: Output,
    summaries: Callable[[], AsyncIterator[ActionSummary]],
    *,
    now: datetime,
    show_private: bool,
) -> None:
    """``render_review`` over summaries read as they come (see ``stream_list``)."""

    def rows() -> AsyncIterator[list[str]]:
        return _cells_of(summaries(), lambda summary: review_cells(summary, now, show_private))

    count = await stream_table(out, REVIEW_COLUMNS, rows, wrap=("reasons",))
    if not count:
        out.line("nothing needs review")
        return
    out.line(_review_footer(count))


def render_holds(out: Output, holds: Sequence[PhoneHold], *, now: datetime) -> None:
    """The phones held by unresolved attempts: since when, and when a pass can free each
    (voiding the fence if the send script never ran; moving it to review at the latest)."""
    if not holds:
        return
    out.line("phones held by an unresolved attempt (no other action starts there meanwhile):")
    out.table(
        ["phone", "action", "dispatch id", "held for", "void from", "review at"],
        (
            [
                hold.device,
                hold.action_id,
                hold.dispatch_id,
                age(now - hold.since),
                when(hold.void_from),
                when(hold.review_at),
            ]
            for hold in holds
        ),
    )
    out.line(
        "a send or `starebrain reconcile` on that phone reads it: the attempt is settled by its"
        " row, voided from 'void from' if its script never ran, or moved to review at"
        " 'review at', which frees the phone"
    )


def held_rule(action: Action) -> str:
    """The policy gate's rule that holds ``action`` (``recipients.approve``), or ``-``."""
    rule = (action.gate or {}).get("rule")
    return str(rule) if rule else "-"


def held_since(action: Action) -> datetime:
    """When the policy gate held ``action`` (its verdict's time; its creation when the
    verdict kept no readable time)."""
    at = (action.gate or {}).get("at")
    try:
        return parse_time(at) if isinstance(at, str) else action.created_at
    except ValueError:
        return action.created_at


def render_approvals(
    out: Output, summaries: Sequence[ActionSummary], *, now: datetime, show_private: bool
) -> None:
    """The actions the policy gate holds for a person's approval."""
    if not summaries:
        return
    out.line("waiting for a person's approval (the policy gate holds them; nothing was sent):")
    out.table(
        ["action", "to", "rule", "held for"],
        (
            [
                summary.action.action_id,
                recipient_text(summary, show_private=show_private),
                held_rule(summary.action),
                age(now - held_since(summary.action)),
            ]
            for summary in summaries
        ),
    )
    out.line(f"`{APPROVE_COMMAND}` lets one go; `{DENY_COMMAND}` stops it")


def deadline_text(summary: ActionSummary) -> str:
    """The deadline, and when the ledger recorded that it passed with nothing sent."""
    action = summary.action
    shown = when(action.intent.not_after)
    if action.expired_at is not None:
        return f"{shown} (passed with nothing sent; recorded {when(action.expired_at)})"
    return f"{shown} (no attempt starts at or after it)"
