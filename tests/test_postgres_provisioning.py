"""The PostgreSQL test fixture: each test's URL lands in an empty schema of its own, schemas do
not see each other, and they are gone after teardown. The coming PostgreSQL ledger backend's
tests rely on all three; a fixture that leaked tables between tests would hide its bugs."""

from __future__ import annotations

import socket
from urllib.parse import parse_qs, urlsplit

import asyncpg
import pytest

from tests._postgres import fresh_schema, pg_base_url, pg_schema_url


def _schema_of(url: str) -> str:
    """The search_path a fixture URL names."""
    return parse_qs(urlsplit(url).query)["search_path"][0]


async def _schema_exists(schema: str) -> bool:
    conn = await asyncpg.connect(pg_base_url())
    try:
        found = await conn.fetchval("SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema)
    finally:
        await conn.close()
    return bool(found)


async def test_pg_url_lands_in_its_own_empty_schema(pg_url: str) -> None:
    """A connection from the URL starts in the fixture's schema, which is empty, and a table it
    creates unqualified lives there and not in public."""
    schema = _schema_of(pg_url)
    conn = await asyncpg.connect(pg_url)
    try:
        assert schema == await conn.fetchval("SELECT current_schema()")
        assert 0 == await conn.fetchval(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = $1",
            schema,
        )
        await conn.execute("CREATE TABLE receipts (id int PRIMARY KEY)")
        assert schema == await conn.fetchval(
            "SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = 'receipts'::regclass"
        )
        assert await conn.fetchval("SELECT to_regclass('public.receipts')") is None
    finally:
        await conn.close()


async def test_pool_connections_land_in_the_schema(pg_url: str) -> None:
    """Every connection of an asyncpg pool made from the URL (the backend's way to connect) is
    in the fixture's schema, not only the first."""
    async with asyncpg.create_pool(pg_url, min_size=3, max_size=3) as pool:
        conns = [await pool.acquire() for _ in range(3)]
        try:
            schemas = [await conn.fetchval("SELECT current_schema()") for conn in conns]
        finally:
            for conn in conns:
                await pool.release(conn)
    assert [_schema_of(pg_url)] * 3 == schemas


async def test_two_schemas_do_not_see_each_others_tables(pg_url: str) -> None:
    """The same table name in two fresh schemas is two tables, and a table made in one is not
    visible from the other."""
    async with fresh_schema() as other_url:
        assert _schema_of(pg_url) != _schema_of(other_url)
        first = await asyncpg.connect(pg_url)
        second = await asyncpg.connect(other_url)
        try:
            await first.execute("CREATE TABLE receipts (id int); INSERT INTO receipts VALUES (1)")
            await second.execute("CREATE TABLE receipts (id int); INSERT INTO receipts VALUES (2)")
            await second.execute("CREATE TABLE only_second (id int)")
            assert [1] == [r["id"] for r in await first.fetch("SELECT id FROM receipts")]
            assert [2] == [r["id"] for r in await second.fetch("SELECT id FROM receipts")]
            assert await first.fetchval("SELECT to_regclass('only_second')") is None
        finally:
            await first.close()
            await second.close()


async def test_schema_is_dropped_with_its_tables_even_when_the_test_fails() -> None:
    """Leaving the fixture's context drops the schema and its tables, also when the body raised."""
    with pytest.raises(RuntimeError, match="test body failed"):
        async with fresh_schema() as url:
            schema = _schema_of(url)
            conn = await asyncpg.connect(url)
            try:
                await conn.execute("CREATE TABLE receipts (id int)")
            finally:
                await conn.close()
            assert await _schema_exists(schema)
            raise RuntimeError("test body failed")
    assert not await _schema_exists(schema)


async def test_unreachable_server_fails_the_test_naming_url_and_fix() -> None:
    """A server that does not answer fails the test (pytest's Failed, not Skipped), and the
    message names the URL without its password and says how to get a server."""
    with socket.socket() as probe:  # a port nothing listens on: bound but never listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        url = f"postgresql://postgres:hunter2@127.0.0.1:{port}/test"
        with pytest.raises(pytest.fail.Exception) as failed:
            async with fresh_schema(url):
                pytest.fail("the body must not run without a server")
    message = str(failed.value)
    assert f"postgresql://postgres:***@127.0.0.1:{port}/test" in message
    assert "hunter2" not in message
    assert ".ci/run" in message
    assert "STAREBRAIN_TEST_PG" in message


def test_schema_url_replaces_search_path_and_keeps_other_parameters() -> None:
    """The schema URL sets search_path once, overriding one the base URL had, and keeps the rest."""
    url = pg_schema_url("postgresql://u:p@h:5/db?sslmode=disable&search_path=old", "t_1")
    parts = urlsplit(url)
    assert "u:p@h:5" == parts.netloc
    assert {"sslmode": ["disable"], "search_path": ["t_1"]} == parse_qs(parts.query)
