"""Fixtures for ledger tests: a real SQLite file per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from starebrain_actions import Ledger


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    """A path for a fresh ledger file."""
    return tmp_path / "ledger.db"


@pytest.fixture
async def ledger(ledger_path: Path) -> AsyncIterator[Ledger]:
    """An open ledger on a fresh file."""
    async with Ledger.open(ledger_path) as opened:
        yield opened
