"""Replies and STOP (issue 34, items 4 and 5): the phone's inbox rows, read in the same round
trips as the sends' own reads, kept once and linked to the action they answer; an opt-out
refuses every later send to the number until it opts back in. Real ledgers (SQLite and
PostgreSQL), the real ADB wire to the simulated phone."""

from __future__ import annotations

from typing import Any

from starebrain_actions import Status
from starebrain_actions.ledger.events import LedgerEvent
from starebrain_actions.phone.android import AndroidPhone
from starebrain_actions.render.values import event_data

from .conftest import sent_rows

TO, OTHER, STRANGER = "+12025550100", "+12025550199", "+12025550177"


async def _events(agent: Any, kind: str) -> list[LedgerEvent]:
    return await agent.ledger.events(types=[kind])


async def test_a_reply_is_recorded_by_a_read_pass_linked_to_the_latest_action_before_it(
    sms_phone: Any, agent_for: Any
) -> None:
    """Two actions to one number: a reply dated between them answers the first, one dated
    after both the second; a number never texted is not kept; however many passes read them,
    each reply is recorded once, with its reply.received event."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        assert Status.SUCCEEDED == (await agent.send("A-1", TO, "first", wait=5)).status
        between = phone.now_ms()
        phone.store.insert_incoming("(202) 555-0100", "ok thanks", date_ms=between)
        assert Status.SUCCEEDED == (await agent.send("A-2", TO, "second", wait=5)).status
        phone.store.insert_incoming("2025550100", "and again", date_ms=phone.now_ms() + 5)
        phone.store.insert_incoming(STRANGER, "who is this", date_ms=phone.now_ms() + 6)
        for _ in range(3):
            await agent.reconcile()
        replies = await agent.replies()
        first, second = await agent.replies("A-1"), await agent.replies("A-2")
        events = await _events(agent, "reply.received")
    assert ["ok thanks", "and again"] == [reply.body for reply in replies]
    assert {TO} == {reply.number for reply in replies}
    assert ["ok thanks"] == [reply.body for reply in first]
    assert ["and again"] == [reply.body for reply in second]
    assert [("A-1", "ok thanks"), ("A-2", "and again")] == [
        (event.action_id, event.data["body"]) for event in events
    ]
    shown = str(event_data(events[0], show_private=False))
    assert "ok thanks" not in shown and TO.replace(" ", "") not in shown


async def test_a_reply_during_a_send_is_recorded_by_its_own_reads(
    sms_phone: Any, agent_for: Any
) -> None:
    """A reply that lands while a send waits for its row is read by that send's own reads
    and linked to that send's action (sent before the reply)."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        await agent.send("A-1", TO, "first", wait=5)
        replied: list[int] = []

        def reply(step: str) -> None:
            if step == "waiting for the phone's row" and not replied:
                replied.append(phone.receive_sms(TO, "got it"))

        outcome = await agent.send("A-2", TO, "with a reply", wait=5, on_step=reply)
        replies = await agent.replies("A-2")
    assert Status.SUCCEEDED == outcome.status
    assert ["got it"] == [r.body for r in replies]


async def test_reading_the_inbox_rows_costs_no_round_trip(sms_phone: Any, agent_for: Any) -> None:
    """The read a send or a pass makes anyway carries the inbox rows: the same window read
    with a reply in it takes as many round trips as without (one), and returns the reply,
    its sender normalised with the phone's region."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        handle = agent.phone
        assert isinstance(handle, AndroidPhone)
        await agent.send("A-1", TO, "first", wait=5)
        (anchor,) = [row for row in phone.store.rows(types=[2]) if row.body == "first"]
        window = {"after_id": anchor._id, "anchor_date_ms": anchor.date, "find_unseen": True}
        quiet = await handle.read_outgoing(**window)
        phone.receive_sms("(202) 555-0100", "thanks")
        with_reply = await handle.read_outgoing(**window)
    assert (1, ()) == (quiet.round_trips, quiet.incoming)
    assert 1 == with_reply.round_trips
    assert [(TO, "thanks")] == [(m.number, m.body) for m in with_reply.incoming]


async def test_stop_opts_out_and_every_later_send_is_refused_until_start(
    sms_phone: Any, agent_for: Any
) -> None:
    """STOP (trimmed, any case) opts the number out: the next send to it is refused by the
    gate with rule opted_out and nothing reaches the phone, another number still sends;
    START opts it back in and the same action then sends."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        await agent.send("A-1", TO, "hello", wait=5)
        phone.receive_sms(TO, "  Stop ")
        report = await agent.reconcile()
        assert 1 == report.replies_recorded
        refused = await agent.send("A-2", TO, "are you there", wait=5)
        other = await agent.send("B-1", OTHER, "hello other", wait=5)
        out = await _events(agent, "recipient.opted_out")
        refusals = await _events(agent, "action.refused")
        phone.receive_sms(TO, "START")
        await agent.reconcile()
        again = await agent.send("A-2", TO, "are you there", wait=5)
        back = await _events(agent, "recipient.opted_in")
        changes = await agent.ledger.opt_out_changes(TO)
    assert refused.gate is not None
    assert "opted_out" == refused.gate.rule
    assert Status.SUCCEEDED == other.status
    assert ["A-1"] == [event.action_id for event in out]
    assert refusals and {("A-2", "opted_out")} == {
        (event.action_id, event.data["evidence"]["rule"]) for event in refusals
    }
    assert Status.SUCCEEDED == again.status
    assert 1 == len(sent_rows(phone, TO, "are you there"))
    assert 1 == len(back)
    assert [("opt_out", "reply"), ("opt_in", "reply")] == [(c.change, c.actor) for c in changes]


async def test_only_the_whole_text_is_a_keyword(sms_phone: Any, agent_for: Any) -> None:
    """ "STOP please" is a reply, not an opt-out; "stop" is; a YES from a number not opted out
    changes nothing."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        await agent.send("A-1", TO, "hello", wait=5)
        await agent.send("B-1", OTHER, "hello", wait=5)
        phone.store.insert_incoming(TO, "STOP please", date_ms=phone.now_ms())
        phone.store.insert_incoming(OTHER, "YES", date_ms=phone.now_ms())
        await agent.reconcile()
        assert [] == await agent.ledger.opt_outs()
        phone.store.insert_incoming(TO, "stop", date_ms=phone.now_ms() + 1)
        await agent.reconcile()
        opted = await agent.ledger.opt_outs()
        keywords = [reply.keyword for reply in await agent.replies()]
    assert [TO] == [change.number for change in opted]
    assert [None, "opt_in", "opt_out"] == keywords


async def test_a_person_adds_and_removes_an_opt_out_with_its_events(
    sms_phone: Any, agent_for: Any
) -> None:
    """optouts add refuses the number's sends with no reply at all; remove lifts it; each
    change is kept with who and why, and writes its event."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        made, changed = await agent.ledger.change_opt_out(
            "+1 202 555 0100", "opt_out", actor="alice", reason="asked by phone"
        )
        refused = await agent.send("A-1", TO, "hello", wait=5)
        await agent.ledger.change_opt_out(TO, "opt_in", actor="alice", reason="asked again")
        sent = await agent.send("A-1", TO, "hello", wait=5)
        events = await agent.ledger.events(types=["recipient.*"])
    assert changed and TO == made.number
    assert refused.gate is not None and "opted_out" == refused.gate.rule
    assert [] == sent_rows(phone, TO, "hello")[:-1]
    assert Status.SUCCEEDED == sent.status
    assert ["recipient.opted_out", "recipient.opted_in"] == [event.type for event in events]
    assert ["asked by phone", "asked again"] == [event.data["reason"] for event in events]


async def test_the_keywords_come_from_the_policy_file(
    sms_phone: Any, agent_for: Any, tmp_path: Any
) -> None:
    """[replies] opt_out = ["ARRET"]: "arret" opts out and "STOP" is an ordinary reply."""
    from starebrain_actions.core.policy import load_policy

    path = tmp_path / "policy.toml"
    path.write_text('[replies]\nopt_out = ["ARRET"]\n', encoding="utf-8")
    phone = await sms_phone()
    async with agent_for(phone, gate=load_policy(path)) as agent:
        await agent.send("A-1", TO, "bonjour", wait=5)
        phone.store.insert_incoming(TO, "STOP", date_ms=phone.now_ms())
        await agent.reconcile()
        assert [] == await agent.ledger.opt_outs()
        phone.store.insert_incoming(TO, " arret", date_ms=phone.now_ms() + 1)
        await agent.reconcile()
        refused = await agent.send("A-2", TO, "encore", wait=5)
    assert refused.gate is not None and "opted_out" == refused.gate.rule
    assert [] == sent_rows(phone, TO, "encore")
