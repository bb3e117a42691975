"""The agent facade, public as ``starebrain_actions.agent``: ``SmsAgent`` and what it returns.

Defined in :mod:`starebrain_actions.orchestration` (the agent, what a send or a resume
returns, and the reconcile pass); this module only re-exports them.
"""

from starebrain_actions.orchestration.agent import SmsAgent
from starebrain_actions.orchestration.outcome import ResumeItem, ResumeReport, SendOutcome
from starebrain_actions.orchestration.reconciler import (
    Change,
    DeviceReport,
    ReconcilePass,
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
