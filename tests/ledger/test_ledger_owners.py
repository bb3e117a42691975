"""Owners and namespaces (DESIGN.md invariant 9): once a client of ``starebrain mcp
--clients`` is registered in the ledger, only a caller acting as that client creates ids
under ``NAME/``; every other caller of the ledger is refused and nothing is written. And
``approve = "new"`` counts a number as known per client. Both backends (``ledger``)."""

from __future__ import annotations

import pytest

from starebrain_actions import Ledger, SmsIntent, confirm_delivery
from starebrain_actions.core.exceptions import InvalidInput, NotFound, PolicyRefused
from starebrain_actions.core.policy import Policy, Verdict

TO = "+12025550100"
INTENT = SmsIntent(recipient=TO, body="hello")


async def test_only_a_client_creates_ids_in_its_namespace(ledger: Ledger) -> None:
    """An unscoped caller cannot create ``bob/B-9`` once bob is registered (nothing is
    written); bob can; another client cannot; an id outside every namespace is anyone's."""
    await ledger.register_owners(["alice", "bob"])
    with pytest.raises(InvalidInput, match="namespace of client 'bob'"):
        await ledger.create_action("bob/B-9", INTENT)
    with pytest.raises(NotFound):
        await ledger.get_action("bob/B-9")
    with pytest.raises(InvalidInput, match="client 'alice' creates ids under alice/ only"):
        await ledger.create_action("bob/B-9", INTENT, owner="alice")
    created = await ledger.create_action("bob/B-9", INTENT, owner="bob")
    free = await ledger.create_action("carol/C-1", INTENT)
    assert ("bob", None) == (created.owner, free.owner)


async def test_a_stored_action_is_read_back_not_created_again(ledger: Ledger) -> None:
    """The same intent under a client's stored id, asked for by a caller with no owner (an
    operator's rerun, ``SmsAgent.send`` inside the server), returns the stored action with
    its owner; a client whose id another caller created before it registered is refused."""
    await ledger.create_action("bob/old", INTENT)  # before bob was a registered client
    await ledger.register_owners(["bob"])
    await ledger.create_action("bob/B-1", INTENT, owner="bob")
    again = await ledger.create_action("bob/B-1", INTENT)
    assert "bob" == again.owner
    with pytest.raises(InvalidInput, match="created by another caller"):
        await ledger.create_action("bob/old", INTENT, owner="bob")


async def test_register_owners_refuses_a_malformed_name(ledger: Ledger) -> None:
    """A client's name cannot be empty or hold the separator."""
    for name in ("", "a/b"):
        with pytest.raises(InvalidInput):
            await ledger.register_owners([name])


async def test_new_numbers_are_counted_per_client(ledger: Ledger) -> None:
    """A number alice texted (confirmed) is still new to bob: his first SMS to it waits for
    approval, while alice's next one does not (and an unowned action counts every one)."""
    await ledger.register_owners(["alice", "bob"])
    await ledger.create_action("alice/A-1", INTENT, owner="alice")
    record = await ledger.begin_attempt("alice/A-1", "10.0.0.1:5555")
    await ledger.apply(confirm_delivery(record, provider_object_id=7, now=ledger.now()))
    gate = Policy(approve="new")
    await ledger.create_action("bob/B-1", SmsIntent(recipient=TO, body="b"), owner="bob")
    with pytest.raises(PolicyRefused) as held:
        await ledger.begin_attempt("bob/B-1", "10.0.0.1:5555", gate=gate)
    await ledger.create_action("alice/A-2", SmsIntent(recipient=TO, body="a2"), owner="alice")
    await ledger.create_action("plain", SmsIntent(recipient=TO, body="p"))
    second = await ledger.begin_attempt("alice/A-2", "10.0.0.2:5555", gate=gate)
    plain = await ledger.begin_attempt("plain", "10.0.0.3:5555", gate=gate)
    assert Verdict.HOLD == held.value.gate.verdict
    assert (1, 1) == (second.attempt, plain.attempt)
