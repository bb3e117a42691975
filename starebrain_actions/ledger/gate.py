"""The policy gate's part of a new attempt, in the ledger: what its rules count (sends to the
recipient today, sends this hour, whether the recipient ever got one), the verdict kept on the
action and in its history, and what binds a sender with no gate of its own.

The rules themselves are pure (``core.policy.judge``); these functions run inside
``Ledger.begin_attempt``'s write transaction, under the lock every gated attempt takes, so
that the counts hold until the receipt commits.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from starebrain_actions.core.convert import format_time
from starebrain_actions.core.model import Action, ActionRecord, Event
from starebrain_actions.ledger import pg as _pg
from starebrain_actions.ledger.updates import history_row, to_json

if TYPE_CHECKING:
    from starebrain_actions.core.policy import GateDecision, Policy

#: An action's recipient in SQL, per dialect.
_RECIPIENT: Final = _pg.json_field("actions.intent_json", "recipient")


def gate_refusal(
    db: sqlite3.Connection,
    gate: Policy | None,
    action: Action,
    attempts: Sequence[ActionRecord],
    when: datetime,
    *,
    counted: Sequence[int] | None = None,
) -> GateDecision | None:
    """The verdict refusing a new attempt of ``action`` now (None: the gate allows it). With a
    ``gate``, its rules' verdict, kept on the action (and in its history when it changed)
    whenever it refuses or replaces an earlier one; without, a person's denial or a hold for
    approval another sender's gate recorded (``standing_verdict``): nothing bypasses them.

    A refusing verdict is to be committed (it is kept) and then raised as ``PolicyRefused``.
    ``counted``: the counts of ``gate_counts`` if the caller read them already, under the
    same lock (a receipt on PostgreSQL reads them with the action, ``PgConnection.lock_and_read``).
    """
    if gate is None:
        return standing_verdict(action)
    verdict = judge_attempt(db, gate, action, when, counted=counted)
    if not verdict.allowed or action.gate is not None:
        note_verdict(db, action, attempts, verdict, when)
    return None if verdict.allowed else verdict


def gate_since(when: datetime) -> tuple[str, str]:
    """The starts of the windows the gate counts in (a day, an hour before ``when``), in
    stored form."""
    return format_time(when - timedelta(days=1)), format_time(when - timedelta(hours=1))


def gate_counts(db: sqlite3.Connection, action: Action, when: datetime) -> tuple[int, int, int]:
    """What the gate's rules count for a new attempt of ``action`` now: other actions sent
    to its recipient in the last day, other actions sent in the last hour, and confirmed
    attempts to its recipient (``starebrain_lock_and_read``, PostgreSQL migration 0007,
    counts the same in a receipt's first round trip)."""
    recipient = _RECIPIENT[_pg.dialect(db)]
    here = action.intent.recipient
    day, hour = gate_since(when)

    def count(sql: str, *params: Any) -> int:
        return int(db.execute(sql, params).fetchone()[0])

    others = (
        "SELECT count(DISTINCT attempts.action_id) FROM attempts"
        " JOIN actions ON actions.action_id = attempts.action_id"
        " WHERE attempts.dispatched_at >= ? AND attempts.action_id <> ?"
    )
    return (
        count(f"{others} AND {recipient} = ?", day, action.action_id, here),
        count(others, hour, action.action_id),
        count(
            "SELECT count(*) FROM attempts JOIN actions"
            " ON actions.action_id = attempts.action_id"
            f" WHERE attempts.delivery = 'CONFIRMED' AND {recipient} = ?",
            here,
        ),
    )


def judge_attempt(
    db: sqlite3.Connection,
    gate: Policy,
    action: Action,
    when: datetime,
    *,
    counted: Sequence[int] | None = None,
) -> GateDecision:
    """The gate's verdict on a new attempt of ``action`` now, counted in the ledger (or
    ``counted``, ``gate_counts`` read by the caller)."""
    from starebrain_actions.core.policy import GateCounts, judge

    today, last_hour, known = counted if counted is not None else gate_counts(db, action, when)
    counts = GateCounts(
        to_recipient_today=int(today),
        last_hour=int(last_hour),
        known_recipient=int(known) > 0,
        approved=action.approval == "APPROVED",
        denied=action.approval == "DENIED",
    )
    return judge(gate, action.intent, counts, now=when)


def note_verdict(
    db: sqlite3.Connection,
    action: Action,
    attempts: Sequence[ActionRecord],
    verdict: GateDecision,
    when: datetime,
) -> None:
    """Keep the gate's verdict on the action, and in its history when it changed."""
    from starebrain_actions.core.policy import Verdict

    kept = None
    if verdict.verdict is not Verdict.ALLOW:
        kept = {
            "verdict": verdict.verdict.value,
            "rule": verdict.rule,
            "detail": verdict.detail,
            "until": format_time(verdict.until) if verdict.until else None,
            "digest": verdict.digest,
            "at": format_time(when),
        }
    previous = action.gate or {}
    if kept is not None and (previous.get("verdict"), previous.get("rule")) == (
        kept["verdict"],
        kept["rule"],
    ):
        return
    db.execute(
        "UPDATE actions SET gate_json = ? WHERE action_id = ?",
        (to_json(kept) if kept is not None else None, action.action_id),
    )
    history_row(
        db,
        action.action_id,
        attempts,
        Event.POLICY_VERDICT,
        "policy",
        when,
        {
            "verdict": verdict.verdict.value,
            "rule": verdict.rule,
            "detail": verdict.detail,
            "digest": verdict.digest,
        },
    )


def standing_verdict(action: Action) -> GateDecision | None:
    """What binds every sender of ``action``, gate or not: a person's denial (DENY), or a
    hold for a person's approval recorded by a gate and not lifted (HOLD)."""
    from starebrain_actions.core.policy import GateDecision, Verdict

    gate = action.gate or {}
    if action.approval == "DENIED":
        return GateDecision(
            verdict=Verdict.DENY,
            rule="approval",
            detail="a person denied this action",
            digest=str(gate.get("digest", "default")),
        )
    if action.approval is None and gate.get("verdict") == Verdict.HOLD.value:
        return GateDecision(
            verdict=Verdict.HOLD,
            rule=str(gate.get("rule")),
            detail=str(gate.get("detail")),
            digest=str(gate.get("digest", "default")),
        )
    return None
