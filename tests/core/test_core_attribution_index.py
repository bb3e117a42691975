"""plan_device with the judge's match keys decides exactly as it does judging every pair."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from starebrain_actions import (
    AcceptanceState,
    Action,
    ActionRecord,
    ArtifactOutcome,
    DeliveryState,
    ProviderKind,
    RetryPolicy,
    SmsIntent,
)
from starebrain_actions.core.ports import OutgoingMessage, PhoneRead
from starebrain_actions.orchestration.attribution import MatchKeys, plan_device
from starebrain_actions.orchestration.watched import Watched
from starebrain_actions.phone.android import AndroidPhone

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
CLOCK = 1_800_000_000_000
SHELL = "com.android.shell"
APP = "com.google.android.apps.messaging"

#: recipients as an intent may be written (each valid in the US)
INTENT_RECIPIENTS = ("+12025550100", "(202) 555-0100", "+12025550111", "12345", "+442079460000")
#: recipients as a row may store them: the same numbers written otherwise, and junk
ROW_RECIPIENTS = (
    *INTENT_RECIPIENTS,
    "202-555-0100",
    "2025550111",
    "+1 202 555 0100",
    "020 7946 0000",
    "",
    "not a number",
    None,
)
BODIES = ("Your code is 4821", "Your code is 4821\r\n", "Your code is 4821\n", "café", "other")
ROW_BODIES = (*BODIES, "cafe\u0301", "Your code is 4821 ", None)


def matcher(region: str = "US", *, loose_whitespace: bool = False) -> AndroidPhone:
    """The adapter's pure matching methods (judge and match keys) without a connection:
    nothing else of it is used."""
    phone = object.__new__(AndroidPhone)
    phone._region = region
    phone._loose_whitespace = loose_whitespace
    return phone


@st.composite
def intents(draw: st.DrawFn) -> SmsIntent:
    recipient = draw(st.sampled_from(INTENT_RECIPIENTS))
    # a national number needs its region; an international one may have any, or none
    region = "US" if recipient.startswith("(") else draw(st.sampled_from([None, "US", "GB"]))
    return SmsIntent(recipient=recipient, body=draw(st.sampled_from(BODIES)), region=region)


@st.composite
def rows(draw: st.DrawFn, row_id: int) -> OutgoingMessage:
    outcome = draw(st.sampled_from([ArtifactOutcome.SENT] * 3 + [ArtifactOutcome.FAILED]))
    kind = draw(st.sampled_from([ProviderKind.SMS] * 4 + [ProviderKind.MMS]))
    recipient = draw(st.sampled_from(ROW_RECIPIENTS))
    recipients: tuple[str, ...] = ()
    if kind is ProviderKind.MMS:
        recipients = tuple(
            draw(st.lists(st.sampled_from(INTENT_RECIPIENTS), min_size=0, max_size=2))
        )
        recipient = recipients[0] if len(recipients) == 1 else None
    return OutgoingMessage(
        provider_object_id=row_id,
        outcome=outcome,
        type={ArtifactOutcome.SENT: 2, ArtifactOutcome.FAILED: 5}[outcome],
        recipient=recipient,
        body=draw(st.sampled_from(ROW_BODIES)),
        date_ms=draw(
            st.sampled_from([None, CLOCK - 9_000, CLOCK + 100, CLOCK + 1_500, CLOCK + 8_000])
        ),
        kind=kind,
        recipients=recipients,
        creator=draw(st.sampled_from([None, SHELL, APP])),
    )


EVIDENCE: tuple[dict[str, Any], ...] = (
    {"send_window_ms": 2_000},
    {},
    {"creator": SHELL},
    {"keys_window_ms": [CLOCK, CLOCK + 500]},
    {"send_window_ms": 2_000, "mms_watermark_id": 0},
    {"fence": "claimed", "fence_stages": [f"am@x@{CLOCK}"]},
)


@st.composite
def watched_items(draw: st.DrawFn, index: int, row_ids: list[int]) -> Watched:
    intent = draw(intents())
    action = Action(
        action_id=f"A-{index}",
        fingerprint=intent.fingerprint,
        intent=intent,
        policy=RetryPolicy(grace_window=timedelta(seconds=60)),
        created_at=NOW,
    )
    floor = draw(st.integers(min_value=0, max_value=4))
    common: dict[str, Any] = {
        "action_id": action.action_id,
        "dispatch_id": f"d-{index}",
        "attempt": 1,
        "device": "dev",
        "dispatched_at": NOW - timedelta(minutes=draw(st.integers(0, 90))),
        "watermark_id": floor,
        "device_clock_ms": draw(st.sampled_from([CLOCK, None])),
        "evidence": draw(st.sampled_from(EVIDENCE)),
    }
    state = draw(st.sampled_from(["pending", "confirmed", "accepted"]))
    if state == "pending" or not row_ids:
        record = ActionRecord(**common)
    else:
        record = ActionRecord(
            **common,
            delivery=DeliveryState.CONFIRMED,
            acceptance=(
                AcceptanceState.ACCEPTED if state == "accepted" else AcceptanceState.PENDING
            ),
            provider_object_id=draw(st.sampled_from(row_ids)),
            provider_kind=ProviderKind.SMS,
            confirmed_at=NOW,
            accepted_at=NOW if state == "accepted" else None,
        )
    return Watched(record=record, action=action, floor_id=floor)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Watched], PhoneRead, set[int], AndroidPhone]:
    count = draw(st.integers(min_value=0, max_value=10))
    messages = [draw(rows(row_id)) for row_id in range(1, count + 1)]
    sms_ids = [m.provider_object_id for m in messages if m.kind is ProviderKind.SMS]
    watched = [
        draw(watched_items(index, sms_ids))
        for index in range(draw(st.integers(min_value=1, max_value=5)))
    ]
    claimed = set(draw(st.lists(st.sampled_from(sms_ids), max_size=3))) if sms_ids else set()
    read = PhoneRead(
        messages=tuple(messages), complete=True, full_view=True, mode="shell", round_trips=1
    )
    phone = matcher(draw(st.sampled_from(["US", "GB"])), loose_whitespace=draw(st.booleans()))
    return watched, read, claimed, phone


def test_the_adapter_offers_match_keys() -> None:
    """The Android adapter has the match keys the reconciler looks for."""
    assert isinstance(matcher(), MatchKeys)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_indexed_planning_decides_as_judging_every_pair(
    scenario: tuple[list[Watched], PhoneRead, set[int], AndroidPhone],
) -> None:
    """Indexing rows by normalised recipient and body changes no decision: the same
    transitions and duplicates, in the same order, as judging every row against every
    attempt (formats of one number, line endings, NFC, half matches, MMS, claimed rows)."""
    watched, read, claimed, phone = scenario
    plain = plan_device(watched, read, claimed, phone.judge, NOW)
    indexed = plan_device(watched, read, claimed, phone.judge, NOW, keys=phone)
    assert plain == indexed


@settings(max_examples=300, deadline=None)
@given(
    intent=intents(),
    message=rows(1),
    region=st.sampled_from(["US", "GB"]),
    loose=st.booleans(),
)
def test_match_keys_are_what_the_judge_compares(
    intent: SmsIntent, message: OutgoingMessage, region: str, loose: bool
) -> None:
    """Whenever the judge finds the recipient (or the body) equal, the keys are equal and
    not None; the keys never claim more than the judge."""
    phone = matcher(region, loose_whitespace=loose)
    verdict = phone.judge(message, intent)
    scope, recipient, body = phone.intent_keys(intent)
    row_recipient, row_body = phone.message_keys(message, scope)
    same_recipient = recipient is not None and recipient == row_recipient
    same_body = body is not None and body == row_body
    assert verdict.details["recipient_ok"] == same_recipient
    assert verdict.details["body_ok"] == same_body


def test_many_attempts_and_owner_rows_plan_without_judging_every_pair() -> None:
    """At 2,000 confirmed attempts and 200 unclaimed rows of the owner's, the indexed planner
    judges a handful of pairs where the plain one judges every pair (a count, not a time)."""
    phone = matcher()
    calls = {"plain": 0, "indexed": 0}

    def counting(name: str) -> Any:
        def judge(message: OutgoingMessage, intent: SmsIntent) -> Any:
            calls[name] += 1
            return phone.judge(message, intent)

        return judge

    watched = []
    messages = []
    for index in range(2_000):
        intent = SmsIntent(recipient="+12025550100", body=f"code {index}", region="US")
        action = Action(
            action_id=f"A-{index}",
            fingerprint=intent.fingerprint,
            intent=intent,
            policy=RetryPolicy(),
            created_at=NOW,
        )
        record = ActionRecord(
            action_id=action.action_id,
            dispatch_id=f"d-{index}",
            attempt=1,
            device="dev",
            dispatched_at=NOW - timedelta(seconds=2_000 - index),
            watermark_id=index,
            device_clock_ms=CLOCK,
            delivery=DeliveryState.CONFIRMED,
            acceptance=AcceptanceState.ACCEPTED,
            provider_object_id=index + 1,
            provider_kind=ProviderKind.SMS,
            confirmed_at=NOW,
            accepted_at=NOW,
            evidence={"send_window_ms": 2_000},
        )
        watched.append(Watched(record=record, action=action, floor_id=index))
        messages.append(
            OutgoingMessage(
                provider_object_id=index + 1,
                outcome=ArtifactOutcome.SENT,
                type=2,
                recipient="+12025550100",
                body=f"code {index}",
                date_ms=CLOCK + 100,
            )
        )
    owner = [
        OutgoingMessage(
            provider_object_id=3_000 + index,
            outcome=ArtifactOutcome.SENT,
            type=2,
            recipient="+12025550100",
            body=f"on my way {index}",
            date_ms=CLOCK + 100,
            creator=APP,
        )
        for index in range(200)
    ]
    read = PhoneRead(
        messages=(*messages, *owner), complete=True, full_view=True, mode="shell", round_trips=1
    )
    claimed = set(range(1, 2_001))
    indexed = plan_device(watched, read, claimed, counting("indexed"), NOW, keys=phone)
    assert () == indexed.transitions and () == indexed.duplicates
    assert 0 == calls["indexed"]
    sample = watched[:50]
    plain = plan_device(sample, read, claimed, counting("plain"), NOW)
    assert plain == plan_device(sample, read, claimed, phone.judge, NOW, keys=phone)
    assert 50 * 200 == calls["plain"]
