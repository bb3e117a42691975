"""A phone's ordinary life (issue 21, items 1 and 4): the owner deletes the latest thread, the
phone is wiped at the same address, an old ledger row names an id the phone reuses, and one
phone is reached at two addresses. Counted from the phone's own store."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import (
    DeliveryState,
    Ledger,
    RetryPolicy,
    SmsIntent,
    Status,
    confirm_delivery,
)
from starebrain_actions.cli.main import main
from starebrain_actions.core.decisions import spends_budget
from starebrain_actions.core.exceptions import DeviceBusy
from starebrain_actions.orchestration.agent import SmsAgent
from tests.conftest import OUTBOX_FIRST

from .conftest import FAST, sent_rows

TO, BODY = "+1 202 555 0100", "Your code is 4821"


async def send_four(agent: SmsAgent) -> None:
    """Four messages, each SUCCEEDED."""
    for n in range(4):
        outcome = await agent.send(f"A-{n}", TO, f"message {n}", wait=5)
        assert Status.SUCCEEDED == outcome.status


@pytest.mark.parametrize("read_as_system", [False, True])
async def test_a_send_after_the_latest_thread_was_deleted_is_proven(
    sms_phone: Any, agent_for: Any, read_as_system: bool
) -> None:
    """Four SMS, then the owner deletes the latest rows (``delete from sms where _id >= 2``,
    as deleting the latest conversation does). The next send takes ``_id`` 2 again (SMS
    ``_id`` is INTEGER PRIMARY KEY without AUTOINCREMENT): it is proven and SUCCEEDED at
    once, where it used to wait out its whole wait, IN_FLIGHT, and hold the phone."""
    build = {} if read_as_system else {"root": False}
    phone = await sms_phone(**build)
    async with agent_for(phone, read_as_system=read_as_system) as agent:
        await send_four(agent)
        first_new = phone.store.max_id() - 3
        deleted = phone.store.delete_from(first_new + 1)
        assert 3 == len(deleted)
        outcome = await agent.send("B-1", TO, BODY, wait=5)
        other = await agent.send("B-2", TO, "after it", wait=5)
    record = outcome.record
    assert record is not None
    assert (Status.SUCCEEDED, Status.SUCCEEDED) == (outcome.status, other.status)
    assert [record.provider_object_id] == sent_rows(phone, TO, BODY) == [first_new + 1]
    assert record.provider_row_date_ms == phone.store.row(first_new + 1).date  # type: ignore[union-attr]


async def test_a_lost_reply_after_the_latest_rows_were_deleted_is_proven(
    sms_phone: Any, agent_for: Any, adb_key_path: Path
) -> None:
    """The same with the send's reply lost (no watermark recorded: the attempt's floor is the
    highest id the ledger knew, now gone): the read anchors again at a row that exists, and
    the row in the attempt's window confirms it wherever its id falls."""
    phone = await sms_phone()
    async with agent_for(phone, command_timeout_s=3.0) as agent:
        await send_four(agent)
        phone.store.delete_from(phone.store.max_id() - 2)
        phone.inject_fault("hang-after-send")
        outcome = await agent.send("B-1", TO, BODY, wait=10)
    record = outcome.record
    assert record is not None
    assert (Status.SUCCEEDED, 1) == (outcome.status, len(sent_rows(phone, TO, BODY)))
    assert record.provider_object_id in sent_rows(phone, TO, BODY)


async def test_the_owners_identical_text_reusing_our_deleted_rows_id_is_not_ours(
    sms_phone: Any, agent_for: Any
) -> None:
    """Our row was the highest and out of sight (queued), the owner deleted it, and then
    texted the very same words, which took its ``_id`` again, dated well after our send
    window: that row is not ours (its date says so), and the attempt is never SUCCEEDED."""
    phone = await sms_phone(root=False, app=OUTBOX_FIRST)
    policy = RetryPolicy(
        settle_after=timedelta(milliseconds=300),
        framework_settle_after=timedelta(milliseconds=200),
        maximum_attempts=3,
        grace_window=timedelta(seconds=1),
    )
    async with agent_for(phone, policy=policy) as agent:
        phone.inject_fault("stuck-outbox")
        first = await agent.send("A-17", TO, BODY, wait=0.3)
        ours = phone.store.max_id()
        phone.store.delete_from(ours)
        await asyncio.sleep(2.0)  # well after our keys
        owners = phone.store.insert_outgoing("+12025550100", BODY, date_ms=phone.now_ms())
        phone.store.mark_sent(owners, date_sent_ms=phone.now_ms())
        again = await agent.send("A-17", TO, BODY, wait=1.5)
    assert owners == ours  # the owner's text took our row's _id
    assert Status.SUCCEEDED not in (first.status, again.status)
    record = again.record
    assert record is not None and record.provider_object_id is None
    assert 1 == agent.dispatches


async def test_a_wiped_phone_at_the_same_address_is_a_new_phone(
    phone_factory: Any, db_path: str, adb_key_path: Path
) -> None:
    """The phone is factory-reset and comes back at the same address with an empty store and
    a new android_id: the ledger says it is another phone (``binding.replaced``), keeps its
    evidence apart under a name of its own, and the next send is proven at once."""
    phone: SimulatedPhone = await phone_factory(allow_new_keys=True, send_delay_ms=20)
    async with SmsAgent.open(
        db=db_path, device=phone.serial, key_path=adb_key_path, policy=FAST, poll_interval_s=0.05
    ) as agent:
        await send_four(agent)
        before = agent.binding
    old_identity = phone.android_id
    await phone.wipe_data()
    await phone.enable_tcpip()
    phone.unlock_user()  # the owner sets the phone up again and unlocks it
    phone.screen = "on"
    async with SmsAgent.open(
        db=db_path, device=phone.serial, key_path=adb_key_path, policy=FAST, poll_interval_s=0.05
    ) as agent:
        outcome = await agent.send("B-1", TO, BODY, wait=5)
        after = agent.binding
        phones = {info.key: info for info in await agent.ledger.phones()}
    assert before is not None and after is not None
    assert phone.android_id != old_identity
    assert (before.key, after.replaced) == (phone.serial, phone.serial)
    assert after.key == f"{phone.serial}#2"
    record = outcome.record
    assert record is not None and after.key == record.device
    assert (Status.SUCCEEDED, [1]) == (outcome.status, sent_rows(phone, TO, BODY))
    assert f"android_id:{old_identity}" == phones[phone.serial].identity
    assert f"android_id:{phone.android_id}" == phones[after.key].identity


async def test_an_open_agent_never_uses_the_phone_wiped_under_it(
    phone_factory: Any, db_path: str, adb_key_path: Path
) -> None:
    """The phone is wiped while an agent holds it open: its handle reconnects on the next
    call and finds another identity at the address, so it refuses that phone for good
    (nothing is sent under the old phone's name, whose rows and fence are gone); a plain
    reboot (the same identity) is used again. A new agent then sends on the new phone."""
    phone: SimulatedPhone = await phone_factory(allow_new_keys=True, send_delay_ms=20)
    async with SmsAgent.open(
        db=db_path, device=phone.serial, key_path=adb_key_path, policy=FAST, poll_interval_s=0.05
    ) as agent:
        await send_four(agent)
        await phone.reboot()
        await phone.enable_tcpip()
        phone.unlock_user()
        phone.screen = "on"
        rebooted = await agent.send("R-1", TO, "after a reboot", wait=5)
        await phone.wipe_data()
        await phone.enable_tcpip()
        phone.unlock_user()
        phone.screen = "on"
        refused = await agent.send("W-1", TO, "after a wipe", wait=2)
    assert Status.SUCCEEDED == rebooted.status
    await phone.radio_idle()
    assert [] == [t for t in phone.transmissions if t.body == "after a wipe"]
    assert refused.record is not None and refused.record.delivery is DeliveryState.FAILED
    assert "another phone answers here now" in (refused.record.last_error or "")
    async with SmsAgent.open(
        db=db_path, device=phone.serial, key_path=adb_key_path, policy=FAST, poll_interval_s=0.05
    ) as agent:
        again = await agent.send("W-1", TO, "after a wipe", wait=5)
        key = agent.phone.device
    assert (Status.SUCCEEDED, f"{phone.serial}#2") == (again.status, key)
    sent = await phone.wait_transmissions(lambda t: t.body == "after a wipe", then_idle=True)
    assert 1 == len(sent)


async def test_the_readme_ledger_example_does_not_hold_back_a_later_send(
    sms_phone: Any, agent_for: Any, db_path: str
) -> None:
    """docs/python.md's Ledger example records ``provider_object_id=812`` on the phone's address;
    an SmsAgent on that phone afterwards sends and proves its message (it used to end
    IN_FLIGHT, its watermark above every row the phone had)."""
    phone = await sms_phone()
    async with Ledger.open(db_path) as ledger:
        intent = SmsIntent(recipient="+12025550100", body="Your code is 4821")
        await ledger.create_action("A-17", intent)
        record = await ledger.begin_attempt("A-17", phone.serial)
        await ledger.apply(confirm_delivery(record, provider_object_id=812, now=ledger.now()))
    async with agent_for(phone) as agent:
        outcome = await agent.send("otp-1001", "+1 202 555 0143", BODY, wait=5)
    assert Status.SUCCEEDED == outcome.status
    assert 1 == len(sent_rows(phone, "+12025550143", BODY))


@contextlib.asynccontextmanager
async def forwarded(port: int) -> AsyncIterator[int]:
    """A TCP port on loopback that carries every connection to ``port`` (as ``adb forward``
    or a second network path to one phone would): the phone behind two addresses."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2)


async def test_one_phone_under_two_addresses_is_one_device(
    phone_factory: Any, db_path: str, adb_key_path: Path
) -> None:
    """127.0.0.1:P and a second address reaching the same phone are one device in the ledger:
    one key, one lease. While an attempt made through the first holds the phone, a send of
    another action through the second waits for it (they used to be two devices, and their
    sends ran on one phone at once)."""
    phone: SimulatedPhone = await phone_factory(send_delay_ms=20, app=OUTBOX_FIRST)
    async with forwarded(phone.port) as port:
        second = f"127.0.0.1:{port}"
        async with (
            SmsAgent.open(
                db=db_path, device=phone.serial, key_path=adb_key_path, policy=FAST
            ) as one,
            SmsAgent.open(db=db_path, device=second, key_path=adb_key_path, policy=FAST) as two,
        ):
            phone.inject_fault("stuck-outbox")  # out of sight: its attempt keeps the lease
            held = await one.send("A-1", TO, BODY, wait=0.3)
            told: list[str] = []
            other = await two.send("B-1", "+1 202 555 0199", "other", wait=1.0, on_wait=told.append)
            with pytest.raises(DeviceBusy):
                await two.ledger.begin_attempt("B-1", two.phone.device)
            assert one.binding is not None and two.binding is not None
            keys = (one.binding.key, two.binding.key, two.phone.device)
            phones = await one.ledger.phones()
    assert (phone.serial, phone.serial, phone.serial) == keys
    assert [phone.serial] == [info.key for info in phones]
    assert {phone.serial, second} == set(phones[0].addresses)
    assert held.record is not None and DeliveryState.PENDING is held.record.delivery
    assert Status.PLANNED == other.status and told
    assert [] == sent_rows(phone, "+12025550199", "other")
    # `starebrain list --device` takes either address for the one phone
    for address in (phone.serial, second):
        listed = await asyncio.to_thread(
            CliRunner().invoke, main, ["--db", db_path, "list", "--device", address, "--json"]
        )
        assert ["A-1"] == [row["action"]["action_id"] for row in json.loads(listed.stdout)]


async def test_a_legacy_ledger_adopts_its_phone_at_the_first_connection(
    sms_phone: Any, agent_for: Any, db_path: str
) -> None:
    """A ledger from before phones had identities names the device by its address: the first
    connection binds that name to the phone's identity, and its attempts, lease and
    watermarks stay the phone's (no second name for it)."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        await send_four(agent)
    async with Ledger.open(db_path) as ledger:
        # as a version 6 ledger left it: the device by its address, no identity bound
        await ledger._write(lambda db: db.execute("UPDATE phones SET identity = NULL"))
    async with agent_for(phone) as agent:
        binding = agent.binding
        outcome = await agent.send("B-1", TO, BODY, wait=5)
    assert binding is not None
    assert (phone.serial, True, False) == (binding.key, binding.adopted, binding.new)
    assert Status.SUCCEEDED == outcome.status


async def test_a_cleared_fence_folder_spends_no_attempt_and_the_text_goes_out_once(
    sms_phone: Any, agent_for: Any
) -> None:
    """``rm -rf /data/local/tmp/*`` under an open agent, whose handle knows the old epoch: the
    attempt's claim fails on the phone, which is still the same phone (its identity, read at
    once) without that epoch. The attempt FAILS without spending the budget (one attempt
    allowed: it used to be spent, the action FAILED for a person to retry), the agent asks
    the phone for its new epoch, and the text goes out once."""
    phone = await sms_phone()
    policy = RetryPolicy(
        maximum_attempts=1,
        grace_window=timedelta(seconds=1),
        initial_interval=timedelta(milliseconds=50),
        settle_after=timedelta(milliseconds=300),
    )
    async with agent_for(phone, policy=policy) as agent:
        await agent.phone.fence_epoch()  # asked once per connection
        phone.clear_tmp()
        outcome = await agent.send("A-17", TO, BODY, wait=5)
    first = outcome.summary.attempts[0]
    assert (Status.SUCCEEDED, 2) == (outcome.status, len(outcome.summary.attempts))
    assert (DeliveryState.FAILED, True) == (first.delivery, first.evidence.get("fence_lost"))
    sent = await phone.wait_transmissions(lambda t: t.body == BODY, then_idle=True)
    assert (1, [1]) == (len(sent), [len(sent_rows(phone, TO, BODY))])


async def test_a_wipe_found_by_a_send_ends_that_send_after_one_attempt(
    phone_factory: Any, db_path: str, adb_key_path: Path
) -> None:
    """The phone is wiped under an open agent with a long wait: the send that finds another
    phone at the address makes one attempt (FAILED, unreachable: no budget spent) and ends,
    instead of starting attempt after attempt on a handle that refuses its phone for good
    until the wait is over; nothing goes out under the old phone's name."""
    phone: SimulatedPhone = await phone_factory(allow_new_keys=True, send_delay_ms=20)
    async with SmsAgent.open(
        db=db_path, device=phone.serial, key_path=adb_key_path, policy=FAST, poll_interval_s=0.05
    ) as agent:
        await send_four(agent)
        await phone.wipe_data()
        await phone.enable_tcpip()
        phone.unlock_user()
        phone.screen = "on"
        started = asyncio.get_running_loop().time()
        refused = await agent.send("W-1", TO, "after a wipe", wait=4)
        took = asyncio.get_running_loop().time() - started
    await phone.radio_idle()
    assert [] == [t for t in phone.transmissions if t.body == "after a wipe"]
    assert 1 == len(refused.summary.attempts), refused.summary.attempts
    record = refused.record
    assert record is not None and record.delivery is DeliveryState.FAILED
    assert "another phone answers here now" in (record.last_error or "")
    assert (True, False) == (record.evidence.get("unreachable"), spends_budget(record))
    assert took < 3.0


async def test_a_reset_under_a_live_link_is_found_by_the_failed_fence_claim(
    sms_phone: Any, agent_for: Any
) -> None:
    """The phone's data is reset under a connection that never dropped (no reconnect for the
    handle to read its identity again): the send's fence claim fails, and the phone is asked
    at once who it is: another phone, refused for good as after a reconnect. The attempt is
    FAILED as unreachable (no budget spent: it used to be spent, attempt after attempt, on
    claims that phone could not make) and the send ends; nothing goes out."""
    phone = await sms_phone()
    async with agent_for(phone) as agent:
        await agent.phone.fence_epoch()
        phone.store.wipe()  # the stores and android_id, as a factory reset leaves them
        phone.clear_tmp()
        outcome = await agent.send("A-17", TO, BODY, wait=4)
        replaced = agent.phone.replaced
    record = outcome.record
    assert record is not None and 1 == len(outcome.summary.attempts)
    assert (DeliveryState.FAILED, True, False) == (
        record.delivery,
        record.evidence.get("unreachable"),
        spends_budget(record),
    )
    assert replaced is not None and "another phone answers here now" in replaced
    await phone.radio_idle()
    assert [] == [t for t in phone.transmissions if t.body == BODY]


@pytest.mark.parametrize("threads_autoincrement", [True, False])
async def test_a_deleted_conversations_thread_id_given_again_fools_nothing(
    sms_phone: Any, agent_for: Any, threads_autoincrement: bool
) -> None:
    """The owner deletes the conversation of our last send, the latest one; our next send,
    to someone else, starts a conversation that (on a database without AUTOINCREMENT on
    ``threads``) takes the deleted one's thread id, and its row the deleted row's ``_id``.
    The product reads ``thread_id`` but attributes by ``_id``, recipient, body and date,
    never by conversation: each send is proven by its own row, and the first keeps its
    verdict."""
    phone = await sms_phone(threads_autoincrement=threads_autoincrement)
    first_to, second_to = "+1 202 555 0177", "+1 202 555 0188"
    async with agent_for(phone) as agent:
        first = await agent.send("T-1", first_to, BODY, wait=5)
        assert first.record is not None and first.record.provider_object_id is not None
        first_row = phone.store.row(first.record.provider_object_id)
        assert first_row is not None and first_row.thread_id is not None
        assert max(phone.store.threads()) == first_row.thread_id  # the latest conversation
        phone.store.delete_conversation(first_row.thread_id)
        second = await agent.send("T-2", second_to, BODY, wait=5)
        again = await agent.send("T-1", first_to, BODY, wait=1)  # the same action again
    assert second.record is not None
    second_row = phone.store.row(second.record.provider_object_id or 0)
    assert second_row is not None
    reused = second_row.thread_id == first_row.thread_id
    assert (not threads_autoincrement) == reused
    assert (Status.SUCCEEDED, Status.SUCCEEDED) == (first.status, second.status)
    assert [second_row._id] == sent_rows(phone, second_to, BODY)
    assert (Status.SUCCEEDED, 2) == (again.status, agent.dispatches)


@pytest.mark.parametrize("serialno", ["0123456789ABCDEF", "R58M41ABCDE"])
async def test_two_phones_sharing_a_serial_are_two_devices(
    phone_factory: Any, db_path: str, adb_key_path: Path, serialno: str
) -> None:
    """Two phones report one ``ro.serialno`` (a cheap build's placeholder, or a vendor's
    serial reused across units): the ledger tells them apart by ``android_id``, so they are
    two devices, two leases. An attempt holding the first phone does not hold the second,
    and each send lands on its own phone."""
    first: SimulatedPhone = await phone_factory(
        send_delay_ms=20, app=OUTBOX_FIRST, serialno=serialno
    )
    second: SimulatedPhone = await phone_factory(send_delay_ms=20, serialno=serialno)
    async with (
        SmsAgent.open(db=db_path, device=first.serial, key_path=adb_key_path, policy=FAST) as one,
        SmsAgent.open(db=db_path, device=second.serial, key_path=adb_key_path, policy=FAST) as two,
    ):
        facts = [await agent.phone._device.facts() for agent in (one, two)]  # type: ignore[attr-defined]
        first.inject_fault("stuck-outbox")  # out of sight: its attempt keeps the first's lease
        held = await one.send("A-1", TO, BODY, wait=0.3)
        other = await two.send("B-1", "+1 202 555 0199", "other", wait=5)
        assert one.binding is not None and two.binding is not None
        keys = {one.binding.key, two.binding.key}
        phones = await one.ledger.phones()
    assert [serialno, serialno] == [fact.serialno for fact in facts]
    assert facts[0].identity != facts[1].identity
    assert {first.serial, second.serial} == keys == {info.key for info in phones}
    assert held.record is not None and DeliveryState.PENDING is held.record.delivery
    assert Status.SUCCEEDED == other.status
    assert [] == sent_rows(first, "+12025550199", "other")
    assert 1 == len(sent_rows(second, "+12025550199", "other"))
