"""A person's decisions, each recorded on the action or attempt and in its history with who and
why: a ruling on whether an attempt was sent (``Ledger.resolve``), more attempts for an action
whose retries were refused (``retry``), an approval or a denial for an action the policy gate
holds (``approve``, ``deny``), and the rules an action is judged by (``set_policy``;
``policy_of`` reads them).

The rules of each decision are pure (``core.transitions``: ``resolve``, ``grant_retry``); here
they are applied in one write transaction, under the action's lock.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from starebrain_actions._logging import get_logger
from starebrain_actions.core import decisions as _decisions
from starebrain_actions.core import transitions as _core
from starebrain_actions.core.convert import to_jsonable
from starebrain_actions.core.exceptions import (
    InvalidInput,
    InvariantViolation,
    LedgerError,
    NotFound,
    RetryRefused,
    StaleTransition,
)
from starebrain_actions.core.model import (
    Action,
    ActionRecord,
    ActionSummary,
    Event,
    ProviderKind,
    Transition,
    require_aware,
)
from starebrain_actions.ledger import pg as _pg
from starebrain_actions.ledger.gate import keep_policy, pinned_policy
from starebrain_actions.ledger.queries import ActionReads
from starebrain_actions.ledger.queue import requeue
from starebrain_actions.ledger.read import load_action, load_attempts
from starebrain_actions.ledger.updates import apply_transition, history_row, log_transition, to_json

if TYPE_CHECKING:
    from starebrain_actions.core.policy import Policy

_log = get_logger("starebrain.ledger")


class Rulings(ActionReads):
    """The ``Ledger``'s writes of a person's decisions (see the module docstring); those on
    an action answer with its summary (``ActionReads.summary``)."""

    async def resolve(
        self,
        action_id: str,
        *,
        as_sent: bool,
        reason: str,
        operator: str,
        dispatch_id: str | None = None,
        now: datetime | None = None,
        expect_version: int | None = None,
        force: bool = False,
        row: tuple[ProviderKind, int] | None = None,
    ) -> ActionRecord:
        """An operator's ruling on the latest (or the named) attempt, recorded in history.

        ``expect_version``: the attempt's version the operator saw (``status``/``review``);
        anything changed since refuses the ruling. ``force`` and ``row``: see
        ``core.transitions.resolve``. Repeating a ruling still in force
        (``core.transitions.ruling_in_force``) writes nothing and returns the attempt as it
        stands (its version unchanged).

        Raises:
            NotFound: no such action, it has no attempt, or ``dispatch_id`` is not one of its
                attempts (the message names the action it belongs to, if any).
            InvalidInput: no reason or operator; see ``core.transitions.resolve``.
            StaleTransition: the attempt is no longer at ``expect_version``.
        """
        when = require_aware("now", now) if now is not None else self.now()

        def work(db: sqlite3.Connection) -> tuple[Transition | None, ActionRecord | LedgerError]:
            chosen = _ruled_attempt(db, action_id, dispatch_id)
            if expect_version is not None and chosen.version != expect_version:
                now_status = _core.derive_status(chosen, when, timedelta(0)).value
                raise StaleTransition(
                    chosen.dispatch_id,
                    f"version {expect_version} (what you saw)",
                    f"version {chosen.version} ({now_status} now)",
                )
            if _core.ruling_in_force(chosen, as_sent=as_sent, row=row):
                return None, chosen
            transition = _core.resolve(
                chosen,
                as_sent=as_sent,
                reason=reason,
                operator=operator,
                now=when,
                force=force,
                row=row,
            )
            result = apply_transition(db, transition)
            requeue(db, action_id, when)
            return transition, result

        transition, result = await self._write(work)
        if transition is None:
            _log.info(
                "operator_ruling_repeated",
                action_id=action_id,
                dispatch_id=getattr(result, "dispatch_id", None),
            )
        else:
            log_transition(transition, result)
        if isinstance(result, LedgerError):
            raise result
        return result

    async def retry(
        self,
        action_id: str,
        *,
        reason: str,
        operator: str,
        attempts: int = 1,
        now: datetime | None = None,
    ) -> ActionSummary:
        """An operator gives an action whose budget is spent, or whose retries were refused
        (a repeated mismatch, a passed deadline), ``attempts`` new attempts: the attempts so
        far stay as evidence and no longer count (``_decisions.grant_retry``). Recorded on the
        action and as a ``retry_granted`` row of its history, with who and why. The next
        ``send`` or ``resume`` of the action sends it.

        Raises:
            NotFound: no such action.
            InvalidInput: ``attempts`` below 1, no reason or no operator.
            RetryRefused: an attempt is unresolved (in flight, verifying, in review), the
                action succeeded or may be retried already, or it was denied; nothing is
                written.
        """
        when = require_aware("now", now) if now is not None else self.now()

        def work(db: sqlite3.Connection) -> Action:
            _pg.lock(db, f"action:{action_id}")
            action = load_action(db, action_id)
            if action.denied:
                raise RetryRefused(_denied_text(action_id, "no retry sends it"))
            records = load_attempts(db, action_id)
            was = _decisions.should_redispatch(action, records, when).reason
            granted = _decisions.grant_retry(
                action, records, granted=attempts, now=when, by=operator, reason=reason
            )
            grant = granted.grant
            assert grant is not None
            db.execute(
                "UPDATE actions SET grant_json = ? WHERE action_id = ?",
                (to_json(to_jsonable(grant)), action_id),
            )
            requeue(db, action_id, when)
            history_row(
                db,
                action_id,
                records,
                Event.RETRY_GRANTED,
                f"operator:{operator}",
                when,
                {
                    "reason": reason,
                    "refused_because": was.value,
                    "attempts_granted": attempts,
                    "after_attempt": grant.after_attempt,
                },
            )
            return granted

        action = await self._write(work)
        self._remember(action)
        _log.info(
            "retry_granted",
            action_id=action_id,
            attempts=attempts,
            operator=operator,
        )
        return await self.summary(action_id, now=now)

    async def approve(
        self, action_id: str, *, operator: str, reason: str = "", now: datetime | None = None
    ) -> ActionSummary:
        """A person's approval of an action the policy gate holds (``approve = "new"`` or
        ``"always"``): the next ``send``, ``send_sms`` or ``resume`` of it sends it (the
        other rules still apply). Recorded on the action and in its history.

        Raises:
            NotFound: no such action.
            InvalidInput: no operator.
            InvariantViolation: it was denied already, by a person or by a gate's rule (a
                DENY is final).
        """
        return await self._rule_on(action_id, "APPROVED", operator, reason, now)

    async def deny(
        self, action_id: str, *, operator: str, reason: str, now: datetime | None = None
    ) -> ActionSummary:
        """A person's denial: nothing more is ever sent for this action (an attempt already
        under way is not called back; the gate refuses every later one). Recorded on the
        action and in its history.

        Raises:
            NotFound: no such action.
            InvalidInput: no operator or no reason.
        """
        if not reason.strip():
            raise InvalidInput("a denial needs a reason (it is kept in the history)")
        return await self._rule_on(action_id, "DENIED", operator, reason, now)

    async def policy_of(self, action_id: str) -> Policy | None:
        """The policy pinned to the action: every path judges it by these rules (None: no
        gate has judged it yet).

        Raises:
            NotFound: no such action.
            CorruptRecord: its kept policy cannot be read.
        """

        def work(db: sqlite3.Connection) -> Policy | None:
            return pinned_policy(db, load_action(db, action_id))

        return await self._run(work)

    async def set_policy(
        self,
        action_id: str,
        policy: Policy,
        *,
        operator: str,
        reason: str,
        now: datetime | None = None,
    ) -> ActionSummary:
        """A person pins ``policy`` to the action in place of the one that judged it: every
        later path judges it by these rules. Kept in its history (``policy_pinned``, with
        who, why and the rules it replaced); a queued action is looked at again. A DENY stays
        final, and a hold still waits for ``approve``.

        Raises:
            NotFound: no such action.
            InvalidInput: no operator or no reason.
            InvariantViolation: the action was denied (a DENY is final).
        """
        if not operator.strip() or not reason.strip():
            raise InvalidInput("a change of an action's policy needs who and why")
        when = require_aware("now", now) if now is not None else self.now()

        def work(db: sqlite3.Connection) -> None:
            _pg.lock(db, f"action:{action_id}")
            action = load_action(db, action_id)
            if action.denied:
                raise InvariantViolation(_denied_text(action_id, "whatever policy judges it now"))
            pin = keep_policy(db, policy, when)
            if pin == action.gate_policy:
                return  # these rules judge it already: nothing written
            db.execute("UPDATE actions SET gate_policy = ? WHERE action_id = ?", (pin, action_id))
            requeue(db, action_id, when)
            history_row(
                db,
                action_id,
                load_attempts(db, action_id),
                Event.POLICY_PINNED,
                f"operator:{operator}",
                when,
                {
                    "pin": pin,
                    "digest": policy.digest,
                    "source": policy.source,
                    "replaced": action.gate_policy,
                    "reason": reason,
                },
            )

        await self._write(work)
        self._actions.pop(action_id, None)
        _log.info("policy_set", action_id=action_id, operator=operator)
        return await self.summary(action_id, now=now)

    async def _rule_on(
        self, action_id: str, ruling: str, operator: str, reason: str, now: datetime | None
    ) -> ActionSummary:
        """Record ``ruling`` (``APPROVED`` or ``DENIED``) on the action, unless it is in force
        already; a denial is final."""
        if not operator.strip():
            raise InvalidInput("an approval or a denial needs who gives it (operator)")
        when = require_aware("now", now) if now is not None else self.now()

        def work(db: sqlite3.Connection) -> None:
            _pg.lock(db, f"action:{action_id}")
            action = load_action(db, action_id)
            if action.approval == ruling:
                return  # already in force: nothing written
            if action.approval == "DENIED":
                raise InvariantViolation(
                    f"action {action_id} was denied by a person: a denial is final (send the"
                    " text as a new action if it must go after all)"
                )
            if action.denied and ruling == "APPROVED":
                rule = (action.gate or {}).get("rule", "the policy gate")
                raise InvariantViolation(
                    f"action {action_id} was denied by {rule}: a DENY is final, whoever judged"
                    " it (send the text as a new action if it must go after all)"
                )
            db.execute("UPDATE actions SET approval = ? WHERE action_id = ?", (ruling, action_id))
            requeue(db, action_id, when)
            history_row(
                db,
                action_id,
                load_attempts(db, action_id),
                Event.APPROVED if ruling == "APPROVED" else Event.DENIED,
                f"operator:{operator}",
                when,
                {"reason": reason},
            )

        await self._write(work)
        self._actions.pop(action_id, None)
        _log.info("action_" + ruling.lower(), action_id=action_id, operator=operator)
        return await self.summary(action_id, now=now)


def _denied_text(action_id: str, what: str) -> str:
    """Why a person's step cannot send a denied action, and what to do instead."""
    return (
        f"action {action_id} was denied (a DENY is final, whoever judged it): {what}; send"
        " the text as a new action if it must go after all"
    )


def _ruled_attempt(db: sqlite3.Connection, action_id: str, dispatch_id: str | None) -> ActionRecord:
    """The attempt a ruling on ``action_id`` is about: ``dispatch_id``'s, else the latest.

    Raises:
        NotFound: no such action, it has no attempt, or ``dispatch_id`` is not one of its.
    """
    load_action(db, action_id)
    attempts = load_attempts(db, action_id)
    if dispatch_id is not None:
        chosen = [record for record in attempts if record.dispatch_id == dispatch_id]
        if not chosen:
            raise NotFound(_not_this_action(db, action_id, dispatch_id, attempts))
    else:
        chosen = attempts[-1:]
    if not chosen:
        raise NotFound(f"action {action_id} has no attempt to resolve")
    return chosen[0]


def _not_this_action(
    db: sqlite3.Connection, action_id: str, dispatch_id: str, attempts: Sequence[ActionRecord]
) -> str:
    """Why ``dispatch_id`` cannot be ruled on as an attempt of ``action_id``."""
    owner = db.execute(
        "SELECT action_id, attempt FROM attempts WHERE dispatch_id = ?", (dispatch_id,)
    ).fetchone()
    if owner is not None:
        return (
            f"dispatch id {dispatch_id} is attempt {owner[1]} of action {owner[0]}, not of"
            f" action {action_id}: check which action you mean"
        )
    known = ", ".join(record.dispatch_id for record in attempts) or "none"
    return (
        f"action {action_id} has no attempt with dispatch id {dispatch_id} (its attempts: {known})"
    )
