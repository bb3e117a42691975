"""Fixtures for agent tests: a ledger file and simulated phones with history."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import RetryPolicy
from starebrain_actions.cli.demo import seed_history
from starebrain_actions.orchestration.agent import SmsAgent
from tests._postgres import fresh_schema

PhoneFactory = Callable[..., Awaitable[SimulatedPhone]]
SENT = 2

#: A policy fast enough for tests: proofs of absence after one second; an app's row settles
#: 0.3 s after the attempt's receipt and a framework row 0.2 s after it is seen (the
#: simulated framework's failure update comes 50 ms after its insert). The simulated app
#: writes its row 0.2 s to 1 s after the receipt (connect, fence, ``am``, keys), so an app's
#: row is settled when first seen: a test whose radio fails a send (``send-fails``) either
#: has no radio delay (``send_delay_ms=0``: the row turns FAILED in the step that wrote it,
#: never seen SENT) or a settle time the test cannot outlast.
FAST = RetryPolicy(
    maximum_attempts=3,
    grace_window=timedelta(seconds=1),
    initial_interval=timedelta(milliseconds=50),
    settle_after=timedelta(milliseconds=300),
    framework_settle_after=timedelta(milliseconds=200),
)


def sent_rows(phone: SimulatedPhone, to: str, body: str) -> list[int]:
    """Ids of SENT rows carrying exactly ``body`` to ``to`` (ground truth from the store)."""
    wanted = to.replace(" ", "")
    return [
        row._id
        for row in phone.store.rows(types=[SENT])
        if (row.address or "").replace(" ", "") == wanted and row.body == body
    ]


@pytest.fixture
async def sms_phone(phone_factory: PhoneFactory) -> Callable[..., Awaitable[SimulatedPhone]]:
    """Start a simulated phone with some history: a userdebug build, which the agents of
    ``agent_for`` read through su 1000 (every type visible), unless ``root=`` is given (a
    user build, restricted view, for ``root=False``)."""

    async def start(**kwargs: Any) -> SimulatedPhone:
        if "root" not in kwargs:
            kwargs.setdefault("build_type", "userdebug")
        kwargs.setdefault("send_delay_ms", 20)
        phone = await phone_factory(**kwargs)
        seed_history(phone)
        return phone

    return start


@pytest.fixture(params=("sqlite", "postgresql"))
async def db_path(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh ledger: a SQLite file path, or the URL of a fresh PostgreSQL schema (every
    agent test runs on both backends: issue 13, no behaviour may differ)."""
    if request.param == "sqlite":
        yield str(tmp_path / "ledger.db")
        return
    async with fresh_schema() as url:
        yield url


@pytest.fixture
def agent_for(db_path: Path, adb_key_path: Path) -> Callable[..., Any]:
    """``async with agent_for(phone, **kwargs) as agent``: an SmsAgent on the test ledger,
    sending through the messaging app (``send_path="ui"``) unless told otherwise: what these
    tests exercise is the app's behaviour, and ``auto`` would take the framework path on a
    simulated phone whose framework.jar proves the code (``test_agent_send_path`` tests
    ``auto``'s choice)."""

    @asynccontextmanager
    async def open_agent(phone: SimulatedPhone, **kwargs: Any) -> AsyncIterator[SmsAgent]:
        kwargs.setdefault("policy", FAST)
        kwargs.setdefault("poll_interval_s", 0.05)
        kwargs.setdefault("command_timeout_s", 10.0)
        kwargs.setdefault("read_as_system", phone.build_type != "user")
        kwargs.setdefault("send_path", "ui")
        async with SmsAgent.open(
            db=kwargs.pop("db", db_path), device=phone.serial, key_path=adb_key_path, **kwargs
        ) as agent:
            yield agent

    return open_agent
