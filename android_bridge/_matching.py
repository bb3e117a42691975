"""Does a provider row carry the intended SMS? Recipient and body compared as a person would.

Recipients go through :func:`normalize_recipient`, the one rule intents and the sender use
too: E.164 for a valid number (national numbers read in the device's region), the digits for
a short code, and "invalid" for anything else. An invalid recipient on either side never
matches. Bodies are compared after Unicode NFC and turning ``\\r\\n`` and ``\\r`` into
``\\n``; nothing fuzzier unless asked (``loose_whitespace``: trailing whitespace on each line
and at the end is ignored, and runs of spaces/tabs count as one).
"""

from __future__ import annotations

import re
import unicodedata

import attrs

from android_bridge._records import SmsMessage
from android_bridge.recipients import normalize_recipient


def normalize_body(body: str, *, loose_whitespace: bool = False) -> str:
    """NFC, line endings as ``\\n``; with ``loose_whitespace`` also trailing whitespace per
    line and at the end dropped, and runs of spaces/tabs collapsed to one space."""
    text = unicodedata.normalize("NFC", body).replace("\r\n", "\n").replace("\r", "\n")
    if loose_whitespace:
        lines = [re.sub(r"[ \t]+", " ", line).rstrip() for line in text.split("\n")]
        text = "\n".join(lines).rstrip()
    return text


@attrs.frozen(kw_only=True)
class MatchResult:
    """Whether a provider row matches the intent, and why not when it does not."""

    #: Both recipient and body match.
    matched: bool
    #: Recipients equal after normalisation.
    recipient_ok: bool
    #: Bodies equal after normalisation.
    body_ok: bool
    #: One short machine-readable reason: "match", "recipient_mismatch", "body_mismatch",
    #: "both_mismatch", "recipient_invalid", "body_missing".
    reason: str
    #: Human-readable details for the audit trail (never the raw number or body).
    details: tuple[str, ...]


def _body_difference(expected: str, actual: str) -> str:
    if len(expected) != len(actual):
        return f"length differs: expected {len(expected)} characters, found {len(actual)}"
    index = next(i for i, (a, b) in enumerate(zip(expected, actual, strict=True)) if a != b)
    return (
        f"first difference at character {index}:"
        f" expected U+{ord(expected[index]):04X}, found U+{ord(actual[index]):04X}"
    )


def message_matches_intent(
    message: SmsMessage,
    recipient: str,
    body: str,
    *,
    region: str | None,
    loose_whitespace: bool = False,
) -> MatchResult:
    """Compare a provider row with the intended recipient and body.

    ``region`` is the device's region (for national numbers on either side; None reads
    international numbers and short codes only).
    ``loose_whitespace`` is the one documented loosening (see :func:`normalize_body`).
    """
    details: list[str] = []
    intended = normalize_recipient(recipient, region)
    found = normalize_recipient(message.address or "", region)
    recipient_invalid = intended.kind == "invalid" or found.kind == "invalid"
    if recipient_invalid:
        recipient_ok = False
        side = "intended" if intended.kind == "invalid" else "stored"
        details.append(f"{side} recipient is not a phone number or short code")
        why = intended.reason if intended.kind == "invalid" else found.reason
        details.append(f"{side} recipient: {why}")
    elif intended.kind != found.kind:
        recipient_ok = False
        details.append(f"recipient kinds differ: intended {intended.kind}, stored {found.kind}")
    else:
        recipient_ok = intended.value == found.value
        if not recipient_ok:
            details.append(f"recipients differ after {intended.kind} normalisation")
    if message.body is None:
        body_ok = False
        details.append("stored body is NULL")
    else:
        expected_body = normalize_body(body, loose_whitespace=loose_whitespace)
        actual_body = normalize_body(message.body, loose_whitespace=loose_whitespace)
        body_ok = expected_body == actual_body
        if not body_ok:
            details.append("body " + _body_difference(expected_body, actual_body))
    if recipient_ok and body_ok:
        reason = "match"
    elif message.body is None and recipient_ok:
        reason = "body_missing"
    elif recipient_invalid and body_ok:
        reason = "recipient_invalid"
    elif not recipient_ok and not body_ok:
        reason = "both_mismatch"
    elif not recipient_ok:
        reason = "recipient_mismatch"
    else:
        reason = "body_mismatch"
    return MatchResult(
        matched=recipient_ok and body_ok,
        recipient_ok=recipient_ok,
        body_ok=body_ok,
        reason=reason,
        details=tuple(details),
    )
