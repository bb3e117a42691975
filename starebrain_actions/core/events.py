"""The ledger's events as data: their types and one event.

The ledger writes them (``ledger/events.py``); the render layer shows them
(``render/values.event_data``, with the command that answers it). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any, Final

import attrs

from starebrain_actions.core.exceptions import InvalidInput

#: The event types the ledger writes, with what each reports.
EVENT_TYPES: Final[Mapping[str, str]] = {
    "action.created": "a new action: its intent is recorded (nothing sent yet)",
    "attempt.created": "an attempt's receipt, written before anything reaches the phone",
    "attempt.submitted": "the send command reached the phone (its outcome is not known yet)",
    "action.sent": "the phone took it: a read of the phone found the sent message",
    "action.succeeded": "sent, and the message matches the intent",
    "attempt.failed": "an attempt failed, provably sending nothing; another may follow",
    "action.failed": "final: the last attempt the budget allows failed (reason in data)",
    "action.needs_person": "a review, or an approval hold: data.command answers it",
    "action.denied": "the policy gate or a person denied it: it is never sent",
    "action.expired": "its deadline passed with nothing sent: it is never sent",
    "action.approved": "a person approved it",
    "action.waiting": "the policy gate holds it until a time (quiet hours, a rate limit)",
    "action.refused": "the policy gate refused it for now (a limit; the recipient opted out)",
    "action.released": "the policy gate lets go an action it refused before",
    "action.retry_granted": "a person gave it new attempts (starebrain retry)",
    "action.resolved": "a person ruled on an attempt (sent or not sent)",
    "action.policy_pinned": "the policy that judged it is kept with it",
    "action.changed": "any other change of the action",
    "attempt.error": "an error that proves nothing was kept on an attempt",
    "phone.not_ready": "the phone refused a send before anything went out (locked...)",
    "phone.unreachable": "the phone could not be reached: nothing was sent",
    "reply.received": "a reply from a number the ledger has texted, linked to its action",
    "recipient.opted_out": "a number asked to receive nothing more (STOP), or a person said so",
    "recipient.opted_in": "a number opted back in (START), or a person said so",
    "webhook.disabled": "a webhook endpoint kept failing and was turned off",
}


@attrs.frozen(kw_only=True)
class LedgerEvent:
    """One event as the ledger keeps it (``data`` unredacted: see ``public``)."""

    #: its place in the ledger's order of events (1, 2, ...): a cursor
    position: int
    #: its stable id (``evt_…``): the same on every delivery
    event_id: str
    #: what happened (``EVENT_TYPES``)
    type: str
    #: the action it concerns, if any
    action_id: str | None
    #: the attempt it concerns, if any
    dispatch_id: str | None
    #: the phone it concerns, if known
    device: str | None
    #: when the change happened
    at: datetime
    #: the history row it reports (None: a change the history does not keep)
    history_sequence: int | None
    #: what changed, JSON-able
    data: Mapping[str, Any]


def check_types(types: Collection[str]) -> tuple[str, ...]:
    """The types asked for, each a known one (or a family: ``action.*``).

    Raises:
        InvalidInput: an unknown type, naming the known ones.
    """
    wanted = []
    for kind in types:
        if kind in EVENT_TYPES or (
            kind.endswith(".*") and any(k.startswith(kind[:-1]) for k in EVENT_TYPES)
        ):
            wanted.append(kind)
        else:
            raise InvalidInput(
                f"unknown event type {kind!r}; known: {', '.join(EVENT_TYPES)}"
                " (or a family such as action.*)"
            )
    return tuple(dict.fromkeys(wanted))
