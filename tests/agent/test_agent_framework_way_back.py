"""The framework path is not lost for good to one doubt, and never comes back on a guess
(``starebrain_actions.phone.send_path.framework_standing``): a framework send whose row
comes back, the doubted attempt's own row read back late, or a person's ruling that it went
out restores it for ``send_path="auto"``; sends through the app, reads that see nothing and
time do not. Ground truth is the phone's own record of who sent what (``transmissions``: the
app, or the shell through ``isms``), on both ledgers (``agent_for``'s ``db_path``)."""

from __future__ import annotations

from typing import Any

from starebrain_actions import DeliveryState, ReviewReason, Status
from tests.agent.conftest import sent_rows
from tests.agent.test_agent_send_path import MESSAGING, ONE_SHOT, SHELL, senders

TO, BODY = "+1 202 555 0100", "Your code is 4821"
#: a person's own number, for the send that proves the path (as ``doctor --send-test``)
OWN = "+1 202 555 0142"
#: another customer: a later send to the doubted attempt's own number stays unattributed
#: while that attempt is open (its row could be the doubted one's: ``attribution``)
OTHER = "+1 202 555 0177"


async def lost_in_review(agent: Any, action_id: str, body: str) -> Any:
    """Send ``action_id`` (one attempt allowed) and wait, by sending it again (the same
    action: never a second SMS), until its attempt went to review as UNVERIFIED: a loaded
    machine may end a short wait before the attempt was even dispatched."""
    for _ in range(20):
        outcome = await agent.send(action_id, TO, body, wait=1)
        record = outcome.record
        if record is not None and record.review_reason is ReviewReason.UNVERIFIED:
            return outcome
    raise AssertionError(f"{action_id} never went to review: {outcome}")


async def doubt_by_a_swapped_sim(phone: Any, agent_for: Any) -> None:
    """Prove the framework path (one send through it), then doubt it: the SIM is swapped, so
    the framework answers its success parcel and sends nothing; the attempt goes to review
    (UNVERIFIED). The SIM is put back: the framework could send again, but nothing proves it.
    The phone has sent one SMS so far: the first send's."""
    async with agent_for(phone, send_path="auto") as agent:
        first = await agent.send("A-1", TO, BODY, wait=10)
        assert ("framework", Status.SUCCEEDED) == (agent.phone.send_path, first.status)
    phone.sim_sub_ids = (2,)
    async with agent_for(phone, send_path="auto", policy=ONE_SHOT) as agent:
        assert "framework" == agent.phone.send_path
        await lost_in_review(agent, "A-2", "Your code is 9917")
    phone.sim_sub_ids = (1,)
    assert [SHELL] == await senders(phone, 1)


async def test_a_doubt_holds_through_sends_through_the_app_and_reads(
    sms_phone: Any, agent_for: Any
) -> None:
    """Once doubted, ``auto`` sends through the app, send after send (each says since when
    and by which attempt), and no read of the phone, no send through the app and no new
    agent brings the framework back on its own: the phone's own record shows only the app
    sending."""
    phone = await sms_phone(android=14)
    await doubt_by_a_swapped_sim(phone, agent_for)
    for number in range(3):
        async with agent_for(phone, send_path="auto") as agent:
            assert "ui" == agent.phone.send_path
            assert "doubted since" in agent.phone.path_choice
            assert "A-2" in agent.phone.path_choice
            await agent.reconcile()
            outcome = await agent.send(f"B-{number}", TO, f"Reminder {number}", wait=10)
        assert outcome.record is not None
        assert "ui" == outcome.record.evidence.get("send_path", "ui")
    assert [SHELL, MESSAGING, MESSAGING, MESSAGING] == await senders(phone, 4)


async def test_a_framework_send_that_comes_back_restores_the_path(
    sms_phone: Any, agent_for: Any
) -> None:
    """Doubted, then a person sends once through the framework (what ``doctor --send-test
    --send-path framework`` does) and its row comes back written by the shell: the next
    ``auto`` agent takes the framework again, its attempt saying the path was restored and
    after which doubt."""
    phone = await sms_phone(android=14)
    await doubt_by_a_swapped_sim(phone, agent_for)
    async with agent_for(phone, send_path="framework") as agent:
        proof = await agent.send("P-1", OWN, "starebrain doctor send test", wait=10)
    assert proof.record is not None
    assert SHELL == proof.record.evidence["row_creator"]
    async with agent_for(phone, send_path="auto") as agent:
        assert "framework" == agent.phone.send_path
        after = await agent.send("A-3", OTHER, "Your code is 5550", wait=10)
    assert Status.SUCCEEDED is after.status
    assert after.record is not None
    choice = after.record.evidence["path_choice"]
    assert ("restored", True, True) == (
        choice.split(":")[0],
        proof.record.dispatch_id in choice,
        "A-2" in choice,
    )
    assert [SHELL, SHELL, SHELL] == await senders(phone, 3)


async def test_the_doubted_sends_own_row_coming_back_late_restores_the_path(
    sms_phone: Any, agent_for: Any
) -> None:
    """A stuck send that went out after all: the radio answers only after the attempt went
    to review (UNVERIFIED), and the framework writes its row then. A later reconcile pass
    attributes the row to the attempt (which still waits for a person), and that row, the
    shell's, proves the path: ``auto`` takes the framework again. Before the row, a pass that
    sees nothing changed nothing."""
    phone = await sms_phone(android=14)
    async with agent_for(phone, send_path="framework") as agent:
        await agent.send("A-1", TO, BODY, wait=10)
    phone.hold_radio()
    async with agent_for(phone, send_path="auto", policy=ONE_SHOT) as agent:
        await lost_in_review(agent, "A-2", "Your code is 9917")
        await agent.reconcile()  # the row is not there yet: a read that sees nothing
    async with agent_for(phone, send_path="auto") as agent:
        assert ("ui", True) == (agent.phone.send_path, "doubted since" in agent.phone.path_choice)
    assert [SHELL] == [transmission.app for transmission in phone.transmissions]
    phone.release_radio()
    assert [SHELL, SHELL] == await senders(phone, 2)
    async with agent_for(phone, send_path="auto") as agent:
        await agent.reconcile()
        (record,) = await agent.ledger.attempts("A-2")
        assert (DeliveryState.CONFIRMED, ReviewReason.UNVERIFIED, SHELL) == (
            record.delivery,
            record.review_reason,
            record.evidence.get("row_creator"),
        )
    async with agent_for(phone, send_path="auto") as agent:
        assert "framework" == agent.phone.send_path
        # its own row answers its own doubt
        assert agent.phone.path_choice.startswith("restored:")
        assert "A-2" in agent.phone.path_choice
        after = await agent.send("A-3", OTHER, "Your code is 5550", wait=10)
    assert Status.SUCCEEDED is after.status
    assert [SHELL, SHELL, SHELL] == await senders(phone, 3)
    assert 1 == len(sent_rows(phone, TO, "Your code is 9917"))  # the late row, once


async def test_a_ruling_that_the_doubted_sms_went_out_restores_the_path(
    sms_phone: Any, agent_for: Any
) -> None:
    """The framework sent it, but its row was gone before any read saw it (the owner deleted
    the thread as it came: the radio answered late, the row was deleted at once): the attempt
    goes to review and ``auto`` turns to the app. A person learns the recipient got it and
    rules it sent: ``auto`` takes the framework again, naming the ruling. The phone's own
    record agrees with the person: the doubted SMS did go out, once."""
    phone = await sms_phone(android=14)
    async with agent_for(phone, send_path="framework") as agent:
        await agent.send("A-1", TO, BODY, wait=10)
    phone.hold_radio()
    async with agent_for(phone, send_path="auto", policy=ONE_SHOT) as agent:
        await lost_in_review(agent, "A-2", "Your code is 9917")
    phone.release_radio()
    sent = await phone.wait_transmissions(count=2, then_idle=True)
    row_id = sent[-1].provider_id
    assert row_id is not None
    phone.store.delete(row_id)  # the owner deletes the thread
    async with agent_for(phone, send_path="auto") as agent:
        await agent.reconcile()  # sees nothing: proves nothing
        assert "ui" == agent.phone.send_path
        ruled = await agent.ledger.resolve(
            "A-2", as_sent=True, reason="the recipient got the code", operator="ops"
        )
        assert (DeliveryState.CONFIRMED, None) == (ruled.delivery, ruled.review_reason)
    async with agent_for(phone, send_path="auto") as agent:
        assert "framework" == agent.phone.send_path
        assert agent.phone.path_choice.startswith("restored:")
        assert "ruled sent by ops" in agent.phone.path_choice
        after = await agent.send("A-3", OTHER, "Your code is 5550", wait=10)
    assert Status.SUCCEEDED is after.status
    assert [SHELL, SHELL, SHELL] == await senders(phone, 3)


async def test_a_ruling_that_nothing_went_out_keeps_the_doubt(
    sms_phone: Any, agent_for: Any
) -> None:
    """The SIM was swapped: nothing went out, and a person rules so. That is a doubt too (the
    framework said yes and lost the SMS): ``auto`` stays on the app."""
    phone = await sms_phone(android=14)
    await doubt_by_a_swapped_sim(phone, agent_for)
    async with agent_for(phone, send_path="auto") as agent:
        await agent.ledger.resolve(
            "A-2", as_sent=False, reason="SIM swapped: nothing went out", operator="ops"
        )
    async with agent_for(phone, send_path="auto") as agent:
        assert ("ui", True) == (agent.phone.send_path, "operator" in agent.phone.path_choice)
        await agent.send("B-1", TO, "Reminder", wait=10)
    assert [SHELL, MESSAGING] == await senders(phone, 2)
