"""What the MCP server tells a model: structured results, and one ``next_step`` sentence per
state, derived from an action's summary (pure: no I/O).

Every result carries both axes of the latest attempt, the derived status, the review reasons
(and the superseded ones), the attempt count, the action id (repeated, and whether it was
derived from the intent), whether a call sent nothing and answers with the action's earlier
message, and a ``next_step`` written for a model: what to do now, never "send it again under
a new id" while the outcome is open. A denied action (``Status.DENIED``: a DENY is final)
carries its verdict in ``policy`` and is never said to be retryable.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple

import attrs
from pydantic import BaseModel, Field

from starebrain_actions.core import decisions as _decisions
from starebrain_actions.core.convert import age, format_time
from starebrain_actions.core.decisions import should_redispatch
from starebrain_actions.core.derived_ids import is_derived_id, settled
from starebrain_actions.core.model import (
    AcceptanceState,
    ActionRecord,
    ActionSummary,
    DeliveryState,
    PhoneHold,
    RedispatchDecision,
    ReviewReason,
    Status,
)
from starebrain_actions.ledger.gate import standing_verdict
from starebrain_actions.render import values as _render_values

__all__ = [
    "OPEN_STATUSES",
    "AttemptView",
    "ChangeView",
    "ClaimView",
    "DeviceView",
    "ReconcileResult",
    "RepliesResult",
    "ReplyView",
    "ReviewList",
    "SmsResult",
    "next_step",
    "sms_result",
    "status_line",
]

#: Statuses whose outcome is not proven yet (a read may still settle them).
OPEN_STATUSES: Final = frozenset({Status.IN_FLIGHT, Status.UNKNOWN, Status.VERIFYING})


class AttemptView(BaseModel):
    """One dispatch attempt, as a model needs to see it."""

    attempt: int = Field(description="1 for the first attempt, 2 for the next, ...")
    dispatch_id: str
    device: str = Field(description="The phone it was sent through (host:port).")
    delivery: DeliveryState = Field(
        description="PENDING: no proof yet; CONFIRMED: the phone shows it went out;"
        " FAILED: provably nothing went out."
    )
    acceptance: AcceptanceState = Field(
        description="PENDING: not checked yet; ACCEPTED: the text and recipient on the phone"
        " match; REJECTED: something else went out."
    )
    review_reason: ReviewReason | None = None
    dispatched_at: str
    last_error: str | None = None


class PolicyView(BaseModel):
    """The policy gate's verdict on an action."""

    verdict: str = Field(description="DENY, HOLD, WAIT or OVER_LIMIT.")
    rule: str = Field(description="The rule that decided, as the policy file names it.")
    detail: str = Field(description="Why, in a sentence.")
    until: str | None = Field(default=None, description="WAIT: when the quiet hours end (UTC).")


class ClaimView(BaseModel):
    """The worker driving a queued action now, and the phone it took it for."""

    worker: str = Field(description="The worker (host:pid) that took the action.")
    device: str = Field(description="The phone it took it for (its key in the ledger).")
    claimed_at: str = Field(description="When it took it (UTC).")


class HoldView(BaseModel):
    """Another action's unresolved attempt holding the phone, and when it can be freed."""

    action_id: str = Field(description="The action whose attempt holds the phone.")
    dispatch_id: str
    since: str = Field(description="When that attempt started (UTC).")
    releasable_at: str = Field(
        description="The earliest time a read of the phone can free it without finding that"
        " message (UTC): call send_sms again with the same action_id then."
    )
    review_at: str = Field(
        description="When that attempt goes to review at the latest, which frees the phone."
    )


class SmsResult(BaseModel):
    """Where one SMS action stands: both axes, the derived status, and what to do next."""

    action_id: str = Field(
        description="The action's id. Pass exactly this id again to retry or to ask for its"
        " status: a repeated send never sends a second SMS."
    )
    action_id_derived: bool = Field(
        description="True when the id was derived from the recipient and text (none given):"
        " the same text to the same number is then one action while its outcome is open, and"
        " for the server's derived id window (24 hours by default) after its latest attempt."
    )
    earlier_message: bool = Field(
        default=False,
        description="send_sms only: True when the call repeated one already made: the action"
        " had an attempt before it and has no new one, so the result is about that earlier"
        " message, never a new send. first_sent_at says when it went out.",
    )
    first_sent_at: str | None = Field(
        default=None,
        description="When the action's first attempt that could have sent it was handed to"
        " the phone (UTC); null while none was (tries the phone refused before anything was"
        " sent, when it was not ready, do not count).",
    )
    status: Status = Field(
        description="SUCCEEDED: sent and the text verified on the phone. IN_FLIGHT: being sent,"
        " not proven yet. UNKNOWN: still not proven past the grace window (it may have gone"
        " out). VERIFYING: the phone shows it sent, not yet settled (the messaging app may"
        " still mark it failed until settles_at): never report it as delivered, never send it"
        " again. FAILED: nothing went out. MISMATCH: something other than the intended text"
        " went out (or the phone showed it sent, then marked it failed: see next_step)."
        " PLANNED: nothing sent yet: no attempt started yet (a queued action: waiting for a"
        " worker of its pool), or the phone was not ready (or did not answer) and the action"
        " waits for it: waiting_for_phone and phone_not_ready say what a person must do."
        " DENIED: a DENY (a policy rule, or a person) stopped it for good: it is never sent,"
        " by any path; policy says which rule. EXPIRED: its not_after deadline passed with"
        " nothing sent: it is never sent, by any path."
    )
    next_step: str = Field(description="What to do now, in one sentence.")
    delivery: DeliveryState | None = Field(
        description="The latest attempt's delivery axis (None before any attempt)."
    )
    acceptance: AcceptanceState | None = Field(
        description="The latest attempt's acceptance axis (None before any attempt)."
    )
    needs_review: bool = Field(description="True when a person must decide; do not resend.")
    review_reasons: list[ReviewReason] = Field(
        description="Why a person must look (empty: nobody needs to)."
    )
    superseded_reasons: list[ReviewReason] = Field(
        description="Past problems a later attempt superseded (MISMATCH: a wrong text went"
        " out before the good one); they stop nothing."
    )
    settled: bool = Field(
        description="True when nothing can change this action any more without a person."
    )
    settles_at: str | None = Field(
        default=None,
        description="While VERIFYING: when the phone's row settles (UTC); until then the app"
        " may still mark the SMS failed.",
    )
    attempts: int = Field(
        description="Attempts made so far that could have sent it (they spent the budget);"
        " tries the phone refused before anything was sent are counted in unsent_tries."
    )
    unsent_tries: int = Field(
        default=0,
        description="Tries that sent nothing and spent no attempt: the phone was not ready"
        " (locked, screen off, no SMS app...) or did not answer.",
    )
    max_attempts: int = Field(description="Attempts the action's budget allows.")
    retry_at: str | None = Field(
        default=None, description="When a retry is allowed, if it waits for a backoff (UTC)."
    )
    device: str | None = Field(default=None, description="The phone of the latest attempt.")
    pool: str | None = Field(
        default=None,
        description="The pool of phones the action was queued for (send_sms with pool): a"
        " worker beside those phones sends it, never this server. Null: not queued.",
    )
    claim: ClaimView | None = Field(
        default=None,
        description="A queued action a worker is driving now: which worker, and the phone it"
        " took it for. Null otherwise.",
    )
    policy: PolicyView | None = Field(
        default=None,
        description="The policy gate's verdict when it stopped this action: DENY (never"
        " sent), HOLD (a person must approve it; no tool can), WAIT (quiet hours at the"
        " recipient, until `until`), OVER_LIMIT (a limit; try later). Null when it did not.",
    )
    phone_not_ready: str | None = Field(
        default=None,
        description="When the latest attempt found the phone not ready (locked, screen off, no"
        " SMS app...): what a person must do on the phone. Nothing was sent and no attempt was"
        " spent.",
    )
    waiting_for_phone: str | None = Field(
        default=None,
        description="While the action is PLANNED because the phone was not ready or did not"
        " answer: why, and what a person must do, in a sentence. Null otherwise.",
    )
    held_by: HoldView | None = Field(
        default=None,
        description="send_sms only: another action's unresolved attempt that held the phone"
        " when this call stopped waiting, so nothing of this action could start.",
    )
    latest: AttemptView | None = Field(default=None, description="The latest attempt.")
    record: dict[str, Any] | None = Field(
        default=None,
        description="Every attempt's full record, as `starebrain status --json` prints it"
        " (only with detail=true).",
    )


class ReviewList(BaseModel):
    """Actions waiting for a person."""

    count: int
    actions: list[SmsResult]
    next_step: str


class EventView(BaseModel):
    """One event of the ledger (``starebrain events``), as a client sees it."""

    id: str = Field(description="The event's stable id: the same on every read.")
    position: int = Field(description="Its place in the ledger's order: pass it as `after`.")
    type: str = Field(description="What happened, e.g. action.succeeded, action.needs_person.")
    action_id: str | None = Field(description="The action it concerns, as you named it.")
    at: str = Field(description="When it happened (UTC).")
    data: dict[str, Any] = Field(description="What changed (numbers and bodies redacted).")


class EventsPage(BaseModel):
    """The events after a cursor."""

    events: list[EventView]
    #: the cursor to pass next (the last position read, or the one given)
    next_after: int
    #: True when more events may be waiting (the page was full)
    more: bool
    next_step: str


class ReplyView(BaseModel):
    """One reply the ledger recorded."""

    reply_id: int
    number: str = Field(description="The sender (redacted unless the server shows private data).")
    body: str = Field(description="The text (redacted unless the server shows private data).")
    received_at: str = Field(description="When the phone received it (its clock, UTC).")
    keyword: str | None = Field(
        description="opt_out (STOP...) or opt_in (START...) when the whole text was one."
    )


class RepliesResult(BaseModel):
    """The replies linked to one action, and whether its recipient is opted out now."""

    action_id: str
    count: int
    replies: list[ReplyView]
    recipient_opted_out: bool = Field(
        description="True: the recipient asked to receive nothing more (STOP, or a person"
        " said so); every new send to it is refused (rule opted_out) until it opts back in."
    )
    next_step: str


class ChangeView(BaseModel):
    """One transition a reconcile pass applied."""

    action_id: str
    dispatch_id: str
    event: str
    from_status: Status
    to_status: Status


class DeviceView(BaseModel):
    """What a reconcile pass did on one phone."""

    device: str
    reachable: bool
    error: str | None = None
    changes: int = 0
    in_flight: int = Field(default=0, description="Attempts on it still unresolved after the pass.")


class ReconcileResult(BaseModel):
    """One read-only pass over the phones."""

    devices: list[DeviceView]
    changes: list[ChangeView]
    next_step: str


def _reasons(reasons: Sequence[ReviewReason]) -> str:
    return ", ".join(reason.value for reason in reasons)


def next_step(
    summary: ActionSummary,
    *,
    now: datetime,
    sending: bool = False,
    earlier: bool = False,
    held_by: PhoneHold | None = None,
) -> str:
    """What a model should do about an action in this state (pure). ``sending``: a send of
    the action is running in the server right now. ``earlier``: the action had an attempt
    before the call and has no new one (``derived_ids.earlier_message``): the answer is about that
    earlier message, which is said first, with when it went out; once the action is
    settled, how to send the same text again as a new message follows (only then: while
    the outcome is open, a new id could be a second SMS)."""
    summary = _denied_status(summary)
    step = _gate_step(summary) or _state_step(summary, now=now, sending=sending)
    if held_by is not None and not sending and summary.status in (Status.PLANNED, Status.FAILED):
        step = (
            f"Nothing of this action was sent: the phone is held by action"
            f" {held_by.action_id!r}, whose attempt since {format_time(held_by.since)} is"
            " not proven yet (the server reads the phone for it meanwhile). Call send_sms"
            f" again with action_id {summary.action.action_id!r} from"
            f" {format_time(held_by.releasable_at())}, when a read can free the phone (at the"
            f" latest {format_time(held_by.review_at)}); never under a new action_id."
        )
    if not earlier or not summary.attempts:
        return step
    first = _render_values.first_sent_at(summary) or summary.attempts[0].dispatched_at
    verb = "tried" if summary.status in (Status.FAILED, Status.DENIED) else "sent"
    sent_now = "nothing new has been sent so far" if sending else "this call sent nothing"
    said = (
        f"This is the earlier message of action {summary.action.action_id!r}, first {verb} at"
        f" {format_time(first)} ({age(now - first)} ago); {sent_now}."
    )
    if summary.status is Status.DENIED or not settled(summary, datetime.now(UTC)):
        return f"{said} {step}"
    return (
        f"{said} {step} If the user wants the same text sent again as a new message, call"
        " send_sms with a new action_id of your own."
    )


class _Facts(NamedTuple):
    """What every state's step needs to know about the action, worked out once."""

    #: "call send_sms again with action_id '…'"
    again: str
    #: the same words, starting a sentence
    again_first: str
    #: may a new attempt start now
    decision: RedispatchDecision
    #: a retry is allowed, now or after a backoff
    retry_allowed: bool
    #: " from <time>" when the retry waits for a backoff, else ""
    when: str
    #: the review reasons that stop a retry (a MISMATCH a retry may mend does not)
    blocking: list[ReviewReason]
    #: the pool the action is queued for (its workers send it, never a call): None, not
    #: queued
    pool: str | None = None
    #: why no new attempt may start, in words (the redispatch decision's reason, or the
    #: DENY that stopped the action for good)
    stopped: str = ""

    def retry(self, what: str = "retry") -> str:
        """The sentence saying how the action is retried: a call, or its pool's workers."""
        if self.pool is None:
            return f"{self.again_first}{self.when} to {what}."
        done = "retries it" if what == "retry" else f"will {what}"
        return (
            f"A worker of pool {self.pool!r} {done}{self.when} on its own; {self.again} to"
            " follow it (never send it under another action_id)."
        )


def _facts(summary: ActionSummary, now: datetime) -> _Facts:
    action_id = summary.action.action_id
    pool = summary.action.pool
    again = (
        f"call send_sms again with action_id {action_id!r}"
        if pool is None
        else f"call sms_status with action_id {action_id!r}"
    )
    decision = should_redispatch(summary.action, summary.attempts, now)
    # a DENY is final: whatever the budget says, no path starts another attempt
    denied = summary.action.denied
    retry_allowed = not denied and (decision.redispatch or decision.waits)
    return _Facts(
        again=again,
        again_first="C" + again[1:],  # the same words, starting a sentence
        decision=decision,
        retry_allowed=retry_allowed,
        when=(
            f" from {format_time(decision.retry_at)}"
            if decision.waits and decision.retry_at is not None
            else ""
        ),
        blocking=[
            reason
            for reason in summary.review_reasons
            if not (reason is ReviewReason.MISMATCH and retry_allowed)
        ],
        pool=pool,
        stopped=f"denied by {_denied_by(summary)}" if denied else decision.reason.value,
    )


def _state_step(summary: ActionSummary, *, now: datetime, sending: bool) -> str:
    """One sentence telling a model what to do about an action in this state (pure)."""
    status = summary.status
    facts = _facts(summary, now)
    if status is Status.SUCCEEDED:
        return _succeeded_step(facts)
    if status is Status.PLANNED:
        if _render_values.waiting_text(summary) is not None:
            return _waiting_step(summary, facts)
        if facts.pool is not None:
            return _queued_step(summary, facts)
        scheduled = summary.action.intent.not_before
        if scheduled is not None and scheduled > now and not sending:
            return (
                f"Scheduled: nothing is sent before {format_time(scheduled)}"
                f" (its not_before); {facts.again} then (it never sends twice)."
            )
        return _planned_step(facts, sending=sending)
    if status in OPEN_STATUSES:
        return _open_step(summary, facts)
    if status is Status.FAILED:
        return _failed_step(summary, facts)
    if status is Status.DENIED:
        return _denied_step(summary)
    if status is Status.EXPIRED:
        return _expired_step(summary)
    return _rejected_step(summary, facts)


def _expired_step(summary: ActionSummary) -> str:
    """EXPIRED: its deadline passed with nothing sent; no path ever sends it."""
    deadline = summary.action.intent.not_after
    shown = format_time(deadline) if deadline is not None else "its deadline"
    return (
        f"Expired: its deadline ({shown}) passed with nothing sent. This action is never"
        " sent, by any path, and no ruling lifts a deadline. Tell the user; if the message is"
        " still wanted, send it as a new message with a new action_id (and a new deadline)."
    )


def _succeeded_step(facts: _Facts) -> str:
    if facts.blocking:
        return (
            f"Sent and verified on the phone, but a person must look ({_reasons(facts.blocking)}):"
            " do not send it again; tell the user."
        )
    return "Done: the SMS went out and the phone shows the intended text. Do not send it again."


def _planned_step(facts: _Facts, *, sending: bool) -> str:
    if sending:
        return (
            "The send is starting. Wait a few seconds and"
            f" {facts.again} (it never sends twice) to learn how it went."
        )
    return f"Nothing has been sent yet: {facts.again} to send it."


def _queued_step(summary: ActionSummary, facts: _Facts) -> str:
    """PLANNED and queued for a pool: a worker beside its phones sends it."""
    claim = summary.action.claim
    if claim is not None:
        return (
            f"Queued for pool {facts.pool!r} and taken by worker {claim.worker} for phone"
            f" {claim.device}: the send is starting there. Wait a few seconds and"
            f" {facts.again} to learn how it went; a repeated send_sms never sends it twice."
        )
    return (
        f"Queued for pool {facts.pool!r}: nothing has been sent yet; a worker beside that"
        f" pool's phones sends it{facts.when}. {facts.again_first} later to learn how it went;"
        " a repeated send_sms never queues or sends it twice."
    )


def _open_step(summary: ActionSummary, facts: _Facts) -> str:
    """IN_FLIGHT, UNKNOWN or VERIFYING: not proven yet."""
    again, blocking = facts.again, facts.blocking
    if blocking:
        return (
            f"Not proven either way and automatic handling has stopped ({_reasons(blocking)}):"
            " the SMS may have gone out. Do not send it again under any action_id; tell the"
            " user a person must check the phone (list_review)."
        )
    if summary.status is Status.VERIFYING:
        due = _decisions.settling_until(summary.latest) if summary.latest is not None else None
        if due is not None:
            return (
                "Sent by the phone, not yet settled: the messaging app may still mark it"
                f" failed until {format_time(due)}. Do not tell the user it was delivered"
                f" and do not send it again under any action_id; {again}"
                f"{' or call sms_status' if facts.pool is None else ''} after that time to"
                " learn whether it settled."
            )
        return (
            "The phone shows the SMS went out; its text is being checked. Wait a few"
            f" seconds and {again} (it never sends twice) or call sms_status."
        )
    if summary.status is Status.IN_FLIGHT:
        return (
            "Being sent; not proven yet. Wait a few seconds and"
            f" {again} (it never sends twice). Never retry under a new action_id."
        )
    read = (
        " or call reconcile to read the phone"
        if facts.pool is None
        else f" (the worker of pool {facts.pool!r} reads its phone)"
    )
    return (
        "Not proven yet, past the grace window: the SMS may have gone out. Do not send it"
        f" under a new action_id; {again} later{read}; if it stays UNKNOWN, tell the user a"
        " person must check the phone."
    )


def _waiting_step(summary: ActionSummary, facts: _Facts) -> str:
    """PLANNED because the latest try found the phone not ready or not answering: nothing
    went out, no attempt was spent, and a person must act on the phone first."""
    again, when = facts.again, facts.when
    latest = summary.latest
    then = (
        f"once it is done, {again}{when} (it never sends twice)."
        if facts.pool is None
        else f"once it is done, a worker of pool {facts.pool!r} sends it; {again} to follow it."
    )
    remedy = _not_ready(summary)
    if remedy is not None:
        return (
            f"The phone is not ready, so nothing went out and no attempt was spent; a person"
            f" must {remedy}. Tell the user so; {then}"
        )
    reason = _render_values.unsent_reason(latest) if latest is not None else "it did not answer"
    return (
        f"The phone could not take the send ({reason}), so nothing went out and no attempt"
        f" was spent. {facts.retry()}"
    )


def _failed_step(summary: ActionSummary, facts: _Facts) -> str:
    """FAILED: nothing went out (proven, or out of attempts; a phone not ready after a wrong
    text went out: ``_waiting_step``)."""
    blocking = facts.blocking
    if _not_ready(summary) is not None and facts.retry_allowed and not blocking:
        return _waiting_step(summary, facts)
    if blocking:
        return (
            f"Nothing went out, and a person must decide ({_reasons(blocking)}). Do not"
            " resend under a new action_id; tell the user."
        )
    if facts.retry_allowed:
        return f"Nothing went out (proven). {facts.retry()}"
    return (
        "Nothing went out and the action has no attempt left"
        f" ({facts.stopped}). Tell the user; do not resend under a new action_id"
        " without their consent."
    )


def _rejected_step(summary: ActionSummary, facts: _Facts) -> str:
    """MISMATCH: something else went out, or the phone showed it sent, then marked it
    failed."""
    blocking = facts.blocking
    retry = facts.retry_allowed and not blocking
    latest = summary.latest
    if latest is not None and _decisions.failed_after_sent(latest):
        # REJECTED because its row turned FAILED: nothing went out, like a FAILED delivery
        if retry:
            return (
                "Nothing went out: the phone showed the SMS sent, then marked it failed."
                f" {facts.retry()}"
            )
        return (
            "Nothing went out (the phone showed the SMS sent, then marked it failed) and no"
            f" resend is allowed ({_reasons(blocking) or facts.stopped}). Tell the"
            " user; do not resend under a new action_id without their consent."
        )
    # MISMATCH: something else went out
    if retry:
        return (
            "An incident: the phone sent something other than the intended text (tell the"
            f" user). {facts.retry('send the intended text once')}"
        )
    return (
        "An incident: the phone sent something other than the intended text, and no resend is"
        f" allowed ({_reasons(blocking) or facts.stopped}). Tell the user; a person"
        " must review it."
    )


def _denied_status(summary: ActionSummary) -> ActionSummary:
    """``summary`` with the status DENIED when a DENY stopped the action and nothing of it is
    under way or went out (none, or its latest attempt FAILED), as the ledger derives it."""
    if summary.action.denied and summary.status in (Status.PLANNED, Status.FAILED):
        return attrs.evolve(summary, status=Status.DENIED)
    return summary


def _denied_by(summary: ActionSummary, *, detail: bool = False) -> str:
    """Who denied the action, in words: a person (``starebrain deny``), or a gate's rule
    (``detail``: with why)."""
    verdict = standing_verdict(summary.action)
    if verdict is None or verdict.rule == "approval":
        return "a person (`starebrain deny`)" if detail else "a person"
    if detail:
        return f"the policy gate's rule {verdict.rule}: {verdict.detail}"
    return f"rule {verdict.rule}"


def _denied_step(summary: ActionSummary) -> str:
    """What to do about an action a DENY stopped for good (``Status.DENIED``: a policy
    rule's, or a person's)."""
    return (
        f"Denied by {_denied_by(summary, detail=True)}. This action is never sent, by any"
        " path: a DENY is final, and calling send_sms again with it sends nothing. Tell the"
        " user; do not send the message under another action_id on your own. A person who"
        " wants it sent after all"
        " creates a new action for it (a new action_id)."
    )


def _gate_step(summary: ActionSummary) -> str | None:
    """What to do about an action the policy gate stopped (None: it did not stop it, or a
    person approved it since)."""
    gate = summary.action.gate
    if gate is None or summary.status not in (Status.PLANNED, Status.FAILED, Status.MISMATCH):
        return None
    if summary.action.denied:
        # DENIED's step says so; after a wrong text went out, MISMATCH's (never resent)
        return None
    if gate.get("verdict") == "HOLD" and summary.action.approval == "APPROVED":
        return None  # a person approved it: it goes as any action does
    action_id = summary.action.action_id
    rule = f"rule {gate.get('rule')}: {gate.get('detail')}"
    verdict = gate.get("verdict")
    pool = summary.action.pool
    if pool is not None:
        return _queued_gate_step(action_id, pool, rule, verdict, gate.get("until"))
    if verdict == "HOLD":
        return (
            f"Held by the policy gate for a person's approval ({rule}): nothing was sent."
            " Tell the user a person must approve it (`starebrain approve"
            f" {action_id}`); you cannot. Then call send_sms again with action_id"
            f" {action_id!r}."
        )
    if verdict == "WAIT":
        return (
            f"Quiet hours at the recipient ({rule}): nothing was sent. Call send_sms again"
            f" with action_id {action_id!r} after {gate.get('until')}."
        )
    return (
        f"Refused over a limit of the policy ({rule}): nothing was sent. Tell the user; try"
        f" again later with action_id {action_id!r}, never under another one."
    )


def _queued_gate_step(action_id: str, pool: str, rule: str, verdict: object, until: object) -> str:
    """What to do about a queued action the policy gate stopped, but did not deny: its
    pool's workers send it once it may go, never a call."""
    follow = f"call sms_status with action_id {action_id!r}"
    if verdict == "HOLD":
        return (
            f"Held by the policy gate for a person's approval ({rule}): nothing was sent."
            " Tell the user a person must approve it (`starebrain approve"
            f" {action_id}`); you cannot. Once approved, a worker of pool {pool!r} sends it:"
            f" {follow} to follow it."
        )
    if verdict == "WAIT":
        return (
            f"Quiet hours at the recipient ({rule}): nothing was sent. A worker of pool"
            f" {pool!r} sends it after {until}; {follow} then."
        )
    return (
        f"Refused over a limit of the policy ({rule}): nothing was sent yet. A worker of pool"
        f" {pool!r} tries it again later; {follow} to follow it, and never send it under"
        " another action_id."
    )


def _policy_view(summary: ActionSummary) -> PolicyView | None:
    """The verdict that stopped the action: a DENY, final, whoever gave it (a rule of any
    gate that judged it, or a person: rule ``approval``); else the gate's latest verdict
    kept on the action; None when no gate refused it, or a person approved what it held."""
    action = summary.action
    if action.denied:
        verdict = standing_verdict(action)
        if verdict is not None:
            return PolicyView(verdict="DENY", rule=verdict.rule, detail=verdict.detail)
    gate = action.gate
    if gate is None or (gate.get("verdict") == "HOLD" and action.approval == "APPROVED"):
        return None  # no gate refused it, or a person lifted its hold
    return PolicyView(
        verdict=str(gate.get("verdict")),
        rule=str(gate.get("rule")),
        detail=str(gate.get("detail")),
        until=gate.get("until"),
    )


def _not_ready(summary: ActionSummary) -> str | None:
    """What a person must do on the phone, when the latest attempt found it not ready."""
    latest = summary.latest
    return _decisions.not_ready_remedy(latest) if latest is not None else None


def _attempt_view(record: ActionRecord) -> AttemptView:
    return AttemptView(
        attempt=record.attempt,
        dispatch_id=record.dispatch_id,
        device=record.device,
        delivery=record.delivery,
        acceptance=record.acceptance,
        review_reason=record.review_reason,
        dispatched_at=format_time(record.dispatched_at),
        last_error=record.last_error,
    )


def sms_result(
    summary: ActionSummary,
    *,
    now: datetime,
    derived: bool | None = None,
    detail: bool = False,
    show_private: bool = False,
    sending: bool = False,
    earlier: bool = False,
    held_by: PhoneHold | None = None,
) -> SmsResult:
    """The model-facing result for an action (pure). ``derived`` None: tell from the id
    (an id that is a generation of the one derived from the intent was derived, or chosen
    the same way). ``sending``: a send of it is running in the server right now.
    ``earlier``: the call sent nothing and answers with the action's earlier message. A
    denied action with nothing of it under way or gone out reads DENIED, its verdict in
    ``policy``."""
    summary = _denied_status(summary)
    action = summary.action
    latest = summary.latest
    decision = should_redispatch(action, summary.attempts, now)
    return SmsResult(
        action_id=action.action_id,
        action_id_derived=(
            derived if derived is not None else is_derived_id(action.action_id, action.intent)
        ),
        earlier_message=earlier,
        first_sent_at=(
            format_time(first) if (first := _render_values.first_sent_at(summary)) else None
        ),
        status=summary.status,
        next_step=next_step(summary, now=now, sending=sending, earlier=earlier, held_by=held_by),
        delivery=latest.delivery if latest else None,
        acceptance=latest.acceptance if latest else None,
        needs_review=summary.needs_review,
        review_reasons=list(summary.review_reasons),
        superseded_reasons=list(summary.superseded_reasons),
        settled=settled(summary, datetime.now(UTC)),
        settles_at=(
            format_time(due) if (due := _render_values.settles_at(summary)) is not None else None
        ),
        attempts=_render_values.attempts_made(summary),
        unsent_tries=len(_render_values.unsent_tries(summary)),
        max_attempts=action.budget,
        retry_at=(
            format_time(decision.retry_at)
            if decision.waits and decision.retry_at is not None
            else None
        ),
        device=latest.device if latest else None,
        pool=action.pool,
        claim=(
            ClaimView(
                worker=claim.worker,
                device=claim.device,
                claimed_at=format_time(claim.claimed_at),
            )
            if (claim := action.claim) is not None
            else None
        ),
        policy=_policy_view(summary),
        phone_not_ready=_not_ready(summary),
        waiting_for_phone=_render_values.waiting_text(summary),
        held_by=(
            HoldView(
                action_id=held_by.action_id,
                dispatch_id=held_by.dispatch_id,
                since=format_time(held_by.since),
                releasable_at=format_time(held_by.releasable_at()),
                review_at=format_time(held_by.review_at),
            )
            if held_by is not None
            else None
        ),
        latest=_attempt_view(latest) if latest else None,
        record=_render_values.summary_data(summary, show_private=show_private) if detail else None,
    )


def status_line(summary: ActionSummary) -> str:
    """``action A-17 is UNKNOWN after 1 attempt(s)`` for error messages (attempts that
    could have sent it: tries the phone refused before anything was sent do not count)."""
    return (
        f"action {summary.action.action_id} is {summary.status.value} after"
        f" {_render_values.attempts_made(summary)} attempt(s)"
    )
