"""Errors raised by the ledger and its pure core.

The tree says what a caller must do next::

    StarebrainError
    ├── InvalidInput (ValueError)         bad argument: fix the call; nothing was written
    ├── InvariantViolation                a transition the contract forbids (e.g. try_accept
    │   │                                 before delivery is CONFIRMED); nothing was written
    │   └── RetryRefused                  an operator's retry while an attempt is unresolved,
    │                                     or of an action that needs none; nothing written
    ├── CorruptRecord                     a stored row holds a value the code does not know
    ├── PhoneError                        the phone port failed; the class says what follows
    │   ├── DispatchNotSent               provably nothing was sent: the attempt may FAIL
    │   │   ├── DispatchUnreachable       the phone could not be reached: FAIL, budget kept
    │   │   ├── DispatchNotReady          locked, screen off, no SMS app...: FAIL, budget kept
    │   │   └── DispatchFenceLost         the attempt's fence epoch is gone: FAIL, budget kept
    │   ├── DispatchOutcomeUnknown        it may have been sent: the attempt stays PENDING
    │   ├── LookupFailed                  a read of the phone that proves nothing
    │   │   └── LinkDown                  ...because the link to the phone is down
    │   └── PhoneHeldByAnotherLedger      another ledger's attempt is open on the phone:
    │                                     nothing recorded or sent (``share_phone`` allows it)
    └── LedgerError                       the SQLite store refused or could not do something
        ├── LedgerUnavailable             the database file cannot be opened or written
        ├── SchemaTooNew                  the file was written by a newer version; untouched
        ├── NotFound                      no such action or dispatch id
        ├── FingerprintConflict           same action id, different intent; nothing written
        ├── StaleTransition               compare-and-set lost: someone moved the record first
        └── AttemptRefused                begin_attempt said no; ``decision`` says why
            ├── AttemptInFlight           an earlier attempt of the action is unresolved
            ├── DeviceBusy                the device's lease is held by another attempt
            ├── BudgetExhausted           no attempts or time left: manual review
            ├── PolicyRefused             the policy gate denied, held or limited it
            └── WrongPhone                the action is bound to another phone or pool
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starebrain_actions.core.model import RedispatchDecision


class StarebrainError(Exception):
    """Base of every error this package raises on purpose."""


class InvalidInput(StarebrainError, ValueError):
    """An argument is malformed (naive datetime, empty body, bad policy...)."""


class InvariantViolation(StarebrainError):
    """The requested transition is not allowed from the record's current states."""


class RetryRefused(InvariantViolation):
    """An operator's ``retry`` was refused: an attempt of the action is unresolved (a new one
    could send the SMS twice), or the action succeeded or may be retried already."""


class CorruptRecord(StarebrainError):
    """A stored row cannot be read back as a record (unknown state, bad JSON...)."""


class PhoneError(StarebrainError):
    """A phone (behind the ``Phone`` protocol) failed; the subclass says what may follow."""


class DispatchNotSent(PhoneError):
    """The send provably never reached the phone: the attempt may be marked FAILED."""


class DispatchUnreachable(DispatchNotSent):
    """The phone could not be reached at all (refused, timed out, not authorised): nothing was
    sent, and nothing was learnt about the message. The attempt FAILS without spending the
    action's budget; the next one waits for its backoff."""


class DispatchNotReady(DispatchNotSent):
    """The phone is not ready for a send (the keyguard showing, the screen off, no default
    SMS app, another window in focus), as checked on the phone before the first key: nothing
    was sent, and a person must act (``remedy`` says how). Like an unreachable phone, the
    attempt FAILS without spending the action's budget; the next one waits for its backoff.
    ``reason`` names the check (``keyguard_showing``, ``screen_off``...)."""

    def __init__(self, message: str, *, reason: str, remedy: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.remedy = remedy


class DispatchFenceLost(DispatchNotSent):
    """The send's fence claim failed because the attempt's fence epoch is gone from the
    phone, which is still the same phone (its fence folder was cleared): nothing ran, and
    nothing was learnt about the message. The attempt FAILS without spending the action's
    budget; the next one is noted with the phone's new epoch."""


class DispatchOutcomeUnknown(PhoneError):
    """The send may have reached the phone: the attempt stays PENDING until a read decides."""


class LookupFailed(PhoneError):
    """A read of the phone failed or cannot be trusted; it proves nothing either way."""


class LinkDown(LookupFailed):
    """The phone could not be reached, or the link failed mid-read: try again later."""


class PhoneHeldByAnotherLedger(PhoneError):
    """The fence on the phone names another ledger with attempts still open there (its send
    scripts marked them, and that ledger has not yet found them resolved): two ledgers
    driving one phone could each attribute the other's messages, and neither's lease holds
    the other back. Nothing was recorded or sent; ``share_phone=True`` (``--share-phone``)
    sends anyway."""

    def __init__(
        self, message: str, *, ledger_id: str, other_ledger_id: str, open_attempts: tuple[str, ...]
    ) -> None:
        super().__init__(message)
        #: this ledger's own id
        self.ledger_id = ledger_id
        #: the other ledger's id, as the phone names it
        self.other_ledger_id = other_ledger_id
        #: the dispatch ids of the other ledger's attempts still marked open on the phone
        self.open_attempts = open_attempts


class LedgerError(StarebrainError):
    """The SQLite ledger refused or could not complete an operation."""


class LedgerUnavailable(LedgerError):
    """The database file cannot be opened, created or written (path, permissions)."""


class SchemaTooNew(LedgerError):
    """The database was written by a newer schema version; it is left untouched."""


class NotFound(LedgerError, LookupError):
    """No action or attempt has the given id."""


class FingerprintConflict(LedgerError):
    """An action with this id exists with a different intent fingerprint."""

    def __init__(self, action_id: str, stored: str, offered: str, detail: str = "") -> None:
        super().__init__(
            f"action {action_id!r} already exists with fingerprint {stored}; "
            f"this intent has fingerprint {offered}{detail}: use a new action id for a new"
            " intent"
        )
        self.action_id = action_id
        self.stored = stored
        self.offered = offered


class PassOutdated(LedgerError):
    """A reconcile pass's snapshot is stale: an attempt was started on the device after the
    pass listed its attempts, so rows it read may be that attempt's. Nothing was written;
    redo the pass."""


class StaleTransition(LedgerError):
    """A compare-and-set update matched no row: the record was moved by someone else."""

    def __init__(self, dispatch_id: str, expected: str, found: str) -> None:
        super().__init__(
            f"attempt {dispatch_id}: expected {expected} but the ledger holds {found}; "
            "another worker got there first"
        )
        self.dispatch_id = dispatch_id
        self.expected = expected
        self.found = found


class AttemptRefused(LedgerError):
    """``begin_attempt`` refused to create a new attempt."""

    def __init__(self, message: str, decision: RedispatchDecision | None = None) -> None:
        super().__init__(message)
        self.decision = decision


class AttemptInFlight(AttemptRefused):
    """The action already has an attempt whose delivery is unresolved."""


class DeviceBusy(AttemptRefused):
    """Another action's in-flight attempt holds this device's lease.

    ``holder_dispatch_id``, ``holder_action_id`` and ``holder_since`` name it (empty when
    unknown), so a caller can say what it waits for.
    """

    holder_dispatch_id: str = ""
    holder_action_id: str = ""
    holder_since: str = ""


class PolicyRefused(AttemptRefused):
    """The policy gate stopped the attempt before anything was sent: ``gate`` (a
    ``GateDecision``) says which rule and what follows (DENY: never sent; HOLD: a person
    must approve it; WAIT: quiet hours, until ``gate.until``; OVER_LIMIT: a limit, try
    later). The verdict is in the action's history."""

    gate: Any = None


class BudgetExhausted(AttemptRefused):
    """The action has used its attempts or passed its deadline: a person must look."""


class WrongPhone(AttemptRefused):
    """The action is bound elsewhere (DESIGN.md invariant 9): to the phone its sender named
    (``planned_device``), or to its pool's workers, one of which must hold its claim for this
    phone. Nothing was written; a sender on the right phone, or a worker of the pool, sends
    it."""
