"""Fixtures for ledger tests: a real SQLite file, or a real PostgreSQL schema, per test.

``ledger`` runs each test that takes it on both backends (issue 13: no behaviour may differ);
tests that need a file (``ledger_path``: file modes, raw sqlite3, WAL) stay SQLite's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from starebrain_actions import Ledger
from tests._postgres import fresh_schema

BACKENDS = ("sqlite", "postgresql")


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    """A path for a fresh ledger file."""
    return tmp_path / "ledger.db"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test taking ``ledger`` runs on both backends, except those that also take
    ``ledger_path``: they reach into the SQLite file itself."""
    if "ledger_target" in metafunc.fixturenames:
        backends = ("sqlite",) if "ledger_path" in metafunc.fixturenames else BACKENDS
        metafunc.parametrize("ledger_target", backends, indirect=True)


@pytest.fixture
async def ledger_target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """Where a fresh ledger goes: a file path, or a URL of a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield str(tmp_path / "ledger.db")
        return
    async with fresh_schema() as url:
        yield url


@pytest.fixture
async def ledger(ledger_target: str) -> AsyncIterator[Ledger]:
    """An open ledger on a fresh file or schema (each test runs on both backends)."""
    async with Ledger.open(ledger_target) as opened:
        yield opened
