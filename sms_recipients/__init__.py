"""What an SMS recipient is: one pure rule shared by the ledger and the Android bridge.

Intent creation (``starebrain_actions``), sending and matching (``android_bridge``) all call
:func:`normalize_recipient`, so a recipient one of them accepts is never refused by another.
It lives in its own package because neither of the two may import the other here: the
ledger's pure core knows nothing of Android, and the bridge knows nothing of the ledger.
"""

from __future__ import annotations

from sms_recipients._rules import (
    SHORT_CODE_DIGITS,
    NormalizedRecipient,
    RecipientKind,
    normalize_recipient,
)

__all__ = [
    "SHORT_CODE_DIGITS",
    "NormalizedRecipient",
    "RecipientKind",
    "normalize_recipient",
]
