"""A client's view of the ledger (``--clients``): its own action ids, never another client's."""

from __future__ import annotations

from typing import Final

import attrs

from starebrain_actions.core.exceptions import InvalidInput
from starebrain_actions.core.model import ActionSummary, PhoneHold, check_action_id
from starebrain_actions.mcp.auth import ActionScope

__all__ = ["OTHER_CLIENTS_ACTION", "check_scoped_id", "hold_seen", "own_ids", "seen"]

#: What a client of ``--clients`` sees for another client's action holding a phone.
OTHER_CLIENTS_ACTION: Final = "(another client's action)"


def seen(summary: ActionSummary, scope: ActionScope) -> ActionSummary:
    """``summary`` as the client of ``scope`` sees it: its own action id, not the ledger's."""
    own = scope.own(summary.action.action_id)
    if own is None or own == summary.action.action_id:
        return summary
    return attrs.evolve(summary, action=attrs.evolve(summary.action, action_id=own))


def hold_seen(hold: PhoneHold | None, scope: ActionScope) -> PhoneHold | None:
    """A phone's holder as the client of ``scope`` sees it: another client's action is not
    named."""
    if hold is None:
        return None
    own = scope.own(hold.action_id)
    return attrs.evolve(hold, action_id=OTHER_CLIENTS_ACTION if own is None else own)


def own_ids(text: str, ledger_id: str, scope: ActionScope) -> str:
    """``text`` with the ledger's id of a client's action replaced by the client's own."""
    own = scope.own(ledger_id)
    return text if own is None or own == ledger_id else text.replace(ledger_id, own)


def check_scoped_id(action_id: str, scope: ActionScope) -> None:
    """Raises InvalidInput when the client's prefix makes ``action_id`` too long."""
    try:
        check_action_id(scope.ledger_id(action_id))
    except InvalidInput:
        room = 200 - len(scope.ledger_id(""))
        raise InvalidInput(
            f"action id {action_id!r} is too long for this client: at most {room} characters"
        ) from None
