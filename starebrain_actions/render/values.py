"""A record's values in words and as JSON data: times, durations, provider rows, reasons,
evidence, the budget spent, what a status means, where an action went (its phone, or its
place in the queue), and the JSON shapes of summaries, history, holds and gate verdicts
(personal data redacted unless shown on purpose)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from starebrain_actions.core import decisions as _decisions
from starebrain_actions.core.convert import age, format_time, to_jsonable
from starebrain_actions.core.events import LedgerEvent
from starebrain_actions.core.model import (
    ActionRecord,
    ActionSummary,
    HistoryEntry,
    PhoneHold,
    ProviderKind,
    ReviewReason,
    Status,
    provider_row_name,
)
from starebrain_actions.render.sanitize import redact_body, redact_data, redact_number


def settles_at(summary: ActionSummary) -> datetime | None:
    """When the latest attempt's row settles, while the action is VERIFYING because of it
    (sent by the phone, not yet settled); None otherwise."""
    latest = summary.latest
    if summary.status is not Status.VERIFYING or latest is None:
        return None
    return _decisions.settling_until(latest)


#: What a person does about a try that sent nothing for another reason than a phone not
#: ready (whose remedy the bridge words and the attempt keeps: ``not_ready_remedy``), by
#: ``decisions.unsent_why``.
_UNSENT_REMEDIES: Final = {
    "unreachable": "check the phone's connection (adb devices)",
    "fence_lost": "nothing: the next attempt makes a new fence on the phone",
}


def unsent_reason(record: ActionRecord) -> str:
    """Why a try sent nothing, as its send said it (the error it kept)."""
    error = record.evidence.get("error")
    if isinstance(error, str) and error:
        return error
    return record.last_error or str(_decisions.unsent_why(record))


def unsent_remedy(record: ActionRecord) -> str | None:
    """What a person does about a try that sent nothing: the not-ready remedy the send
    kept (``decisions.not_ready_remedy``), or the unreachable one; None for another
    attempt."""
    why = _decisions.unsent_why(record)
    if why is None:
        return None
    return _decisions.not_ready_remedy(record) or _UNSENT_REMEDIES[why]


def unsent_tries(summary: ActionSummary) -> tuple[ActionRecord, ...]:
    """The action's tries that sent nothing and spent no attempt (the phone not ready,
    unreachable, its fence lost: ``decisions.unsent_why``), oldest first."""
    return tuple(r for r in summary.attempts if _decisions.unsent_why(r) is not None)


def waiting_text(summary: ActionSummary) -> str | None:
    """``waiting for the phone: REASON; to do: REMEDY…`` while the action is PLANNED
    because its latest try found the phone not ready or not answering
    (``decisions.waiting_for_phone``); None otherwise."""
    latest = summary.latest
    if summary.status is not Status.PLANNED or latest is None:
        return None
    if _decisions.unsent_why(latest) is None:
        return None
    then = (
        f"a worker of pool {summary.action.pool} sends it once it is done"
        if summary.action.pool is not None
        else "rerun the send (or `starebrain resume`) once it is done"
    )
    return (
        f"waiting for the phone: {unsent_reason(latest)}; to do: {unsent_remedy(latest)}."
        f" Nothing was sent and no attempt was spent; {then}"
    )


def status_meaning(summary: ActionSummary) -> str | None:
    """The status in words where the bare word could mislead: an action waiting for the
    phone, a row that has not settled, a send the phone showed and then marked failed."""
    if summary.status is Status.DENIED:
        return (
            f"denied by {denial_rule(summary)}: never sent, by any path (a DENY is final; to"
            " send the text after all, send it as a new action)"
        )
    if summary.status is Status.EXPIRED:
        return (
            f"its deadline ({when(summary.action.intent.not_after)}) passed with nothing sent:"
            " never sent, by any path (no ruling lifts a deadline; to send the text after"
            " all, send it as a new action)"
        )
    waiting = waiting_text(summary)
    if waiting is not None:
        return waiting
    due = settles_at(summary)
    if due is not None:
        latest = summary.latest
        if latest is not None and _decisions.sent_as_mms(latest, latest.provider_kind):
            return (
                "sent by the phone as MMS, not settled: no time proves an MMS (MmsService may"
                f" still fail it); still sent at {when(due)}, it goes to a person"
            )
        return (
            "sent by the phone, not yet settled: the app may still mark it failed until"
            f" {when(due)}"
        )
    latest = summary.latest
    if latest is not None and _decisions.failed_after_sent(latest):
        return "the phone showed it sent, then marked it failed: nothing went out"
    if latest is not None and latest.review_reason is ReviewReason.UNSETTLED:
        why = latest.evidence.get("why")
        if isinstance(why, str) and why and "no longer in view" not in why:
            # a row that may hide a send (parts of a long text, an MMS, a late FAILED)
            return f"{why}: a person must rule; it is never resent without a ruling"
        return (
            "the phone showed it sent, then its row left the view before it settled (failed,"
            " or deleted by the phone's owner): a person must rule; it is never resent"
        )
    return None


def denial_rule(summary: ActionSummary) -> str:
    """What denied the action: ``approval`` (a person's ``starebrain deny``) or the gate's
    rule (``recipients.deny``…)."""
    action = summary.action
    if action.approval == "DENIED":
        return "approval"
    return str((action.gate or {}).get("rule") or "the policy gate")


def status_cell(summary: ActionSummary) -> str:
    """The status for a table cell: a denied action with what denied it
    (``DENIED (recipients.deny)``)."""
    if summary.status is Status.DENIED:
        return f"{summary.status.value} ({denial_rule(summary)})"
    return summary.status.value


def gate_text(summary: ActionSummary) -> str | None:
    """What the policy gate keeps on the action, in words: its latest refusing verdict with
    its rule, and the digest of the rules pinned to it; None when no gate has judged it."""
    action = summary.action
    verdict = action.gate or {}
    parts = []
    if verdict:
        parts.append(
            f"{verdict.get('verdict')} by {verdict.get('rule')}: {verdict.get('detail')}"
            f" (at {verdict.get('at')})"
        )
    if action.approval is not None:
        parts.append(f"a person's ruling: {action.approval}")
    if action.gate_policy is not None:
        parts.append(f"judged by the rules {action.gate_policy} on every path")
    return "; ".join(parts) or None


def summary_data(summary: ActionSummary, *, show_private: bool) -> dict[str, Any]:
    """An action summary as JSON-able data: the record fields plus what is derived
    (``settling`` and ``settles_at``: sent by the phone, not yet settled), and the intent's
    deadline and schedule (``not_after``, ``not_before``: null when it has none)."""
    data: dict[str, Any] = to_jsonable(summary)
    data["needs_review"] = summary.needs_review
    data["latest"] = data["attempts"][-1] if data["attempts"] else None
    due = settles_at(summary)
    data["settling"] = due is not None
    data["settles_at"] = to_jsonable(due) if due is not None else None
    intent = summary.action.intent
    data["not_after"] = to_jsonable(intent.not_after) if intent.not_after else None
    data["not_before"] = to_jsonable(intent.not_before) if intent.not_before else None
    data["attempts_spent"] = spent_attempts(summary)
    data["unsent_tries"] = [unsent_try_data(record) for record in unsent_tries(summary)]
    data["waiting_for_phone"] = waiting_text(summary)
    return dict(redact_data(data, show_private=show_private))


def unsent_try_data(record: ActionRecord) -> dict[str, Any]:
    """A try that sent nothing as JSON (``unsent_tries``): which attempt, why
    (``not_ready``, ``unreachable``, ``fence_lost``), the not-ready check, the reason and
    what a person does about it."""
    return {
        "attempt": record.attempt,
        "dispatch_id": record.dispatch_id,
        "device": record.device,
        "dispatched_at": when(record.dispatched_at),
        "why": _decisions.unsent_why(record),
        "check": _decisions.not_ready(record),
        "reason": unsent_reason(record),
        "remedy": unsent_remedy(record),
    }


def history_data(entries: Sequence[HistoryEntry], *, show_private: bool) -> list[Any]:
    """History entries as JSON-able data."""
    return list(redact_data(to_jsonable(list(entries)), show_private=show_private))


def when(value: datetime | None) -> str:
    """A time as the ledger writes it, or ``-``."""
    return format_time(value) if value is not None else "-"


def hold_data(hold: PhoneHold) -> dict[str, Any]:
    """A phone's hold as JSON: the attempt, since when, and when a pass can free it."""
    return {
        "action_id": hold.action_id,
        "dispatch_id": hold.dispatch_id,
        "device": hold.device,
        "since": when(hold.since),
        "void_from": when(hold.void_from) if hold.void_from is not None else None,
        "review_at": when(hold.review_at),
        "releasable_at": when(hold.releasable_at()),
    }


def gate_data(decision: Any) -> dict[str, Any]:
    """The policy gate's verdict as JSON: verdict, rule, detail, until, the file's digest."""
    return {
        "verdict": decision.verdict.value,
        "rule": decision.rule,
        "detail": decision.detail,
        "until": when(decision.until) if decision.until is not None else None,
        "digest": decision.digest,
    }


def duration_text(delta: timedelta) -> str:
    """A configured duration, exactly and short: ``24h``, ``90m``, ``45s``, ``0.5s``."""
    seconds = delta.total_seconds()
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def provider_row_text(provider_object_id: int | None, kind: ProviderKind | str | None) -> str:
    """A provider row for a table cell: an SMS row as its bare ``_id`` (``812``, as always),
    any other with its table named (``mms _id 12``: MMS ``_id``s are another numbering),
    ``-`` for none. ``kind`` may be the stored text (``"mms"``), as ``Ledger.duplicates``
    gives it; None with an ``_id`` is an SMS row."""
    if provider_object_id is None:
        return "-"
    provider_kind = ProviderKind.SMS if kind is None else ProviderKind(kind)
    if provider_kind is ProviderKind.SMS:
        return str(provider_object_id)
    return provider_row_name(provider_kind, provider_object_id)


def recipient_text(summary: ActionSummary, *, show_private: bool) -> str:
    """The action's recipient, redacted unless shown on purpose."""
    recipient = summary.action.intent.recipient
    return recipient if show_private else redact_number(recipient)


def body_text(summary: ActionSummary, *, show_private: bool) -> str:
    """The action's body, redacted unless shown on purpose."""
    body = summary.action.intent.body
    return body if show_private else redact_body(body)


def reasons_text(summary: ActionSummary) -> str:
    """Review reasons, comma-separated, then superseded ones (``MISMATCH (superseded)``: a
    wrong message went out before a good resend), or ``-``."""
    shown = [reason.value for reason in summary.review_reasons]
    shown += [f"{reason.value} (superseded)" for reason in summary.superseded_reasons]
    return ", ".join(shown) or "-"


def evidence_text(evidence: Mapping[str, Any], *, show_private: bool) -> str:
    """Evidence as compact ``key=value`` text (nested values as JSON), redacted by default."""
    data = redact_data(dict(evidence), show_private=show_private)
    parts = []
    for key in sorted(data):
        value = data[key]
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        parts.append(f"{key}={shown}")
    return " ".join(parts) or "-"


def spent_attempts(summary: ActionSummary) -> int:
    """The attempts that spent the action's budget (since an operator's grant, if any)."""
    counted = summary.action.counted(summary.attempts)
    return sum(1 for record in counted if _decisions.spends_budget(record))


def attempts_made(summary: ActionSummary) -> int:
    """The attempts that could have sent the message (they spent the budget), since the
    first: ``list``'s count. Tries that sent nothing (the phone not ready, unreachable:
    ``unsent_tries``) are not among them."""
    return sum(1 for record in summary.attempts if _decisions.spends_budget(record))


def first_sent_at(summary: ActionSummary) -> datetime | None:
    """When the action's first attempt that could have sent it was handed to the phone
    (``decisions.first_sent``); None while none was (no attempt, or only tries the phone
    refused before anything was sent)."""
    first = _decisions.first_sent(summary.attempts)
    return first.dispatched_at if first is not None else None


def attempts_text(summary: ActionSummary) -> str:
    """``2 of 3 allowed``; after an operator's grant, counted from it, and saying so."""
    action = summary.action
    counted = action.counted(summary.attempts)
    spent = spent_attempts(summary)
    text = f"{spent} of {action.budget} allowed"
    if spent < len(counted):
        text += (
            f" (and {len(counted) - spent} that spent nothing: the phone was not ready or"
            " did not answer)"
        )
    grant = action.grant
    if grant is not None:
        text += (
            f" since attempt {grant.after_attempt} (a retry granted by {grant.granted_by} at"
            f" {when(grant.granted_at)}; its reason is in the history)"
        )
    return text


def where_text(summary: ActionSummary) -> str:
    """Where the action went, in one word (``list``'s ``device`` column): the phone of its
    latest attempt; while it has none and was queued, ``claimed:WORKER`` (a worker drives it
    now), ``queued:POOL`` (waiting for a worker of its pool) or ``pool:POOL`` (it left the
    queue without an attempt: refused, or in a person's hands); ``-`` otherwise."""
    if summary.latest is not None:
        return summary.latest.device
    action = summary.action
    if action.claim is not None:
        return f"claimed:{action.claim.worker}"
    if action.pool is None:
        return "-"
    return f"queued:{action.pool}" if action.queue_after is not None else f"pool:{action.pool}"


def queue_text(summary: ActionSummary, now: datetime | None = None) -> str | None:
    """A queued action's place in its pool's queue, in words (``status``'s ``queue`` line):
    the worker driving it and on which phone, since when; else when a worker looks at it
    next (``due now`` from ``now`` on); else that it left the queue. None: never queued."""
    action = summary.action
    if action.pool is None:
        return None
    claim = action.claim
    if claim is not None:
        return (
            f"claimed by worker {claim.worker} on phone {claim.device} since"
            f" {when(claim.claimed_at)}"
        )
    after = action.queue_after
    if after is None:
        return (
            "left the queue (sent, refused, or in a person's hands; a person's ruling puts it back)"
        )
    if now is not None and after <= now:
        return f"waiting: due now (since {when(after)}), for the next free worker"
    return f"waiting: a worker looks at it again from {when(after)}"


def queue_tally_text(tally: Mapping[str, Mapping[str, int]]) -> str | None:
    """``queue: default 12 waiting, 3 later, 2 claimed; bulk 0 waiting, …`` from
    ``Ledger.queue_tally``: per pool, the actions due now, those due later (a backoff, a
    recheck) and those a worker drives; None without any pool."""
    if not tally:
        return None
    parts = [
        f"{pool} {counts.get('waiting', 0)} waiting, {counts.get('later', 0)} later,"
        f" {counts.get('claimed', 0)} claimed"
        for pool, counts in tally.items()
    ]
    return "queue: " + "; ".join(parts)


def heartbeat_text(heartbeat_at: datetime, now: datetime, *, stale: bool) -> str:
    """A worker's heartbeat by its age: ``beat 3s ago``, or ``STALE (beat 45s ago)`` once
    it is older than the queue's ``STALE_AFTER`` (its phone and claims may be taken over)."""
    beat = f"beat {age(now - heartbeat_at)} ago"
    return f"STALE ({beat})" if stale else beat


def status_counts_text(counts: Mapping[Status, int] | Mapping[str, int]) -> str:
    """``SUCCEEDED=3 FAILED=1``: non-zero counts in the status table's order."""
    lookup = {str(key): value for key, value in counts.items()}
    parts = [f"{status.value}={lookup[status.value]}" for status in Status if lookup.get(status)]
    return " ".join(parts) or "none"


#: What a person runs on an action the policy gate holds for approval (``ID``: its id): the
#: first lets it go, the second stops it for good. ``review`` and the nightly report name
#: the same two.
APPROVE_COMMAND: Final = "starebrain approve ID"
DENY_COMMAND: Final = "starebrain deny ID --reason TEXT"


def approval_commands(action_id: str) -> tuple[str, str]:
    """``APPROVE_COMMAND`` and ``DENY_COMMAND`` for one action, ready to paste: its id quoted
    for a POSIX shell, behind ``--`` when it starts with ``-`` (else read as an option)."""
    shown = shlex.quote(action_id)
    if action_id.startswith("-"):
        return f"starebrain approve -- {shown}", f"starebrain deny --reason TEXT -- {shown}"
    return f"starebrain approve {shown}", f"starebrain deny {shown} --reason TEXT"


def answering_command(event: LedgerEvent) -> str | None:
    """The command that answers an event a person must act on, its action's id ready to
    paste (None: none): ``action.failed`` is granted more attempts, a hold for approval is
    approved (``approval_commands``), a review is ruled on, a MISMATCH or DUPLICATE is
    looked at."""
    action = event.action_id
    if action is None or event.type not in ("action.failed", "action.needs_person"):
        return None
    if event.type == "action.needs_person" and event.data.get("event") == "policy_verdict":
        return approval_commands(action)[0]
    shown = shlex.quote(action) if not action.startswith("-") else f"-- {shlex.quote(action)}"
    if event.type == "action.failed":
        return f"starebrain retry {shown} --reason TEXT"
    if event.data.get("review_reason") in ("MISMATCH", "DUPLICATE"):
        # something went out that a person should see; nothing to rule on (`review` takes
        # no id: it lists every action waiting)
        return f"starebrain status {shown}"
    return f"starebrain resolve {shown} --as sent|not-sent --reason TEXT"


def event_data(event: LedgerEvent, *, show_private: bool) -> dict[str, Any]:
    """An event as it is shown and sent (``starebrain events --json``, MCP ``get_events``,
    webhooks): JSON-able, personal fields redacted unless ``show_private``; ``data.command``
    says how a person answers ``action.needs_person`` and ``action.failed``."""
    data = dict(event.data)
    command = answering_command(event)
    if command is not None:
        data["command"] = command
    return {
        "id": event.event_id,
        "position": event.position,
        "type": event.type,
        "action_id": event.action_id,
        "dispatch_id": event.dispatch_id,
        "device": event.device,
        "at": format_time(event.at),
        "data": redact_data(data, show_private=show_private),
    }
