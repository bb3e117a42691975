"""The ``ISms`` codes a build proves in its own framework jar, kept per build fingerprint
(``Ledger.framework_codes``), on both backends: what the schema refuses, that a new reading
replaces an old one, and that a migrated ledger starts with none."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from starebrain_actions import Ledger
from starebrain_actions.ledger.phones import FrameworkCodes

BUILD = "google/panther/panther:14/UQ1A.240205.004/11269751:user/release-keys"
AT = datetime(2026, 12, 5, 8, 0, tzinfo=UTC)


async def test_codes_are_kept_per_build_and_a_new_reading_replaces_the_old(
    ledger: Ledger,
) -> None:
    """Nothing is kept for a build never read; a proven reading comes back as it was kept; a
    later reading of the same build replaces it; another build has its own row."""
    assert await ledger.framework_codes(BUILD) is None
    cut_short = FrameworkCodes(
        build=BUILD,
        sdk=34,
        send_text=None,
        reason="the framework jar could not be pulled (timeout)",
        read_at=AT,
        retry_after=AT + timedelta(hours=1),
    )
    await ledger.keep_framework_codes(cut_short)
    assert cut_short == await ledger.framework_codes(BUILD)
    proven = FrameworkCodes(
        build=BUILD, sdk=34, send_text=5, send_multipart=8, read_at=AT + timedelta(hours=2)
    )
    await ledger.keep_framework_codes(proven)
    other = FrameworkCodes(
        build=BUILD.replace("14/", "15/"),
        sdk=35,
        send_text=None,
        reason="no DEX in /system/framework/framework.jar defines ISms$Stub",
        read_at=AT,
    )
    await ledger.keep_framework_codes(other)
    assert proven == await ledger.framework_codes(BUILD)
    assert {BUILD: proven, other.build: other} == await ledger.all_framework_codes()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"send_text": None}, "either the codes"),
        ({"send_text": 5, "reason": "both"}, "either the codes"),
        ({"send_text": 5, "retry_after": AT}, "only an unproven"),
        ({"build": "", "send_text": 5}, "must not be empty"),
    ],
)
def test_a_reading_that_says_two_things_is_refused(fields: dict[str, object], message: str) -> None:
    """Codes and a reason are exclusive; only an unproven reading is retried; a build has a
    fingerprint."""
    values: dict[str, object] = {"build": BUILD, "sdk": 34, "read_at": AT, **fields}
    with pytest.raises(ValueError, match=message):
        FrameworkCodes(**values)  # type: ignore[arg-type]


#: Rows the table's CHECKs refuse (``tests/ledger/test_postgres_schema.py`` runs them too).
BAD_CODES_ROWS = [
    pytest.param("'b', 34, NULL, NULL, NULL", id="neither-codes-nor-reason"),
    pytest.param("'b', 34, 5, NULL, 'and a reason'", id="codes-and-a-reason"),
    pytest.param("'b', 34, 0, NULL, NULL", id="a-code-below-1"),
    pytest.param("'b', 34, NULL, 7, 'why'", id="multipart-without-text"),
    pytest.param("'', 34, 5, NULL, NULL", id="no-build"),
]


def bad_codes_insert(values: str, retry_after: str = "NULL") -> str:
    """An INSERT of one row into framework_codes, with ``values`` for its first five columns."""
    return (
        "INSERT INTO framework_codes (build, sdk, send_text, send_multipart, reason, read_at,"
        f" retry_after) VALUES ({values}, '2026-12-05T08:00:00.000000Z', {retry_after})"
    )


@pytest.mark.parametrize("values", BAD_CODES_ROWS)
async def test_the_schema_refuses_a_row_that_breaks_the_rules(
    ledger_path: Path, values: str
) -> None:
    """The table's CHECKs hold the same rules as the class, for a writer that bypasses it;
    and a proven row is never retried."""
    async with Ledger.open(ledger_path):
        pass
    with sqlite3.connect(ledger_path) as db:
        for statement in (
            bad_codes_insert(values),
            bad_codes_insert("'b', 34, 5, NULL, NULL", "'2026-12-05T09:00:00.000000Z'"),
        ):
            with pytest.raises(sqlite3.IntegrityError):
                db.execute(statement)
        assert [] == db.execute("SELECT * FROM framework_codes").fetchall()
