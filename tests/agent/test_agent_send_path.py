"""``send_path="auto"`` (the default): the framework path only on a phone build where it is
proven: by the phone's own framework jar, whose ``ISms$Stub`` carries the transaction code
the bridge sends with (read once per build and kept in the ledger), or, where the jar proves
nothing, by a framework send this ledger saw confirmed by a row ``com.android.shell`` wrote;
the messaging app otherwise (``starebrain_actions.phone.send_path``). Ground truth is the phone's
own record of who sent what (``transmissions``: the app, or the shell through ``isms``).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from android_bridge import Device
from starebrain_actions import Ledger, RetryPolicy, ReviewReason, SmsIntent, Status
from starebrain_actions.core.exceptions import InvalidInput
from starebrain_actions.core.segments import count_segments
from starebrain_actions.phone.send_path import RETRY_CODES_AFTER, ledger_proof
from tests.agent.conftest import sent_rows

TO, BODY = "+1 202 555 0100", "Your code is 4821"
SHELL = "com.android.shell"
MESSAGING = "com.google.android.apps.messaging"
#: no retries, and an attempt never seen goes to review at once (UNVERIFIED)
ONE_SHOT = RetryPolicy(
    settle_after=timedelta(milliseconds=300),
    framework_settle_after=timedelta(milliseconds=200),
    maximum_attempts=1,
    unverified_after=timedelta(0),
)


async def senders(phone: Any, count: int) -> list[str]:
    """Who the phone says sent each message, in order (ground truth, not the ledger), once
    ``count`` messages have left it (the radio sends after the row) and nothing more is on
    its way."""
    sent = await phone.wait_transmissions(count=count, then_idle=True)
    return [transmission.app for transmission in sent]


JAR_READ = "base64 /system/framework/framework.jar"


def jar_reads(phone: Any) -> int:
    """How many times the phone was asked for its framework jar (its own command log)."""
    return sum(JAR_READ in command for command in phone.commands_run)


@pytest.mark.parametrize("android", [10, 11, 15])
async def test_a_jar_that_proves_the_code_opens_the_framework_from_the_first_send(
    sms_phone: Any, agent_for: Any, android: int
) -> None:
    """A new ledger, and a phone whose framework.jar carries the ``ISms$Stub`` constant the
    bridge sends with (6 on Android 10, 5 on 11 to 15): ``auto`` takes the framework from the
    very first send, saying the jar proved it; the finding is kept in the ledger under the
    build, so the next agent reads the ledger, not the jar."""
    phone = await sms_phone(android=android)
    async with agent_for(phone, send_path="auto") as agent:
        assert "framework" == agent.phone.send_path
        assert "framework.jar proves" in agent.phone.path_choice
        first = await agent.send("A-1", TO, BODY, wait=5)
        build = agent.phone._device.cached_facts.build
        kept = await agent.ledger.framework_codes(build)
    assert 1 == jar_reads(phone)
    async with agent_for(phone, send_path="auto") as agent:
        assert "framework" == agent.phone.send_path
        second = await agent.send("A-2", TO, "Your code is 9917", wait=5)
    assert 1 == jar_reads(phone)  # the ledger's copy, not a second pull
    assert (Status.SUCCEEDED, Status.SUCCEEDED) == (first.status, second.status)
    assert [SHELL, SHELL] == await senders(phone, 2)
    assert first.record is not None
    assert "framework" == first.record.evidence["send_path"]
    assert kept is not None
    assert (6 if android == 10 else 5, None) == (kept.send_text, kept.reason)


async def test_a_vendor_jar_with_another_code_keeps_the_framework_shut(
    sms_phone: Any, agent_for: Any
) -> None:
    """An OEM ``ISms`` that declares a method before AOSP's moves every code by one: the jar
    proves 6 where the bridge would call 5, which reaches another method there. ``auto``
    sends through the app and says why, and keeps doing so."""
    phone = await sms_phone(android=14, framework_jar="vendor-reordered")
    async with agent_for(phone, send_path="auto") as agent:
        assert "ui" == agent.phone.send_path
        assert "code 6, not the bridge's 5" in agent.phone.path_choice
        outcome = await agent.send("A-1", TO, BODY, wait=5)
    assert Status.SUCCEEDED is outcome.status
    assert [MESSAGING] == await senders(phone, 1)


@pytest.mark.parametrize("android", [12, 14])
async def test_a_phone_without_subscription_1_keeps_the_app_though_its_jar_proves_the_code(
    sms_phone: Any, agent_for: Any, android: int
) -> None:
    """The framework path sends on subscription 1; a phone whose SIM is subscription 2 (a SIM
    swapped once) would take the call, report success and send nothing. ``auto`` asks the
    phone first (14+: its own list, ``dumpsys isub``; before: the newest row's ``sub_id``)
    and sends through the app, saying why: one SMS, sent by the app."""
    phone = await sms_phone(android=android, sim_sub_ids=(2,))
    phone.store.insert_incoming("+12025550143", "hi", date_ms=phone.now_ms(), sub_id=2)
    async with agent_for(phone, send_path="auto") as agent:
        assert "ui" == agent.phone.send_path
        assert "subscription 1" in agent.phone.path_choice
        assert ("isub): 2" if android >= 14 else "row's subscription: 2") in (
            agent.phone.path_choice
        )
        outcome = await agent.send("A-1", TO, BODY, wait=5)
    assert Status.SUCCEEDED is outcome.status
    assert [MESSAGING] == await senders(phone, 1)


@pytest.mark.parametrize(
    ("jar", "why"),
    [
        ("stripped", "defines ISms$Stub"),
        ("missing", "stat of"),
        ("no-read-permission", "base64 of"),
        ("dex041", "041"),
    ],
)
async def test_a_new_ledger_sends_through_the_app_where_the_jar_proves_nothing(
    sms_phone: Any, agent_for: Any, jar: str, why: str
) -> None:
    """The probe passes (isms is there, Android 14 is in the table, the shell is uid 2000), but
    the jar cannot be read exactly (stripped to an odex, missing, unreadable, a DEX version the
    reader does not know) and nothing this ledger holds proves the code on this build: the
    app sends, and the attempt says why, with the jar's own reason."""
    phone = await sms_phone(android=14, framework_jar=jar)
    async with agent_for(phone, send_path="auto") as agent:
        assert ("ui", True) == (agent.phone.send_path, "framework" in agent.phone.path_choice)
        outcome = await agent.send("A-1", TO, BODY, wait=5)
    assert outcome.record is not None
    assert Status.SUCCEEDED is outcome.status
    assert [MESSAGING] == await senders(phone, 1)
    choice = outcome.record.evidence["path_choice"]
    assert "no framework send" in choice
    assert why in choice
    assert "send_path" not in outcome.record.evidence


async def test_a_jar_that_proves_nothing_still_yields_to_a_confirmed_framework_send(
    sms_phone: Any, agent_for: Any
) -> None:
    """Where the jar is stripped, today's rule stands: a person's framework send confirmed by
    the shell's row on this build opens the framework path for ``auto``."""
    phone = await sms_phone(android=13, framework_jar="stripped")
    async with agent_for(phone, send_path="framework") as agent:
        first = await agent.send("A-1", TO, BODY, wait=5)
    async with agent_for(phone, send_path="auto") as agent:
        assert "framework" == agent.phone.send_path
        assert "A-1" in agent.phone.path_choice
        second = await agent.send("A-2", TO, "Your code is 9917", wait=5)
    assert (Status.SUCCEEDED, Status.SUCCEEDED) == (first.status, second.status)
    assert [SHELL, SHELL] == await senders(phone, 2)


async def test_one_confirmed_framework_send_proves_the_path_for_auto(
    sms_phone: Any, agent_for: Any
) -> None:
    """A person sends once through the framework; its row comes back written by the shell on
    this build (ro.build.fingerprint). The next agent on ``auto`` takes the framework path,
    and its attempt names the proof."""
    phone = await sms_phone(android=15)
    async with agent_for(phone, send_path="framework") as agent:
        first = await agent.send("A-1", TO, BODY, wait=5)
    assert first.record is not None
    assert SHELL == first.record.evidence["row_creator"]
    async with agent_for(phone, send_path="auto") as agent:
        assert "framework" == agent.phone.send_path
        second = await agent.send("A-2", TO, "Your code is 9917", wait=5)
    assert (Status.SUCCEEDED, Status.SUCCEEDED) == (first.status, second.status)
    assert [SHELL, SHELL] == await senders(phone, 2)
    assert second.record is not None
    evidence = second.record.evidence
    assert first.record.dispatch_id in evidence["path_choice"]
    assert evidence["build"].endswith(":userdebug/test-keys")


async def test_another_build_of_the_same_phone_is_not_proven(
    sms_phone: Any, agent_for: Any
) -> None:
    """The proof is per build: on another build of the same phone (here eng instead of
    userdebug; an update changes ro.build.fingerprint the same way) ``auto`` uses the app
    again until a framework send on that build comes back (a stripped jar: no proof of its
    own)."""
    phone = await sms_phone(android=13, framework_jar="stripped")
    async with agent_for(phone, send_path="framework") as agent:
        await agent.send("A-1", TO, BODY, wait=5)
    phone.build_type = "eng"
    async with agent_for(phone, send_path="auto") as agent:
        assert "ui" == agent.phone.send_path
        outcome = await agent.send("A-2", TO, "Your code is 9917", wait=5)
    assert Status.SUCCEEDED is outcome.status
    assert [SHELL, MESSAGING] == await senders(phone, 2)


async def test_a_framework_send_that_never_comes_back_turns_auto_back_to_the_app(
    sms_phone: Any, agent_for: Any
) -> None:
    """Proven once; then the SIM is swapped (a new subscription id), so the framework answers
    its usual success parcel and sends nothing. That attempt goes to review as UNVERIFIED
    (never sent again without proof), and the next ``auto`` agent sends through the app,
    saying why: never two SMS for one action, counted on the phone."""
    phone = await sms_phone(android=12)
    async with agent_for(phone, send_path="framework") as agent:
        await agent.send("A-1", TO, BODY, wait=5)
    phone.sim_sub_ids = (2,)
    async with agent_for(phone, send_path="auto", policy=ONE_SHOT) as agent:
        assert "framework" == agent.phone.send_path
        lost = await agent.send("A-2", TO, "Your code is 9917", wait=1)
    assert lost.record is not None
    assert ReviewReason.UNVERIFIED is lost.record.review_reason
    async with agent_for(phone, send_path="auto") as agent:
        assert "ui" == agent.phone.send_path
        assert "UNVERIFIED" in agent.phone.path_choice
        third = await agent.send("A-3", TO, "Your code is 5550", wait=5)
    assert Status.SUCCEEDED is third.status
    assert [SHELL, MESSAGING] == await senders(phone, 2)


async def test_an_explicit_path_is_kept_whatever_the_record(sms_phone: Any, agent_for: Any) -> None:
    """``send_path="ui"`` sends through the app even where the framework is proven, and says
    no choice was made."""
    phone = await sms_phone(android=11)
    async with agent_for(phone, send_path="framework") as agent:
        await agent.send("A-1", TO, BODY, wait=5)
    async with agent_for(phone, send_path="ui") as agent:
        assert ("ui", "") == (agent.phone.send_path, agent.phone.path_choice)
        await agent.send("A-2", TO, "Your code is 9917", wait=5)
    assert [SHELL, MESSAGING] == await senders(phone, 2)


async def test_a_long_lived_agent_chooses_again_before_each_send(
    sms_phone: Any, agent_for: Any
) -> None:
    """An agent kept open (the MCP server's way) does not keep its first choice: its framework
    send that went to review turns its very next send back to the app."""
    phone = await sms_phone(android=14)
    async with agent_for(phone, send_path="framework") as agent:
        await agent.send("A-1", TO, BODY, wait=5)
    async with agent_for(phone, send_path="auto", policy=ONE_SHOT) as agent:
        assert "framework" == agent.phone.send_path
        phone.sim_sub_ids = (2,)
        lost = await agent.send("A-2", TO, "Your code is 9917", wait=1)
        assert lost.record is not None
        assert ReviewReason.UNVERIFIED is lost.record.review_reason
        phone.sim_sub_ids = (1,)
        after = await agent.send("A-3", TO, "Your code is 5550", wait=5)
        assert "ui" == agent.phone.send_path
    assert after.record is not None
    assert "UNVERIFIED" in after.record.evidence["path_choice"]
    assert (Status.SUCCEEDED, [SHELL, MESSAGING]) == (after.status, await senders(phone, 2))


async def test_a_send_goes_the_way_its_receipt_says(sms_phone: Any, agent_for: Any) -> None:
    """The receipt is written first and names the path; the send takes that path even if
    ``auto`` chose another one meanwhile (another send's choice, on the same handle)."""
    phone = await sms_phone(android=15)
    async with agent_for(phone, send_path="ui") as agent:
        assert "ui" == agent.phone.send_path
        intent = SmsIntent(recipient=TO, body=BODY)
        receipt = await agent.phone.dispatch(intent, path="framework")
    async with asyncio.timeout(5):
        await phone.wait_idle()  # the radio's answer (send_delay_ms)
    assert "framework" == receipt.evidence["send_path"]
    assert [SHELL] == await senders(phone, 1)


#: Two SMS segments each: 171 GSM-7 septets, and 71 UCS-2 code units (one SMS holds 70).
LONG_BODIES = [
    pytest.param(
        "Your code is 4821; it expires in ten minutes. " * 3 + "Thanks for waiting; see you soon!",
        id="gsm7-171",
    ),
    pytest.param("Ваш код 4821. " * 5 + "!", id="ucs2-71"),
]


@pytest.mark.parametrize("long_body", LONG_BODIES)
async def test_auto_sends_a_body_of_more_than_one_sms_through_the_app_where_the_framework_is_proven(
    sms_phone: Any, agent_for: Any, long_body: str
) -> None:
    """The framework path sends one SMS segment (SMSDispatcher.sendText sends nothing for a
    longer text and still reports success), so ``auto``, with the framework proven on this
    build, takes the app for a body of two segments, saying so in ``path_choice``, and the
    framework again for the next short one: each message sent once, by whom the phone says."""
    assert 2 == count_segments(long_body).segments
    phone = await sms_phone(android=15)
    async with agent_for(phone, send_path="framework") as agent:
        await agent.send("A-1", TO, BODY, wait=5)
    async with agent_for(phone, send_path="auto") as agent:
        assert "framework" == agent.phone.send_path
        long = await agent.send("A-2", TO, long_body, wait=5)
        short = await agent.send("A-3", TO, "Your code is 9917", wait=5)
    assert long.record is not None and short.record is not None
    assert (Status.SUCCEEDED, Status.SUCCEEDED) == (long.status, short.status)
    assert [SHELL, MESSAGING, SHELL] == await senders(phone, 3)
    assert ["sms"] * 3 == [transmission.channel for transmission in phone.transmissions]
    assert 1 == len(sent_rows(phone, TO, long_body))
    assert "2 SMS segments" in long.record.evidence["path_choice"]
    assert "send_path" not in long.record.evidence
    assert "framework" == short.record.evidence["send_path"]
    assert "A-1" in short.record.evidence["path_choice"]


@pytest.mark.parametrize("long_body", LONG_BODIES)
async def test_an_explicit_framework_path_refuses_a_longer_body_before_anything_is_recorded(
    sms_phone: Any, agent_for: Any, long_body: str
) -> None:
    """``send_path="framework"`` cannot send two segments: ``send`` raises InvalidInput naming
    the count and the other paths, before the ledger holds an action or an attempt, and the
    phone is not asked to send anything."""
    phone = await sms_phone(android=10)
    rows_before = phone.store.rows()
    async with agent_for(phone, send_path="framework") as agent:
        with pytest.raises(InvalidInput, match="2 SMS segments") as refused:
            await agent.send("A-1", TO, long_body, wait=5)
        assert [] == await agent.ledger.summaries()
        assert [] == await agent.ledger.latest_attempts(phone.serial, 10)
        assert 0 == agent.dispatches
    assert "send path ui, or auto" in str(refused.value)
    assert "nothing was recorded or sent" in str(refused.value)
    assert [] == phone.transmissions
    assert rows_before == phone.store.rows()
    assert not any("service call" in command for command in phone.commands_run)


async def test_a_jar_read_cut_short_is_kept_for_an_hour_then_read_again(
    sms_phone: Any, db_path: str, adb_key_path: Any
) -> None:
    """The jar's read hangs (the link stalls): ``auto`` keeps the app's path, keeps the
    failure with a time to retry after, and does not pull the jar again before it (each
    process would otherwise pay the timeout before every send); an hour later it reads the
    jar again, finds the code proven, and keeps that for good."""
    phone = await sms_phone(android=14)
    now = [datetime(2026, 12, 5, 8, 0, tzinfo=UTC)]
    connect = Device.connect(phone.serial, key_path=adb_key_path, command_timeout_s=0.5)
    async with Ledger.open(db_path, clock=lambda: now[0]) as ledger, await connect as device:
        build = (await device.facts()).build
        phone.inject_fault("hang")
        proven, why = await ledger_proof(ledger)(phone.serial, device)
        assert (False, True) == (proven, "could not be pulled" in why)
        kept = await ledger.framework_codes(build)
        assert kept is not None
        assert now[0] + RETRY_CODES_AFTER == kept.retry_after
        pulls = jar_reads(phone)
        now[0] += RETRY_CODES_AFTER / 2
        proven, why = await ledger_proof(ledger)(phone.serial, device)
        assert (False, True) == (proven, "could not be pulled" in why)
        assert pulls == jar_reads(phone)  # kept: not pulled again within the hour
        now[0] += RETRY_CODES_AFTER
        proven, why = await ledger_proof(ledger)(phone.serial, device)
        assert (True, pulls + 1) == (proven, jar_reads(phone))
        kept = await ledger.framework_codes(build)
        assert kept is not None
        assert (5, None, None) == (kept.send_text, kept.reason, kept.retry_after)
