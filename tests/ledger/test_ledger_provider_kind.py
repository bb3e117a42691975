"""The ledger names a provider row by (device, kind, _id): SMS and MMS ``_id``s are separate."""

from __future__ import annotations

import io
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from starebrain_actions import (
    ActionRecord,
    DeliveryState,
    DuplicateSighting,
    Event,
    InvalidInput,
    Ledger,
    LedgerError,
    MatchVerdict,
    ProviderKind,
    ReviewReason,
    SmsIntent,
    confirm_delivery,
    try_accept,
)
from starebrain_actions.render.output import Output
from starebrain_actions.render.records import render_attempts, render_history
from starebrain_actions.render.values import provider_row_text

SMS, MMS = ProviderKind.SMS, ProviderKind.MMS


async def attempt(ledger: Ledger, action_id: str, device: str = "dev") -> ActionRecord:
    """A new action and its first, PENDING attempt on ``device``."""
    await ledger.create_action(action_id, SmsIntent(recipient="+12025550100", body=action_id))
    return await ledger.begin_attempt(action_id, device)


async def confirmed(
    ledger: Ledger, action_id: str, provider_object_id: int, kind: ProviderKind
) -> ActionRecord:
    """A new action whose first attempt on "dev" is confirmed by row ``provider_object_id``
    of table ``kind``."""
    record = await attempt(ledger, action_id)
    return await ledger.apply(
        confirm_delivery(
            record, provider_object_id=provider_object_id, provider_kind=kind, now=ledger.now()
        )
    )


def raw(path: Path) -> sqlite3.Connection:
    """A plain sqlite3 connection, as a person with the sqlite3 shell would have."""
    return sqlite3.connect(path, isolation_level=None)


async def test_an_sms_and_an_mms_with_the_same_id_confirm_two_attempts(ledger: Ledger) -> None:
    """SMS _id 7 and MMS _id 7 on one device are two messages: each confirms its own attempt,
    and the record read back names its table."""
    sms = await confirmed(ledger, "A-1", 7, SMS)
    mms = await confirmed(ledger, "A-2", 7, MMS)
    assert (7, SMS) == (sms.provider_object_id, sms.provider_kind)
    assert mms == await ledger.get_attempt(mms.dispatch_id)
    assert (7, MMS) == (mms.provider_object_id, mms.provider_kind)
    confirm = (await ledger.history("A-2"))[-1]
    assert (Event.CONFIRM, "mms", 7) == (
        confirm.event,
        confirm.evidence["provider_kind"],
        confirm.evidence["provider_object_id"],
    )


@pytest.mark.parametrize("kind", list(ProviderKind))
async def test_one_row_of_one_table_confirms_one_attempt(
    ledger: Ledger, kind: ProviderKind
) -> None:
    """A second attempt confirmed by the same (device, kind, _id) is refused by UNIQUE and
    stays PENDING (invariant 5, per table)."""
    await confirmed(ledger, "A-1", 7, kind)
    second = await attempt(ledger, "A-2")
    with pytest.raises(LedgerError, match="UNIQUE"):
        await ledger.apply(
            confirm_delivery(second, provider_object_id=7, provider_kind=kind, now=ledger.now())
        )
    assert DeliveryState.PENDING == (await ledger.get_attempt(second.dispatch_id)).delivery


async def test_the_same_id_on_another_device_is_another_row(ledger: Ledger) -> None:
    """MMS _id 7 on two devices confirms two attempts."""
    await confirmed(ledger, "A-1", 7, MMS)
    other = await attempt(ledger, "A-2", device="dev-2")
    stored = await ledger.apply(
        confirm_delivery(other, provider_object_id=7, provider_kind=MMS, now=ledger.now())
    )
    assert ("dev-2", 7, MMS) == (stored.device, stored.provider_object_id, stored.provider_kind)


async def test_operator_rulings_store_no_half_named_row(ledger: Ledger, ledger_path: Path) -> None:
    """Resolving a PENDING attempt as sent stores neither _id nor kind; resolving an
    MMS-confirmed one as not sent clears both."""
    await attempt(ledger, "A-1")
    resolved = await ledger.resolve("A-1", as_sent=True, reason="seen it", operator="ana")
    assert (DeliveryState.CONFIRMED, None, None) == (
        resolved.delivery,
        resolved.provider_object_id,
        resolved.provider_kind,
    )
    record = await confirmed(ledger, "A-2", 12, MMS)
    undone = await ledger.resolve(
        "A-2", as_sent=False, reason="not ours", operator="ana", force=True
    )
    assert (None, None) == (undone.provider_object_id, undone.provider_kind)
    with closing(raw(ledger_path)) as db:
        assert [(None, None), (None, None)] == db.execute(
            "SELECT provider_object_id, provider_kind FROM attempts ORDER BY action_id"
        ).fetchall()
    assert undone == await ledger.get_attempt(record.dispatch_id)


async def test_raw_sql_cannot_store_an_id_without_its_table(
    ledger: Ledger, ledger_path: Path
) -> None:
    """UPDATEs that leave a kind without an _id, an _id without a kind, or an unknown kind
    are refused by CHECK constraints."""
    record = await confirmed(ledger, "A-1", 7, MMS)
    statements = [
        "UPDATE attempts SET provider_kind = NULL, version = version + 1 WHERE dispatch_id = ?",
        "UPDATE attempts SET provider_object_id = NULL, version = version + 1"
        " WHERE dispatch_id = ?",
        "UPDATE attempts SET provider_kind = 'rcs', version = version + 1 WHERE dispatch_id = ?",
    ]
    with closing(raw(ledger_path)) as db:
        for statement in statements:
            with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
                db.execute(statement, (record.dispatch_id,))
        pending = await attempt(ledger, "A-2", device="dev-2")
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            db.execute(
                "UPDATE attempts SET provider_kind = 'sms', version = version + 1"
                " WHERE dispatch_id = ?",
                (pending.dispatch_id,),
            )
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            db.execute(
                "INSERT INTO duplicates (device, provider_object_id, provider_kind, dispatch_id,"
                " seen_at) VALUES ('dev', 8, 'rcs', ?, 't')",
                (record.dispatch_id,),
            )
    assert record == await ledger.get_attempt(record.dispatch_id)


async def test_raw_sql_cannot_make_two_attempts_share_a_row(
    ledger: Ledger, ledger_path: Path
) -> None:
    """Moving an SMS artifact onto the MMS table where the same _id already confirms another
    attempt is refused by UNIQUE; moving it to a free row of either table is not."""
    sms = await confirmed(ledger, "A-1", 7, SMS)
    await confirmed(ledger, "A-2", 7, MMS)
    update = (
        "UPDATE attempts SET provider_kind = ?, provider_object_id = ?, version = version + 1"
        " WHERE dispatch_id = ?"
    )
    with closing(raw(ledger_path)) as db:
        with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
            db.execute(update, ("mms", 7, sms.dispatch_id))
        db.execute(update, ("mms", 8, sms.dispatch_id))
        assert ("mms", 8) == db.execute(
            "SELECT provider_kind, provider_object_id FROM attempts WHERE dispatch_id = ?",
            (sms.dispatch_id,),
        ).fetchone()


async def test_a_row_is_an_artifact_or_a_duplicate_of_its_own_table(
    ledger: Ledger, ledger_path: Path
) -> None:
    """A duplicate may share its _id with an artifact of the other table, never of its own;
    no attempt may be confirmed by a row of a table where it is a duplicate or an artifact."""
    record = await confirmed(ledger, "A-1", 5, SMS)
    assert await ledger.record_duplicate(
        record.dispatch_id, provider_object_id=5, provider_kind=MMS
    )
    with pytest.raises(LedgerError, match="already confirms"):
        await ledger.record_duplicate(record.dispatch_id, provider_object_id=5)
    other = await attempt(ledger, "A-2")
    with pytest.raises(LedgerError, match="recorded as a duplicate"):
        await ledger.apply(
            confirm_delivery(other, provider_object_id=5, provider_kind=MMS, now=ledger.now())
        )
    with closing(raw(ledger_path)) as db:
        with pytest.raises(sqlite3.IntegrityError, match="recorded as a duplicate"):
            db.execute(
                "UPDATE attempts SET provider_kind = 'mms', version = version + 1"
                " WHERE dispatch_id = ?",
                (record.dispatch_id,),
            )
        with pytest.raises(sqlite3.IntegrityError, match="already confirms"):
            db.execute(
                "INSERT INTO duplicates (device, provider_object_id, provider_kind, dispatch_id,"
                " seen_at) VALUES ('dev', 5, 'sms', ?, 't')",
                (record.dispatch_id,),
            )
    with pytest.raises(LedgerError, match="UNIQUE"):
        await ledger.apply(
            confirm_delivery(other, provider_object_id=5, provider_kind=SMS, now=ledger.now())
        )
    assert DeliveryState.PENDING == (await ledger.get_attempt(other.dispatch_id)).delivery


async def test_duplicates_record_and_report_their_table(ledger: Ledger) -> None:
    """record_duplicate keeps the kind: duplicates() reports it, the review flag's evidence
    names it, and the same _id in the other table is another duplicate."""
    record = await confirmed(ledger, "A-1", 5, SMS)
    assert await ledger.record_duplicate(
        record.dispatch_id, provider_object_id=9, provider_kind=MMS, evidence={"date_ms": 1}
    )
    assert not await ledger.record_duplicate(
        record.dispatch_id, provider_object_id=9, provider_kind=MMS
    )
    assert await ledger.record_duplicate(record.dispatch_id, provider_object_id=9)
    rows = await ledger.duplicates("A-1")
    assert [("mms", 9, {"date_ms": 1}), ("sms", 9, {})] == sorted(
        (row["provider_kind"], row["provider_object_id"], row["evidence"]) for row in rows
    )
    flag = [entry for entry in await ledger.history("A-1") if entry.event is Event.FLAG_REVIEW]
    assert [("mms", 9)] == [
        (entry.evidence["duplicate_provider_kind"], entry.evidence["duplicate_provider_object_id"])
        for entry in flag
    ]
    summary = await ledger.summary("A-1")
    assert (2, (ReviewReason.DUPLICATE,)) == (summary.duplicates, summary.review_reasons)


async def test_record_duplicate_refuses_a_kind_that_is_not_a_provider_kind(
    ledger: Ledger, ledger_path: Path
) -> None:
    """A kind given as bare text raises InvalidInput and writes nothing."""
    record = await confirmed(ledger, "A-1", 5, SMS)
    with pytest.raises(InvalidInput, match="kind"):
        await ledger.record_duplicate(
            record.dispatch_id,
            provider_object_id=9,
            provider_kind="mms",  # type: ignore[arg-type]
        )
    assert [] == await ledger.duplicates("A-1")


async def test_apply_pass_takes_old_tuples_kinded_tuples_and_records(ledger: Ledger) -> None:
    """A 3-tuple is an SMS row, a 4-tuple names its kind, a DuplicateSighting is taken as is;
    all are recorded in the pass's one transaction."""
    record = await confirmed(ledger, "A-1", 5, SMS)
    results, added = await ledger.apply_pass(
        [],
        [
            (record.dispatch_id, 6, {"n": 1}),
            (record.dispatch_id, 6, {"n": 2}, MMS),
            DuplicateSighting(dispatch_id=record.dispatch_id, provider_object_id=7, kind=MMS),
        ],
    )
    assert ([], 3) == (results, added)
    assert [("mms", 6, {"n": 2}), ("mms", 7, {}), ("sms", 6, {"n": 1})] == sorted(
        (row["provider_kind"], row["provider_object_id"], row["evidence"])
        for row in await ledger.duplicates("A-1")
    )


@pytest.mark.parametrize(
    "bad",
    [("d", 6), ("d", 6, {}, "mms"), ("d", 6, {}, ProviderKind.MMS, "extra")],
    ids=["short", "text-kind", "long"],
)
async def test_apply_pass_refuses_malformed_duplicates_before_writing(
    ledger: Ledger, bad: tuple[object, ...]
) -> None:
    """A malformed duplicate raises InvalidInput and not even the pass's transitions apply."""
    record = await attempt(ledger, "A-1")
    transition = confirm_delivery(record, provider_object_id=5, now=ledger.now())
    with pytest.raises(InvalidInput):
        await ledger.apply_pass([transition], [bad])  # type: ignore[list-item]
    assert DeliveryState.PENDING == (await ledger.get_attempt(record.dispatch_id)).delivery


async def test_claimed_ids_are_per_table(ledger: Ledger) -> None:
    """claimed_provider_ids gives the SMS _ids above the anchor (artifacts and duplicates),
    claimed_mms_ids the MMS ones; an _id of one table never claims the other's."""
    sms = await confirmed(ledger, "A-1", 20, SMS)
    mms = await confirmed(ledger, "A-2", 30, MMS)
    await ledger.record_duplicate(sms.dispatch_id, provider_object_id=21)
    await ledger.record_duplicate(mms.dispatch_id, provider_object_id=31, provider_kind=MMS)
    await ledger.record_duplicate(mms.dispatch_id, provider_object_id=10, provider_kind=MMS)

    def ids(claims: set[tuple[int, int | None]]) -> set[int]:
        return {row_id for row_id, _date in claims}

    assert {20, 21} == ids(await ledger.claimed_provider_ids("dev", 10))
    assert {21} == ids(await ledger.claimed_provider_ids("dev", 20))
    assert {30, 31} == ids(await ledger.claimed_mms_ids("dev", 10))
    assert {10, 30, 31} == ids(await ledger.claimed_mms_ids("dev", 0))
    assert set() == await ledger.claimed_mms_ids("dev-2", 0)


async def test_a_reused_id_is_another_row(ledger: Ledger) -> None:
    """SMS _ids are reused once the latest rows are deleted (MmsSmsDatabaseHelper: INTEGER
    PRIMARY KEY without AUTOINCREMENT): _id 20 dated 1000 and _id 20 dated 2000 are two
    messages. Each confirms its own attempt, the claims name both with their dates, and the
    same _id and date never confirms two attempts (issue 21, item 1)."""
    first = await attempt(ledger, "A-1")
    await ledger.apply(
        confirm_delivery(first, provider_object_id=20, row_date_ms=1000, now=ledger.now())
    )
    await ledger.resolve("A-1", as_sent=True, reason="done", operator="o")
    second = await attempt(ledger, "A-2")
    later = await ledger.apply(
        confirm_delivery(second, provider_object_id=20, row_date_ms=2000, now=ledger.now())
    )
    assert (20, 2000) == (later.provider_object_id, later.provider_row_date_ms)
    assert {(20, 1000), (20, 2000)} == await ledger.claimed_provider_ids("dev", 10)
    third = await attempt(ledger, "A-3")
    with pytest.raises(LedgerError, match=r"UNIQUE|unique|duplicate key"):
        await ledger.apply(
            confirm_delivery(third, provider_object_id=20, row_date_ms=2000, now=ledger.now())
        )


async def test_device_floor_counts_sms_ids_only(ledger: Ledger) -> None:
    """An MMS _id, however high, is not an SMS watermark: device_floor takes SMS artifacts
    and watermarks only."""
    first = await confirmed(ledger, "A-1", 500, MMS)
    later = ledger.now()
    assert 0 == await ledger.device_floor("dev", later)
    await confirmed(ledger, "A-2", 40, SMS)
    assert 40 == await ledger.device_floor("dev", ledger.now())
    assert 0 == await ledger.device_floor("dev", first.dispatched_at)


async def test_attempts_and_history_render_the_table_of_the_row(ledger: Ledger) -> None:
    """The attempts table shows an MMS row as "mms _id 12" and an SMS row as its bare _id;
    the history shows the kind next to the _id."""
    sms = await confirmed(ledger, "A-1", 812, SMS)
    mms = await confirmed(ledger, "A-2", 12, MMS)
    await ledger.apply(try_accept(mms, MatchVerdict(matched=True), now=ledger.now()))
    stream = io.StringIO()
    out = Output(rich=False, stream=stream)
    render_attempts(out, [sms, await ledger.get_attempt(mms.dispatch_id)])
    render_history(out, await ledger.history("A-2"), show_private=False)
    text = stream.getvalue()
    rows = text.splitlines()
    assert any(" 812 " in row and sms.dispatch_id in row for row in rows)
    assert any("mms _id 12" in row and mms.dispatch_id in row for row in rows)
    assert "provider_kind=mms provider_object_id=12" in text
    assert ["-", "812", "mms _id 12", "mms _id 12"] == [
        provider_row_text(None, None),
        provider_row_text(812, SMS),
        provider_row_text(12, MMS),
        provider_row_text(12, "mms"),
    ]
