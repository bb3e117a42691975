"""``SqlQueryChecker`` for restricted callers, and what passes it (LIMIT, ORDER BY in --sort)."""

from __future__ import annotations

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge.simulator import SimulatedPhone
from android_bridge.simulator._sqlcheck import QueryRejected, check_query_parameters
from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import connect

VERSIONS = (10, 11, 12, 13, 14, 15)

#: Arguments the checker rejects, each printed as a plain "No result found.".
REJECTED = [
    "--where '_id IN (SELECT _id FROM sms)'",
    "--where '_id IN (select _id from sms)'",
    "--where '_id IN (SeLeCt _id FROM sms)'",
    """--where '"select" = 1'""",
    "--where '`SELECT` = 1'",
    "--where '[select] = 1'",
    "--projection '_id:(SELECT COUNT(*) FROM sms) AS n'",
    "--sort '(SELECT 1)'",
    "--where '_id = 1; DROP TABLE sms'",
    "--sort '_id;'",
    """--where "body = 'unterminated" """,
    """--where '"unterminated = 1'""",
    "--where '[unterminated = 1'",
    "--where '_id = 1 /* open comment'",
    "--where '_id = 1 -- comment to the end'",
]


async def run(phone: SimulatedPhone, signer: PythonRSASigner, command: str) -> str:
    """Run one command line on ``phone`` over adb-shell and return its merged output."""
    device = await connect(phone, signer)
    try:
        return str(await device.shell(command))
    finally:
        await device.close()


async def phone_with_rows(phone_factory: PhoneFactory, android: int) -> SimulatedPhone:
    """A userdebug phone with five received messages (_id 1 to 5, dates 1 to 5)."""
    phone = await phone_factory(android=android, build_type="userdebug")
    for index in range(1, 6):
        phone.store.insert_incoming("+15550100", f"m{index}", date_ms=index)
    return phone


@pytest.mark.parametrize("android", VERSIONS)
@pytest.mark.parametrize("args", REJECTED)
async def test_rejected_queries_print_no_result_found_without_a_trace(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int, args: str
) -> None:
    """SmsProvider catches the checker's IllegalArgumentException and returns null, so content
    prints only 'No result found.' (SmsProvider.query, SqlQueryChecker, SQLiteTokenizer,
    TelephonyProvider android-10.0.0_r30 to android-15.0.0_r1)."""
    phone = await phone_with_rows(phone_factory, android)
    assert "No result found.\nrc=0\n" == await run(
        phone, adb_signer, f'content query --uri content://sms {args}; echo "rc=$?"'
    )


@pytest.mark.parametrize("android", VERSIONS)
async def test_limit_and_order_by_in_sort_work(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """Only SELECT is a refused token: '_id DESC LIMIT 2' and 'ORDER BY' words pass and SQLite
    takes them (SqlQueryChecker.checkToken, TelephonyProvider android-10.0.0_r30 to 15.0.0_r1)."""
    phone = await phone_with_rows(phone_factory, android)
    assert "Row: 0 _id=5\nRow: 1 _id=4\n" == await run(
        phone,
        adb_signer,
        "content query --uri content://sms --projection _id --sort '_id DESC LIMIT 2'",
    )
    assert "Row: 0 _id=2\n" == await run(
        phone,
        adb_signer,
        "content query --uri content://sms --projection _id --sort '_id ASC LIMIT 1 OFFSET 1'",
    )
    assert "Row: 0 _id=1\nRow: 1 _id=5\n" == await run(
        phone,
        adb_signer,
        "content query --uri content://sms/inbox --projection _id"
        " --sort 'type ASC, date ASC LIMIT 2 OFFSET 0' --where '_id IN (1, 5)'",
    )


@pytest.mark.parametrize("android", VERSIONS)
async def test_select_inside_a_string_literal_or_a_longer_word_passes(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """A single-quoted string is a value and 'selected' is another word (SQLiteTokenizer,
    TelephonyProvider android-10.0.0_r30 to android-15.0.0_r1)."""
    phone = await phone_with_rows(phone_factory, android)
    phone.store.insert_incoming("+15550100", "select; me -- now", date_ms=9)
    assert "Row: 0 _id=6\n" == await run(
        phone,
        adb_signer,
        "content query --uri content://sms --projection _id"
        """ --where "body = 'select; me -- now' AND 'selected' != 'x'" """,
    )


@pytest.mark.parametrize("android", VERSIONS)
async def test_the_full_view_is_not_checked(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """su 1000 is not restricted, so its subqueries run (SmsProvider.query checks restricted
    callers only, TelephonyProvider android-10.0.0_r30 to android-15.0.0_r1)."""
    phone = await phone_with_rows(phone_factory, android)
    assert "Row: 0 _id=5\n" == await run(
        phone,
        adb_signer,
        "su 1000 content query --uri content://sms --projection _id"
        " --where '_id = (SELECT MAX(_id) FROM sms)'",
    )


@pytest.mark.parametrize("android", (10, 13))
async def test_the_full_view_runs_only_the_first_statement(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """Android compiles the first statement and ignores the rest (sqlite3_prepare16_v2 without a
    tail in android_database_SQLiteConnection.cpp); nothing is written (SmsProvider.query adds no
    filter up to TelephonyProvider android-13.0.0_r1)."""
    phone = await phone_with_rows(phone_factory, android)
    printed = await run(
        phone,
        adb_signer,
        "su 1000 content query --uri content://sms --projection _id"
        " --where '_id = 1); DELETE FROM sms; --'",
    )
    assert "Row: 0 _id=1\n" == printed
    assert 5 == len(phone.store.rows())


@pytest.mark.parametrize("android", (14, 15))
async def test_a_statement_cut_by_the_sub_filter_does_not_compile(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """From Android 14 the caller's WHERE is wrapped with the subscription filter, so a ';' in it
    is a syntax error (DatabaseUtils.concatenateWhere in SmsProvider.query, TelephonyProvider
    android-14.0.0_r1, 15.0.0_r1)."""
    phone = await phone_with_rows(phone_factory, android)
    printed = await run(
        phone,
        adb_signer,
        "su 1000 content query --uri content://sms --projection _id"
        " --where '_id = 1); DELETE FROM sms; --'",
    )
    assert printed.startswith(
        "Error while accessing provider:sms\n"
        'android.database.sqlite.SQLiteException: near ";": syntax error'
    )
    assert 5 == len(phone.store.rows())


@pytest.mark.parametrize(("android", "rejected"), [(13, False), (14, True), (15, True)])
async def test_long_s_select_is_rejected_from_14(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int, rejected: bool
) -> None:
    """checkToken compares with equalsIgnoreCase from android-14.0.0_r1 (U+017F uppercases to S),
    with toLowerCase before (SqlQueryChecker, TelephonyProvider android-13.0.0_r1, 14.0.0_r1)."""
    phone = await phone_with_rows(phone_factory, android)
    printed = await run(
        phone,
        adb_signer,
        "content query --uri content://sms --projection _id --where '[\u017felect] IS NULL'",
    )
    if rejected:
        assert "No result found.\n" == printed
    else:
        # The bracketed identifier reaches SQLite, which has no such column.
        assert printed.startswith("Error while accessing provider:sms\n")
        assert "no such column: \u017felect" in printed


@pytest.mark.parametrize(
    ("projection", "selection", "sort", "message"),
    [
        (None, "x IN (select 1)", None, "SELECT token not allowed in query"),
        (["_id", "[SELECT]"], None, None, "SELECT token not allowed in query"),
        (None, "a = 1", "b; c", "Semicolon is not allowed in 'b; c'"),
        (None, "a = 'open", None, "Unterminated quote in 'a = 'open'"),
        (None, "a = 1 --", None, "Unterminated comment in 'a = 1 --'"),
        (None, "a = 1 /* x", None, "Unterminated comment in 'a = 1 /* x'"),
    ],
)
def test_checker_messages(
    projection: list[str] | None, selection: str | None, sort: str | None, message: str
) -> None:
    """The checker's IllegalArgumentException messages (SqlQueryChecker, SQLiteTokenizer,
    TelephonyProvider android-14.0.0_r1)."""
    with pytest.raises(QueryRejected) as caught:
        check_query_parameters(projection, selection, sort, ignore_case=True)
    assert message == str(caught.value)


def test_checker_passes_comments_that_end_and_doubled_quotes() -> None:
    """A terminated comment, a doubled quote and other keywords pass (SQLiteTokenizer,
    TelephonyProvider android-14.0.0_r1)."""
    check_query_parameters(
        ["_id", '"a""b"'],
        "a = 'it''s' /* c */ AND b = 1 -- c\n",
        "_id DESC LIMIT 5 OFFSET 1",
        ignore_case=True,
    )


def test_checker_verdicts_are_the_same_when_seen_again() -> None:
    """A text is judged the same the second time (its verdict is remembered), for each way
    of comparing case: a quoted long-s "select" is SELECT to equalsIgnoreCase (its upper
    case is S), not to toLowerCase."""
    long_s = '"\u017felect" = 1'
    for _ in range(2):
        with pytest.raises(QueryRejected) as caught:
            check_query_parameters(None, "a = 1", "b; c", ignore_case=True)
        assert "Semicolon is not allowed in 'b; c'" == str(caught.value)
        check_query_parameters(None, long_s, None, ignore_case=False)
        with pytest.raises(QueryRejected):
            check_query_parameters(None, long_s, None, ignore_case=True)
