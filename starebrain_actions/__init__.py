"""starebrain-actions: durable two-axis receipts that stop agents sending the same SMS twice.

Public names are imported lazily (``_EXPORTS``): ``import starebrain_actions.cli`` does
not pay for the ledger, cattrs or structlog before a command needs them.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from starebrain_actions._convert import converter
    from starebrain_actions._core import (
        LEGAL_STATES,
        STATUS_TABLE,
        TRANSITIONS,
        confirm_delivery,
        derive_status,
        fail_delivery,
        flag_for_review,
        note_error,
        reconcile,
        record_submission,
        resolve,
        should_redispatch,
        try_accept,
    )
    from starebrain_actions._ledger import SCHEMA_VERSION, Ledger, summarize
    from starebrain_actions._logging import configure_logging
    from starebrain_actions._model import (
        AcceptanceState,
        Action,
        ActionRecord,
        ActionSummary,
        Artifact,
        ArtifactOutcome,
        DeliveryState,
        DuplicateSighting,
        Event,
        HistoryEntry,
        LookupResult,
        MatchVerdict,
        ProviderKind,
        RedispatchDecision,
        RedispatchReason,
        RetryPolicy,
        ReviewReason,
        SmsIntent,
        Status,
        Transition,
    )
    from starebrain_actions.exceptions import (
        AttemptInFlight,
        AttemptRefused,
        BudgetExhausted,
        CorruptRecord,
        DeviceBusy,
        FingerprintConflict,
        InvalidInput,
        InvariantViolation,
        LedgerError,
        LedgerUnavailable,
        NotFound,
        PassOutdated,
        SchemaTooNew,
        StaleTransition,
        StarebrainError,
    )

#: Where each public name is defined (``module`` or ``module:attribute``). A name is imported
#: on first use, so that importing one submodule (the command line, say) loads only what it
#: needs; ``from starebrain_actions import X`` works as with eager imports.
_EXPORTS: dict[str, str] = {
    "converter": "starebrain_actions._convert",
    "LEGAL_STATES": "starebrain_actions._core",
    "STATUS_TABLE": "starebrain_actions._core",
    "TRANSITIONS": "starebrain_actions._core",
    "confirm_delivery": "starebrain_actions._core",
    "derive_status": "starebrain_actions._core",
    "fail_delivery": "starebrain_actions._core",
    "flag_for_review": "starebrain_actions._core",
    "note_error": "starebrain_actions._core",
    "reconcile": "starebrain_actions._core",
    "record_submission": "starebrain_actions._core",
    "resolve": "starebrain_actions._core",
    "should_redispatch": "starebrain_actions._core",
    "try_accept": "starebrain_actions._core",
    "Ledger": "starebrain_actions._ledger",
    "SCHEMA_VERSION": "starebrain_actions._ledger",
    "summarize": "starebrain_actions._ledger",
    "configure_logging": "starebrain_actions._logging",
    "AcceptanceState": "starebrain_actions._model",
    "Action": "starebrain_actions._model",
    "ActionRecord": "starebrain_actions._model",
    "ActionSummary": "starebrain_actions._model",
    "Artifact": "starebrain_actions._model",
    "ArtifactOutcome": "starebrain_actions._model",
    "DeliveryState": "starebrain_actions._model",
    "DuplicateSighting": "starebrain_actions._model",
    "Event": "starebrain_actions._model",
    "HistoryEntry": "starebrain_actions._model",
    "LookupResult": "starebrain_actions._model",
    "MatchVerdict": "starebrain_actions._model",
    "ProviderKind": "starebrain_actions._model",
    "RedispatchDecision": "starebrain_actions._model",
    "RedispatchReason": "starebrain_actions._model",
    "RetryPolicy": "starebrain_actions._model",
    "ReviewReason": "starebrain_actions._model",
    "SmsIntent": "starebrain_actions._model",
    "Status": "starebrain_actions._model",
    "Transition": "starebrain_actions._model",
    "AttemptInFlight": "starebrain_actions.exceptions",
    "AttemptRefused": "starebrain_actions.exceptions",
    "BudgetExhausted": "starebrain_actions.exceptions",
    "CorruptRecord": "starebrain_actions.exceptions",
    "DeviceBusy": "starebrain_actions.exceptions",
    "FingerprintConflict": "starebrain_actions.exceptions",
    "InvalidInput": "starebrain_actions.exceptions",
    "InvariantViolation": "starebrain_actions.exceptions",
    "LedgerError": "starebrain_actions.exceptions",
    "LedgerUnavailable": "starebrain_actions.exceptions",
    "NotFound": "starebrain_actions.exceptions",
    "PassOutdated": "starebrain_actions.exceptions",
    "SchemaTooNew": "starebrain_actions.exceptions",
    "StaleTransition": "starebrain_actions.exceptions",
    "StarebrainError": "starebrain_actions.exceptions",
}

__all__ = [
    "LEGAL_STATES",
    "SCHEMA_VERSION",
    "STATUS_TABLE",
    "TRANSITIONS",
    "AcceptanceState",
    "Action",
    "ActionRecord",
    "ActionSummary",
    "Artifact",
    "ArtifactOutcome",
    "AttemptInFlight",
    "AttemptRefused",
    "BudgetExhausted",
    "CorruptRecord",
    "DeliveryState",
    "DeviceBusy",
    "DuplicateSighting",
    "Event",
    "FingerprintConflict",
    "HistoryEntry",
    "InvalidInput",
    "InvariantViolation",
    "Ledger",
    "LedgerError",
    "LedgerUnavailable",
    "LookupResult",
    "MatchVerdict",
    "NotFound",
    "PassOutdated",
    "ProviderKind",
    "RedispatchDecision",
    "RedispatchReason",
    "RetryPolicy",
    "ReviewReason",
    "SchemaTooNew",
    "SmsIntent",
    "StaleTransition",
    "StarebrainError",
    "Status",
    "Transition",
    "configure_logging",
    "confirm_delivery",
    "converter",
    "derive_status",
    "fail_delivery",
    "flag_for_review",
    "note_error",
    "reconcile",
    "record_submission",
    "resolve",
    "should_redispatch",
    "summarize",
    "try_accept",
]


def __getattr__(name: str) -> _typing.Any:
    """Import a public name on first use (PEP 562), then keep it in the module."""
    try:
        module, _, attribute = _EXPORTS[name].partition(":")
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(_importlib.import_module(module), attribute or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
