"""The default SMS app as Android 10 to 15 really show it: the product sends through user 0's
SMS role holder, read with ``cmd role get-role-holders`` where the Permission module has it
(14+, or 12/13 updated by Google Play) and from ``dumpsys role`` elsewhere; it never trusts
``sms_default_application``, which nothing writes from Android 10 on (``null`` on a phone
first booted on 10+, a stale package on one upgraded from 9). Each test counts what left the
phone and what its SMS store holds, on the SQLite and the PostgreSQL ledger.
"""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from starebrain_actions import DeliveryState, Status
from tests.agent.conftest import sent_rows

TO, BODY = "+1 202 555 0100", "Your code is 4821"
AOSP = "com.android.messaging"
GOOGLE = "com.google.android.apps.messaging"


def _sources(logs: list[dict[str, Any]]) -> list[tuple[str | None, str | None]]:
    """(sms_app, sms_app_source) of every send the bridge logged as dispatched."""
    return [
        (event.get("sms_app"), event.get("sms_app_source"))
        for event in logs
        if event.get("event") == "sms_dispatched"
    ]


@pytest.mark.parametrize("android", [11, 12, 13])
async def test_a_send_on_android_11_to_13_goes_to_the_role_holder(
    sms_phone: Any, agent_for: Any, android: int
) -> None:
    """Android 11 to 13 as shipped have no `cmd role get-role-holders` (Permission commit
    2e97608b is first in android-14.0.0_r11) and say `null` for the setting: the holder comes
    from `dumpsys role`, and the one SMS goes out through it: SUCCEEDED, one SENT row."""
    phone = await sms_phone(android=android, app="aosp")
    with capture_logs() as logs:
        async with agent_for(phone) as agent:
            outcome = await agent.send("A-17", TO, BODY, wait=5)
    assert Status.SUCCEEDED == outcome.status
    assert 1 == len(sent_rows(phone, TO, BODY))
    sent = await phone.wait_transmissions(count=1, then_idle=True)  # the radio sends after the row
    assert [(AOSP, BODY)] == [(t.app, t.body) for t in sent]
    assert [(AOSP, "dumpsys role")] == _sources(logs)


@pytest.mark.parametrize("android", [12, 13])
async def test_a_play_updated_module_on_12_and_13_answers_cmd_role(
    sms_phone: Any, agent_for: Any, android: int
) -> None:
    """A Permission module Google Play updated brings `get-role-holders` to 12 and 13 (the
    role service lives in the module from 12): the holder comes from `cmd role`, one SMS."""
    phone = await sms_phone(android=android, app="aosp", permission_module_updated=True)
    with capture_logs() as logs:
        async with agent_for(phone) as agent:
            outcome = await agent.send("A-17", TO, BODY, wait=5)
    assert (Status.SUCCEEDED, 1) == (outcome.status, len(sent_rows(phone, TO, BODY)))
    assert [(AOSP, "cmd role")] == _sources(logs)


@pytest.mark.parametrize("android", [10, 11, 12, 13])
async def test_a_stale_setting_never_sends_through_the_app_it_names(
    sms_phone: Any, agent_for: Any, android: int
) -> None:
    """A phone upgraded from Android 9 keeps `sms_default_application` naming Google Messages;
    the user has since made AOSP Messaging the default. The send goes through AOSP Messaging,
    never through the app the stale setting names."""
    phone = await sms_phone(
        android=android, app="aosp", second_sms_app=True, sms_default_setting=GOOGLE
    )
    phone.system_state.sms_role_holder = AOSP
    async with agent_for(phone) as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=5)
    assert Status.SUCCEEDED == outcome.status
    assert [AOSP] == [t.app for t in await phone.wait_transmissions(count=1, then_idle=True)]
    assert 1 == len(sent_rows(phone, TO, BODY))


@pytest.mark.parametrize("android", [10, 11, 12, 13, 14, 15])
async def test_no_default_sms_app_is_refused_before_any_key(
    sms_phone: Any, agent_for: Any, android: int
) -> None:
    """Two SMS apps and no default, while the stale setting still names one of them: the send
    is refused before any key, saying which read found no holder; nothing leaves the phone,
    and every attempt is FAILED by that proof."""
    phone = await sms_phone(android=android, second_sms_app=True, sms_default_setting=AOSP)
    async with agent_for(phone) as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=5)
    source = "cmd role" if android >= 14 else "dumpsys role"
    await phone.radio_idle()
    assert ([], Status.PLANNED) == (phone.transmissions, outcome.status)  # waits for the phone
    assert [] == sent_rows(phone, TO, BODY)
    for attempt in outcome.summary.attempts:
        evidence = str(attempt.evidence)
        assert DeliveryState.FAILED is attempt.delivery
        assert f"no default SMS app is set (the SMS role has no holder; read with {source})" in (
            evidence
        )
        assert "no key was pressed" in evidence


@pytest.mark.parametrize("android", [11, 13])
async def test_another_users_sms_app_is_never_taken_for_the_phones(
    sms_phone: Any, agent_for: Any, android: int
) -> None:
    """A phone with a work profile (no SMS role) and a secondary user whose default SMS app is
    Google Messages: `dumpsys role` lists all three users, and the send goes through user 0's
    AOSP Messaging only."""
    phone = await sms_phone(
        android=android,
        app="aosp",
        second_sms_app=True,
        work_profile=True,
        secondary_user_sms_app=GOOGLE,
    )
    phone.system_state.sms_role_holder = AOSP
    with capture_logs() as logs:
        async with agent_for(phone) as agent:
            outcome = await agent.send("A-17", TO, BODY, wait=5)
    sent = await phone.wait_transmissions(count=1, then_idle=True)
    assert (Status.SUCCEEDED, [AOSP]) == (outcome.status, [t.app for t in sent])
    assert [(AOSP, "dumpsys role")] == _sources(logs)


@pytest.mark.parametrize("android", [11, 13])
async def test_no_default_for_user_0_is_refused_whatever_another_user_has(
    sms_phone: Any, agent_for: Any, android: int
) -> None:
    """User 0 has no default SMS app; a secondary user does: the send is refused before any
    key, saying the dump showed user 0's SMS role without a holder; nothing leaves the
    phone."""
    phone = await sms_phone(android=android, second_sms_app=True, secondary_user_sms_app=AOSP)
    async with agent_for(phone) as agent:
        outcome = await agent.send("A-17", TO, BODY, wait=5)
    await phone.radio_idle()
    assert ([], Status.PLANNED) == (phone.transmissions, outcome.status)  # waits for the phone
    assert "no holder; read with dumpsys role" in str(outcome.summary.attempts[0].evidence)
