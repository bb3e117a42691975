"""Where an action stands when the agent returns: ``SendOutcome`` for a send, ``ResumeItem``
and ``ResumeReport`` for a resume, and the other action's attempt that holds a phone
(``hold_on``), with the words a person reads for each.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import attrs

from starebrain_actions.core import decisions as _decisions
from starebrain_actions.core import transitions as _core
from starebrain_actions.core.convert import age, format_time
from starebrain_actions.core.model import ActionRecord, ActionSummary, PhoneHold, Status
from starebrain_actions.ledger.store import Ledger
from starebrain_actions.orchestration.reconciler import DeviceReport

if TYPE_CHECKING:
    from starebrain_actions.core.policy import GateDecision


async def hold_on(
    ledger: Ledger, device: str, action_id: str, void_after: timedelta
) -> PhoneHold | None:
    """The attempt of another action than ``action_id`` holding the phone ``device`` (its
    key) now, and when a pass can free it; None: none does."""
    for record in await ledger.holders(device):
        if record.action_id != action_id:
            action = await ledger.get_action(record.action_id)
            return _core.phone_hold(record, action, void_after)
    return None


def hold_text(hold: PhoneHold, now: datetime) -> str:
    """What a send blocked by ``hold`` says it waits for, and when the phone can be freed."""
    held = age(now - hold.since)
    release = (
        f"a pass voids it from {format_time(hold.void_from)} if its send script never ran,"
        f" and moves it to review at {format_time(hold.review_at)} at the latest"
        if hold.void_from is not None
        else f"a pass moves it to review at {format_time(hold.review_at)} at the latest"
    )
    return (
        f"waiting for attempt {hold.dispatch_id} of action {hold.action_id}: it holds this"
        f" phone since {format_time(hold.since)} ({held} ago) until the phone proves its outcome;"
        f" this send reads the phone for it meanwhile: {release}"
    )


@attrs.frozen(kw_only=True)
class SendOutcome:
    """Where an action stands when ``send`` returns."""

    #: the action, its attempts and what is derived from them
    summary: ActionSummary
    #: another action's attempt that held the phone when the send gave up waiting for it
    #: (None: the phone was not held by another action at the end)
    held_by: PhoneHold | None = None
    #: the policy gate's verdict when it stopped the send (``core.policy.GateDecision``: DENY,
    #: HOLD for a person's approval, WAIT for quiet hours, OVER_LIMIT); None: it did not
    gate: GateDecision | None = None
    #: why no attempt could start on this phone, when the action is bound elsewhere (the
    #: phone its sender named, or its pool's workers: ``WrongPhone``); None: it is not
    refused: str | None = None

    @property
    def status(self) -> Status:
        """The derived status of the latest attempt (PLANNED if none could start)."""
        return self.summary.status

    @property
    def record(self) -> ActionRecord | None:
        """The latest attempt."""
        return self.summary.latest

    @property
    def resolved(self) -> bool:
        """True when nothing is in flight any more."""
        return self.status not in (Status.IN_FLIGHT, Status.UNKNOWN, Status.VERIFYING)

    @property
    def settling(self) -> bool:
        """True when the phone shows the message sent but it has not settled yet: the app
        may still mark it failed until ``settles_at`` (never read this as SUCCEEDED)."""
        return self.status is Status.VERIFYING and self.settles_at is not None

    @property
    def not_ready(self) -> str | None:
        """What a person must do on the phone when the latest attempt found it not ready
        (locked, screen off, no SMS app...; such an attempt spent nothing), else None."""
        record = self.record
        return _decisions.not_ready_remedy(record) if record is not None else None

    @property
    def settles_at(self) -> datetime | None:
        """When the latest attempt's row settles, if it is settling (see ``settling``)."""
        record = self.record
        if record is None or self.status is not Status.VERIFYING:
            return None
        return _decisions.settling_until(record)


@attrs.frozen(kw_only=True)
class ResumeItem:
    """What ``resume`` did with one action."""

    action_id: str
    #: its status before and after
    before: Status
    after: Status
    #: attempts started for it by this resume
    sent: int = 0
    #: in a few words: what happened, or why nothing was sent
    note: str = ""
    #: where the send left it (None: it was not sent through ``send``'s path)
    outcome: SendOutcome | None = None


@attrs.frozen(kw_only=True)
class ResumeReport:
    """What ``SmsAgent.resume`` did on one phone."""

    device: str
    #: the reconcile pass it started with
    reconciled: DeviceReport
    #: one per action it drove, in the order driven
    items: tuple[ResumeItem, ...] = ()


def resume_note(outcome: SendOutcome) -> str:
    """One phrase for where a resumed action stands."""
    status = outcome.status
    if outcome.gate is not None:
        gate = outcome.gate
        return f"stopped by the policy gate: {gate.verdict.value} ({gate.rule}: {gate.detail})"
    if outcome.refused is not None:
        return f"not sent: {outcome.refused}"
    if status is Status.DENIED:
        return "denied: never sent (a DENY is final)"
    if outcome.not_ready is not None:
        return f"the phone is not ready: {outcome.not_ready} (no attempt spent)"
    if outcome.held_by is not None:
        return f"waiting: action {outcome.held_by.action_id} holds the phone"
    if status is Status.SUCCEEDED:
        return "sent and verified"
    if outcome.settling and outcome.settles_at is not None:
        return f"sent by the phone; settles at {format_time(outcome.settles_at)}"
    if status in (Status.IN_FLIGHT, Status.UNKNOWN, Status.VERIFYING):
        return "not proven yet: a later pass or resume settles it"
    if status is Status.PLANNED:
        return "not started (the phone is busy or its send limit was reached)"
    return status.value.lower().replace("_", " ")
