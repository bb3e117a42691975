"""Action ids and what a send's answer is about: the ids derived from an intent (``sms-`` and
16 hex digits of its fingerprint, then ``-2``, ``-3``… for later generations), whether an
action is settled for good, and whether an answer describes an earlier message only. Pure:
the ledger, the command line and the MCP server all decide through these."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Final

from starebrain_actions.core.decisions import first_sent, should_redispatch
from starebrain_actions.core.exceptions import InvalidInput
from starebrain_actions.core.model import (
    ActionSummary,
    SmsIntent,
    Status,
    require_aware,
)

#: How long a settled action answers a send that names no action id (the id derived from the
#: intent): 24 hours, as long as Stripe keeps an idempotency key. Past it, the same text to
#: the same number is a new action.
DERIVED_ID_WINDOW: Final = timedelta(hours=24)


def derive_action_id(intent: SmsIntent) -> str:
    """The first generation of an intent's derived action id: ``sms-`` and 16 hex digits of
    its message's fingerprint (``SmsIntent.message_fingerprint``: without a deadline or a
    schedule, so that a rerun naming them as durations finds its action, and one naming
    other times conflicts with it). Later generations add ``-2``, ``-3``…
    (``choose_derived_generation``)."""
    return "sms-" + intent.message_fingerprint.removeprefix("sha256:")[:16]


def is_derived_id(action_id: str, intent: SmsIntent) -> bool:
    """True when ``action_id`` is a generation of ``intent``'s derived id."""
    return derived_generation(action_id, derive_action_id(intent)) is not None


def settled(summary: ActionSummary, now: datetime) -> bool:
    """True when no send can change the action any more: SUCCEEDED, DENIED (a DENY is final:
    no path sends it), EXPIRED (its deadline passed with nothing sent), or FAILED/MISMATCH
    with no new attempt allowed (other than after a backoff)."""
    if summary.status in (Status.SUCCEEDED, Status.DENIED, Status.EXPIRED):
        return True
    if summary.status not in (Status.FAILED, Status.MISMATCH):
        return False
    decision = should_redispatch(summary.action, summary.attempts, now)
    return not decision.redispatch and not decision.waits


def derived_id_resumable(summary: ActionSummary, now: datetime, window: timedelta) -> bool:
    """May a send that names no action id resume this action, rather than start a new one?

    Always while the action is not settled, however old: no attempt yet (PLANNED), or an
    attempt whose delivery is PENDING, or CONFIRMED with its acceptance PENDING. A new
    action then could be a second SMS while the first one's outcome is unknown. Once every
    attempt is final (FAILED, ACCEPTED or REJECTED), only for ``window`` from the later of
    the action's creation and its latest attempt's dispatch.

    Raises:
        InvalidInput: ``window`` is negative.
    """
    now = require_aware("now", now)
    if window < timedelta(0):
        raise InvalidInput(f"the derived id window must not be negative; got {window}")
    attempts = summary.attempts
    if not attempts or not all(record.is_final for record in attempts):
        return True
    since = max(summary.action.created_at, *(record.dispatched_at for record in attempts))
    return now < since + window


def derived_generation_id(base_id: str, generation: int) -> str:
    """The id of a derived action's ``generation``: ``base_id`` for the first (so ledgers
    written before generations existed keep working), ``base_id-2``, ``base_id-3``… after.

    Raises:
        InvalidInput: ``generation`` is below 1.
    """
    if generation < 1:
        raise InvalidInput(f"generations count from 1; got {generation}")
    return base_id if generation == 1 else f"{base_id}-{generation}"


def derived_generation(action_id: str, base_id: str) -> int | None:
    """Which generation of ``base_id`` ``action_id`` names (``derived_generation_id``
    reversed), or None when it names none."""
    if action_id == base_id:
        return 1
    prefix = base_id + "-"
    number = action_id.removeprefix(prefix)
    if (
        number == action_id
        or not number.isascii()
        or not number.isdigit()
        or number.startswith("0")
        or int(number) < 2
    ):
        return None
    return int(number)


def choose_derived_generation(
    generations: Sequence[ActionSummary], fingerprint: str, now: datetime, window: timedelta
) -> int:
    """The generation of a derived id a send of this message (``fingerprint``: its
    ``SmsIntent.message_fingerprint``) uses.

    ``generations`` holds the existing generations 1, 2, … in order, up to the first that
    no action holds (``len(generations) + 1``: ``Ledger.derived_generations``). The answer is
    the newest generation holding this message that may still be resumed
    (``derived_id_resumable``); when none may, the first free generation. A generation
    holding another message (a collision of the 64 bits, or an id someone chose) is never
    used. The same message with another deadline or schedule is the same generation: its
    creation then fails as a changed intent (never a second SMS beside one whose outcome is
    open). Two processes asking at once get the same answer, and creating an action is
    idempotent on its id and intent, so they share one action.

    Raises:
        InvalidInput: ``window`` is negative.
    """
    if window < timedelta(0):
        raise InvalidInput(f"the derived id window must not be negative; got {window}")
    for generation in range(len(generations), 0, -1):
        summary = generations[generation - 1]
        held = summary.action.intent.message_fingerprint
        if held == fingerprint and derived_id_resumable(summary, now, window):
            return generation
    return len(generations) + 1


def earlier_message(before: ActionSummary | None, after: ActionSummary) -> bool:
    """Does a send's answer describe an earlier message only? True when the action had an
    attempt that could have sent it before the call (``before``; a try the phone refused
    before anything was sent is none: ``first_sent``) and has no new attempt after it
    (``after``): the call sent nothing, and whatever the answer says went out, went out
    before it."""
    return (
        before is not None
        and before.action.action_id == after.action.action_id
        and first_sent(before.attempts) is not None
        and len(after.attempts) == len(before.attempts)
    )
