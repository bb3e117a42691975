"""The agent facade, public as ``starebrain_actions.agent``: ``SmsAgent`` and what it returns.

Defined in :mod:`starebrain_actions.orchestration.agent`; this module only re-exports it.
"""

from starebrain_actions.orchestration.agent import (
    Change,
    DeviceReport,
    ReconcilePass,
    ResumeItem,
    ResumeReport,
    SendOutcome,
    SmsAgent,
    reconcile_pending,
)

__all__ = [
    "Change",
    "DeviceReport",
    "ReconcilePass",
    "ResumeItem",
    "ResumeReport",
    "SendOutcome",
    "SmsAgent",
    "reconcile_pending",
]
