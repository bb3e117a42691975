"""The policy gate's part of a new attempt, in the ledger: what its rules count (sends to the
recipient today, sends this hour, whether the recipient ever got one), the verdict kept on the
action and in its history, and what binds a sender with no gate of its own.

The rules themselves are pure (``core.policy.judge``); these functions run inside
``Ledger.begin_attempt``'s write transaction, under the lock every gated attempt takes, so
that the counts hold until the receipt commits.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from starebrain_actions.core.convert import format_time
from starebrain_actions.core.exceptions import CorruptRecord, InvalidInput
from starebrain_actions.core.model import Action, ActionRecord, Event
from starebrain_actions.ledger import pg as _pg
from starebrain_actions.ledger.updates import history_row, to_json

if TYPE_CHECKING:
    from starebrain_actions.core.policy import GateDecision, Policy

#: An action's recipient in SQL, per dialect.
_RECIPIENT: Final = _pg.json_field("actions.intent_json", "recipient")


#: The rule of the refusal of an action whose recipient opted out (``opted_out_refusal``).
OPTED_OUT_RULE: Final = "opted_out"
#: ``gate_refusal``'s ``opt_out`` when the caller has not read it: the gate reads it.
READ_OPT_OUT: Final[Mapping[str, Any]] = {"read": True}


def gate_refusal(
    db: sqlite3.Connection,
    gate: Policy | None,
    action: Action,
    attempts: Sequence[ActionRecord],
    when: datetime,
    *,
    counted: Sequence[int] | None = None,
    opt_out: Mapping[str, Any] | None = READ_OPT_OUT,
) -> GateDecision | None:
    """The verdict refusing a new attempt of ``action`` now (None: allowed), from what the
    ledger keeps with the action, whatever process asks (DESIGN.md invariant 9):

    1. a standing verdict (``standing_verdict``): a DENY of any gate or a person's denial is
       final; a hold for approval binds until a person approves;
    2. the recipient's opt-out (``opted_out_refusal``), with or without any policy: refused
       while the number's opt-out change in force is ``opt_out``, judged again at every
       attempt, so that an opt-in (START, ``optouts remove``) lifts it;
    3. the rules of the policy pinned to the action (``gate_policies``), judged again now:
       its limits and quiet hours are counted on every path;
    4. ``gate``, the policy of the process asking (``--policy``, a client's file), if any:
       it may add a refusal, never lift one. The first gate to judge an action is pinned to
       it (kept by its rules' digest, with a history row).

    A refusing verdict is kept on the action (and in its history when it changed) and is to
    be committed, then raised as ``PolicyRefused``. ``counted``: the counts of
    ``gate_counts`` if the caller read them already, under the same lock (a receipt on
    PostgreSQL reads them with the action, ``PgConnection.lock_and_read``). ``opt_out``: the
    recipient's opt-out change in force as its row (None: never changed), read by the
    caller under the same lock; ``READ_OPT_OUT``: read it here.
    """
    standing = standing_verdict(action)
    if standing is not None:
        return standing
    opted_out = opted_out_refusal(db, action, opt_out, gate)
    if opted_out is not None:
        note_verdict(db, action, attempts, opted_out, when)
        return opted_out
    pinned = pinned_policy(db, action)
    if pinned is None and gate is not None:
        pin_policy(db, action, attempts, gate, when)
        pinned, gate = gate, None
    elif gate is not None:
        # imported here: a send with no gate never loads the rules' module (issue 37)
        from starebrain_actions.core.policy import policy_pin

        if policy_pin(gate) == action.gate_policy:
            gate = None  # the same rules: judged once
    verdict = None
    for policy in (pinned, gate):
        if policy is None:
            continue
        verdict = judge_attempt(db, policy, action, when, counted=counted)
        if not verdict.allowed:
            note_verdict(db, action, attempts, verdict, when)
            return verdict
    if action.gate is not None and (
        verdict is not None or action.gate.get("rule") == OPTED_OUT_RULE
    ):
        # refused before, let go now (an opt-out lifted, with no policy to judge again)
        from starebrain_actions.core.policy import GateDecision, Verdict

        allowed = verdict or GateDecision(verdict=Verdict.ALLOW, digest=_digest_of(action))
        note_verdict(db, action, attempts, allowed, when)
    return None


def _digest_of(action: Action) -> str:
    return str((action.gate or {}).get("digest", "default"))


def opted_out_refusal(
    db: sqlite3.Connection,
    action: Action,
    opt_out: Mapping[str, Any] | None,
    gate: Policy | None,
) -> GateDecision | None:
    """The refusal of a new attempt of ``action`` whose recipient opted out (STOP, or a
    person's ``starebrain optouts add``), or None. Not a DENY: a refusal judged again at
    every attempt (verdict OVER_LIMIT, rule ``opted_out``: refused now, a later attempt may
    pass), so that the number's opt-in lifts it; no policy is needed, and none can lift it.
    ``opt_out``: the change in force as its row (None: never changed), or ``READ_OPT_OUT``."""
    from starebrain_actions.ledger.replies import change_from_row, latest_change

    if opt_out is READ_OPT_OUT:
        change = latest_change(db, action.intent.recipient)
    else:
        change = change_from_row(opt_out) if opt_out is not None else None
    if change is None or not change.opted_out:
        return None
    from starebrain_actions.core.policy import GateDecision, Verdict

    how = (
        "the number replied with an opt-out keyword (STOP)"
        if change.actor == "reply"
        else f"{change.actor} opted the number out"
    )
    return GateDecision(
        verdict=Verdict.OVER_LIMIT,
        rule=OPTED_OUT_RULE,
        detail=(
            f"the recipient opted out: {how} at {format_time(change.at)}; nothing is sent to"
            " it until it opts back in (START) or a person removes the opt-out (`starebrain"
            " optouts remove NUMBER --reason TEXT`)"
        ),
        digest=gate.digest if gate is not None else _digest_of(action),
    )


def pinned_policy(db: sqlite3.Connection, action: Action) -> Policy | None:
    """The policy pinned to ``action`` (None: no gate has judged it yet).

    Raises:
        CorruptRecord: the kept policy is missing or no longer parses.
    """
    pin = action.gate_policy
    if pin is None:
        return None
    from starebrain_actions.core.policy import parse_policy

    row = db.execute(
        "SELECT document_json, file_digest, source FROM gate_policies WHERE pin = ?", (pin,)
    ).fetchone()
    if row is None:
        raise CorruptRecord(f"action {action.action_id!r}: its policy {pin} is not in the ledger")
    kept = (str(row[0]), str(row[1]), str(row[2]))
    known = _PARSED.get(kept)
    if known is not None:
        return known
    try:
        policy = parse_policy(json.loads(kept[0]), digest=kept[1], source=kept[2])
    except (ValueError, InvalidInput) as exc:
        raise CorruptRecord(f"the kept policy {pin} cannot be read: {exc}") from exc
    _PARSED[kept] = policy
    return policy


def keep_policy(db: sqlite3.Connection, policy: Policy, when: datetime) -> str:
    """Keep ``policy``'s rules in ``gate_policies`` (once per digest of its rules; a kept
    policy never changes) and return that digest, its pin."""
    from starebrain_actions.core.policy import policy_document, policy_pin

    pin = policy_pin(policy)
    db.execute(
        "INSERT INTO gate_policies (pin, document_json, file_digest, source, stored_at)"
        " VALUES (?, ?, ?, ?, ?) ON CONFLICT (pin) DO NOTHING",
        (pin, to_json(policy_document(policy)), policy.digest, policy.source, format_time(when)),
    )
    return pin


def pin_policy(
    db: sqlite3.Connection,
    action: Action,
    attempts: Sequence[ActionRecord],
    policy: Policy,
    when: datetime,
) -> str:
    """Pin ``policy`` to ``action``, which has none yet (kept, with a history row); the
    pin."""
    pin = keep_policy(db, policy, when)
    db.execute(
        "UPDATE actions SET gate_policy = ? WHERE action_id = ? AND gate_policy IS NULL",
        (pin, action.action_id),
    )
    history_row(
        db,
        action.action_id,
        attempts,
        Event.POLICY_PINNED,
        "policy",
        when,
        {"pin": pin, "digest": policy.digest, "source": policy.source},
    )
    return pin


#: Kept policies already parsed, by their row (document, file digest, source).
_PARSED: dict[tuple[str, str, str], Policy] = {}


def gate_since(when: datetime) -> tuple[str, str]:
    """The starts of the windows the gate counts in (a day, an hour before ``when``), in
    stored form."""
    return format_time(when - timedelta(days=1)), format_time(when - timedelta(hours=1))


def gate_counts(db: sqlite3.Connection, action: Action, when: datetime) -> tuple[int, int, int]:
    """What the gate's rules count for a new attempt of ``action`` now: other actions sent
    to its recipient in the last day, other actions sent in the last hour, and confirmed
    attempts to its recipient (of its owner's actions only, when it has one)
    (``starebrain_lock_and_read``, PostgreSQL migration 0007, counts the same in a receipt's
    first round trip for an action with no owner)."""
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
    # "new" is per client where the action has an owner: whether another client ever
    # texted the number is not this client's to learn (its approval mode would tell it)
    own = "" if action.owner is None else " AND actions.owner = ?"
    return (
        count(f"{others} AND {recipient} = ?", day, action.action_id, here),
        count(others, hour, action.action_id),
        count(
            "SELECT count(*) FROM attempts JOIN actions"
            " ON actions.action_id = attempts.action_id"
            f" WHERE attempts.delivery = 'CONFIRMED' AND {recipient} = ?{own}",
            here,
            *(() if action.owner is None else (action.owner,)),
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
    """Keep the gate's verdict on the action (with when it was judged, also when it stands
    as before), and in its history when it changed."""
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
    db.execute(
        "UPDATE actions SET gate_json = ? WHERE action_id = ?",
        (to_json(kept) if kept is not None else None, action.action_id),
    )
    if kept is not None and (previous.get("verdict"), previous.get("rule")) == (
        kept["verdict"],
        kept["rule"],
    ):
        return  # the same verdict again: kept with its new time (a queue's next look counts
        # from it), one history row for the change only
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
    """What binds every sender of ``action``, gate or not: a DENY (a person's denial, or the
    verdict of any gate that judged it: final), or a hold for a person's approval recorded by
    a gate and not lifted (HOLD)."""
    if not (action.approval == "DENIED" or action.denied or action.awaiting_approval):
        return None  # the rules' module is not loaded for a send nothing binds (issue 37)
    from starebrain_actions.core.policy import GateDecision, Verdict

    gate = action.gate or {}
    if action.approval == "DENIED":
        verdict, rule, detail = Verdict.DENY, "approval", "a person denied this action"
    elif action.denied:
        verdict, rule, detail = Verdict.DENY, str(gate.get("rule")), str(gate.get("detail"))
    elif action.awaiting_approval:
        verdict, rule, detail = Verdict.HOLD, str(gate.get("rule")), str(gate.get("detail"))
    else:
        return None
    digest = str(gate.get("digest", "default"))
    return GateDecision(verdict=verdict, rule=rule, detail=detail, digest=digest)
